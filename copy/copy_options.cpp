#include "ferry/copy/copy_options.h"

#include <string>

#include "ferry/pipeline/error.h"

namespace ferry {

void validate(const CopyOptions& options) {
  const size_t alignment = options.min_packed_alignment_bytes;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw Error(ErrorContext{"copy"},
                "min_packed_alignment_bytes must be a power of two of at least 1, got " + std::to_string(alignment));
  }
  if (options.max_packed_chunk_bytes == 0) {
    throw Error(ErrorContext{"copy"}, "max_packed_chunk_bytes must be at least 1, got 0");
  }
}

}  // namespace ferry
