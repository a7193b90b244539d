#include "tests/stress/soak/soak_model.h"

#include <algorithm>
#include <utility>

namespace ferry::soak {
namespace {

// Nothing is planned at all when an epoch is empty, or when drop_last leaves no whole batch.
bool plans_nothing(const RunShape& shape) {
  return shape.epoch_size == 0 || (shape.drop_last && shape.epoch_size < shape.batch_size);
}

// Positions [0, limit) of an epoch are planned in fail and replace modes.
uint64_t plan_limit(const RunShape& shape) {
  const uint64_t m = shape.epoch_size;
  return shape.drop_last ? m / shape.batch_size * shape.batch_size : m;
}

// The samples tried for position p (replace mode): the planned one, then those after it, until one
// reads; nullopt when kMaxReplacementTries after it fail too.
std::optional<std::vector<uint64_t>> replacement_tries(const RunShape& shape, uint64_t epoch, uint64_t p) {
  const std::vector<uint64_t>& order = shape.order(epoch);
  std::vector<uint64_t> tried;
  for (uint64_t k = 0; k <= kMaxReplacementTries; ++k) {
    const uint64_t sample = order[(p + k) % order.size()];
    tried.push_back(sample);
    if (!shape.fails(sample)) return tried;
  }
  return std::nullopt;
}

// A place in the run, (epoch, position), with an epoch's end the next one's start.
using Place = std::pair<uint64_t, uint64_t>;
Place normal(const RunShape& shape, uint64_t epoch, uint64_t position) {
  return position >= shape.epoch_size ? Place{epoch + 1, 0} : Place{epoch, position};
}

// Failing positions in [from, to) over the run's epochs.
uint64_t failing_between(const RunShape& shape, Place from, Place to) {
  uint64_t count = 0;
  for (uint64_t e = from.first; e < shape.epochs && Place{e, 0} < to; ++e) {
    const uint64_t first = e == from.first ? from.second : 0;
    const uint64_t last = e == to.first ? to.second : shape.epoch_size;
    for (uint64_t p = first; p < last; ++p) count += shape.fails(shape.order(e)[p]) ? 1 : 0;
  }
  return count;
}

// The last epoch a pipeline can take a plan of: the error's, or the last batch's when max_batches
// ends the run; else the run's last.
uint64_t last_epoch_planned(const RunShape& shape, const ExpectedRun& run) {
  if (run.error) return run.error->epoch;
  if (shape.max_batches != 0 && run.batches.size() == shape.max_batches) return run.batches.back().epoch;
  return shape.epochs - 1;
}

}  // namespace

ExpectedRun expected_run(const RunShape& shape) {
  ExpectedRun run;
  if (plans_nothing(shape)) return run;
  const uint64_t b = shape.batch_size;
  const auto capped = [&] { return shape.max_batches != 0 && run.batches.size() >= shape.max_batches; };
  if (shape.mode == SkipMode::kRefill) {
    for (uint64_t e = 0; e < shape.epochs; ++e) {
      if (capped()) return run;
      const std::vector<uint64_t>& order = shape.order(e);
      std::vector<uint64_t> positions;
      std::optional<uint64_t> first_lost;
      for (uint64_t p = 0; p < shape.epoch_size; ++p) {
        if (!shape.fails(order[p])) {
          positions.push_back(p);
        } else if (!first_lost) {
          first_lost = order[p];
        }
      }
      uint64_t index = 0;
      for (size_t first = 0; first < positions.size(); first += b) {
        const size_t count = std::min<size_t>(b, positions.size() - first);
        if (count < b && shape.drop_last) break;
        if (capped()) return run;
        ExpectedBatch batch{e, index++, {}, positions[first], positions[first + count - 1], false};
        for (size_t k = first; k < first + count; ++k) batch.samples.push_back(order[positions[k]]);
        run.batches.push_back(std::move(batch));
      }
      // An epoch that made no batch, with another over the same samples to come: none ever will.
      if (index == 0 && e + 1 < shape.epochs && shape.same_samples_every_epoch && first_lost) {
        run.error = ExpectedError{*first_lost, e, std::nullopt};
        return run;
      }
    }
    return run;
  }
  const uint64_t limit = plan_limit(shape);
  const uint64_t plans = (limit + b - 1) / b;
  for (uint64_t e = 0; e < shape.epochs; ++e) {
    const std::vector<uint64_t>& order = shape.order(e);
    for (uint64_t i = 0; i < plans; ++i) {
      if (capped()) return run;
      const uint64_t first = i * b;
      const uint64_t count = std::min(b, limit - first);
      ExpectedBatch batch{e, i, {}, first, first + count - 1, i + 1 == plans};
      for (uint64_t p = first; p < first + count; ++p) {
        const uint64_t sample = order[p];
        if (!shape.fails(sample)) {
          batch.samples.push_back(sample);
          continue;
        }
        if (shape.mode == SkipMode::kFail) {
          run.error = ExpectedError{sample, e, i};
          return run;
        }
        const auto tried = replacement_tries(shape, e, p);
        if (!tried) {
          run.error = ExpectedError{sample, e, i};
          return run;
        }
        batch.samples.push_back(tried->back());
      }
      run.batches.push_back(std::move(batch));
    }
  }
  return run;
}

std::vector<uint64_t> expected_skips(const RunShape& shape, const ExpectedRun& run, const BatchCursor& start,
                                     uint64_t first_batch, size_t limit) {
  std::vector<uint64_t> skips;
  if (shape.mode == SkipMode::kFail || plans_nothing(shape)) return skips;
  if (shape.mode == SkipMode::kRefill) {
    const uint64_t last_epoch = last_epoch_planned(shape, run);
    for (uint64_t e = start.epoch; e <= last_epoch && skips.size() < limit; ++e) {
      const std::vector<uint64_t>& order = shape.order(e);
      for (uint64_t p = e == start.epoch ? start.position : 0; p < shape.epoch_size && skips.size() < limit; ++p) {
        if (shape.fails(order[p])) skips.push_back(order[p]);
      }
    }
    return skips;
  }
  for (uint64_t j = first_batch; j < run.batches.size() && skips.size() < limit; ++j) {
    const ExpectedBatch& batch = run.batches[j];
    for (uint64_t p = batch.first_position; p <= batch.last_position && skips.size() < limit; ++p) {
      const auto tried = replacement_tries(shape, batch.epoch, p);
      for (size_t k = 0; tried && k + 1 < tried->size() && skips.size() < limit; ++k) skips.push_back((*tried)[k]);
    }
  }
  return skips;
}

uint64_t expected_skip_count(const RunShape& shape, const ExpectedRun& run, const BatchCursor& start,
                             uint64_t first_batch, uint64_t delivered, bool ended) {
  if (shape.mode == SkipMode::kFail || plans_nothing(shape)) return 0;
  if (shape.mode == SkipMode::kReplace) {
    uint64_t count = 0;
    for (uint64_t j = first_batch; j < delivered; ++j) {
      const ExpectedBatch& batch = run.batches[j];
      for (uint64_t p = batch.first_position; p <= batch.last_position; ++p) {
        count += replacement_tries(shape, batch.epoch, p)->size() - 1;
      }
    }
    return count;
  }
  if (start.epoch >= shape.epochs) return 0;
  if (shape.max_batches != 0 && first_batch >= shape.max_batches) return 0;
  const Place from{start.epoch, start.position};
  if (!ended || (shape.max_batches != 0 && delivered == shape.max_batches)) {
    if (delivered == first_batch) return 0;  // (ended here: max_batches was already reached)
    const ExpectedBatch& last = run.batches[delivered - 1];
    if (!ended) return failing_between(shape, from, normal(shape, last.epoch, last.last_position + 1));
    // The run stopped at max_batches: collate took no plan after the one that completed the last
    // batch. A smaller batch is an epoch's rest, completed by the epoch's end marker, after every plan
    // of the epoch; a full one by the plan holding its last sample (plans start at the cursor in its
    // epoch and at 0 in later ones).
    uint64_t end = shape.epoch_size;
    if (last.samples.size() == shape.batch_size) {
      const uint64_t origin = last.epoch == start.epoch ? start.position : 0;
      end = std::min(end, origin + ((last.last_position - origin) / shape.batch_size + 1) * shape.batch_size);
    }
    return failing_between(shape, from, normal(shape, last.epoch, end));
  }
  return failing_between(shape, from, Place{shape.epochs, 0});
}

std::string check_cursor(const RunShape& shape, const ExpectedRun& run, uint64_t after, const BatchCursor& cursor) {
  const ExpectedBatch& batch = run.batches[after];
  const auto text = [](const BatchCursor& c) {
    return "{epoch " + std::to_string(c.epoch) + ", batch " + std::to_string(c.index) + ", position " +
           std::to_string(c.position) + "}";
  };
  if (shape.mode != SkipMode::kRefill) {
    const BatchCursor want = batch.last_of_epoch ? BatchCursor{batch.epoch + 1, 0, 0}
                                                 : BatchCursor{batch.epoch, batch.index + 1, batch.last_position + 1};
    return cursor == want ? "" : "state().next is " + text(cursor) + ", expected " + text(want);
  }
  const Place at = normal(shape, cursor.epoch, cursor.position);
  const Place lower = normal(shape, batch.epoch, batch.last_position + 1);
  const Place upper = after + 1 < run.batches.size()
                          ? Place{run.batches[after + 1].epoch, run.batches[after + 1].first_position}
                          : Place{shape.epochs, 0};
  const bool index_ok = cursor.epoch == batch.epoch
                            ? cursor.index == batch.index + 1
                            : cursor.epoch == batch.epoch + 1 && cursor.index == 0 && cursor.position == 0;
  if (at < lower || upper < at || !index_ok) {
    return "state().next is " + text(cursor) + " after batch " + std::to_string(batch.epoch) + "/" +
           std::to_string(batch.index) + " (last position " + std::to_string(batch.last_position) +
           "): not between that batch's last sample and the next batch's first";
  }
  return "";
}

}  // namespace ferry::soak
