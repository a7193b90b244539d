#include "ferry/pipeline/segment_copy.h"

#include <algorithm>
#include <cstring>

#include "ferry/build_config.h"
#include "ferry/pipeline/error.h"

namespace ferry {

void copy_segments_on_host(std::span<const CopySegment> segments) noexcept {
  for (const CopySegment& segment : segments) {
    if (segment.copy_bytes != 0) std::memcpy(segment.target, segment.source, segment.copy_bytes);
    std::byte* fill = segment.target + segment.copy_bytes;
    const uint32_t element = segment.element_bytes;
    if (segment.fill_bytes == 0) continue;
    // One element written, then doubled: a fill of n bytes costs log(n) memcpys.
    const uint64_t first = std::min<uint64_t>(element, segment.fill_bytes);
    std::memcpy(fill, segment.pattern.data(), first);
    for (uint64_t done = first; done < segment.fill_bytes;) {
      const uint64_t step = std::min(done, segment.fill_bytes - done);
      std::memcpy(fill + done, fill, step);
      done += step;
    }
  }
}

#if FERRY_SEGMENT_KERNEL
const char* segment_kernel_reason() noexcept { return ""; }

void copy_segments_on_device(std::span<const CopySegment> segments, CudaStreamHandle stream) {
  for (size_t first = 0; first < segments.size(); first += detail::kSegmentsPerLaunch) {
    detail::launch_segment_kernel(segments.data() + first,
                                  std::min(detail::kSegmentsPerLaunch, segments.size() - first), stream);
  }
}
#else
const char* segment_kernel_reason() noexcept { return FERRY_SEGMENT_KERNEL_REASON; }

void copy_segments_on_device(std::span<const CopySegment> segments, CudaStreamHandle /*stream*/) {
  if (segments.empty()) return;
  throw Error(std::string("gathering on the device needs ferry's CUDA kernel, which this build lacks: ") +
              segment_kernel_reason());
}
#endif

}  // namespace ferry
