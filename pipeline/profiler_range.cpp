#include "ferry/pipeline/profiler_range.h"

#include "ferry/build_config.h"

#if FERRY_HAVE_CUDART && __has_include(<nvtx3/nvToolsExt.h>)
#define FERRY_NVTX 1
#include <nvtx3/nvToolsExt.h>
#else
#define FERRY_NVTX 0
#endif

namespace ferry::detail {
namespace {

#if FERRY_NVTX
nvtxDomainHandle_t domain() noexcept {
  static const nvtxDomainHandle_t handle = nvtxDomainCreateA("ferry");
  return handle;
}
#endif

}  // namespace

ProfilerRange::ProfilerRange(const char* nvtx_name, const char* torch_name, uint64_t batch) noexcept
    : torch_scope_(at::RecordScope::USER_SCOPE) {
  if (torch_scope_.isActive()) {
    try {
      torch_scope_.before(torch_name, c10::ArrayRef<const c10::IValue>{});
    } catch (...) {
      // A profiler's callback failed: the run goes on unprofiled rather than fail for it.
    }
  }
#if FERRY_NVTX
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = nvtx_name;
  attributes.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  attributes.payload.ullValue = batch;
  nvtxDomainRangePushEx(domain(), &attributes);
#else
  (void)nvtx_name;
  (void)batch;
#endif
}

ProfilerRange::~ProfilerRange() {
#if FERRY_NVTX
  nvtxDomainRangePop(domain());
#endif
}

bool nvtx_compiled() noexcept { return FERRY_NVTX != 0; }

}  // namespace ferry::detail
