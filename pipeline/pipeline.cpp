#include "ferry/pipeline/pipeline.h"

#include "ferry/pipeline/advanced.h"
#include "ferry/pipeline/pipeline_graph.h"

namespace ferry {

Pipeline pipeline_from_stages(StageSet stages, EngineOptions options) {
  return Pipeline(std::move(stages), std::move(options));
}

Pipeline::Pipeline(StageSet stages, EngineOptions options) : Pipeline(std::move(stages), std::move(options), nullptr) {}

Pipeline::Pipeline(StageSet stages, EngineOptions options, std::shared_ptr<detail::SharedArena> arena)
    : options_(std::move(options)) {
  options_.check();
  graph_ = std::make_unique<detail::PipelineGraph>(std::move(stages), options_, std::move(arena));
}

Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;
Pipeline::~Pipeline() = default;

std::optional<Batch> Pipeline::next() {
  if (!graph_) throw Error("next() on a moved-from pipeline");
  return graph_->next();
}

Pipeline::Next Pipeline::next_for(std::chrono::microseconds timeout) {
  if (!graph_) throw Error("next_for() on a moved-from pipeline");
  if (timeout < std::chrono::microseconds::zero()) timeout = std::chrono::microseconds::zero();
  Next next;
  next.batch = graph_->next(timeout, &next.timed_out);
  return next;
}

void Pipeline::close() {
  if (graph_) graph_->close();
}

PipelineState Pipeline::state() const {
  if (!graph_) throw Error("state() on a moved-from pipeline");
  PipelineState state;
  state.next_batch = options_.first_batch;
  state.order = options_.order;
  state.next = options_.start;
  if (const auto last = graph_->last_delivered()) {
    state.next_batch += last->sequence + 1;  // sequences count from this pipeline's first batch
    state.next = last->next;
    state.last_epoch = last->epoch;
    state.last_index = last->index;
  }
  if (state.next) state.consumed = graph_->consumed_before(*state.next);
  return state;
}

void Pipeline::cache_to(int device) {
  if (!graph_) throw Error("cache_to() on a moved-from pipeline");
  graph_->cache_to(device);
}

std::vector<std::string> Pipeline::sample_keys(const Batch& batch) const {
  if (!graph_) throw Error("sample_keys() on a moved-from pipeline");
  std::vector<std::string> keys;
  keys.reserve(batch.sample_indices().size());
  for (const uint64_t index : batch.sample_indices()) keys.push_back(graph_->decode_stage().sample_key(index));
  return keys;
}

std::vector<std::string> Pipeline::class_names() const {
  if (!graph_) throw Error("class_names() on a moved-from pipeline");
  return graph_->decode_stage().class_names();
}

PipelineStats Pipeline::stats() const {
  if (!graph_) throw Error("stats() on a moved-from pipeline");
  return graph_->stats();
}

}  // namespace ferry
