#pragma once

#include <memory>
#include <optional>

#include <c10/core/Device.h>

#include "ferry/pipeline/cuda_event_pool.h"
#include "ferry/pipeline/cuda_stream.h"
#include "ferry/pipeline/dataset_cache.h"
#include "ferry/pipeline/stage.h"
#include "ferry/stages/pipeline_options.h"

namespace ferry {

class BufferCarver;
class HostBufferRing;
class ImageAugment;

/// Moves a packed batch to its device and builds the Batch the consumer gets.
///
/// GPU: allocates one device buffer through libtorch's caching allocator (as if on the copy stream,
/// so the allocator orders its reuse after ferry's copies; a small batch's is a slice of a larger one:
/// Note [carved device buffers] in buffer_carver.h), queues one cudaMemcpyAsync per chunk on a
/// dedicated non-blocking stream, records a pooled event after them and attaches it to the slab's
/// lease (the slab cannot be reused before the copy has read it). It does not wait: EventWaitStage
/// does, on another thread. The fields are views into the buffer.
///
/// CPU: copies the slab into a CPU buffer (the slab goes straight back to the pool), so a CPU pipeline
/// runs exactly the stages a GPU one does; buffers the consumer has dropped are reused (HostBufferRing).
///
/// With a dataset cache (Note [dataset cache]), the batch's cached samples are gathered into the buffer
/// after the copy, and its other samples kept, on the same stream.
///
/// With an ImageAugment, its field is augmented where the batch's bytes landed, before the event (Note
/// [image augment] in image_augment.h), into the same buffer after the copied bytes; the delivered
/// field is the augmented one.
///
/// The buffer, the event and the views are made in prepare(), on the node before (Note [work ahead]);
/// run() queues the copies. Serial: one batch at a time, per device. Allocates the device buffer (a
/// cudaMalloc only when libtorch's cache has no block).
class H2DSubmitStage : public BatchStage {
 public:
  /// Creates the copy stream on a CUDA device. Throws ferry::Error when the device is unusable.
  /// `in_flight`: the pipeline's prefetch (how many batches a CPU pipeline's buffers cycle through).
  H2DSubmitStage(at::Device device, const TransferOptions& options, std::shared_ptr<DatasetCache> cache = nullptr,
                 std::shared_ptr<const ImageAugment> augment = nullptr, size_t in_flight = 4);
  ~H2DSubmitStage() override;
  std::string_view name() const override { return "h2d"; }
  /// The device (or host) buffer, the event and the Batch of views into the buffer, ahead of the copy
  /// (Note [work ahead]).
  void prepare(BatchWork& work) override;
  void run(BatchWork& work, const std::atomic<bool>& stop) override;

  at::Device device() const noexcept { return device_; }

 private:
  /// Where a batch's augmented field goes: its index among the layout's fields and the byte offset
  /// of the output in the buffer (after the copied bytes).
  struct Augmented {
    size_t field = 0;
    size_t offset = 0;
  };
  std::optional<Augmented> augmented(const BatchWork& work) const;
  /// Both: into the prepared batch's buffer, the copies (and the gather, and the augmentation) queued.
  void copy_to_device(BatchWork& work, const std::optional<Augmented>& augmented);
  void copy_to_host(BatchWork& work, const std::optional<Augmented>& augmented);
  static bool from_host(const BatchWork& work) noexcept { return static_cast<bool>(work.slab) || !work.chunks.empty(); }

  at::Device device_;
  TransferOptions options_;
  std::unique_ptr<CudaStream> stream_;  // CUDA devices only
  std::shared_ptr<CudaEventPool> events_;
  std::unique_ptr<BufferCarver> buffers_;         // CUDA devices only
  std::unique_ptr<HostBufferRing> host_buffers_;  // the CPU only
  std::shared_ptr<DatasetCache> cache_;           // may be null
  std::shared_ptr<const ImageAugment> augment_;   // may be null
};

}  // namespace ferry
