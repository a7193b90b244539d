#include "ferry/copy/copy_options.h"

#include <string>

#include "ferry/pipeline/error.h"

namespace ferry {

void validate(const CopyOptions& options) {
  if (options.min_packed_alignment_bytes == 0) {
    throw Error(ErrorContext{"copy"}, "min_packed_alignment_bytes must be at least 1, got 0");
  }
  if (options.max_packed_chunk_bytes == 0) {
    throw Error(ErrorContext{"copy"}, "max_packed_chunk_bytes must be at least 1, got 0");
  }
}

}  // namespace ferry
