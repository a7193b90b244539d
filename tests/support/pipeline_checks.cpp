#include "tests/support/pipeline_checks.h"

#include <gtest/gtest.h>

#include <ferry/io/samplers/sequential_sampler.h>
#include <ferry/stages/batch_planner.h>
#include <ferry/stages/standard_pipeline.h>
#include "tests/support/reference_batch.h"

namespace ferry::testing {

uint64_t expect_pipeline_delivers_source(std::shared_ptr<const Source> source, const SyntheticSource& truth,
                                         const PipelineOptions& options) {
  // The plans a sequential run must deliver, in order.
  BatchPlanner expected(std::make_shared<SequentialSampler>(truth.size()),
                        {options.batch_size, options.drop_last, options.epochs, options.max_batches});
  Pipeline pipeline = make_pipeline(std::move(source), options);
  const at::Device device = resolve_device(options.device);
  uint64_t delivered = 0;
  for (const Batch& batch : pipeline) {
    const std::optional<BatchPlan> plan = expected.next();
    EXPECT_TRUE(plan) << "an extra batch " << batch.sequence();
    if (!plan) break;
    EXPECT_EQ(batch.sequence(), delivered);
    EXPECT_EQ(batch.epoch(), plan->epoch);
    EXPECT_EQ(batch.index(), plan->index);
    EXPECT_EQ(batch.sample_indices(), plan->sample_indices);
    EXPECT_EQ(batch.device(), device);
    const std::string problem = compare_with_reference(batch, truth, options.collate);
    EXPECT_EQ(problem, "");
    if (!problem.empty()) break;
    ++delivered;
  }
  EXPECT_FALSE(expected.next()) << "batches missing after " << delivered;
  EXPECT_FALSE(pipeline.next()) << "the pipeline keeps reporting its end";
  const PipelineStats stats = pipeline.stats();
  EXPECT_EQ(stats.batches, delivered);
  EXPECT_EQ(stats.pool.leased_bytes, 0u) << "a slab is still leased at the end of the run";
  EXPECT_EQ(stats.pool.waits, 0u) << "pack waited for a slab: token accounting broken";
  return delivered;
}

RunToError run_to_error(Pipeline& pipeline, const SyntheticSource& truth) {
  RunToError run;
  try {
    while (auto batch = pipeline.next()) {
      EXPECT_EQ(compare_with_reference(*batch, truth), "") << "batch " << run.batches;
      ++run.batches;
    }
  } catch (const Error& e) {
    run.error = e;
  }
  return run;
}

PipelineStats run_small_pipeline() {
  SyntheticOptions data;
  data.seed = 4;
  data.samples = 90;
  data.fields = {SyntheticField{"x", at::kFloat, {7}, false, 0, 0, std::nullopt}};
  const auto truth = std::make_shared<const SyntheticSource>(data);
  PipelineOptions options;
  options.device = "cpu";
  options.decode_threads = 3;
  options.batch_size = 6;
  options.prefetch = 4;
  Pipeline pipeline = make_pipeline(truth, options);
  const RunToError run = run_to_error(pipeline, *truth);
  EXPECT_FALSE(run.error) << run.error->what();
  return pipeline.stats();
}

}  // namespace ferry::testing
