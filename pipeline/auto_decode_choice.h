#pragma once

#include <cstdint>
#include <mutex>
#include <string>

namespace ferry {

/// Note [auto: the faster decoder]
/// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
/// Under a jpeg field's `device: auto` the GPU's hardware decoder starts in the background (about a
/// second) while the CPU threads decode every image. Once it is ready, the GPU decodes every group for a
/// while; then the run keeps whichever of the two decoded faster: the CPU threads alone, as measured
/// while the GPU decoder was starting, or the GPU alone, measured once all its decoding states are warm.
/// On a near tie the GPU wins: it leaves the cores to the training process.
///
/// Why not both at once, each taking what it can: measured on one H200 host with 16 cores (ImageNet
/// recipe, 16 threads), decoding on the CPU threads beside the hardware slowed the hardware's calls more
/// than the CPU added. nvJPEG's host call for 64 images took 5.3-6.2 ms instead of 3.9-4.0, its wait
/// after 1.4-1.9 ms instead of 0.56, so sharing by room delivered 43-50k images/s against 55k from the
/// GPU alone (256 x 256), and 20-22k against 36k (ImageNet-like files). Fewer CPU threads beside it
/// gave 55-58k with 4, and still 26k on ImageNet-like files. On a host with 64 cores the CPU threads
/// alone were the faster (59.8k against 55.1k): hence a measurement, not a rule.
///
/// A run's choice is made once and kept. What it measured is in the report (gpu_decode.auto_choice and
/// its rates). Which path decodes an image depends on timing, never what is decoded from it or where it
/// lands (Note [GPU JPEG decode] in io/decoders/nvjpeg_decoder.h says how close the two paths' pixels are).
/// Thread-safe: the decode node's tasks call route() and finished() at once.
class AutoDecodeChoice {
 public:
  enum class Path { kCpu, kGpu };
  enum class Phase {
    kWarming,  // the GPU decoder is not ready: the CPU decodes everything, and its rate is measured
    kTrying,   // the GPU decodes everything: its rate is measured once its decoding states are all warm
    kGpu,      // chosen: the GPU decodes every image it can
    kCpu,      // chosen: the CPU threads decode everything
  };
  /// What was measured: images a second over a window of finished groups (0 where none was measured).
  struct Outcome {
    Phase phase = Phase::kWarming;
    double cpu_images_per_second = 0.0;
    double gpu_images_per_second = 0.0;
  };

  /// The GPU's rate is measured over `gpu_window_images` images; the CPU's rate counts only if its window
  /// had at least `min_cpu_images` (else the GPU is kept); the CPU is kept only if it was faster than the
  /// GPU by more than `cpu_margin` (a fraction).
  explicit AutoDecodeChoice(uint64_t gpu_window_images = kGpuWindowImages, uint64_t min_cpu_images = kMinCpuImages,
                            double cpu_margin = kCpuMargin);

  /// Where the group starting now goes. `gpu_ready`: the GPU decoder can take images; `gpu_settled`: all
  /// its decoding states are warm (its rate is then what it will be).
  Path route(bool gpu_ready, bool gpu_settled);
  /// A group of `images` that route() sent to `path` has been decoded, at `now_ns`.
  void finished(Path path, uint64_t images, uint64_t now_ns);
  Outcome outcome() const;

  /// "warming", "trying", "gpu" or "cpu": the report's words.
  static std::string phase_name(Phase phase);

  static constexpr uint64_t kGpuWindowImages = 16384;  // 0.3 s at 55k images/s
  static constexpr uint64_t kMinCpuImages = 1024;
  static constexpr double kCpuMargin = 0.05;

 private:
  // Images finished after a window's first finish, and the span they took: a rate that leaves out the
  // ramp before the first group is done.
  struct Window {
    uint64_t first_ns = 0;  // 0: no finish yet
    uint64_t last_ns = 0;
    uint64_t images = 0;
    void add(uint64_t images_now, uint64_t now_ns);
    double rate() const;
  };
  void decide();

  const uint64_t gpu_window_images_;
  const uint64_t min_cpu_images_;
  const double cpu_margin_;
  mutable std::mutex mutex_;
  Phase phase_ = Phase::kWarming;  // guarded by mutex_
  bool measuring_gpu_ = false;     // kTrying, settled: the GPU's window is open; guarded by mutex_
  Window cpu_, gpu_;               // guarded by mutex_
  double cpu_rate_ = 0.0;          // images a second, once measured; guarded by mutex_
  double gpu_rate_ = 0.0;          // guarded by mutex_
};

}  // namespace ferry
