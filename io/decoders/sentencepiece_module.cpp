// libferry_sentencepiece: sentencepiece behind a C interface, loaded by SentencePieceModel with dlopen.
//
// Why a module and not a link: Debian's libsentencepiece carries its own copy of protobuf-lite and
// exports its symbols, and libtorch loads another protobuf; linked into one program, the two copies'
// symbols interpose and the program crashes before main. Loaded on its own (RTLD_LOCAL, and
// RTLD_DEEPBIND where another protobuf is global), this module and libsentencepiece keep their symbols
// among themselves (Note [sentencepiece module] in sentencepiece_model.cpp). Only plain C types cross the boundary.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

#include "ferry/io/decoders/sentencepiece_module.h"

namespace {

void set_error(char* error, size_t error_size, const std::string& text) {
  if (error == nullptr || error_size == 0) return;
  std::snprintf(error, error_size, "%s", text.c_str());
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* ferry_sentencepiece_load(const char* path, FerrySentencePieceIds* ids,
                                                                      char* error, size_t error_size) {
  try {
    auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = processor->Load(path);
    if (!status.ok()) {
      set_error(error, error_size, status.ToString());
      return nullptr;
    }
    ids->vocab_size = processor->GetPieceSize();
    ids->bos = processor->bos_id();
    ids->eos = processor->eos_id();
    ids->pad = processor->pad_id();
    ids->unk = processor->unk_id();
    return processor.release();
  } catch (const std::exception& e) {
    set_error(error, error_size, e.what());
  } catch (...) {
    set_error(error, error_size, "unknown exception");
  }
  return nullptr;
}

__attribute__((visibility("default"))) void ferry_sentencepiece_free(void* model) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(model);
}

__attribute__((visibility("default"))) int64_t ferry_sentencepiece_encode(const void* model, const char* text,
                                                                          size_t size, int32_t* ids, int64_t capacity,
                                                                          char* error, size_t error_size) {
  try {
    // Encode() is const and keeps no state: the decode threads share one processor.
    thread_local std::vector<int> pieces;
    pieces.clear();
    const auto* processor = static_cast<const sentencepiece::SentencePieceProcessor*>(model);
    const auto status = processor->Encode(absl::string_view(text, size), &pieces);
    if (!status.ok()) {
      set_error(error, error_size, status.ToString());
      return -1;
    }
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
