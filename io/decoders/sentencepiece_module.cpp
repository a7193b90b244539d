// libferry_sentencepiece: sentencepiece behind a C interface, loaded by SentencePieceModel with dlopen.
//
// Why a module and not a link: Debian's libsentencepiece carries its own copy of protobuf-lite and
// exports its symbols, and libtorch loads another protobuf; linked into one program, the two copies'
// symbols interpose and the program crashes before main. Loaded on its own (RTLD_LOCAL, and
// RTLD_DEEPBIND where another protobuf is global), this module and libsentencepiece keep their symbols
// among themselves (Note [sentencepiece module] in sentencepiece_model.cpp). Only plain C types cross the
// boundary.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iterator>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include <sentencepiece_processor.h>

#include "ferry/io/decoders/sentencepiece_module.h"

// Note [encoding only what is kept]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A field of L ids keeps the first L ids of a text; a book cut to 1024 ids has thousands more, and
// encoding them all costs in proportion. Where no piece of the model holds the word-start mark U+2581 (or
// a space) anywhere but at its start (models trained with split_by_whitespace, sentencepiece's default,
// and without treat_whitespace_as_suffix or whitespace-only pieces), no piece spans a space; where the
// model also normalizes with one of sentencepiece's built-in rule sets (a user's rules may rewrite across
// a space) and marks spaces with U+2581, the ids of a text's start cut before a space are the first ids
// of the whole text's. A text with at least twice the bytes that the ids wanted take (at the bytes per id
// seen so far, and a quarter more) is encoded from such a start, cut before a space between two visible
// ASCII characters (so that no rule about combining marks or other spaces reaches across the cut); where
// that start gave too few ids, or has no such space, and for shorter texts, the whole text is. A text of
// barely more ids than wanted gains nothing from its start, and the start tried first costs at most half
// the whole.

namespace {

constexpr std::string_view kWordStart = "\xe2\x96\x81";  // U+2581, sentencepiece's mark for a space

struct Model {
  sentencepiece::SentencePieceProcessor processor;
  bool cuts_before_spaces = false;  // a text's start may be encoded alone (Note [encoding only what is kept])
};

// Whether every piece has the word-start mark (or a space) at its start only, if at all.
bool pieces_start_words_only(const sentencepiece::SentencePieceProcessor& processor) {
  for (int id = 0; id < processor.GetPieceSize(); ++id) {
    if (processor.IsControl(id) || processor.IsUnknown(id)) continue;
    const std::string& piece = processor.IdToPiece(id);
    if (piece.find(kWordStart, 1) != std::string::npos || piece.find(' ', 1) != std::string::npos) return false;
  }
  return true;
}

// Reads a varint of protobuf's wire format at `at`, moving past it; false where it is cut short.
bool read_varint(std::string_view data, size_t& at, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64 && at < data.size(); shift += 7) {
    const auto byte = static_cast<uint8_t>(data[at++]);
    value |= uint64_t{byte & 0x7fU} << shift;
    if ((byte & 0x80U) == 0) return true;
  }
  return false;
}

// Calls visit(number, varint, bytes) for each field of a serialized protobuf message (bytes for a
// length-delimited one, varint for a varint); false where the message is not well formed. Debian's
// libsentencepiece-dev ships no generated headers for ModelProto, so its few fields read here are read
// from the wire format.
template <typename Visit>
bool for_each_field(std::string_view message, Visit visit) {
  size_t at = 0;
  while (at < message.size()) {
    uint64_t tag = 0;
    uint64_t value = 0;
    std::string_view bytes;
    if (!read_varint(message, at, tag)) return false;
    switch (tag & 7U) {
      case 0:  // varint
        if (!read_varint(message, at, value)) return false;
        break;
      case 1:  // 64 bits
        if (message.size() - at < 8) return false;
        at += 8;
        break;
      case 2:  // length-delimited
        if (!read_varint(message, at, value) || value > message.size() - at) return false;
        bytes = message.substr(at, value);
        at += value;
        break;
      case 5:  // 32 bits
        if (message.size() - at < 4) return false;
        at += 4;
        break;
      default: return false;
    }
    visit(tag >> 3, value, bytes);
  }
  return true;
}

// Whether the model normalizes with a built-in rule set and marks spaces with U+2581: its ModelProto's
// normalizer_spec (field 3) has one of the built-in names (1; a user's rules are "user_defined") and
// escape_whitespaces (5, by default true) set.
bool normalizes_with_built_in_rules(const sentencepiece::SentencePieceProcessor& processor) {
  const std::string model = processor.serialized_model_proto();
  std::string_view spec;
  if (!for_each_field(model, [&](uint64_t number, uint64_t, std::string_view bytes) {
        if (number == 3) spec = bytes;
      })) {
    return false;
  }
  std::string_view name;
  bool escapes_spaces = true;
  if (!for_each_field(spec, [&](uint64_t number, uint64_t value, std::string_view bytes) {
        if (number == 1) name = bytes;
        if (number == 5) escapes_spaces = value != 0;
      })) {
    return false;
  }
  constexpr std::string_view kBuiltIn[] = {"nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity"};
  return escapes_spaces && std::find(std::begin(kBuiltIn), std::end(kBuiltIn), name) != std::end(kBuiltIn);
}

bool ascii_visible(char c) { return c > ' ' && c < 0x7f; }

// The last space before `limit` whose neighbours are visible ASCII characters; 0 if none.
size_t cut_before(std::string_view text, size_t limit) {
  if (text.size() < 3) return 0;
  for (size_t i = std::min(limit, text.size() - 2); i > 0; --i) {
    if (text[i] == ' ' && ascii_visible(text[i - 1]) && ascii_visible(text[i + 1])) return i;
  }
  return 0;
}

void set_error(char* error, size_t error_size, const std::string& text) {
  if (error == nullptr || error_size == 0) return;
  std::snprintf(error, error_size, "%s", text.c_str());
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* ferry_sentencepiece_load(const char* path, FerrySentencePieceIds* ids,
                                                                      char* error, size_t error_size) {
  try {
    auto model = std::make_unique<Model>();
    sentencepiece::SentencePieceProcessor& processor = model->processor;
    const auto status = processor.Load(path);
    if (!status.ok()) {
      set_error(error, error_size, status.ToString());
      return nullptr;
    }
    ids->vocab_size = processor.GetPieceSize();
    ids->bos = processor.bos_id();
    ids->eos = processor.eos_id();
    ids->pad = processor.pad_id();
    ids->unk = processor.unk_id();
    model->cuts_before_spaces = pieces_start_words_only(processor) && normalizes_with_built_in_rules(processor);
    return model.release();
  } catch (const std::exception& e) {
    set_error(error, error_size, e.what());
  } catch (...) {
    set_error(error, error_size, "unknown exception");
  }
  return nullptr;
}

__attribute__((visibility("default"))) void ferry_sentencepiece_free(void* model) { delete static_cast<Model*>(model); }

__attribute__((visibility("default"))) int64_t ferry_sentencepiece_encode_start(const void* model, const char* text,
                                                                                size_t size, int32_t* ids,
                                                                                int64_t capacity, char* error,
                                                                                size_t error_size) {
  try {
    // Encode() is const and keeps no state: the decode threads share one processor.
    thread_local std::vector<int> pieces;
    thread_local double bytes_per_id = 4.0;  // as seen in this thread's texts so far
    const auto* chosen = static_cast<const Model*>(model);
    const std::string_view whole(text, size);
    const auto encode = [&](std::string_view part) {
      pieces.clear();
      const auto status = chosen->processor.Encode(absl::string_view(part.data(), part.size()), &pieces);
      if (!status.ok()) set_error(error, error_size, status.ToString());
      if (!pieces.empty()) bytes_per_id = static_cast<double>(part.size()) / static_cast<double>(pieces.size());
      return status.ok();
    };
    const auto wanted = static_cast<size_t>(std::max<int64_t>(capacity, 0)) + 1;  // ids that show the text is cut
    // A start of the text where it has at least twice the bytes that many ids take, else the whole.
    const double start_bytes = static_cast<double>(wanted) * bytes_per_id * 1.25 + 16;
    const size_t cut = chosen->cuts_before_spaces && 2 * start_bytes <= static_cast<double>(size)
                           ? cut_before(whole, static_cast<size_t>(start_bytes))
                           : 0;
    if (cut > 0 && !encode(whole.substr(0, cut))) return -1;
    if ((cut == 0 || pieces.size() < wanted) && !encode(whole)) return -1;
    const auto count = static_cast<int64_t>(pieces.size());
    std::copy_n(pieces.begin(), std::min(count, capacity), ids);
    return count;
  } catch (const std::exception& e) {
    set_error(error, error_size, e.what());
  } catch (...) {
    set_error(error, error_size, "unknown exception");
  }
  return -1;
}

}  // extern "C"
