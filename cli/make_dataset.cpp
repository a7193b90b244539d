#include "cli/make_dataset.h"

#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "io/indexed_dataset_writer.h"
#include "pipeline/error.h"

namespace ferry::cli {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t count_of(std::string_view flag, std::string_view text) {
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw std::invalid_argument(std::string(flag) + ": expected a non-negative integer, found '" + std::string(text) + "'");
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

// Documents of 50..2000 tokens drawn from [0, vocab): enough structure to check windows that cross
// document boundaries, small enough to write in a moment.
int make_tokens(const std::string& prefix, uint64_t documents, uint64_t seed, uint64_t vocab, IndexedDtype dtype) {
  make_parent_folders(prefix);
  IndexedDatasetWriter writer(prefix, dtype);
  uint64_t state = seed;
  std::vector<int64_t> tokens;
  for (uint64_t d = 0; d < documents; ++d) {
    tokens.resize(50 + splitmix64(state) % 1951);
    for (int64_t& token : tokens) token = static_cast<int64_t>(splitmix64(state) % vocab);
    writer.add_document(tokens);
  }
  writer.finalize();
  std::printf("wrote %s.bin and %s.idx (%llu documents, %llu tokens, %s)\n", prefix.c_str(), prefix.c_str(),
              static_cast<unsigned long long>(writer.document_count()), static_cast<unsigned long long>(writer.token_count()),
              dtype == IndexedDtype::kUInt16 ? "uint16" : "int32");
  return 0;
}

}  // namespace

int make_dataset(const std::vector<std::string_view>& args) {
  if (args.size() < 2) throw std::invalid_argument("make-dataset needs a KIND and an OUT path");
  const std::string_view kind = args[0];
  const std::string out(args[1]);
  if (out.empty() || out.front() == '-' || out.back() == '/') {
    throw std::invalid_argument("make-dataset: OUT must be a path prefix such as data/tokens, found '" + out + "'");
  }
  uint64_t documents = 1000;
  uint64_t seed = 0;
  uint64_t vocab = 50257;
  IndexedDtype dtype = IndexedDtype::kUInt16;
  for (size_t i = 2; i < args.size(); ++i) {
    const std::string_view flag = args[i];
    if (i + 1 >= args.size()) throw std::invalid_argument(std::string(flag) + " needs a value");
    const std::string_view value = args[++i];
    if (flag == "--documents") {
      documents = count_of(flag, value);
      if (documents == 0) throw std::invalid_argument("--documents: expected at least 1");
    } else if (flag == "--seed") {
      seed = count_of(flag, value);
    } else if (flag == "--vocab") {
      vocab = count_of(flag, value);
      if (vocab == 0 || vocab > (uint64_t{1} << 31)) throw std::invalid_argument("--vocab: expected 1..2147483648");
    } else if (flag == "--dtype") {
      if (value == "uint16") dtype = IndexedDtype::kUInt16;
      else if (value == "int32") dtype = IndexedDtype::kInt32;
      else throw std::invalid_argument("--dtype: expected uint16 or int32, found '" + std::string(value) + "'");
    } else {
      throw std::invalid_argument("unknown option '" + std::string(flag) + "'");
    }
  }
  if (kind == "tokens") {
    if (dtype == IndexedDtype::kUInt16 && vocab > 65536) {
      throw std::invalid_argument("--vocab " + std::to_string(vocab) + " does not fit uint16 tokens: use --dtype int32");
    }
    return make_tokens(out, documents, seed, vocab, dtype);
  }
  throw std::invalid_argument("unknown dataset kind '" + std::string(kind) + "' (known: tokens)");
}

}  // namespace ferry::cli
