#pragma once

#include <cstddef>
#include <cstdint>

// The constants of Megatron-LM's indexed dataset format, for its reader (indexed_dataset.cpp) and its
// writer (indexed_dataset_writer.cpp). Internal: not installed.

namespace ferry::detail::mmidx {

// Note [MMIDIDX layout]
// ~~~~~~~~~~~~~~~~~~~~~
// Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py: _IndexWriter,
// _IndexReader, IndexedDatasetBuilder) is two files. `<prefix>.bin` holds the tokens of every
// sequence back to back, in the dtype the index names, with no header. `<prefix>.idx` is, all
// little-endian and unpadded (so the arrays after the 34-byte header are not aligned):
//
//   offset  size  field
//   0       9     magic "MMIDIDX\0\0"
//   9       8     version, uint64 = 1
//   17      1     dtype code, uint8: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
//                 7 float32, 8 uint16
//   18      8     sequence count N, uint64
//   26      8     document index count D, uint64
//   34      4N    sequence lengths, int32, in tokens
//   34+4N   8N    sequence pointers, int64, byte offsets into the .bin
//   34+12N  8D    document indices, int64: 0, then for each document the index of the sequence
//                 after its last one; so D = documents + 1 and the last entry is N
//   34+12N+8D N   (multimodal datasets only) sequence modes, int8
//
// The writer computes the pointers as the running sum of length * itemsize from 0, so sequences
// are contiguous and the .bin is exactly as long as the last sequence's end. IndexedDataset insists on
// that: it is what every Megatron tool writes (merged datasets too: the writer recomputes the
// pointers), and it makes any range of the concatenated token stream one contiguous byte range of
// the .bin, which TokenWindowSource copies with a single memcpy. Documents may be empty (the
// preprocessing script adds a document with no sequences for a text with no tokens, which repeats
// a document index) and a sequence may have length 0 (add_item with an empty tensor).
//
// Nothing in the header says whether the modes are there (Megatron's reader is told by its caller),
// so an index exactly N bytes longer than its arrays is taken to carry them; any other excess is an
// error ("trailing bytes").

inline constexpr char kMagic[] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr size_t kMagicBytes = sizeof(kMagic);
inline constexpr uint64_t kVersion = 1;
inline constexpr uint64_t kVersionOffset = 9;
inline constexpr uint64_t kDtypeOffset = 17;
inline constexpr uint64_t kSequenceCountOffset = 18;
inline constexpr uint64_t kDocumentCountOffset = 26;
inline constexpr uint64_t kHeaderBytes = 34;

}  // namespace ferry::detail::mmidx
