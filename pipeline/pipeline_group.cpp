#include "ferry/pipeline/pipeline_group.h"

#include <string>

#include "ferry/pipeline/advanced.h"

#include "ferry/pipeline/pipeline_graph.h"
#include "ferry/pipeline/shared_arena.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

std::string where(const Batch& batch) {
  return "batch " + std::to_string(batch.index()) + " of epoch " + std::to_string(batch.epoch());
}

}  // namespace

PipelineGroup::PipelineGroup(std::vector<PipelinePart> parts, size_t decode_threads)
    : mutex_(std::make_unique<std::mutex>()), progress_(std::make_unique<Progress>()) {
  if (parts.empty()) throw Error("a pipeline group needs at least one device");
  // One pool of decode threads for every device: the arena one pipeline of decode_threads would have,
  // plus the threads each device's GPU decoder keeps waiting (SampleStage::gpu_groups()). Every device's
  // decode node may use the whole pool; the serial nodes, which never block, take turns in the rest.
  size_t gpu_groups = 0;
  for (PipelinePart& part : parts) {
    part.options.check();
    if (part.stages.decode) gpu_groups += part.stages.decode->gpu_groups();
  }
  const auto arena =
      std::make_shared<detail::SharedArena>(detail::PipelineGraph::arena_slots(decode_threads, gpu_groups));
  decode_threads_ = decode_threads;
  pipelines_.reserve(parts.size());
  for (PipelinePart& part : parts)
    pipelines_.push_back(Pipeline(std::move(part.stages), std::move(part.options), arena));
  progress_->taken.resize(pipelines_.size());
  progress_->delivered.resize(pipelines_.size());
}

PipelineGroup pipeline_group_from_parts(std::vector<PipelinePart> parts, size_t decode_threads) {
  return PipelineGroup(std::move(parts), decode_threads);
}

PipelineGroup::PipelineGroup(PipelineGroup&&) noexcept = default;

PipelineGroup& PipelineGroup::operator=(PipelineGroup&& other) noexcept {
  if (this != &other) {
    close();  // every device stops before the first is destroyed, not one after another
    pipelines_ = std::move(other.pipelines_);
    decode_threads_ = other.decode_threads_;
    mutex_ = std::move(other.mutex_);
    progress_ = std::move(other.progress_);
  }
  return *this;
}

PipelineGroup::~PipelineGroup() { close(); }

const Pipeline& PipelineGroup::pipeline(size_t device) const {
  if (device >= pipelines_.size()) {
    throw Error("no device " + std::to_string(device) + " in a group of " + std::to_string(pipelines_.size()));
  }
  return pipelines_[device];
}

void PipelineGroup::cache_to(int device) {
  if (pipelines_.size() != 1) {
    throw Error("cache_to() moves one pipeline's dataset cache; a group of " + std::to_string(pipelines_.size()) +
                " devices keeps one on each of them");
  }
  pipelines_.front().cache_to(device);
}

std::optional<BatchGroup> PipelineGroup::next() { return next_for(std::chrono::microseconds(-1)).step; }

PipelineGroup::Next PipelineGroup::next_for(std::chrono::microseconds timeout) {
  if (!progress_) throw Error("next() on a moved-from pipeline group");
  const bool waits_forever = timeout < std::chrono::microseconds::zero();
  const Clock::time_point deadline = waits_forever ? Clock::time_point::max() : Clock::now() + timeout;
  Next result;
  for (size_t d = 0; d < pipelines_.size(); ++d) {
    {
      std::lock_guard lock(*mutex_);
      if (progress_->taken[d]) continue;  // taken by an earlier call that timed out
    }
    std::optional<Batch> batch;
    if (waits_forever) {
      batch = pipelines_[d].next();
    } else {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
      Pipeline::Next got = pipelines_[d].next_for(std::max(left, std::chrono::microseconds::zero()));
      if (got.timed_out) {
        result.timed_out = true;
        return result;
      }
      batch = std::move(got.batch);
    }
    std::unique_lock lock(*mutex_);
    std::vector<std::optional<Batch>>& taken = progress_->taken;
    if (!batch) {
      // After close() the step is abandoned (its batches stay taken, not delivered). At the end of the run
      // every device must end at the same step: those before this one ended it with a batch, or the
      // ones after it still have one.
      if (progress_->closed) return result;
      for (size_t other = 0; other < d; ++other) {
        if (taken[other]) out_of_step(d, nullptr, other, *taken[other]);
      }
      lock.unlock();
      for (size_t other = d + 1; other < pipelines_.size(); ++other) {
        std::optional<Batch> extra = pipelines_[other].next();
        lock.lock();
        const bool closed = progress_->closed;
        lock.unlock();
        if (extra && !closed) out_of_step(d, nullptr, other, *extra);
      }
      return result;
    }
    if (d > 0 && (batch->epoch() != taken[0]->epoch() || batch->index() != taken[0]->index())) {
      out_of_step(d, &*batch, 0, *taken[0]);
    }
    taken[d] = std::move(batch);
  }
  std::lock_guard lock(*mutex_);
  std::vector<Batch> batches;
  batches.reserve(pipelines_.size());
  for (size_t d = 0; d < pipelines_.size(); ++d) {
    Batch& batch = *progress_->taken[d];
    progress_->delivered[d] = Delivered{batch.sequence(), batch.epoch(), batch.index(), batch.info().next};
    batches.push_back(std::move(batch));
    progress_->taken[d].reset();
  }
  result.step.emplace(std::move(batches));
  return result;
}

void PipelineGroup::out_of_step(size_t device, const Batch* batch, size_t other, const Batch& others) const {
  auto name = [this](size_t d) { return pipelines_[d].options().device + " (device " + std::to_string(d) + ")"; };
  throw Error("the group's devices are out of step: " + name(other) + " delivered " + where(others) + " while " +
              name(device) + (batch ? " delivered " + where(*batch) : " ended its run") +
              "; every device must get the same number of batches");
}

void PipelineGroup::close() {
  if (!progress_) return;  // moved from
  {
    std::lock_guard lock(*mutex_);
    progress_->closed = true;
  }
  for (Pipeline& pipeline : pipelines_) pipeline.close();
}

std::vector<PipelineStats> PipelineGroup::stats() const {
  std::vector<PipelineStats> stats;
  stats.reserve(pipelines_.size());
  for (const Pipeline& pipeline : pipelines_) {
    PipelineStats one = pipeline.stats();
    // Each device's decode ran on the group's one pool: its share of the pool's capacity, not of its own
    // node's limit (a device never has more than prefetch x batch_size samples to decode at once).
    one.decode_threads = decode_threads_;
    for (StageStats& stage : one.stages) {
      if (stage.name != "decode") continue;
      stage.threads = decode_threads_;
      stage.account_idle_time(one.elapsed_seconds);
    }
    stats.push_back(std::move(one));
  }
  return stats;
}

std::vector<PipelineState> PipelineGroup::state() const {
  if (!progress_) throw Error("state() on a moved-from pipeline group");
  // From the group's own record of whole steps, never the pipelines' (Pipeline::state()): a device whose
  // batch of the step under way was taken already counts it, and another thread may ask meanwhile.
  std::vector<PipelineState> states;
  states.reserve(pipelines_.size());
  std::lock_guard lock(*mutex_);
  for (size_t d = 0; d < pipelines_.size(); ++d) {
    const EngineOptions& options = pipelines_[d].options();
    PipelineState state;
    state.order = options.order;
    state.next_batch = options.first_batch;
    state.next = options.start;
    if (const std::optional<Delivered>& last = progress_->delivered[d]) {
      state.next_batch += last->sequence + 1;  // sequences count from this pipeline's first batch
      state.next = last->next;
      state.last_epoch = last->epoch;
      state.last_index = last->index;
    }
    if (state.next) state.consumed = pipelines_[d].graph_->consumed_before(*state.next);
    states.push_back(std::move(state));
  }
  return states;
}

}  // namespace ferry
