#include "ferry/copy/copy_streams.h"

#include <map>
#include <mutex>

#include "ferry/pipeline/cuda_stream.h"

namespace ferry::detail {
namespace {

struct PerDevice {
  std::unique_ptr<CudaStream> stream;
  std::shared_ptr<CudaEventPool> events;
};

class Table {
 public:
  PerDevice& at(int device) {
    std::lock_guard lock(mutex_);
    PerDevice& entry = devices_[device];
    // Created under the lock: a second thread asking for the same device must get the same stream.
    // This is the only lock held across a CUDA call in ferry's copy path, and only the first time.
    if (!entry.stream) {
      entry.stream = std::make_unique<CudaStream>(device, /*non_blocking=*/true);
      entry.events = CudaEventPool::create(device);
    }
    return entry;
  }

 private:
  std::mutex mutex_;
  std::map<int, PerDevice> devices_;  // map: references stay valid as devices are added
};

Table& table() {
  static Table* const instance = new Table;  // never destroyed: see the class comment
  return *instance;
}

}  // namespace

CudaStreamHandle CopyStreams::stream(int device) { return table().at(device).stream->handle(); }

std::shared_ptr<CudaEventPool> CopyStreams::events(int device) { return table().at(device).events; }

}  // namespace ferry::detail
