#include "ferry/pipeline/pipeline_graph.h"

#include <algorithm>
#include <cstdio>

#include <oneapi/tbb/info.h>

#include "ferry/pipeline/cuda_event.h"
#include "ferry/pipeline/device_guard.h"
#include "ferry/pipeline/torch_cuda.h"

namespace ferry::detail {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t nanoseconds_since(Clock::time_point start) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

// The serial nodes besides decode: split, collate, pack, h2d. They need arena slots too.
constexpr size_t kSerialNodes = 4;

}  // namespace

// Note [order between serial nodes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A serial oneTBB function_node does not keep order into its successor: when its body returns, it
// spawns the task for its next queued item *before* it forwards the result (oneTBB 2021,
// apply_body_impl_bypass). A quick next item — the end marker, an error — can then reach the
// successor first. A multifunction_node forwards from inside its body, and a serial node's bodies
// run one after another, so its outputs arrive in input order. Every serial node with a successor
// is therefore a multifunction_node; h2d has none (it pushes to in_flight_ from its body).
struct PipelineGraph::Nodes {
  using SplitNode = tbb::flow::multifunction_node<PlanPtr, std::tuple<SamplePtr>>;
  using CollateNode = tbb::flow::multifunction_node<SamplePtr, std::tuple<WorkPtr>>;
  using PackNode = tbb::flow::multifunction_node<WorkPtr, std::tuple<WorkPtr>>;

  Nodes(tbb::flow::graph& g, PipelineGraph& p)
      : source(g,
               [&p](tbb::flow_control& control) {
                 PlanPtr plan;
                 p.shielded("source", [&] { plan = p.plan_next(control); });
                 if (!plan) control.stop();
                 return plan;
               }),
        tokens(g, p.prefetch_),
        split(g, tbb::flow::serial,
              [&p](const PlanPtr& plan, SplitNode::output_ports_type& ports) {
                p.shielded("split", [&] {
                  for (size_t position = 0; position < plan->slots(); ++position) {
                    auto sample = std::make_shared<SampleWork>();
                    sample->plan = plan;
                    sample->position = static_cast<uint32_t>(position);
                    std::get<0>(ports).try_put(std::move(sample));
                  }
                });
              }),
        decode(g, p.decode_threads_,
               [&p](const SamplePtr& sample) {
                 p.shielded("decode", [&] { p.decode(*sample); });
                 return sample;
               }),
        reorder(g, [](const SamplePtr& sample) -> size_t { return sample->sequence(); }),
        collate(g, tbb::flow::serial,
                [&p](const SamplePtr& sample, CollateNode::output_ports_type& ports) {
                  p.shielded("collate", [&] {
                    std::vector<WorkPtr> completed;
                    p.collect(sample, completed);
                    for (WorkPtr& work : completed) std::get<0>(ports).try_put(std::move(work));
                  });
                }),
        pack(g, tbb::flow::serial,
             [&p](const WorkPtr& work, PackNode::output_ports_type& ports) {
               p.shielded("pack", [&] {
                 p.run_batch_stage(kPack, *work);
                 work->samples.clear();  // packed: the decoded tensors are no longer needed
                 std::get<0>(ports).try_put(work);
               });
             }),
        h2d(g, tbb::flow::serial, [&p](const WorkPtr& work) {
          p.shielded("h2d", [&] {
            p.run_batch_stage(kH2D, *work);
            p.submit(work);
          });
          return tbb::flow::continue_msg();
        }) {
    tbb::flow::make_edge(source, tokens);
    tbb::flow::make_edge(tokens, split);
    tbb::flow::make_edge(tbb::flow::output_port<0>(split), decode);
    tbb::flow::make_edge(decode, reorder);
    tbb::flow::make_edge(reorder, collate);
    tbb::flow::make_edge(tbb::flow::output_port<0>(collate), pack);
    tbb::flow::make_edge(tbb::flow::output_port<0>(pack), h2d);
  }

  tbb::flow::input_node<PlanPtr> source;
  tbb::flow::limiter_node<PlanPtr> tokens;
  SplitNode split;
  tbb::flow::function_node<SamplePtr, SamplePtr> decode;
  tbb::flow::sequencer_node<SamplePtr> reorder;
  CollateNode collate;
  PackNode pack;
  tbb::flow::function_node<WorkPtr, tbb::flow::continue_msg> h2d;
};

PipelineGraph::PipelineGraph(StageSet stages, const PipelineOptions& options)
    : stages_(std::move(stages)),
      prefetch_(options.prefetch),
      decode_threads_(options.resolved_decode_threads()),
      on_error_(options.on_error),
      refill_(options.refills()),
      replace_(options.on_error == OnError::kSkip && options.skip_replaces),
      batch_size_(options.batch_size),
      drop_last_(options.drop_last),
      max_batches_(options.max_batches),
      first_batch_(options.first_batch),
      device_(options.device),
      started_(Clock::now()),
      batches_in_flight_(options.prefetch),
      batches_ready_(options.prefetch),
      // Note [tokens]: at most prefetch_ items (batches or the end marker) exist downstream of the
      // limiter, so neither queue can fill up.
      in_flight_(options.prefetch + 1),
      in_flight_lane_(in_flight_.make_producer()),
      ready_(options.prefetch + 1) {
  if (!stages_.batches || !stages_.decode || !stages_.collate || !stages_.pack || !stages_.h2d ||
      !stages_.event_wait) {
    throw Error("a pipeline needs every stage: batches, decode, collate, pack, h2d and event_wait");
  }
  // Decode runs decode_threads_ tasks at once beside the serial nodes; give the pipeline's arena that
  // many slots. oneTBB's default thread limit is the core count: raise it where more decode threads
  // were asked for (I/O-bound decoders want more threads than cores).
  // (The limit counts one external thread beside the workers, hence the + 1.)
  const size_t slots = decode_threads_ + kSerialNodes;
  if (slots + 1 > static_cast<size_t>(tbb::info::default_concurrency())) {
    parallelism_ = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, slots + 1);
  }
  // Another tbb::global_control in the process can hold the limit lower (the smallest one wins);
  // at 1 there is no worker at all and nothing would ever run.
  if (tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism) < 2) {
    throw Error("oneTBB is limited to one thread in this process (a tbb::global_control); the pipeline needs worker threads");
  }
  arena_ = std::make_unique<tbb::task_arena>(static_cast<int>(slots), /*reserved_for_masters=*/0);
  // A graph belongs to the arena it is built in; its tasks, including those that the consumer's
  // token returns start, run there and never on the consumer's thread.
  arena_->execute([this] {
    graph_ = std::make_unique<tbb::flow::graph>();
    nodes_ = std::make_unique<Nodes>(*graph_, *this);
  });
  completion_ = std::thread([this] { shielded("event-wait", [this] { completion_loop(); }); });
  arena_->execute([this] { nodes_->source.activate(); });
}

PipelineGraph::~PipelineGraph() {
  close();
  while (consumers_inside_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
  if (completion_.joinable()) completion_.join();
  if (graph_) {
    arena_->execute([this] {
      graph_->cancel();
      try {
        graph_->wait_for_all();
      } catch (...) {
        // Bodies are shielded; nothing is left to report to a consumer that is gone.
      }
    });
  }
  nodes_.reset();
  graph_.reset();
}

uint64_t PipelineGraph::now_ns() const noexcept { return nanoseconds_since(started_); }

uint64_t PipelineGraph::run_ns() const noexcept {
  const int64_t ended = ended_ns_.load(std::memory_order_acquire);
  return ended >= 0 ? static_cast<uint64_t>(ended) : now_ns();
}

void PipelineGraph::mark_ended() noexcept {
  int64_t running = -1;
  (void)ended_ns_.compare_exchange_strong(running, static_cast<int64_t>(now_ns()), std::memory_order_acq_rel);
}

void PipelineGraph::close() noexcept {
  mark_ended();
  stop_.store(true, std::memory_order_release);
  in_flight_.close();
  ready_.close();
}

template <typename Body>
std::optional<Error> PipelineGraph::guarded(StageId id, const ErrorContext& where, Body&& body) {
  const auto start = Clock::now();
  std::optional<Error> error;
  try {
    body();
  } catch (...) {
    error = error_from(std::current_exception(), where);
  }
  StageCounter& counter = counters_[id];
  counter.busy_ns.fetch_add(nanoseconds_since(start), std::memory_order_relaxed);
  // Release, both: a stats() reader that sees a run also sees the samples collate counted before
  // it, and one that sees a failure also sees its run, so items_out never exceeds items_in.
  // (On x86 a relaxed and a release add are the same instruction.)
  counter.items.fetch_add(1, std::memory_order_release);
  if (error || stop_.load(std::memory_order_acquire)) counter.not_out.fetch_add(1, std::memory_order_release);
  // A failure ends planning: nothing planned after it could be delivered. Except a sample that
  // on_error: skip will drop (decode is the only sample stage): the run goes on without it.
  if (error && !(id == kDecode && on_error_ == OnError::kSkip)) failed_.store(true, std::memory_order_release);
  return error;
}

template <typename Body>
void PipelineGraph::shielded(const char* where, Body&& body) noexcept {
  try {
    body();
  } catch (...) {
    fail_now(where, std::current_exception());
  }
}

void PipelineGraph::fail_now(const char* where, std::exception_ptr error) noexcept {
  failed_.store(true, std::memory_order_release);
  try {
    const ErrorContext context{where, {}, {}, {}};
    Error internal(context, "internal error: " + error_from(error, context).cause());
    std::lock_guard lock(consumer_mutex_);
    if (!sticky_error_) sticky_error_ = std::move(internal);
  } catch (...) {
    // Out of memory even for the message: the closed queue still ends the consumer's wait.
  }
  ready_.close();  // the consumer wakes, finds the sticky error and throws it
}

PipelineGraph::PlanPtr PipelineGraph::plan_next(tbb::flow_control& control) {
  if (planned_last_ || stop_.load(std::memory_order_acquire) || failed_.load(std::memory_order_acquire) ||
      enough_.load(std::memory_order_acquire)) {
    control.stop();
    return nullptr;
  }
  std::optional<BatchPlan> plan;
  const uint64_t start_ns = now_ns();
  batches_in_flight_.change(0, start_ns, /*producer_waiting=*/false);  // planning is work, not waiting
  try {
    plan = stages_.batches->next();
    if (plan && plan->kind == BatchPlan::Kind::kSamples && plan->sample_indices.empty()) {
      throw Error("the batch planner produced an empty batch");
    }
  } catch (...) {
    plan = BatchPlan{};
    plan->kind = BatchPlan::Kind::kError;
    plan->error = error_from(std::current_exception(), ErrorContext{"source", {}, {}, {}});
  }
  if (!plan) {
    plan = BatchPlan{};
    plan->kind = BatchPlan::Kind::kEnd;
  }
  const uint64_t end_ns = now_ns();
  planning_ns_.fetch_add(end_ns - start_ns, std::memory_order_relaxed);
  if (plan->kind == BatchPlan::Kind::kSamples) {
    // Samples first, and release: a stats() reader that sees the batch sees its samples (in >= out).
    planned_samples_.fetch_add(plan->slots(), std::memory_order_relaxed);
    planned_batches_.fetch_add(1, std::memory_order_release);
  } else if (plan->kind != BatchPlan::Kind::kEpochEnd) {
    planned_last_ = true;
  }
  // A plan that will give its token back counts as a batch in flight (Note [refilling batches]).
  // After the last plan the planner has nothing left to wait for.
  const bool holds_token = plan->kind == BatchPlan::Kind::kSamples || plan->kind == BatchPlan::Kind::kEpochEnd;
  batches_in_flight_.change(holds_token ? +1 : 0, end_ns, !planned_last_);
  plan->sequence = next_batch_sequence_++;
  plan->first_sample_sequence = next_sample_sequence_;
  next_sample_sequence_ += plan->slots();
  return std::make_shared<const BatchPlan>(std::move(*plan));
}

void PipelineGraph::decode(SampleWork& sample) {
  // Only shutdown skips decoding. After another sample's failure, samples of earlier batches must
  // still be decoded: those batches are delivered before the error (Note [in-band errors and markers]).
  if (sample.is_marker() || stop_.load(std::memory_order_acquire)) return;
  const ErrorContext where{"decode", sample.index(), sample.plan->epoch, sample.plan->index};
  if (auto error = guarded(kDecode, where, [&] { stages_.decode->run(sample); })) sample.error = std::move(error);
  if (sample.error && replace_) replace(sample);
}

// Note [replacing skipped samples]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Refilling batches (Note [refilling batches]) shortens an epoch by the samples it skipped, and
// ranks that skip different numbers would deliver different numbers of batches: data-parallel
// training would hang at the epoch's end. With skip_replaces, the decode thread that met the
// failure reads the epoch's next samples in order instead (positions p + 1, p + 2, ..., past the
// end from the epoch's start) until one reads and decodes, and that one takes the failed sample's
// place: batches keep their plans, epochs their length, and the replacement appears twice in the
// epoch, as `remainder: pad` repeats samples. Which sample replaces which depends only on the
// data and the order, never on threads or timing, so runs and resumes repeat. After
// kMaxReplacementTries failures in a row the run fails, naming the first: a long run of broken
// samples is a broken dataset, and shortening this rank's epoch would hang the others.
void PipelineGraph::replace(SampleWork& sample) {
  const BatchPlan& plan = *sample.plan;
  for (uint64_t k = 1;; ++k) {
    sample.skipped.push_back(SkippedSample{sample.index(), sample.key, sample.error->stage(), sample.error->cause()});
    std::optional<uint64_t> next;
    if (k <= kMaxReplacementTries) next = stages_.batches->sample_at(plan.epoch, sample.epoch_position() + k);
    if (!next || stop_.load(std::memory_order_acquire)) break;
    sample.replacement = *next;
    sample.error.reset();
    sample.key.clear();
    sample.fields.clear();
    const ErrorContext where{"decode", *next, plan.epoch, plan.index};
    if (auto error = guarded(kDecode, where, [&] { stages_.decode->run(sample); })) {
      sample.error = std::move(error);
    } else {
      return;
    }
  }
  const SkippedSample& first = sample.skipped.front();
  sample.error = Error(ErrorContext{"decode", first.index, plan.epoch, plan.index},
                       "on_error: skip found no readable sample to take the place of sample " + std::to_string(first.index) +
                           (first.key.empty() ? "" : " (" + first.key + ")") + " among the " +
                           std::to_string(sample.skipped.size() - 1) + " after it in the epoch's order (so that every rank "
                           "keeps the same number of batches, a skipped sample is replaced): " + first.reason);
  sample.unskippable = true;
  failed_.store(true, std::memory_order_release);  // the run ends with this error: plan no more
}

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
// Tokens (Note [tokens] in the header) stay one per plan. A plan adds at most batch_size samples to
// fewer than batch_size carried ones, so it completes at most one batch; when it completes none
// (its samples wait for the next plan's), collate emits a kToken item in its place and the
// completion thread gives that token back in order. Under skip the planner follows each epoch's last
// plan with a kEpochEnd marker, which holds a token too: it flushes the epoch's rest as the one
// smaller batch. Without skip (or when skipped samples are replaced: Note [replacing skipped
// samples]) nothing is dropped, every plan but an epoch's last is exactly a batch, and the last
// flushes itself. The one item without a token is the end marker that collate emits
// itself once max_batches batches are out (the planner may have planned more: with skip, plans and
// batches do not match one to one); the queues have room for one item beyond the tokens.
void PipelineGraph::collect(SamplePtr sample, std::vector<WorkPtr>& out) {
  if (collecting_.empty()) collecting_.reserve(sample->plan->slots());
  // The sequencer hands samples over in sequence order, so a plan's samples arrive together and in
  // position order.
  collecting_.push_back(std::move(sample));
  const PlanPtr plan = collecting_.front()->plan;
  if (collecting_.size() < plan->slots()) return;
  std::vector<SamplePtr> samples = std::move(collecting_);
  collecting_.clear();
  if (ended_) return;  // max_batches are out: nothing planned after them is delivered

  switch (plan->kind) {
    case BatchPlan::Kind::kError: {
      WorkPtr work = emit(BatchWork::Kind::kError, out);
      work->error = plan->error;
      return;
    }
    case BatchPlan::Kind::kEnd:
      if (!carry_.empty()) throw Error("internal error: the run ended with samples not in any batch");
      emit(BatchWork::Kind::kEnd, out);
      ended_ = true;
      return;
    case BatchPlan::Kind::kEpochEnd:
      if (!flush_epoch(out)) emit(BatchWork::Kind::kToken, out);
      return;
    case BatchPlan::Kind::kSamples:
      break;
  }

  // Only decode sets a sample's error: each one is a sample that could not be read or decoded.
  for (const SamplePtr& decoded : samples) {
    for (const SkippedSample& skipped : decoded->skipped) record_skipped(skipped);  // replaced ones
    if (decoded->error && (on_error_ == OnError::kFail || decoded->unskippable)) {
      WorkPtr work = emit(BatchWork::Kind::kError, out);
      work->error = decoded->error;
      return;
    }
  }
  if (!in_epoch_ || plan->epoch != carry_epoch_) {  // the epoch's first plan
    if (!carry_.empty()) {
      throw Error("internal error: a plan of epoch " + std::to_string(plan->epoch) + " arrived before epoch " +
                  std::to_string(carry_epoch_) + " was flushed");
    }
    in_epoch_ = true;
    carry_epoch_ = plan->epoch;
    next_index_ = plan->index;  // a resumed run numbers on from where it starts
  }
  for (SamplePtr& decoded : samples) {
    if (decoded->error) {
      record_skipped(SkippedSample{decoded->index(), decoded->key, decoded->error->stage(), decoded->error->cause()});
    } else {
      carry_.push_back(std::move(decoded));
    }
  }
  const size_t before = out.size();
  if (carry_.size() >= batch_size_) emit_batch(batch_size_, plan->last_of_epoch && carry_.size() == batch_size_, out);
  // Without skip an epoch's last plan completes its own (smaller) batch; with skip the marker does.
  if (out.size() == before && plan->last_of_epoch && !refill_) (void)flush_epoch(out);
  if (out.size() == before) emit(BatchWork::Kind::kToken, out);
}

PipelineGraph::WorkPtr PipelineGraph::emit(BatchWork::Kind kind, std::vector<WorkPtr>& out) {
  auto work = std::make_shared<BatchWork>();
  work->kind = kind;
  work->sequence = emitted_++;
  out.push_back(work);
  return work;
}

void PipelineGraph::emit_batch(size_t count, bool last_of_epoch, std::vector<WorkPtr>& out) {
  WorkPtr work = emit(BatchWork::Kind::kBatch, out);
  work->samples.assign(std::make_move_iterator(carry_.begin()), std::make_move_iterator(carry_.begin() + static_cast<ptrdiff_t>(count)));
  carry_.erase(carry_.begin(), carry_.begin() + static_cast<ptrdiff_t>(count));
  BatchInfo& info = work->info;
  info.sequence = batches_out_++;
  info.epoch = carry_epoch_;
  info.index = next_index_++;
  info.sample_indices.reserve(count);
  for (const SamplePtr& sample : work->samples) info.sample_indices.push_back(sample->index());
  const SampleWork& last = *work->samples.back();
  work->next = last_of_epoch ? BatchCursor{carry_epoch_ + 1, 0, 0}
                             : BatchCursor{carry_epoch_, next_index_, last.epoch_position() + 1};
  run_batch_stage(kCollate, *work);
  if (max_batches_ != 0 && first_batch_ + batches_out_ >= max_batches_) {
    emit(BatchWork::Kind::kEnd, out);
    ended_ = true;
    enough_.store(true, std::memory_order_release);
  }
}

bool PipelineGraph::flush_epoch(std::vector<WorkPtr>& out) {
  if (carry_.empty()) return false;
  if (drop_last_) {  // fewer than batch_size left: drop_last drops them, as it would without skips
    carry_.clear();
    return false;
  }
  emit_batch(carry_.size(), /*last_of_epoch=*/true, out);
  return true;
}

void PipelineGraph::record_skipped(const SkippedSample& skipped) {
  uint64_t count = 0;
  {
    // Counted and listed under one lock, so that a snapshot's count and list agree.
    std::lock_guard lock(skipped_mutex_);
    count = ++skipped_count_;
    if (count <= PipelineStats::kMaxListedSkips) skipped_.push_back(skipped);
  }
  if (count > PipelineStats::kMaxListedSkips) return;
  // Said as it happens, so a log shows which samples a run lost; after the first ones, only counted.
  const bool key_in_reason = skipped.key.empty() || skipped.reason.find(skipped.key) != std::string::npos;
  std::fprintf(stderr, "ferry: skipped sample %llu%s%s (on_error: skip): %s\n",
               static_cast<unsigned long long>(skipped.index), key_in_reason ? "" : " ",
               key_in_reason ? "" : skipped.key.c_str(), skipped.reason.c_str());
  if (count == PipelineStats::kMaxListedSkips) {
    std::fprintf(stderr, "ferry: further skipped samples are only counted (see the report)\n");
  }
}

bool PipelineGraph::skip(const BatchWork& work) const noexcept {
  return work.error.has_value() || work.is_marker() || stop_.load(std::memory_order_acquire);
}

void PipelineGraph::return_token() {
  batches_in_flight_.change(-1, now_ns());
  nodes_->tokens.decrementer().try_put(tbb::flow::continue_msg());
}

void PipelineGraph::run_batch_stage(StageId id, BatchWork& work) {
  if (skip(work)) return;
  BatchStage* stage = nullptr;
  switch (id) {
    case kCollate: stage = stages_.collate.get(); break;
    case kPack: stage = stages_.pack.get(); break;
    case kH2D: stage = stages_.h2d.get(); break;
    case kEventWait: stage = stages_.event_wait.get(); break;
    default: return;
  }
  if (id == kCollate) counters_[id].units_in.fetch_add(work.samples.size(), std::memory_order_relaxed);
  if (auto error = guarded(id, work.where(std::string(stage->name())), [&] { stage->run(work, stop_); })) {
    work.error = std::move(error);
  }
}

void PipelineGraph::submit(WorkPtr work) {
  if (stop_.load(std::memory_order_acquire)) return;  // shutting down: drop it (its lease is safe)
  const QueueStatus status = in_flight_lane_.try_push(std::move(work));
  if (status == QueueStatus::kTimeout) {  // `work` is untouched: a refused push does not move from it
    // Cannot happen while Note [tokens] holds; if it ever does, fail loudly rather than block a worker.
    failed_.store(true, std::memory_order_release);
    Error broken(work->where("h2d"), "internal error: the in-flight queue is full (token accounting broken)");
    (void)ready_.try_push(Delivery{Delivery::Kind::kError, {}, std::move(broken)});
  }
}

void PipelineGraph::completion_loop() {
  uint64_t expected = 0;  // batches reach this thread in plan order; anything else is a bug to report
  while (true) {
    WorkPtr work;
    if (in_flight_.pop(work) != QueueStatus::kOk) return;  // closed: shutting down
    if (work->sequence != expected++) {
      deliver(Delivery{Delivery::Kind::kError, {},
                       Error(ErrorContext{"event-wait", {}, {}, {}}, "internal error: item " +
                                                                  std::to_string(work->sequence) +
                                                                  " arrived out of order (expected " +
                                                                  std::to_string(expected - 1) + ")")});
      return;
    }
    if (work->error) {
      deliver(Delivery{Delivery::Kind::kError, {}, work->error});
      return;
    }
    if (work->kind == BatchWork::Kind::kEnd) {
      deliver(Delivery{Delivery::Kind::kEnd, {}, std::nullopt});
      return;
    }
    if (work->kind == BatchWork::Kind::kToken) {  // nothing to deliver: the consumer will not give this token back
      return_token();
      continue;
    }
    run_batch_stage(kEventWait, *work);
    if (stop_.load(std::memory_order_acquire)) return;
    if (work->error) {
      deliver(Delivery{Delivery::Kind::kError, {}, work->error});
      return;
    }
    deliver(Delivery{Delivery::Kind::kBatch, std::move(work->batch), std::nullopt, work->next});
  }
}

void PipelineGraph::deliver(Delivery delivery) {
  const bool batch = delivery.kind == Delivery::Kind::kBatch;
  const uint64_t start_ns = now_ns();
  if (batch) batches_ready_.change(+1, start_ns);  // before the push: Note [occupancy]
  // Never waits while Note [tokens] holds; close() wakes it at shutdown regardless. Handing over
  // (waking the consumer) is work; only a push that found the queue full was blocked.
  QueueStatus status = ready_.try_push(std::move(delivery));  // a refused push leaves `delivery` as it was
  const bool full = status == QueueStatus::kTimeout;
  if (full) status = ready_.push(std::move(delivery));
  const uint64_t end_ns = now_ns();
  StageCounter& counter = counters_[kEventWait];
  (full ? counter.blocked_ns : counter.busy_ns).fetch_add(end_ns - start_ns, std::memory_order_relaxed);
  if (batch && status != QueueStatus::kOk) batches_ready_.change(-1, end_ns);
}

std::optional<Batch> PipelineGraph::next(std::chrono::microseconds timeout, bool* timed_out) {
  if (timed_out != nullptr) *timed_out = false;
  // The destructor waits until no thread is inside next(); close() makes blocked ones return.
  consumers_inside_.fetch_add(1, std::memory_order_acq_rel);
  struct Leave {
    std::atomic<int>& inside;
    ~Leave() { inside.fetch_sub(1, std::memory_order_acq_rel); }
  } leave{consumers_inside_};
  // Whatever ends this call without a batch — the end, an error, a close — ends the run's clock.
  struct EndUnlessBatch {
    PipelineGraph& graph;
    bool batch = false;  // or a timeout: the run goes on
    ~EndUnlessBatch() {
      if (!batch) graph.mark_ended();
    }
  } outcome{*this};

  auto finished_or_failed = [this]() -> bool {
    std::lock_guard lock(consumer_mutex_);
    if (sticky_error_) throw *sticky_error_;
    return finished_;
  };
  if (finished_or_failed() || stop_.load(std::memory_order_acquire)) return std::nullopt;

  Delivery delivery;
  // A wait that timed out and is taken up again by the next call is still one wait for one batch.
  if (ready_.size() == 0 && !resumed_wait_.exchange(false, std::memory_order_relaxed)) {
    consumer_waits_.fetch_add(1, std::memory_order_relaxed);
  }
  const uint64_t start_ns = now_ns();
  const QueueStatus status = ready_.pop(delivery, timeout < std::chrono::microseconds::zero() ? BoundedQueue<Delivery>::kForever : timeout);
  const uint64_t popped_ns = now_ns();
  consumer_wait_ns_.fetch_add(popped_ns - start_ns, std::memory_order_relaxed);
  if (status == QueueStatus::kTimeout) {
    resumed_wait_.store(true, std::memory_order_relaxed);
    outcome.batch = true;  // not the end: the caller will ask again
    if (timed_out != nullptr) *timed_out = true;
    return std::nullopt;
  }
  resumed_wait_.store(false, std::memory_order_relaxed);
  if (status != QueueStatus::kOk) {
    finished_or_failed();  // another consumer may have met the error meanwhile
    return std::nullopt;
  }
  switch (delivery.kind) {
    case Delivery::Kind::kBatch: {
      batches_ready_.change(-1, popped_ns);
      try {
        make_ready_for_consumer(delivery.batch);
      } catch (...) {
        // The batch cannot be handed over; skipping it would break the order, so the run ends here.
        std::lock_guard lock(consumer_mutex_);
        sticky_error_ = error_from(std::current_exception(), ErrorContext{"consumer", {}, delivery.batch.epoch(),
                                                                          delivery.batch.index()});
        ready_.close();
        throw *sticky_error_;
      }
      batches_in_flight_.change(-1, now_ns());  // before the token returns and planning resumes
      nodes_->tokens.decrementer().try_put(tbb::flow::continue_msg());
      outcome.batch = true;
      {
        std::lock_guard lock(consumer_mutex_);
        last_delivered_ = Delivered{delivery.batch.sequence(), delivery.batch.epoch(), delivery.batch.index(), delivery.next};
      }
      delivered_batches_.fetch_add(1, std::memory_order_relaxed);
      delivered_samples_.fetch_add(delivery.batch.batch_size(), std::memory_order_relaxed);
      delivered_bytes_.fetch_add(delivery.batch.nbytes(), std::memory_order_relaxed);
      return std::move(delivery.batch);
    }
    case Delivery::Kind::kEnd: {
      std::lock_guard lock(consumer_mutex_);
      finished_ = true;
      ready_.close();  // wake any other consumer thread blocked on the queue
      return std::nullopt;
    }
    case Delivery::Kind::kError: {
      std::lock_guard lock(consumer_mutex_);
      sticky_error_ = delivery.error;
      ready_.close();
      throw *sticky_error_;
    }
  }
  return std::nullopt;
}

std::optional<PipelineGraph::Delivered> PipelineGraph::last_delivered() const {
  std::lock_guard lock(consumer_mutex_);
  return last_delivered_;
}

void PipelineGraph::make_ready_for_consumer(const Batch& batch) const {
  const std::shared_ptr<CudaEvent>& ready = batch.ready_event();
  if (!ready || !batch.device().is_cuda()) return;
  const int device = batch.device().index();
  DeviceGuard guard(device);
  // The consumer's stream waits for the copy on the device (the host does not block), and the
  // allocator learns that stream uses the memory, so the memory is not reused under its kernels.
  const CudaStreamHandle stream = current_torch_stream(device);
  ready->wait_on(stream);
  record_stream(batch.buffer(), stream);
}

PipelineStats PipelineGraph::stats() const {
  // Note [stats]. Every count is read once; counts of one stage are read so that out <= in holds.
  PipelineStats stats;
  const uint64_t run = run_ns();
  const double wall = static_cast<double>(run) * 1e-9;
  stats.device = device_;
  stats.decode_threads = decode_threads_;
  stats.prefetch = prefetch_;
  stats.elapsed_seconds = wall;
  stats.batches = delivered_batches_.load(std::memory_order_relaxed);
  stats.samples = delivered_samples_.load(std::memory_order_relaxed);
  stats.bytes = delivered_bytes_.load(std::memory_order_relaxed);
  stats.consumer_wait_seconds = static_cast<double>(consumer_wait_ns_.load(std::memory_order_relaxed)) * 1e-9;
  stats.consumer_waits = consumer_waits_.load(std::memory_order_relaxed);
  if (stages_.pool) stats.pool = stages_.pool->stats();

  const Occupancy::Snapshot in_flight = batches_in_flight_.snapshot(run);
  stats.in_flight = OccupancyStats{in_flight.mean, in_flight.peak, prefetch_, static_cast<double>(in_flight.full_ns) * 1e-9};
  const Occupancy::Snapshot ready = batches_ready_.snapshot(run);
  stats.ready_queue = OccupancyStats{ready.mean, ready.peak, prefetch_, static_cast<double>(ready.full_ns) * 1e-9};
  stats.ready_queue_peak = ready.peak;

  StageStats& planner = stats.planner;
  planner.name = "plan";
  planner.threads = 1;
  planner.items = planned_batches_.load(std::memory_order_acquire);  // before the samples: see plan_next()
  planner.items_out = planner.items;
  planner.items_in = planned_samples_.load(std::memory_order_relaxed);
  planner.in_unit = "samples";
  planner.out_unit = "batches";
  planner.busy_seconds = static_cast<double>(planning_ns_.load(std::memory_order_relaxed)) * 1e-9;
  planner.blocked_downstream_seconds = static_cast<double>(in_flight.blocked_ns) * 1e-9;
  planner.account_idle_time(wall);

  const std::array<std::string_view, kStageCount> names{stages_.decode->name(), stages_.collate->name(),
                                                         stages_.pack->name(), stages_.h2d->name(),
                                                         stages_.event_wait->name()};
  for (size_t id = 0; id < kStageCount; ++id) {
    const StageCounter& counter = counters_[id];
    StageStats stage;
    stage.name = std::string(names[id]);
    stage.threads = id == kDecode ? decode_threads_ : 1;
    const uint64_t not_out = counter.not_out.load(std::memory_order_acquire);  // first: see guarded()
    stage.items = counter.items.load(std::memory_order_acquire);  // before units_in: see guarded()
    stage.items_out = stage.items - std::min(not_out, stage.items);
    stage.items_in = id == kCollate ? counter.units_in.load(std::memory_order_relaxed) : stage.items;
    stage.in_unit = id == kDecode || id == kCollate ? "samples" : "batches";
    stage.out_unit = id == kDecode ? "samples" : "batches";
    stage.busy_seconds = static_cast<double>(counter.busy_ns.load(std::memory_order_relaxed)) * 1e-9;
    stage.blocked_downstream_seconds = static_cast<double>(counter.blocked_ns.load(std::memory_order_relaxed)) * 1e-9;
    if (id == kPack) {
      // Pack's body includes its waits for a slab; they are time blocked, not work (Note [stats]).
      stage.blocked_downstream_seconds = stats.pool.wait_seconds;
      stage.busy_seconds = std::max(0.0, stage.busy_seconds - stats.pool.wait_seconds);
    }
    stage.account_idle_time(wall);
    stats.stages.push_back(std::move(stage));
  }
  {
    std::lock_guard lock(skipped_mutex_);
    stats.skipped_samples = skipped_count_;
    stats.skipped = skipped_;
  }
  return stats;
}

}  // namespace ferry::detail
