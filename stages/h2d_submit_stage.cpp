#include "ferry/stages/h2d_submit_stage.h"

#include <utility>
#include <vector>

#include <ATen/ops/empty.h>

#include "ferry/build_config.h"
#include "ferry/pipeline/align_up.h"
#include "ferry/pipeline/buffer_carver.h"
#include "ferry/pipeline/cuda_error.h"
#include "ferry/pipeline/device_guard.h"
#include "ferry/pipeline/fault_injection.h"
#include "ferry/pipeline/field_loop.h"
#include "ferry/pipeline/host_buffer_ring.h"
#include "ferry/pipeline/segment_copy.h"
#include "ferry/pipeline/tensor_views.h"
#include "ferry/pipeline/torch_cuda.h"
#include "ferry/stages/image_augment.h"
#include "ferry/stages/parallel_copy.h"

#if FERRY_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace ferry {

namespace {

// The augmented output starts at a multiple of this after the copied bytes: any element type, and
// whole cache lines and 256-byte device segments for the kernel's stores.
constexpr size_t kAugmentAlignment = 256;

}  // namespace

H2DSubmitStage::H2DSubmitStage(at::Device device, const TransferOptions& options, std::shared_ptr<DatasetCache> cache,
                               std::shared_ptr<const ImageAugment> augment, size_t in_flight)
    : device_(device), options_(options), cache_(std::move(cache)), augment_(std::move(augment)) {
  if (device_.is_cuda()) {
    if (FERRY_WITH_GPU == 0)
      throw Error("cannot deliver to " + device_.str() +
                  ": this is a " FERRY_BUILD_KIND " build (" FERRY_BUILD_REASON ")");
    stream_ = std::make_unique<CudaStream>(device_.index(), /*non_blocking=*/true, options.high_priority_stream);
    events_ = CudaEventPool::create(device_.index());
    buffers_ = std::make_unique<BufferCarver>([device = device_.index(), stream = stream_->handle()](size_t bytes) {
      return detail::allocate_device_buffer(device, stream, bytes);
    });
  } else if (device_.is_cpu()) {
    // The batches in flight, the one the consumer holds and one it is about to drop: a consumer that drops
    // each batch before it takes the next never makes the ring allocate once it has that many.
    host_buffers_ = std::make_unique<HostBufferRing>(in_flight + 2);
  } else {
    throw Error("cannot deliver to " + device_.str() + ": only cpu and cuda devices are supported");
  }
}

H2DSubmitStage::~H2DSubmitStage() = default;

std::optional<H2DSubmitStage::Augmented> H2DSubmitStage::augmented(const BatchWork& work) const {
  if (!augment_) return std::nullopt;
  const BatchLayout& layout = work.layout;
  const std::optional<size_t> field = layout.schema->find(augment_->options().field);
  if (!field) throw Error("augment: the batch has no field '" + augment_->options().field + "'");
  const FieldLayout& image = layout.fields[*field];
  if (image.host || !image.list_offsets.empty()) {
    throw Error("augment: field '" + augment_->options().field + "' is delivered " +
                (image.host ? "on the host (collate.host)" : "as a list (collate.lists)") +
                "; the augmentation works on a batch of images stacked on the device");
  }
  const auto batch = static_cast<int64_t>(work.info.sample_indices.size());
  const std::vector<int64_t> expected = {batch, augment_->image_height(), augment_->image_width(), 3};
  if (image.dtype != at::kByte || image.shape != expected) {
    throw Error("augment: field '" + augment_->options().field + "' is not a batch of uint8 [" +
                std::to_string(expected[1]) + ", " + std::to_string(expected[2]) + ", 3] images");
  }
  return Augmented{*field, align_up(layout.total_bytes, kAugmentAlignment)};
}

void H2DSubmitStage::prepare(BatchWork& work) {
  const std::optional<Augmented> augment = augmented(work);
  const auto batch = static_cast<int64_t>(work.info.sample_indices.size());
  const size_t bytes = augment ? augment->offset + augment_->bytes(batch) : work.layout.total_bytes;
  at::Tensor buffer;
  std::shared_ptr<CudaEvent> ready;
  if (device_.is_cuda()) {
    DeviceGuard guard(device_.index());
    buffer = buffers_->take(bytes);
    ready = events_->acquire();
  } else {
    buffer = host_buffers_->take(bytes);
  }

  const BatchLayout& layout = work.layout;
  std::vector<at::Tensor> tensors(layout.fields.size());
  const auto base = static_cast<size_t>(buffer.storage_offset());  // a slice of a chunk: its place in it
  // A view per field; a wide batch's on several threads, each view given a reference to the buffer
  // counted here beforehand (Note [wide batches]).
  const size_t count = layout.fields.size();
  std::vector<c10::Storage> references(count >= kWideBatchFields ? count : 0, buffer.storage());
  std::vector<std::vector<at::Tensor>> lists;
  for_each_field(count, [&](size_t f) {
    const FieldLayout& field = layout.fields[f];
    if (field.host) {  // collated on the host: delivered as it is
      tensors[f] = field.made;
      return;
    }
    c10::Storage storage;
    if (references.empty()) {
      storage = buffer.storage();
    } else {
      storage = std::move(references[f]);
    }
    tensors[f] =
        augment && augment->field == f
            ? make_view(std::move(storage), device_, augment_->dtype(), base + augment->offset, augment_->shape(batch))
            : make_view(std::move(storage), device_, field.dtype, base + field.offset, field.shape);
  });
  // A list field's samples: a view each, of its own shape, where collate put it.
  for (size_t f = 0; f < count; ++f) {
    const FieldLayout& field = layout.fields[f];
    if (field.list_offsets.empty()) continue;
    lists.resize(count);
    std::vector<at::Tensor>& views = lists[f];
    views.reserve(field.list_offsets.size());
    for (size_t s = 0; s < field.list_offsets.size(); ++s) {
      views.push_back(make_view(buffer.storage(), device_, field.dtype, base + field.offset + field.list_offsets[s],
                                field.list_shapes[s]));
    }
  }
  work.batch =
      Batch(layout.schema, std::move(tensors), work.info, std::move(buffer), std::move(ready), std::move(lists));
}

void H2DSubmitStage::run(BatchWork& work, const std::atomic<bool>& /*stop*/) {
  if (!work.batch.buffer().defined()) prepare(work);  // not done ahead (Note [work ahead])
  const std::optional<Augmented> augment = augmented(work);
  if (device_.is_cuda()) {
    copy_to_device(work, augment);
  } else {
    copy_to_host(work, augment);
  }
}

void H2DSubmitStage::copy_to_device(BatchWork& work, const std::optional<Augmented>& augment) {
  DeviceGuard guard(device_.index());
  const at::Tensor& buffer = work.batch.buffer();
  const std::shared_ptr<CudaEvent>& ready = work.batch.ready_event();
  // However the lease ends from here on (delivery, error, shutdown), the slab — and the pinned tensors
  // copied in place — outlive the copies that read them. That holds when a later copy fails too: the
  // earlier ones are queued already.
  auto in_place = std::make_shared<std::vector<at::Tensor>>(std::move(work.direct_sources));
  // Fields decoded on the device (Note [GPU JPEG decode]) are read by the gather below: kept alike.
  std::vector<CopySegment> on_device;
  on_device.reserve(work.device_sources.size());
  for (auto& [offset, tensor] : work.device_sources) {
    CopySegment segment;
    segment.target = static_cast<std::byte*>(buffer.data_ptr()) + offset;
    segment.source = static_cast<const std::byte*>(tensor.data_ptr());
    segment.copy_bytes = tensor.nbytes();
    on_device.push_back(segment);
    in_place->push_back(std::move(tensor));
  }
  work.device_sources.clear();
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
    copy_segments_on_device(on_device, stream_->handle());
    if (cache_) cache_->serve(work, target, from_host(work), stream_->handle());
    if (augment) {
      const auto images = reinterpret_cast<const uint8_t*>(target + work.layout.fields[augment->field].offset);
      augment_->run_on_device(images, augment_->draws(work.info.epoch, work.info.sample_indices),
                              target + augment->offset, stream_->handle());
    }
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
  (void)augment;
  protect();
#endif
}

void H2DSubmitStage::copy_to_host(BatchWork& work, const std::optional<Augmented>& augment) {
  if (!work.device_sources.empty()) {
    throw Error("fields decoded on the GPU need a CUDA delivery device (transfer.device), not the CPU");
  }
  auto* target = static_cast<std::byte*>(work.batch.buffer().data_ptr());
  std::vector<CopyOp> copies;
  copies.reserve(work.chunks.size());
  for (const CopyChunk& chunk : work.chunks)
    copies.push_back(CopyOp{target + chunk.offset, chunk.source, chunk.bytes, {}, 1});
  if (detail::fault_fires(Fault::kTransferCopy)) {  // Note [fault injection]
    throw Error("the copy of batch " + std::to_string(work.info.index) + " failed (an injected fault)");
  }
  run_copies(copies, options_.parallel_pack_bytes);
  if (cache_) cache_->serve(work, target, from_host(work), nullptr);
  if (augment) {
    const auto images = reinterpret_cast<const uint8_t*>(target + work.layout.fields[augment->field].offset);
    augment_->run_on_host(images, augment_->draws(work.info.epoch, work.info.sample_indices), target + augment->offset);
  }
  work.slab.release();
  work.direct_sources.clear();
}

}  // namespace ferry
