#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/pipeline/pipeline_stats.h"

namespace ferry {

/// shape[0] of a variable-length field: its length differs from sample to sample.
inline constexpr int64_t kVariableLength = -1;

/// One field of a source's samples, as the source promises to deliver it after decoding.
struct FieldSpec {
  std::string name;
  at::ScalarType dtype = at::kByte;
  /// Per-sample shape. A variable-length field has shape[0] == kVariableLength and the fixed rest; a
  /// field whose other sizes vary too (an image of its own size, [kVariableLength, kVariableLength, 3])
  /// is delivered as a list (CollateOptions::lists).
  std::vector<int64_t> shape;
  /// The largest product of the sizes that vary (a variable-length field's length, an image's pixels);
  /// unset when not known (pool.slab_bytes must then be set, as the largest batch is unknown).
  std::optional<int64_t> max_length;
  /// Name of the decoder (see DecoderRegistry) that turns this field's encoded bytes into a tensor.
  std::string decoder = "raw";

  bool variable() const noexcept { return !shape.empty() && shape[0] == kVariableLength; }
};

/// Which sample is being made (read, transformed), and the seed of its random numbers. Draw from
/// random_seed() (or from all three numbers) and a sample gets the same draw on every run, with any
/// number of threads and after a resume, and another draw every epoch.
struct SampleContext {
  uint64_t seed = 0;  // sampler.seed
  uint64_t epoch = 0;
  uint64_t index = 0;    // the sample's index in its source
  std::string_view key;  // the sample's name in messages ("shard-0003.tar:000123")
  /// Turns true when the pipeline stops (null: never): code that waits on something outside the
  /// pipeline (a worker process, the network) watches it and gives up (throws), so closing never waits.
  const std::atomic<bool>* stop = nullptr;

  bool stopping() const noexcept { return stop != nullptr && stop->load(std::memory_order_acquire); }
  /// 64 random bits from (seed, epoch, index): a seed for the sample's own generator.
  uint64_t random_seed() const noexcept;
};

/// A sample as stored: one encoded tensor per field (usually uint8 bytes), in the source's field
/// order, and a key that identifies the sample in messages ("shard-0003.tar:000123", a file path).
struct EncodedSample {
  uint64_t index = 0;
  std::string key;
  /// One per field, in fields() order. An undefined tensor is a field the sample lacks (an optional
  /// member): it is decoded to zeros of the field's shape (a variable size as 0), without its decoder.
  std::vector<at::Tensor> fields;
};

/// What Source::read_samples() made of one sample: the sample, or why it could not be read.
struct ReadResult {
  EncodedSample sample;
  std::exception_ptr error;  // set when it could not
};

/// The order a run reads a source's samples in, told to a source that fetches its data ahead (remote
/// shards, Source::read_in_order). Thread-safe: asked from the source's own threads while the run goes on.
class ReadOrder {
 public:
  virtual ~ReadOrder() = default;
  /// Steps in the run: its reads, counted over its epochs from its first (0).
  virtual uint64_t steps() const = 0;
  /// The sample of this source the run reads at `step` (< steps()); nullopt where that read is of
  /// another source (a mixture's other parts).
  virtual std::optional<uint64_t> sample_at_step(uint64_t step) const = 0;
  /// The first step whose read may not have finished: the steps before it are read and done with.
  virtual uint64_t reached() const = 0;
  /// Samples read at once (the decode threads).
  virtual size_t readers() const = 0;
};

/// Random access to a dataset's samples.
///
/// read() is called concurrently from the decode threads, for any index in [0, size()), in any
/// order: implementations must be thread-safe and should not serialise on a lock. It throws
/// ferry::Error naming the sample (and the file and offset, where there is one) for bad data.
class Source {
 public:
  virtual ~Source() = default;
  virtual const std::vector<FieldSpec>& fields() const = 0;
  virtual uint64_t size() const = 0;
  virtual EncodedSample read(uint64_t index) const = 0;
  /// What the decode stage calls: read() for the sample `context` names (its key is not known yet).
  /// A source whose samples are made per epoch (user code drawing random numbers) overrides it;
  /// the others need not.
  virtual EncodedSample read_sample(uint64_t index, const SampleContext& context) const {
    (void)context;
    return read(index);
  }
  /// One line for reports and errors, e.g. "synthetic(seed=7, samples=10000, fields=3)".
  virtual std::string describe() const = 0;
  /// The key read() gives sample `index` ("shard-0003.tar:000123", a file's path), without reading
  /// it: what a batch says it holds. By default the index as text. Thread-safe.
  virtual std::string key(uint64_t index) const { return std::to_string(index); }
  /// The names of the classes its label field numbers, in label order (an image folder's class
  /// folders); empty where it has none.
  virtual std::vector<std::string> class_names() const { return {}; }
  /// Where the samples lie in shards that are best read in order (tar files): each shard's number of
  /// samples, the shards in sample order. Shard-aware orders (sampler.shuffle_buffer) use it. Empty
  /// (the default): one collection read at random.
  virtual std::vector<uint64_t> shard_sizes() const { return {}; }
  /// Whether read_sample() gives a sample the same fields in every epoch, so that a dataset cache may
  /// keep it. A source running user code that may draw per-epoch random numbers says no.
  virtual bool same_every_epoch() const { return true; }
  /// Whether reading several samples in one read_samples() call costs less than reading them one by one
  /// (each call a round trip to a worker process): the decode stage then reads each group's samples
  /// so, before decoding them.
  virtual bool reads_in_groups() const { return false; }
  /// What its code did so far, where it runs beside the pipeline's threads (worker processes); nullopt
  /// otherwise. Thread-safe.
  virtual std::optional<UserCodeStats> user_code() const { return std::nullopt; }
  /// What fetching its data did (remote, compressed or piped files, through the cache); nullopt where it
  /// fetches nothing. Thread-safe.
  virtual std::optional<RemoteDataStats> remote_data() const { return std::nullopt; }
  /// The sources this one draws from by weight (a mixture), in order, each with its weight's share and
  /// samples 0; empty for any other source. The decode stage counts each part's samples for the report.
  virtual std::vector<SourcePartStats> mixed_parts() const { return {}; }
  /// Which of mixed_parts() the sample `index` comes from; only asked where there are some.
  virtual size_t part_of(uint64_t index) const {
    (void)index;
    return 0;
  }
  /// Called as a run starts, before it reads: the order it reads in. A source that fetches its data
  /// (remote shards) fetches ahead along it while the returned handle lives; the others ignore it and
  /// return null (the default).
  virtual std::shared_ptr<const void> read_in_order(std::shared_ptr<const ReadOrder> order) const {
    (void)order;
    return nullptr;
  }
  /// Reads the samples `contexts` name (their index each), one result each, in order: a sample that
  /// cannot be read fails alone. By default, read_sample() for each.
  virtual std::vector<ReadResult> read_samples(const std::vector<SampleContext>& contexts) const {
    std::vector<ReadResult> results(contexts.size());
    for (size_t i = 0; i < contexts.size(); ++i) {
      try {
        results[i].sample = read_sample(contexts[i].index, contexts[i]);
      } catch (...) {
        results[i].error = std::current_exception();
      }
    }
    return results;
  }
};

}  // namespace ferry
