#include "ferry/pipeline/batch_cutter.h"

#include <iterator>
#include <string>
#include <utility>

#include "ferry/pipeline/error.h"

namespace ferry::detail {

// Note [refilling batches]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Plans say in which order samples are read; collate cuts the batches. It appends each plan's
// decoded samples to `carry_` and emits a batch whenever batch_size of them are there, so under
// `on_error: skip` a batch that lost samples is filled from the next ones and keeps its size. Only
// the last batch of an epoch can be smaller (or dropped, under drop_last); batches never span
// epochs. As plans arrive in order and decoding is deterministic, which samples a batch holds does
// not depend on thread counts or timing; a batch's `next` cursor records where the one after it
// starts, which is what a resume needs (PipelineState::next).
//
// Tokens (Note [tokens] in pipeline_graph.cpp) stay one per plan. A plan adds at most batch_size samples to
// fewer than batch_size carried ones, so it completes at most one batch; when it completes none
// (its samples wait for the next plan's), collate emits a kToken item in its place and the
// completion thread gives that token back in order. Under skip the planner follows each epoch's last
// plan with a kEpochEnd marker, which holds a token too: it flushes the epoch's rest as the one
// smaller batch. Without skip (or when skipped samples are replaced: Note [replacing skipped
// samples] in pipeline_graph.cpp) nothing is dropped, every plan but an epoch's last is exactly a batch, and the last
// flushes itself. The one item without a token is the end marker that collate emits
// itself once max_batches batches are out (the planner may have planned more: with skip, plans and
// batches do not match one to one); the queues have room for one item beyond the tokens.
//
// An epoch planned from its start that makes no batch (it lost every sample, or kept fewer than
// batch_size under drop_last), followed by another over the same samples (the marker's
// same_samples_follow), ends the run with an error naming the first sample it lost: every later
// epoch would do the same, and with "run until max_batches" epochs (2^40 of them) the run would skip
// forever without delivering a batch, an error or its end. A resumed run's first epoch, which starts
// part-way, says nothing about the next; a sampler that deals other samples each epoch (a rank's
// share of a shuffle) may find enough in the next; a run's last epoch ends it anyway, its skips
// counted.

BatchCutter::Options BatchCutter::Options::of(const EngineOptions& options) {
  return Options{options.batch_size, options.drop_last,   options.refills(),
                 options.on_error,   options.max_batches, options.first_batch};
}

BatchCutter::BatchCutter(Options options) : options_(options) {
  if (options_.batch_size == 0) throw Error("BatchCutter: batch_size must be at least 1");
}

BatchCutter::Cut BatchCutter::add(SamplePtr sample) {
  Cut cut;
  if (collecting_.empty()) collecting_.reserve(sample->plan->slots());
  // The sequencer hands samples over in sequence order, so a plan's samples arrive together and in
  // position order.
  if (!collecting_.empty() && sample->plan != collecting_.front()->plan) {
    throw Error("internal error: a sample of plan " + std::to_string(sample->plan->sequence) + " arrived before plan " +
                std::to_string(collecting_.front()->plan->sequence) + " was complete");
  }
  collecting_.push_back(std::move(sample));
  const std::shared_ptr<const BatchPlan> plan = collecting_.front()->plan;
  if (collecting_.size() < plan->slots()) return cut;
  std::vector<SamplePtr> samples = std::move(collecting_);
  collecting_.clear();
  if (ended_) return cut;  // max_batches are out: nothing planned after them is delivered
  cut_plan(*plan, std::move(samples), cut);
  return cut;
}

void BatchCutter::cut_plan(const BatchPlan& plan, std::vector<SamplePtr> samples, Cut& cut) {
  switch (plan.kind) {
    case BatchPlan::Kind::kError: {
      emit(BatchWork::Kind::kError, cut)->error = plan.error;
      return;
    }
    case BatchPlan::Kind::kEnd:
      if (!carry_.empty()) throw Error("internal error: the run ended with samples not in any batch");
      emit(BatchWork::Kind::kEnd, cut);
      ended_ = true;
      return;
    case BatchPlan::Kind::kEpochEnd: {
      const size_t left = carry_.size();
      if (flush_epoch(cut)) return;
      if (plan.same_samples_follow && epoch_whole_ && epoch_batches_ == 0 && epoch_first_lost_) {
        const SkippedSample& first = *epoch_first_lost_;
        const std::string dropped = left == 0 ? ""
                                              : ", and drop_last drops the " + std::to_string(left) +
                                                    " left (fewer than batch_size " +
                                                    std::to_string(options_.batch_size) + ")";
        emit(BatchWork::Kind::kError, cut)->error = Error(
            ErrorContext{first.stage, first.index, plan.epoch, std::nullopt},
            "on_error: skip made no batch of epoch " + std::to_string(plan.epoch) + ": it lost " +
                std::to_string(epoch_lost_) + " of its " + std::to_string(epoch_lost_ + epoch_kept_) + " samples" +
                dropped + "; the next epoch visits the same samples, so no epoch can make a batch (the first lost: " +
                first.reason + ")");
        ended_ = true;  // what was planned after it is not cut: the skips counted are the run's
        return;
      }
      emit(BatchWork::Kind::kToken, cut);
      return;
    }
    case BatchPlan::Kind::kSamples: break;
  }

  // Only decode sets a sample's error: each one is a sample that could not be read or decoded.
  for (const SamplePtr& decoded : samples) {
    for (const SkippedSample& skipped : decoded->skipped) cut.skipped.push_back(skipped);  // replaced ones
    if (decoded->error && (options_.on_error == OnError::kFail || decoded->unskippable)) {
      emit(BatchWork::Kind::kError, cut)->error = decoded->error;
      return;
    }
  }
  if (!in_epoch_ || plan.epoch != carry_epoch_) {  // the epoch's first plan
    if (!carry_.empty()) {
      throw Error("internal error: a plan of epoch " + std::to_string(plan.epoch) + " arrived before epoch " +
                  std::to_string(carry_epoch_) + " was flushed");
    }
    in_epoch_ = true;
    carry_epoch_ = plan.epoch;
    next_index_ = plan.index;  // a resumed run numbers on from where it starts
    epoch_whole_ = plan.first_position == 0;
    epoch_batches_ = 0;
    epoch_kept_ = 0;
    epoch_lost_ = 0;
    epoch_first_lost_.reset();
  }
  for (SamplePtr& decoded : samples) {
    if (decoded->error) {
      cut.skipped.push_back(
          SkippedSample{decoded->index(), decoded->key, decoded->error->stage(), decoded->error->cause()});
      if (!epoch_first_lost_) epoch_first_lost_ = cut.skipped.back();
      ++epoch_lost_;
    } else {
      ++epoch_kept_;
      carry_.push_back(std::move(decoded));
    }
  }
  const size_t before = cut.items.size();
  if (carry_.size() >= options_.batch_size) {
    emit_batch(options_.batch_size, plan.last_of_epoch && carry_.size() == options_.batch_size, cut);
  }
  // Without refill an epoch's last plan completes its own (smaller) batch; with refill the marker does.
  if (cut.items.size() == before && plan.last_of_epoch && !options_.refill) (void)flush_epoch(cut);
  if (cut.items.size() == before) emit(BatchWork::Kind::kToken, cut);
}

BatchCutter::WorkPtr BatchCutter::emit(BatchWork::Kind kind, Cut& cut) {
  auto work = std::make_shared<BatchWork>();
  work->kind = kind;
  work->sequence = emitted_++;
  cut.items.push_back(work);
  return work;
}

void BatchCutter::emit_batch(size_t count, bool last_of_epoch, Cut& cut) {
  WorkPtr work = emit(BatchWork::Kind::kBatch, cut);
  const auto taken = carry_.begin() + static_cast<ptrdiff_t>(count);
  work->samples.assign(std::make_move_iterator(carry_.begin()), std::make_move_iterator(taken));
  carry_.erase(carry_.begin(), taken);
  BatchInfo& info = work->info;
  info.sequence = batches_out_++;
  ++epoch_batches_;
  info.epoch = carry_epoch_;
  info.index = next_index_++;
  info.sample_indices.reserve(count);
  for (const SamplePtr& sample : work->samples) info.sample_indices.push_back(sample->index());
  const SampleWork& last = *work->samples.back();
  work->next = last_of_epoch ? BatchCursor{carry_epoch_ + 1, 0, 0}
                             : BatchCursor{carry_epoch_, next_index_, last.epoch_position() + 1};
  info.next = work->next;
  if (options_.max_batches != 0 && options_.first_batch + batches_out_ >= options_.max_batches) {
    emit(BatchWork::Kind::kEnd, cut);
    ended_ = true;
  }
}

bool BatchCutter::flush_epoch(Cut& cut) {
  if (carry_.empty()) return false;
  if (options_.drop_last) {  // fewer than batch_size left: drop_last drops them, as it would without skips
    carry_.clear();
    return false;
  }
  emit_batch(carry_.size(), /*last_of_epoch=*/true, cut);
  return true;
}

}  // namespace ferry::detail
