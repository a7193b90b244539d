#include "ferry/stages/h2d_submit_stage.h"

#include <ATen/ops/empty.h>

#include "ferry/build_config.h"
#include "ferry/pipeline/buffer_carver.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/device_guard.h"
#include "ferry/pipeline/fault_injection.h"
#include "ferry/pipeline/tensor_views.h"
#include "ferry/pipeline/torch_cuda.h"
#include "ferry/stages/parallel_copy.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {

H2DSubmitStage::H2DSubmitStage(at::Device device, const TransferOptions& options, std::shared_ptr<DatasetCache> cache)
    : device_(device), options_(options), cache_(std::move(cache)) {
  if (device_.is_cuda()) {
    if (FERRY_WITH_GPU == 0)
      throw Error("cannot deliver to " + device_.str() +
                  ": this is a " FERRY_BUILD_KIND " build (" FERRY_BUILD_REASON ")");
    stream_ = std::make_unique<CudaStream>(device_.index(), /*non_blocking=*/true, options.high_priority_stream);
    events_ = CudaEventPool::create(device_.index());
    buffers_ = std::make_unique<BufferCarver>([device = device_.index(), stream = stream_->handle()](size_t bytes) {
      return detail::allocate_device_buffer(device, stream, bytes);
    });
  } else if (!device_.is_cpu()) {
    throw Error("cannot deliver to " + device_.str() + ": only cpu and cuda devices are supported");
  }
}

H2DSubmitStage::~H2DSubmitStage() = default;

void H2DSubmitStage::run(BatchWork& work, const std::atomic<bool>& /*stop*/) {
  std::shared_ptr<CudaEvent> ready;
  const at::Tensor buffer = device_.is_cuda() ? copy_to_device(work, ready) : copy_to_host(work);

  const BatchLayout& layout = work.layout;
  std::vector<at::Tensor> tensors;
  tensors.reserve(layout.fields.size());
  const auto base = static_cast<size_t>(buffer.storage_offset());  // a slice of a chunk: its place in it
  for (const FieldLayout& field : layout.fields) {
    tensors.push_back(make_view(buffer.storage(), device_, field.dtype, base + field.offset, field.shape));
  }
  work.batch = Batch(layout.schema, std::move(tensors), work.info, buffer, std::move(ready));
}

at::Tensor H2DSubmitStage::copy_to_device(BatchWork& work, std::shared_ptr<CudaEvent>& ready) {
  const int device = device_.index();
  DeviceGuard guard(device);
  at::Tensor buffer = buffers_->take(work.layout.total_bytes);
  ready = events_->acquire();
  // However the lease ends from here on (delivery, error, shutdown), the slab — and the pinned tensors
  // copied in place — outlive the copies that read them. That holds when a later copy fails too: the
  // earlier ones are queued already.
  auto in_place = std::make_shared<std::vector<at::Tensor>>(std::move(work.direct_sources));
  auto protect = [&] {
    ready->record(stream_->handle());
    work.slab.attach_event(ready, in_place);
  };
#if FERRY_HAVE_CUDART
  auto* target = static_cast<std::byte*>(buffer.data_ptr());
  try {
    for (const CopyChunk& chunk : work.chunks) {
      FERRY_CUDA_CHECK(detail::fault_fires(Fault::kTransferCopy)
                           ? cudaErrorUnknown  // Note [fault injection]
                           : cudaMemcpyAsync(target + chunk.offset, chunk.source, chunk.bytes, cudaMemcpyHostToDevice,
                                             stream_->handle()));
    }
    if (cache_) cache_->serve(work, target, from_host(work), stream_->handle());
    protect();  // inside: an event that cannot be recorded must not release the slab unprotected
  } catch (...) {
    try {
      protect();
    } catch (...) {
      // The stream cannot even record an event: wait for what was queued instead (errors ignored:
      // the first one is being reported).
      if (cudaStreamSynchronize(stream_->handle()) != cudaSuccess) (void)cudaGetLastError();
    }
    throw;
  }
#else
  protect();
#endif
  return buffer;
}

at::Tensor H2DSubmitStage::copy_to_host(BatchWork& work) const {
  at::Tensor buffer = at::empty({static_cast<int64_t>(work.layout.total_bytes)}, at::kByte);
  auto* target = static_cast<std::byte*>(buffer.data_ptr());
  std::vector<CopyOp> copies;
  copies.reserve(work.chunks.size());
  for (const CopyChunk& chunk : work.chunks)
    copies.push_back(CopyOp{target + chunk.offset, chunk.source, chunk.bytes, {}, 1});
  if (detail::fault_fires(Fault::kTransferCopy)) {  // Note [fault injection]
    throw Error("the copy of batch " + std::to_string(work.info.index) + " failed (an injected fault)");
  }
  run_copies(copies, options_.parallel_pack_bytes);
  if (cache_) cache_->serve(work, target, from_host(work), nullptr);
  work.slab.release();
  work.direct_sources.clear();
  return buffer;
}

}  // namespace ferry
