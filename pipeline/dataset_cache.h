#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

#include "ferry/pipeline/cache_memory.h"
#include "ferry/pipeline/cuda_types.h"
#include "ferry/pipeline/pipeline_stats.h"
#include "ferry/pipeline/segment_copy.h"

namespace ferry {

struct BatchWork;
struct FieldLayout;
class CudaStream;

// Note [dataset cache]
// ~~~~~~~~~~~~~~~~~~~~
// When no decoder draws random numbers, a sample decodes to the same bytes in every epoch, so the bytes
// one epoch copied to the device can make every later batch that holds the sample. The cache is a
// read-through store of decoded samples, keyed by source index, in one arena allocated at the start
// (managed or device memory on the delivery device; host memory when batches go to the CPU):
//
//   decode   a sample in the cache is neither read nor decoded: SampleWork::cached marks it.
//   collate  a cached sample's shape comes from the cache (its length, for a variable-length field).
//   pack     cached samples are skipped; a batch of cached samples only takes no slab at all.
//   h2d      after the batch's host copy is queued, serve() queues on the same (copy) stream a gather
//            of the cached samples from the arena into the batch's device memory — with their padding,
//            and the lengths fields when nothing came from the host — then a fill of the samples that
//            were just copied into free arena space. One kernel launch does up to 512 pieces; they
//            travel in the launch's parameters, so a cached batch makes no host-to-device copy at all.
//
// Ordering needs no lock or event: a sample's slot is published (release) only after its fill is
// queued on the copy stream, and a decode thread that sees the slot (acquire) leads to a gather that
// h2d queues later on the same stream. While serve() works on a batch, the slots of the samples it
// keeps hold kReserved, which contains() reads as absent: a sample twice in a batch, or in flight
// twice (an epoch's end overlapping the next epoch's start), is filled once, and a throw before the
// publish gives the slots back. A sample whose read or decode fails is never cached, so it fails
// (or is skipped) in every epoch, as without the cache. Order, values, sharding and resumption are the
// pipeline's own: the cache only changes where a sample's bytes come from.
//
// Space: a bump allocator over the arena; each sample's fields lie together, each at a 16-byte
// boundary. A sample that does not fit stays uncached (not_kept counts it). The index -> slot table
// and the lengths live on the host. A managed arena can move to the host and back (move_to(), the
// pipeline's cache_to()) with prefetches; its pointers never change, and a gather while it is on the
// host reads it over the link.

/// The dataset cache of Note [dataset cache]. Thread-safety: contains() and rows() from any thread;
/// serve() from one thread at a time (the serial h2d node); move_to() and stats() from any thread.
class DatasetCache {
 public:
  struct Field {
    at::ScalarType dtype = at::kByte;
    std::vector<int64_t> shape;  // per sample; shape[0] < 0 for a variable-length field
    bool variable() const noexcept { return !shape.empty() && shape[0] < 0; }
  };
  struct Options {
    CacheMemory memory = CacheMemory::kHost;
    int device = -1;              // the delivery device (kManaged, kDevice); -1 with kHost
    size_t capacity_bytes = 0;    // the arena
    uint64_t source_samples = 0;  // indices are < this
    std::vector<Field> fields;    // in the source's order
  };

  /// Allocates the arena and the slot table. Throws ferry::Error when the memory cannot be had
  /// (UnifiedMemoryUnsupportedError for managed memory where it cannot work; more than the device has
  /// free). Blocks: while it allocates.
  static std::shared_ptr<DatasetCache> create(Options options);
  ~DatasetCache();
  DatasetCache(const DatasetCache&) = delete;
  DatasetCache& operator=(const DatasetCache&) = delete;

  /// Bytes sample of `field_rows` (dim 0 of each variable-length field, in field order; fixed
  /// fields ignored) take in the arena. Pure.
  static size_t sample_bytes(const std::vector<Field>& fields, const std::vector<int64_t>& field_rows);

  /// Whether `index` is kept. Never blocks (one atomic load).
  bool contains(uint64_t index) const noexcept;
  /// Dim 0 of variable-length field `field` of a kept sample: only for an index contains() said is
  /// kept, on this thread or one that synchronises with it. Never blocks.
  int64_t rows(uint64_t index, size_t field) const noexcept;

  /// The h2d side for one batch laid out in `batch` (device or host memory, per the cache's memory):
  /// gathers its cached samples into it and keeps its other samples. `from_host` says whether the
  /// host copy wrote the batch (else it holds cached samples only and the gather writes the lengths
  /// fields too). GPU: queued on `stream`; host: done before it returns. Throws ferry::CudaError.
  void serve(const BatchWork& work, std::byte* batch, bool from_host, CudaStreamHandle stream);

  /// A managed cache's bytes to `device` (-1: the host), with the preferred location advised there;
  /// returns when they are there. Pointers do not change; batches keep flowing meanwhile. Throws
  /// ferry::Error for a cache that is not managed, or a device other than the cache's or -1.
  void move_to(int device);

  DatasetCacheStats stats() const;
  const Options& options() const noexcept { return options_; }
  /// The arena: its address never changes, wherever its pages are.
  const std::byte* data() const noexcept { return arena_; }

 private:
  explicit DatasetCache(Options options);
  void harvest_timings();  // serve() only

  static constexpr uint64_t kReserved = UINT64_MAX;  // a slot serve() is filling (Note [dataset cache])

  Options options_;
  std::byte* arena_ = nullptr;
  std::unique_ptr<std::byte[]> host_arena_;
  std::vector<size_t> variable_fields_;  // field -> its column in rows_, or npos
  size_t variable_count_ = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> slots_;  // index -> offset + 1 (0: not kept)
  std::unique_ptr<int64_t[]> rows_;                 // index * variable_count_ + column
  size_t used_ = 0;                                 // serve() only; used_bytes_ for readers
  // serve()'s scratch, kept to reuse its memory: no allocation per batch once warm.
  std::vector<const FieldLayout*> placed_;
  std::vector<CopySegment> gather_;
  std::vector<CopySegment> fill_;
  std::vector<uint64_t> kept_indices_;
  std::vector<size_t> kept_offsets_;
  std::vector<int64_t> kept_rows_;  // field_count per kept sample
  std::atomic<uint64_t> used_bytes_{0};
  std::atomic<uint64_t> kept_{0};
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> not_kept_{0};
  std::atomic<uint64_t> gathers_{0};
  std::atomic<uint64_t> timed_gathers_{0};
  std::atomic<uint64_t> gather_ns_{0};

  // Per epoch: did any delivered sample miss? serve() writes, stats() reads.
  mutable std::mutex epochs_mutex_;
  std::vector<std::pair<uint64_t, bool>> epochs_;  // (epoch, all hits), in the order met

  // GPU gather timing: event pairs around each gather, read back once done (serve() only).
  struct Timing;
  std::deque<std::unique_ptr<Timing>> pending_timings_;
  std::vector<std::unique_ptr<Timing>> free_timings_;

  std::mutex move_mutex_;
  std::atomic<int> location_;  // -1: host
  std::atomic<uint64_t> moves_{0};
  std::atomic<uint64_t> last_move_ns_{0};
};

}  // namespace ferry
