#include "cli/make_dataset.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include <ATen/ATen.h>
#include <oneapi/tbb/parallel_pipeline.h>
#include <oneapi/tbb/task_arena.h>

#include <ferry/io/decoders/jpeg_encoder.h>
#include <ferry/io/decoders/npy_encoder.h>
#include <ferry/io/formats/indexed_dataset_writer.h>
#include <ferry/io/formats/tar_writer.h>
#include <ferry/io/util/atomic_file.h>
#include <ferry/io/util/splitmix64.h>
#include <ferry/pipeline/error.h>
#include "cli/synthetic_image.h"

namespace ferry::cli {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t count_of(std::string_view flag, std::string_view text) {
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw std::invalid_argument(std::string(flag) + ": expected a non-negative integer, found '" + std::string(text) +
                                "'");
  }
  return value;
}

// mkdir -p of the folder `path` is in.
void make_parent_folders(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    const std::string folder = path.substr(0, slash);
    if (::mkdir(folder.c_str(), 0755) != 0 && errno != EEXIST) {
      throw Error("make-dataset: cannot create the folder " + folder + ": " + std::strerror(errno));
    }
  }
}

// ---- the kinds and their options -------------------------------------------------------------------

struct Kind {
  std::string_view name;
  std::string_view flags;  // the options it takes, space-separated, in the order the usage shows them
};

constexpr Kind kKinds[] = {
    {"tokens", "--documents --seed --vocab --dtype"},
    {"tar", "--samples --shards --image-size --classes --seed --quality"},
    {"npy", "--samples --shards --classes --seed"},
    {"images", "--samples --image-size --classes --seed --quality"},
};

bool takes(const Kind& kind, std::string_view flag) {
  for (size_t at = 0; at < kind.flags.size();) {
    const size_t end = std::min(kind.flags.find(' ', at), kind.flags.size());
    if (kind.flags.substr(at, end - at) == flag) return true;
    at = end + 1;
  }
  return false;
}

std::string comma_list(std::string_view flags) {
  std::string text(flags);
  for (size_t at = text.find(' '); at != std::string::npos; at = text.find(' ', at + 2)) text.replace(at, 1, ", ");
  return text;
}

struct Options {
  // The directory kinds.
  uint64_t samples = 1000;
  uint64_t shards = 4;
  int64_t height = 256;
  int64_t width = 256;
  bool imagenet_sizes = false;  // --image-size imagenet: each image's size from image_size(), not height x width
  uint64_t classes = 10;
  uint64_t seed = 0;
  int quality = 90;
  // tokens.
  uint64_t documents = 1000;
  uint64_t vocab = 50257;
  IndexedDtype dtype = IndexedDtype::kUInt16;
};

constexpr int64_t kMinSide = 8;
constexpr int64_t kMaxSide = 8192;

// "256" (square) or "HxW" ("192x256": 192 rows of 256 pixels).
std::pair<int64_t, int64_t> image_size_of(std::string_view flag, std::string_view text) {
  const auto side = [&](std::string_view part) -> int64_t {
    int64_t value = 0;
    const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || error != std::errc() || end != part.data() + part.size() || value < kMinSide ||
        value > kMaxSide) {
      throw std::invalid_argument(std::string(flag) + ": expected N, HxW or imagenet, with sides " + std::to_string(kMinSide) +
                                  ".." + std::to_string(kMaxSide) + ", found '" + std::string(text) + "'");
    }
    return value;
  };
  const size_t x = text.find('x');
  if (x == std::string_view::npos) {
    const int64_t n = side(text);
    return {n, n};
  }
  return {side(text.substr(0, x)), side(text.substr(x + 1))};
}

// --image-size imagenet: the sizes of ImageNet's photographs, which are mostly 500 pixels on their longer side
// (about 70% landscape 500 x 375, the rest mostly 3:2 or portrait), so that a run resizes and crops as it
// would on the real thing. Drawn per image from (seed, sample): the same files every time.
struct ImageSize {
  int64_t height, width;
};
constexpr ImageSize kImagenetSizes[] = {{375, 500}, {375, 500}, {375, 500}, {375, 500}, {375, 500}, {375, 500},
                                        {375, 500}, {333, 500}, {500, 375}, {500, 333}};

ImageSize image_size(const Options& options, uint64_t sample) {
  if (!options.imagenet_sizes) return {options.height, options.width};
  const uint64_t pick = mix64(options.seed ^ mix64(sample + kGoldenGamma)) % std::size(kImagenetSizes);
  return kImagenetSizes[pick];
}

std::string image_size_text(const Options& options) {
  if (options.imagenet_sizes) return "ImageNet-like sizes, mostly 500x375";
  return std::to_string(options.height) + "x" + std::to_string(options.width);
}

void apply(Options& options, std::string_view flag, std::string_view value) {
  if (flag == "--documents") {
    options.documents = count_of(flag, value);
    if (options.documents == 0) throw std::invalid_argument("--documents: expected at least 1");
  } else if (flag == "--seed") {
    options.seed = count_of(flag, value);
  } else if (flag == "--vocab") {
    options.vocab = count_of(flag, value);
    if (options.vocab == 0 || options.vocab > (uint64_t{1} << 31))
      throw std::invalid_argument("--vocab: expected 1..2147483648");
  } else if (flag == "--dtype") {
    if (value == "uint16")
      options.dtype = IndexedDtype::kUInt16;
    else if (value == "int32")
      options.dtype = IndexedDtype::kInt32;
    else
      throw std::invalid_argument("--dtype: expected uint16 or int32, found '" + std::string(value) + "'");
  } else if (flag == "--samples") {
    options.samples = count_of(flag, value);
    if (options.samples == 0) throw std::invalid_argument("--samples: expected at least 1, found 0");
  } else if (flag == "--shards") {
    options.shards = count_of(flag, value);  // checked against --samples once both are known
  } else if (flag == "--image-size") {
    options.imagenet_sizes = value == "imagenet";
    if (!options.imagenet_sizes) std::tie(options.height, options.width) = image_size_of(flag, value);
  } else if (flag == "--classes") {
    options.classes = count_of(flag, value);
    if (options.classes == 0) throw std::invalid_argument("--classes: expected at least 1, found 0");
  } else if (flag == "--quality") {
    const uint64_t quality = count_of(flag, value);
    if (quality < 1 || quality > 100)
      throw std::invalid_argument("--quality: expected 1..100, found " + std::string(value));
    options.quality = static_cast<int>(quality);
  }
}

// ---- the output folder -----------------------------------------------------------------------------

// Checks OUT_DIR before anything is made, and creates it (with its parents) if it is not there.
// Refuses a folder that holds anything: a dataset written over another would mix the two (shards
// or images left from a larger run), and make-dataset never deletes what it did not write.
std::string prepare_folder(std::string_view kind, std::string out) {
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  if (out.empty() || out.front() == '-') {
    throw std::invalid_argument("make-dataset " + std::string(kind) + ": OUT_DIR must be a folder such as data/" +
                                std::string(kind) + ", found '" + out + "'");
  }
  struct stat info {};
  if (::stat(out.c_str(), &info) == 0) {
    if (!S_ISDIR(info.st_mode)) throw std::invalid_argument("OUT_DIR '" + out + "' exists and is not a folder");
    const std::unique_ptr<DIR, int (*)(DIR*)> folder(::opendir(out.c_str()), &::closedir);  // closed on every path
    if (!folder) throw std::invalid_argument("cannot read OUT_DIR '" + out + "': " + std::strerror(errno));
    std::string first;
    uint64_t entries = 0;
    while (const dirent* entry = ::readdir(folder.get())) {
      const std::string_view name = entry->d_name;
      if (name == "." || name == "..") continue;
      if (entries++ == 0 || name < first) first = name;  // the first by name: the same message every time
    }
    if (entries > 0) {
      throw std::invalid_argument(
          "OUT_DIR '" + out + "' is not empty (it holds '" + first + "'" +
          (entries > 1 ? " and " + std::to_string(entries - 1) + " more" : std::string()) +
          "): make-dataset writes only into a new or empty folder; remove it or choose another");
    }
  } else if (errno == ENOENT) {
    try {
      make_parent_folders(out + "/");
    } catch (const Error& e) {
      throw std::invalid_argument(e.cause());
    }
  } else {
    throw std::invalid_argument("cannot use OUT_DIR '" + out + "': " + std::strerror(errno));
  }
  if (::access(out.c_str(), W_OK) != 0) {
    throw std::invalid_argument("cannot write into OUT_DIR '" + out + "': " + std::strerror(errno));
  }
  return out;
}

// ---- making samples --------------------------------------------------------------------------------

// Makes samples 0..count-1 with make(k) on all cores and hands them to write(k, made) in order, on
// one thread at a time. A bounded number are in flight (4 per core), so memory stays that of a few
// samples whatever the count. An exception in either stops the rest and is rethrown here.
template <typename Make, typename Write>
void make_in_order(uint64_t count, const Make& make, const Write& write) {
  using Made = std::pair<uint64_t, at::Tensor>;
  const auto in_flight = static_cast<size_t>(4 * std::max(1, tbb::this_task_arena::max_concurrency()));
  uint64_t next = 0;
  tbb::parallel_pipeline(
      in_flight,
      tbb::make_filter<void, uint64_t>(tbb::filter_mode::serial_in_order, [&](tbb::flow_control& control) -> uint64_t {
        if (next == count) control.stop();
        return next++;
      }) & tbb::make_filter<uint64_t, Made>(tbb::filter_mode::parallel, [&](uint64_t k) {
        return Made(k, make(k));
      }) & tbb::make_filter<Made, void>(tbb::filter_mode::serial_in_order, [&](const Made& made) {
        write(made.first, made.second);
      }));
}

// The digits of `n` in decimal.
int digits(uint64_t n) {
  int count = 1;
  while (n >= 10) n /= 10, ++count;
  return count;
}

// "%0*llu": `n` zero-padded to `width` digits.
std::string padded(uint64_t n, int width) {
  char text[32];
  std::snprintf(text, sizeof text, "%0*llu", width, static_cast<unsigned long long>(n));
  return text;
}

std::string_view view(const at::Tensor& bytes) {
  return {reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(bytes.numel())};
}

std::string size_text(uint64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%llu bytes (%.1f MB)", static_cast<unsigned long long>(bytes),
                static_cast<double>(bytes) / 1e6);
  return text;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One sample's features for the npy kind: float32 [64], the label's centre (a fixed point in
// [-1, 1)^64 per class and seed) plus noise of standard deviation about 0.35 per value, so the
// classes spread out but can be told apart. Integer arithmetic and exact conversions (multiples of
// 2^-16), so the same on every machine.
constexpr int64_t kFeatures = 64;
at::Tensor make_features(uint64_t seed, uint64_t sample, uint64_t label) {
  uint64_t centre_state = seed ^ 0x5eed5eed5eed5eedULL ^ (label * 0x9e3779b97f4a7c15ULL);
  uint64_t seed_state = seed;
  uint64_t noise_state = splitmix64(seed_state) ^ splitmix64(sample);
  at::Tensor features = at::empty({kFeatures}, at::kFloat);
  float* out = features.data_ptr<float>();
  for (int64_t i = 0; i < kFeatures; ++i) {
    const auto centre = static_cast<int64_t>(splitmix64(centre_state) >> 47) - 65536;  // [-1, 1) in 2^-16
    // The sum of four uniforms in [-0.3, 0.3) (Irwin-Hall): nearly Gaussian, mean 0.
    int64_t noise = 0;
    const uint64_t bits = splitmix64(noise_state);
    for (int part = 0; part < 4; ++part) noise += static_cast<int64_t>((bits >> (16 * part)) & 0xFFFF) - 32768;
    noise = noise * 39321 / 65536;  // x 0.6: each uniform [-0.5, 0.5) becomes [-0.3, 0.3); sd of the sum ~0.35
    out[i] = static_cast<float>(centre + noise) / 65536.0f;  // exact: |value| < 2^18, a multiple of 2^-16
  }
  return features;
}

// ---- the kinds -------------------------------------------------------------------------------------

int make_tokens(const std::string& prefix, const Options& options) {
  make_parent_folders(prefix);
  IndexedDatasetWriter writer(prefix, options.dtype);
  // Documents of 50..2000 tokens drawn from [0, vocab): enough structure to check windows that
  // cross document boundaries, small enough to write in a moment.
  uint64_t state = options.seed;
  std::vector<int64_t> tokens;
  for (uint64_t d = 0; d < options.documents; ++d) {
    tokens.resize(50 + splitmix64(state) % 1951);
    for (int64_t& token : tokens) token = static_cast<int64_t>(splitmix64(state) % options.vocab);
    writer.add_document(tokens);
  }
  writer.finalize();
  std::printf("wrote %s.bin and %s.idx (%llu documents, %llu tokens, %s)\n", prefix.c_str(), prefix.c_str(),
              static_cast<unsigned long long>(writer.document_count()),
              static_cast<unsigned long long>(writer.token_count()),
              options.dtype == IndexedDtype::kUInt16 ? "uint16" : "int32");
  return 0;
}

// tar and npy: WebDataset shards, each sample's payload (.jpg or .npy) then its .cls.
int make_shards(std::string_view kind, const std::string& out, const Options& options) {
  const Clock::time_point start = Clock::now();
  const bool jpeg = kind == "tar";
  const JpegEncoder encoder({.quality = options.quality});
  const int key_width = std::max(6, digits(options.samples - 1));
  const int shard_width = std::max(6, digits(options.shards - 1));
  const std::string extension = jpeg ? ".jpg" : ".npy";
  const auto shard_begin = [&](uint64_t s) {
    return s * (options.samples / options.shards) + std::min(s, options.samples % options.shards);
  };
  const auto shard_path = [&](uint64_t s) { return out + "/shard-" + padded(s, shard_width) + ".tar"; };

  uint64_t shard = 0;
  uint64_t bytes = 0;
  std::optional<AtomicFile> file;  // the shard being written; removed if anything fails
  std::optional<TarWriter> tar;
  make_in_order(
      options.samples,
      [&](uint64_t k) {
        const uint64_t label = k % options.classes;
        const ImageSize size = image_size(options, k);
        return jpeg ? encoder.encode(
                          synthetic_image(options.seed, k, label, SyntheticImageSpec{size.height, size.width, options.classes}))
                    : encode_npy(make_features(options.seed, k, label));
      },
      [&](uint64_t k, const at::Tensor& payload) {
        if (k == shard_begin(shard)) {
          file.emplace(shard_path(shard));
          tar.emplace();
        }
        const std::string key = padded(k, key_width);
        tar->add(key + extension, view(payload));
        tar->add(key + ".cls", std::to_string(k % options.classes));
        file->write(tar->take());
        if (k + 1 == shard_begin(shard + 1)) {
          file->write(tar->finish());
          file->commit();
          bytes += file->size();
          file.reset();
          ++shard;
        }
      });
  const std::string content = jpeg ? "jpg " + image_size_text(options) + " q" + std::to_string(options.quality)
                                   : "npy float32 [" + std::to_string(kFeatures) + "]";
  std::printf("wrote %llu samples to %s: %llu tar shards %s .. %s, %s (%s + cls, %llu classes, seed %llu) in %.2f s\n",
              static_cast<unsigned long long>(options.samples), out.c_str(),
              static_cast<unsigned long long>(options.shards), ("shard-" + padded(0, shard_width) + ".tar").c_str(),
              ("shard-" + padded(options.shards - 1, shard_width) + ".tar").c_str(), size_text(bytes).c_str(),
              content.c_str(), static_cast<unsigned long long>(options.classes),
              static_cast<unsigned long long>(options.seed), seconds_since(start));
  return 0;
}

// images: torchvision's ImageFolder layout, OUT_DIR/class-XXX/KEY.jpg.
int make_image_folder(const std::string& out, const Options& options) {
  const Clock::time_point start = Clock::now();
  const JpegEncoder encoder({.quality = options.quality});
  const int key_width = std::max(6, digits(options.samples - 1));
  // Wide enough that sorted names are in label order (ImageFolder numbers classes by sorted name);
  // only classes that get a sample have a folder (ImageFolder refuses an empty one).
  const uint64_t folders = std::min(options.classes, options.samples);
  const int class_width = std::max(3, digits(folders - 1));
  const auto folder = [&](uint64_t label) { return out + "/class-" + padded(label, class_width); };
  for (uint64_t label = 0; label < folders; ++label) {
    if (::mkdir(folder(label).c_str(), 0755) != 0) {
      throw Error("cannot create the folder " + folder(label) + ": " + std::strerror(errno));
    }
  }
  uint64_t bytes = 0;
  make_in_order(
      options.samples,
      [&](uint64_t k) {
        const ImageSize size = image_size(options, k);
        return encoder.encode(synthetic_image(options.seed, k, k % options.classes,
                                              SyntheticImageSpec{size.height, size.width, options.classes}));
      },
      [&](uint64_t k, const at::Tensor& jpeg) {
        AtomicFile::write_whole(folder(k % options.classes) + "/" + padded(k, key_width) + ".jpg", view(jpeg));
        bytes += static_cast<uint64_t>(jpeg.numel());
      });
  std::printf("wrote %llu images to %s: %llu class folders %s .. %s, %s (jpg %s q%d, seed %llu) in %.2f s\n",
              static_cast<unsigned long long>(options.samples), out.c_str(), static_cast<unsigned long long>(folders),
              ("class-" + padded(0, class_width)).c_str(), ("class-" + padded(folders - 1, class_width)).c_str(),
              size_text(bytes).c_str(), image_size_text(options).c_str(), options.quality, static_cast<unsigned long long>(options.seed), seconds_since(start));
  return 0;
}

}  // namespace

int make_dataset(const std::vector<std::string_view>& args) {
  std::string known;
  for (const Kind& kind : kKinds) known += (known.empty() ? "" : ", ") + std::string(kind.name);
  if (args.empty()) throw std::invalid_argument("make-dataset needs a KIND (" + known + ") and an OUT path");
  const Kind* kind = nullptr;
  for (const Kind& candidate : kKinds) {
    if (candidate.name == args[0]) kind = &candidate;
  }
  if (kind == nullptr)
    throw std::invalid_argument("unknown dataset kind '" + std::string(args[0]) + "' (known: " + known + ")");
  const bool tokens = kind->name == "tokens";
  if (args.size() < 2) {
    throw std::invalid_argument("make-dataset " + std::string(kind->name) + " needs an " +
                                (tokens ? "OUT path" : "OUT_DIR"));
  }
  const std::string out(args[1]);
  if (tokens && (out.empty() || out.front() == '-' || out.back() == '/')) {
    throw std::invalid_argument("make-dataset: OUT must be a path prefix such as data/tokens, found '" + out + "'");
  }

  Options options;
  bool shards_given = false;
  std::vector<std::string_view> given;  // twice is a mistake, not "the last wins"
  for (size_t i = 2; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    const size_t equals = arg.find('=');
    const std::string_view flag = arg.substr(0, equals);
    if (takes(*kind, flag)) {
      if (std::find(given.begin(), given.end(), flag) != given.end()) {
        throw std::invalid_argument(std::string(flag) + " is given twice: give it once");
      }
      given.push_back(flag);
    }
    if (!takes(*kind, flag)) {
      if (arg.rfind("--", 0) != 0) {
        throw std::invalid_argument("unexpected argument '" + std::string(arg) + "' after OUT ('" + out +
                                    "'); options start with --");
      }
      for (const Kind& other : kKinds) {
        if (takes(other, flag)) {
          throw std::invalid_argument(std::string(flag) + " is not an option of make-dataset " +
                                      std::string(kind->name) + " (its options: " + comma_list(kind->flags) + ")");
        }
      }
      throw std::invalid_argument("unknown option '" + std::string(flag) + "'");
    }
    std::string_view value;
    if (equals != std::string_view::npos) {
      value = arg.substr(equals + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      throw std::invalid_argument(std::string(flag) + " needs a value");
    }
    apply(options, flag, value);
    shards_given = shards_given || flag == "--shards";
  }

  if (tokens) {
    // Like the folder kinds, never over a dataset that is there already.
    for (const char* suffix : {".bin", ".idx"}) {
      struct stat info {};
      if (::lstat((out + suffix).c_str(), &info) == 0) {
        throw std::invalid_argument("OUT '" + out + "' holds a dataset already (" + out + suffix +
                                    " exists): remove " + out + ".bin and " + out + ".idx, or choose another OUT");
      }
    }
    if (options.dtype == IndexedDtype::kUInt16 && options.vocab > 65536) {
      throw std::invalid_argument("--vocab " + std::to_string(options.vocab) +
                                  " does not fit uint16 tokens: use --dtype int32");
    }
    return make_tokens(out, options);
  }
  // The default of 4 shards becomes fewer for fewer samples; a number given must fit.
  if (!shards_given) options.shards = std::min(options.shards, options.samples);
  if (kind->name != "images" && (options.shards < 1 || options.shards > options.samples)) {
    throw std::invalid_argument("--shards: expected 1.." + std::to_string(options.samples) +
                                " (at least one sample per shard, " + std::to_string(options.samples) +
                                " samples), found " + std::to_string(options.shards));
  }
  const std::string folder = prepare_folder(kind->name, out);
  try {
    return kind->name == "images" ? make_image_folder(folder, options) : make_shards(kind->name, folder, options);
  } catch (const Error& e) {
    throw Error(ErrorContext{.stage = "make-dataset " + std::string(kind->name)}, e.cause());
  }
}

}  // namespace ferry::cli
