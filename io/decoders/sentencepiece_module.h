#pragma once

// The C interface of libferry_sentencepiece (sentencepiece_module.cpp), which SentencePieceModel
// loads with dlopen. Internal: not installed.

#include <cstddef>
#include <cstdint>

extern "C" {

/// A model's special ids; -1 where the model has none.
struct FerrySentencePieceIds {
  int32_t vocab_size = 0;
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t pad = -1;
  int32_t unk = -1;
};

/// Loads the model file at `path`: a handle, or null with the reason in `error`.
using FerrySentencePieceLoad = void* (*)(const char* path, FerrySentencePieceIds* ids, char* error, size_t error_size);
using FerrySentencePieceFree = void (*)(void* model);
/// ferry_sentencepiece_encode_start: encodes `size` bytes of UTF-8 text: the number of ids, of which the
/// first `capacity` are written to `ids`, or -1 with the reason in `error`. A count above `capacity` may
/// fall short of the whole text's: where the model allows, only a start of the text long enough to fill
/// `ids` is encoded (Note [encoding only what is kept] in sentencepiece_module.cpp). Thread-safe on one
/// handle.
using FerrySentencePieceEncode = int64_t (*)(const void* model, const char* text, size_t size, int32_t* ids,
                                             int64_t capacity, char* error, size_t error_size);
}
