#include "ferry/io/formats/tar_shard_source.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <set>

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <oneapi/tbb/parallel_for.h>

#include "ferry/pipeline/error.h"

namespace ferry {
namespace {

constexpr size_t kMaxExpansion = 1'000'000;

// WebDataset's integer-valued extensions (its default decoders read these as ints).
bool is_label_extension(std::string_view extension) {
  static constexpr std::string_view kLabels[] = {"cls", "cls2", "class", "count", "index", "inx", "id"};
  return std::find(std::begin(kLabels), std::end(kLabels), extension) != std::end(kLabels);
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// A field's extensions: the first, then the alternatives.
std::vector<std::string*> extensions_of(TarField& field) {
  std::vector<std::string*> all{&field.extension};
  for (std::string& alternative : field.alternatives) all.push_back(&alternative);
  return all;
}

std::vector<const std::string*> extensions_of(const TarField& field) {
  std::vector<const std::string*> all{&field.extension};
  for (const std::string& alternative : field.alternatives) all.push_back(&alternative);
  return all;
}

// "'.jpg'", or "'.jpg', '.png' or '.webp'" for a field with alternatives.
std::string extensions_text(const TarField& field) {
  const std::vector<const std::string*> all = extensions_of(field);
  std::string text;
  for (size_t i = 0; i < all.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + std::string("'.") + *all[i] + "'";
  }
  return text;
}

std::optional<int64_t> parse_int(std::string_view text) {
  int64_t value = 0;
  const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || stop != text.data() + text.size()) return std::nullopt;
  return value;
}

// braceexpand's zero padding: "-5" at width 3 is "-05".
std::string padded(int64_t value, size_t width) {
  std::string digits = std::to_string(value < 0 ? -static_cast<uint64_t>(value) : static_cast<uint64_t>(value));
  const size_t sign = value < 0 ? 1 : 0;
  if (digits.size() + sign < width) digits.insert(0, width - digits.size() - sign, '0');
  return (value < 0 ? "-" : "") + digits;
}

// The alternatives of one brace group's content: a numeric range "a..b" or a list "a,b,c".
std::vector<std::string> alternatives(std::string_view group, std::string_view pattern) {
  const std::string where = "shard pattern '" + std::string(pattern) + "': ";
  if (const size_t dots = group.find(".."); dots != std::string_view::npos) {
    const std::string_view left = group.substr(0, dots);
    const std::string_view right = group.substr(dots + 2);
    const auto first = parse_int(left);
    const auto last = parse_int(right);
    if (!first || !last) {
      throw Error(where + "range {" + std::string(group) + "} needs two integers, as in {000000..000099}");
    }
    const uint64_t count = (*first <= *last ? static_cast<uint64_t>(*last) - static_cast<uint64_t>(*first)
                                            : static_cast<uint64_t>(*first) - static_cast<uint64_t>(*last)) +
                           1;
    if (count == 0 || count > kMaxExpansion) {
      throw Error(where + "range {" + std::string(group) + "} has more than " + std::to_string(kMaxExpansion) +
                  " values");
    }
    auto zero_led = [](std::string_view s) {
      return s != "0" && s != "-0" && (s.starts_with('0') || s.starts_with("-0"));
    };
    const size_t width = zero_led(left) || zero_led(right) ? std::max(left.size(), right.size()) : 0;
    std::vector<std::string> out;
    out.reserve(count);
    const int64_t step = *first <= *last ? 1 : -1;
    for (int64_t value = *first;; value += step) {
      out.push_back(padded(value, width));
      if (value == *last) break;
    }
    return out;
  }
  if (group.find(',') == std::string_view::npos) {
    throw Error(where + "brace group {" + std::string(group) + "} is neither a range {a..b} nor a list {a,b}");
  }
  std::vector<std::string> out;
  size_t begin = 0;
  for (;;) {
    const size_t comma = group.find(',', begin);
    out.emplace_back(group.substr(begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin));
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> TarShardSource::expand_braces(std::string_view pattern) {
  std::vector<std::string> results{""};
  size_t pos = 0;
  while (pos < pattern.size()) {
    const size_t open = pattern.find_first_of("{}", pos);
    if (open == std::string_view::npos || pattern[open] == '}') {
      if (open != std::string_view::npos) {
        throw Error("shard pattern '" + std::string(pattern) + "': '}' at position " + std::to_string(open) +
                    " closes no brace");
      }
      for (std::string& result : results) result += pattern.substr(pos);
      break;
    }
    const size_t close = pattern.find_first_of("{}", open + 1);
    if (close == std::string_view::npos || pattern[close] == '{') {
      throw Error("shard pattern '" + std::string(pattern) + "': '{' at position " + std::to_string(open) +
                  (close == std::string_view::npos ? " is never closed" : " is nested, which is not supported"));
    }
    const std::string_view literal = pattern.substr(pos, open - pos);
    const std::vector<std::string> options = alternatives(pattern.substr(open + 1, close - open - 1), pattern);
    if (results.size() * options.size() > kMaxExpansion) {
      throw Error("shard pattern '" + std::string(pattern) + "' expands to more than " + std::to_string(kMaxExpansion) +
                  " paths");
    }
    std::vector<std::string> next;
    next.reserve(results.size() * options.size());
    for (const std::string& result : results) {
      for (const std::string& option : options) next.push_back(result + std::string(literal) + option);
    }
    results = std::move(next);
    pos = close + 1;
  }
  return results;
}

TarShardSource::TarShardSource(TarShardOptions options)
    : options_(std::move(options)), store_(DataStore::get(options_.remote)) {
  if (options_.shards.empty()) throw Error("tar source: no shards given");

  // Index the shards in parallel (each scan is mostly waiting on reads); report the first failure in
  // shard order, so the message does not depend on scheduling.
  const size_t count = options_.shards.size();
  std::vector<std::optional<TarIndex>> indexed(count);
  std::vector<std::exception_ptr> failures(count);
  tbb::parallel_for(size_t{0}, count, [&](size_t s) {
    try {
      std::shared_ptr<const DataFile> file = store_->open(options_.shards[s], DataStore::Access::kWhole, "tar shard");
      // A fetched shard's index kept by an earlier run spares fetching it now (Note [kept indexes]).
      if (const std::optional<std::string> kept = store_->kept_index(*file)) {
        if (std::optional<TarIndex> index = TarIndex::deserialize(file, *kept)) {
          file->size_hint(index->file_size());
          indexed[s] = std::move(index);
          return;
        }
      }
      indexed[s].emplace(file);
      store_->keep_index(*file, indexed[s]->serialize());
    } catch (...) {
      failures[s] = std::current_exception();
    }
  });
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
  shards_.reserve(count);
  for (std::optional<TarIndex>& index : indexed) {
    shard_begin_.push_back(shard_begin_.back() + index->sample_count());
    shards_.push_back(std::move(*index));
  }
  if (size() == 0) throw Error("tar source: its " + std::to_string(count) + " shard(s) hold no samples");

  if (options_.fields.empty()) {
    const auto first =
        std::find_if(shards_.begin(), shards_.end(), [](const TarIndex& s) { return s.sample_count() > 0; });
    for (const TarMember& member : first->members(0)) {
      TarField field;
      field.extension = first->extension(member);
      field.name = field.extension;
      if (is_label_extension(field.extension)) {
        field.dtype = at::kLong;
        field.shape = {};
        field.decoder = "label";
      }
      options_.fields.push_back(std::move(field));
    }
  }

  std::set<std::string, std::less<>> names;
  for (TarField& field : options_.fields) {
    const std::string where = "tar source: field '" + field.name + "'";
    if (field.name.empty()) throw Error("tar source: a field has no name");
    if (!names.insert(field.name).second) throw Error(where + " appears twice");
    for (std::string* extension : extensions_of(field)) {
      if (extension->starts_with('.')) extension->erase(0, 1);
      *extension = lower(*extension);
      if (extension->empty()) throw Error(where + " has no extension (the member it reads, e.g. \"jpg\")");
    }
    if (field.decoder.empty()) throw Error(where + " names no decoder");
    for (size_t d = 0; d < field.shape.size(); ++d) {
      if (field.shape[d] < 0 && field.shape[d] != kVariableLength) {
        throw Error(where + ": a shape's sizes are >= 0, or null (" + std::to_string(kVariableLength) +
                    ") for one that varies per sample");
      }
    }
    const bool variable = !field.shape.empty() && field.shape[0] == kVariableLength;
    if (field.max_length && (!variable || *field.max_length < 0)) {
      throw Error(where + ": max_length needs a variable first dim and must be >= 0");
    }
    spec_of_.push_back(specs_.size());
    specs_.push_back(FieldSpec{field.name, field.dtype, field.shape, field.max_length, field.decoder});
    if (field.optional) {
      const std::string flag = field.name + "_present";
      if (!names.insert(flag).second) throw Error(where + " is optional, and its flag field '" + flag + "' is taken");
      specs_.push_back(FieldSpec{.name = flag, .dtype = at::kBool, .shape = {}, .decoder = "raw"});
    }
  }

  extension_ids_.resize(shards_.size());
  for (size_t f = 0; f < options_.fields.size(); ++f) {
    TarField& field = options_.fields[f];
    bool found = false;
    for (size_t s = 0; s < shards_.size(); ++s) {
      std::vector<uint32_t> ids;
      for (const std::string* extension : extensions_of(field)) {
        if (const std::optional<uint32_t> id = shards_[s].extension_id(*extension)) ids.push_back(*id);
      }
      found = found || !ids.empty();
      extension_ids_[s].push_back(std::move(ids));
    }
    if (!found && !field.optional) {
      std::set<std::string> known;
      for (const TarIndex& shard : shards_) known.insert(shard.extensions().begin(), shard.extensions().end());
      std::string list;
      for (const std::string& extension : known) list += (list.empty() ? "" : ", ") + extension;
      throw Error("tar source: field '" + field.name + "' reads " + extensions_text(field) +
                  " members, which no shard has (extensions found: " + list + ")");
    }
  }
}

size_t TarShardSource::shard_of(uint64_t index) const {
  if (index >= size()) {
    throw Error("tar source: sample " + std::to_string(index) + " is beyond its " + std::to_string(size()) +
                " samples");
  }
  // The last shard whose first sample is <= index (empty shards share their begin with the next).
  const auto it = std::upper_bound(shard_begin_.begin(), shard_begin_.end(), index);
  return static_cast<size_t>(it - shard_begin_.begin()) - 1;
}

TarShardSource::SampleRange TarShardSource::shard_samples(size_t shard) const {
  if (shard >= shards_.size()) {
    throw Error("tar source: shard " + std::to_string(shard) + " is beyond its " + std::to_string(shards_.size()) +
                " shards");
  }
  return SampleRange{shard_begin_[shard], shard_begin_[shard + 1]};
}

std::vector<uint64_t> TarShardSource::shard_sizes() const {
  std::vector<uint64_t> sizes(shards_.size());
  for (size_t s = 0; s < sizes.size(); ++s) sizes[s] = shard_begin_[s + 1] - shard_begin_[s];
  return sizes;
}

const TarIndex& TarShardSource::shard(size_t shard) const {
  if (shard >= shards_.size()) {
    throw Error("tar source: shard " + std::to_string(shard) + " is beyond its " + std::to_string(shards_.size()) +
                " shards");
  }
  return shards_[shard];
}

EncodedSample TarShardSource::read(uint64_t index) const { return read_at(index, nullptr); }

EncodedSample TarShardSource::read_sample(uint64_t index, const SampleContext& context) const {
  return read_at(index, context.stop);
}

namespace {

// The shards' cache extents in the order a run reads their samples. Holds copies of what it needs: the
// cache's threads may use it a moment after the source is gone.
class ShardFetchOrder : public FetchOrder {
 public:
  ShardFetchOrder(std::vector<uint64_t> shard_begin, std::vector<std::vector<uint32_t>> extents,
                  std::shared_ptr<const ReadOrder> order)
      : shard_begin_(std::move(shard_begin)), extents_(std::move(extents)), order_(std::move(order)) {}
  bool extents_at(uint64_t step, std::vector<uint32_t>& out) const override {
    if (step >= order_->steps()) return false;
    const std::optional<uint64_t> sample = order_->sample_at_step(step);
    if (!sample) return true;  // another source's read
    const auto after = std::upper_bound(shard_begin_.begin(), shard_begin_.end(), *sample);
    const auto& ids = extents_[static_cast<size_t>(after - shard_begin_.begin()) - 1];
    out.insert(out.end(), ids.begin(), ids.end());
    return true;
  }
  uint64_t reached() const override { return order_->reached(); }

 private:
  std::vector<uint64_t> shard_begin_;
  std::vector<std::vector<uint32_t>> extents_;
  std::shared_ptr<const ReadOrder> order_;
};

}  // namespace

std::optional<RemoteDataStats> TarShardSource::remote_data() const {
  if (!store_->cache_used()) return std::nullopt;
  return store_->stats();
}

std::shared_ptr<const void> TarShardSource::read_in_order(std::shared_ptr<const ReadOrder> order) const {
  if (!store_->cache_used()) return nullptr;  // every shard is a local plain file
  std::vector<std::vector<uint32_t>> extents(shards_.size());
  for (size_t s = 0; s < shards_.size(); ++s) shards_[s].file().extents(0, 0, extents[s]);
  auto fetch_order = std::make_shared<ShardFetchOrder>(shard_begin_, std::move(extents), order);
  store_->cache().follow(fetch_order, order->readers());
  return fetch_order;
}

EncodedSample TarShardSource::read_at(uint64_t index, const std::atomic<bool>* stop) const {
  const size_t s = shard_of(index);
  const TarIndex& tar = shards_[s];
  const size_t local = static_cast<size_t>(index - shard_begin_[s]);
  EncodedSample sample;
  sample.index = index;
  sample.key = tar.path() + ":" + std::string(tar.key(local));
  sample.fields.resize(specs_.size());
  std::vector<const TarMember*> read(options_.fields.size(), nullptr);
  for (size_t f = 0; f < options_.fields.size(); ++f) {
    const TarField& field = options_.fields[f];
    const TarMember* member = nullptr;
    for (const uint32_t id : extension_ids_[s][f]) {
      if ((member = tar.find(local, id)) != nullptr) break;
    }
    read[f] = member;
    const size_t at = spec_of_[f];
    if (field.optional) sample.fields[at + 1] = at::full({}, member != nullptr, at::kBool);
    if (!member) {
      if (field.optional) continue;  // absent: undefined
      std::string present;
      for (const TarMember& m : tar.members(local)) present += (present.empty() ? "" : ", ") + tar.extension(m);
      const std::string name = std::string(tar.key(local)) + "." + field.extension;
      const std::optional<std::string> link = tar.link_named(name);
      throw Error("tar shard '" + tar.path() + "': sample '" + std::string(tar.key(local)) + "' (index " +
                  std::to_string(index) + ", header at byte " +
                  std::to_string(tar.members(local).front().header_offset) + ") has no " + extensions_text(field) +
                  " member for field '" + field.name + "'; it has: " + present +
                  (link ? "; its '" + name + "' is " + *link +
                              ", which holds no data (ferry reads files only, as WebDataset does: write the shard "
                              "with the data, e.g. tar --hard-dereference)"
                        : std::string()));
    }
    // Two fields reading the same member share its bytes (decoders do not modify their input).
    const auto earlier = std::find(read.begin(), read.begin() + static_cast<std::ptrdiff_t>(f), member);
    if (earlier != read.begin() + static_cast<std::ptrdiff_t>(f)) {
      sample.fields[at] = sample.fields[spec_of_[static_cast<size_t>(earlier - read.begin())]];
      continue;
    }
    at::Tensor bytes = at::empty({static_cast<int64_t>(member->size)}, at::kByte);
    tar.read(*member, bytes.data_ptr(), stop);
    sample.fields[at] = std::move(bytes);
  }
  return sample;
}

std::string TarShardSource::key(uint64_t index) const {
  const size_t s = shard_of(index);
  return shards_[s].path() + ":" + std::string(shards_[s].key(static_cast<size_t>(index - shard_begin_[s])));
}

std::string TarShardSource::describe() const {
  std::string fields;
  for (const TarField& field : options_.fields) {
    fields += (fields.empty() ? "" : ",") + field.extension;
    for (const std::string& alternative : field.alternatives) fields += "|" + alternative;
  }
  return "tar(" + std::to_string(shards_.size()) + (shards_.size() == 1 ? " shard, " : " shards, ") +
         std::to_string(size()) + " samples, fields=" + fields + ")";
}

}  // namespace ferry
