#include "pipeline/pipeline.h"

#include "pipeline/pipeline_graph.h"

namespace ferry {

Pipeline::Pipeline(StageSet stages, PipelineOptions options) : options_(std::move(options)) {
  options_.check();
  graph_ = std::make_unique<detail::PipelineGraph>(std::move(stages), options_);
}

Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;
Pipeline::~Pipeline() = default;

std::optional<Batch> Pipeline::next() {
  if (!graph_) throw Error("next() on a moved-from pipeline");
  return graph_->next();
}

void Pipeline::close() {
  if (graph_) graph_->close();
}

PipelineStats Pipeline::stats() const {
  if (!graph_) throw Error("stats() on a moved-from pipeline");
  return graph_->stats();
}

}  // namespace ferry
