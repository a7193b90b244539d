#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include <ferry/pipeline/batch.h>

namespace ferry::cli {

/// `ferry run --digest PATH`: one line per delivered batch, naming it by its place in the whole
/// run and fingerprinting its contents:
///
///   batch 41 epoch 0 index 41 samples 64 indices 9f3c... bytes 1ab2...
///
/// Two runs delivered the same batches, bit for bit, exactly when their lines agree, so the lines
/// of a run stopped with --save-state and those of its --resume, one after the other, must equal an
/// uninterrupted run's. Hashing reads every byte (device batches are copied to the CPU first): it
/// slows the run, it is for checking. Consumer thread only.
class BatchDigest {
 public:
  /// Throws ferry::Error when the file cannot be created.
  BatchDigest(const std::string& path, uint64_t first_batch);
  void add(const Batch& batch);
  /// Where the run's batches start once the pipeline is made: a state resumed on another number of
  /// ranks starts at another batch than the one it was saved at.
  void set_first_batch(uint64_t first_batch) noexcept { first_batch_ = first_batch; }
  /// Flushes the file; throws ferry::Error when what was written did not reach it (a full disk).
  void finish();

 private:
  std::ofstream out_;
  std::string path_;
  uint64_t first_batch_;
};

}  // namespace ferry::cli
