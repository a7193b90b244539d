#include "ferry/pipeline/auto_decode_choice.h"

namespace ferry {

AutoDecodeChoice::AutoDecodeChoice(uint64_t gpu_window_images, uint64_t min_cpu_images, double cpu_margin)
    : gpu_window_images_(gpu_window_images), min_cpu_images_(min_cpu_images), cpu_margin_(cpu_margin) {}

void AutoDecodeChoice::Window::add(uint64_t images_now, uint64_t now_ns) {
  if (first_ns == 0) {
    first_ns = now_ns == 0 ? 1 : now_ns;  // the first finish opens the window; its images took unknown time
    last_ns = first_ns;
    return;
  }
  images += images_now;
  last_ns = now_ns;
}

double AutoDecodeChoice::Window::rate() const {
  return last_ns > first_ns ? static_cast<double>(images) * 1e9 / static_cast<double>(last_ns - first_ns) : 0.0;
}

AutoDecodeChoice::Path AutoDecodeChoice::route(bool gpu_ready, bool gpu_settled) {
  std::lock_guard lock(mutex_);
  switch (phase_) {
    case Phase::kWarming:
      if (!gpu_ready) return Path::kCpu;
      // The CPU's window closes here: what it finishes from now on shares the cores with the GPU's calls.
      cpu_rate_ = cpu_.images >= min_cpu_images_ ? cpu_.rate() : 0.0;
      phase_ = Phase::kTrying;
      [[fallthrough]];
    case Phase::kTrying:
      if (gpu_settled) measuring_gpu_ = true;
      return Path::kGpu;
    case Phase::kGpu: return Path::kGpu;
    case Phase::kCpu: return Path::kCpu;
  }
  return Path::kCpu;
}

void AutoDecodeChoice::finished(Path path, uint64_t images, uint64_t now_ns) {
  std::lock_guard lock(mutex_);
  if (phase_ == Phase::kWarming && path == Path::kCpu) cpu_.add(images, now_ns);
  if (phase_ != Phase::kTrying || path != Path::kGpu || !measuring_gpu_) return;
  gpu_.add(images, now_ns);
  if (gpu_.images >= gpu_window_images_) decide();
}

void AutoDecodeChoice::decide() {
  gpu_rate_ = gpu_.rate();
  // A CPU window too short to measure (a GPU decoder ready at once) keeps the GPU.
  const bool cpu_faster = cpu_rate_ > (1.0 + cpu_margin_) * gpu_rate_;
  phase_ = cpu_faster ? Phase::kCpu : Phase::kGpu;
}

AutoDecodeChoice::Outcome AutoDecodeChoice::outcome() const {
  std::lock_guard lock(mutex_);
  return Outcome{phase_, cpu_rate_, gpu_rate_};
}

std::string AutoDecodeChoice::phase_name(Phase phase) {
  switch (phase) {
    case Phase::kWarming: return "warming";
    case Phase::kTrying: return "trying";
    case Phase::kGpu: return "gpu";
    case Phase::kCpu: return "cpu";
  }
  return "warming";
}

}  // namespace ferry
