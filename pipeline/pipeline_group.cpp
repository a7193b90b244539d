#include "ferry/pipeline/pipeline_group.h"

#include <string>

#include "ferry/pipeline/pipeline_graph.h"
#include "ferry/pipeline/shared_arena.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

std::string where(const Batch& batch) {
  return "batch " + std::to_string(batch.index()) + " of epoch " + std::to_string(batch.epoch());
}

}  // namespace

PipelineGroup::PipelineGroup(std::vector<Part> parts, size_t decode_threads)
    : mutex_(std::make_unique<std::mutex>()), progress_(std::make_unique<Progress>()) {
  if (parts.empty()) throw Error("a pipeline group needs at least one device");
  // One pool of decode threads for every device, plus each pipeline's own serial nodes and GPU groups.
  size_t slots = decode_threads;
  for (Part& part : parts) {
    part.options.check();
    const size_t gpu_groups = part.stages.decode ? part.stages.decode->gpu_groups() : 0;
    slots += detail::PipelineGraph::arena_slots(0, gpu_groups);
  }
  const auto arena = std::make_shared<detail::SharedArena>(slots);
  pipelines_.reserve(parts.size());
  for (Part& part : parts) pipelines_.push_back(Pipeline(std::move(part.stages), std::move(part.options), arena));
  progress_->taken.resize(pipelines_.size());
  progress_->delivered.resize(pipelines_.size());
}

PipelineGroup::PipelineGroup(PipelineGroup&&) noexcept = default;
PipelineGroup& PipelineGroup::operator=(PipelineGroup&&) noexcept = default;
PipelineGroup::~PipelineGroup() = default;

const Pipeline& PipelineGroup::pipeline(size_t device) const {
  if (device >= pipelines_.size()) {
    throw Error("no device " + std::to_string(device) + " in a group of " + std::to_string(pipelines_.size()));
  }
  return pipelines_[device];
}

Pipeline& PipelineGroup::pipeline(size_t device) {
  return const_cast<Pipeline&>(static_cast<const PipelineGroup&>(*this).pipeline(device));
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
    std::lock_guard lock(*mutex_);
    std::vector<std::optional<Batch>>& taken = progress_->taken;
    if (!batch) {
      // After close() the step is abandoned (its batches stay taken: state() counts them as not
      // delivered). At the end of the run every device must end at the same step.
      if (progress_->closed) return result;
      for (size_t other = 0; other < d; ++other) {
        if (taken[other]) out_of_step(d, nullptr, other, *taken[other]);
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
    progress_->delivered[d] = Delivered{batch.epoch(), batch.index(), batch.info().next};
    batches.push_back(std::move(batch));
    progress_->taken[d].reset();
  }
  result.step.emplace(std::move(batches));
  return result;
}

void PipelineGroup::out_of_step(size_t device, const Batch* batch, size_t other, const Batch& others) const {
  const std::string name = pipelines_[device].options().device;
  throw Error("the group's devices are out of step: " + pipelines_[other].options().device + " delivered " +
              where(others) + " while " + name + (batch ? " delivered " + where(*batch) : " ended its run") +
              "; every device must get the same number of batches (Note [one process, several devices])");
}

void PipelineGroup::close() {
  if (!progress_) return;
  {
    std::lock_guard lock(*mutex_);
    progress_->closed = true;
  }
  for (Pipeline& pipeline : pipelines_) pipeline.close();
}

std::vector<PipelineStats> PipelineGroup::stats() const {
  std::vector<PipelineStats> stats;
  stats.reserve(pipelines_.size());
  for (const Pipeline& pipeline : pipelines_) stats.push_back(pipeline.stats());
  return stats;
}

std::vector<PipelineState> PipelineGroup::state() const {
  if (!progress_) throw Error("state() on a moved-from pipeline group");
  std::vector<PipelineState> states;
  states.reserve(pipelines_.size());
  std::lock_guard lock(*mutex_);
  for (size_t d = 0; d < pipelines_.size(); ++d) {
    PipelineState state = pipelines_[d].state();
    if (progress_->taken[d]) {
      // Taken for a step not handed out yet: not delivered, so the state starts at it.
      state.next_batch -= 1;
      const std::optional<Delivered>& before = progress_->delivered[d];
      state.next = before ? std::optional<BatchCursor>(before->next) : pipelines_[d].options().start;
      state.last_epoch = before ? std::optional<uint64_t>(before->epoch) : std::nullopt;
      state.last_index = before ? std::optional<uint64_t>(before->index) : std::nullopt;
    }
    states.push_back(std::move(state));
  }
  return states;
}

}  // namespace ferry
