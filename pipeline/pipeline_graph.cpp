#include "ferry/pipeline/pipeline_graph.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <tuple>
#include <utility>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include "ferry/pipeline/profiler_range.h"
#include "ferry/pipeline/thread_start.h"

namespace ferry::detail {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t nanoseconds_since(Clock::time_point start) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

// The serial nodes besides decode: split, collate, pack, h2d. They need arena slots too.
constexpr size_t kSerialNodes = 4;

// Samples of a GPU group read by one task of its parallel_for: enough that the task outweighs its
// scheduling (a sample's read and header take tens of microseconds), few enough to spread a batch.
constexpr size_t kGpuGroupReadGrain = 4;

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
  using SplitNode = tbb::flow::multifunction_node<PlanPtr, std::tuple<GroupPtr>>;
  using CollateNode = tbb::flow::multifunction_node<GroupPtr, std::tuple<WorkPtr>>;
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
                  p.split(plan, [&](GroupPtr group) { std::get<0>(ports).try_put(std::move(group)); });
                });
              }),
        decode(g, p.decode_threads_ + p.gpu_groups_,
               [&p](const GroupPtr& group) {
                 p.shielded("decode", [&] { p.decode_group(*group); });
                 return group;
               }),
        reorder(g, [](const GroupPtr& group) -> size_t { return group->sequence; }),
        collate(g, tbb::flow::serial,
                [&p](const GroupPtr& group, CollateNode::output_ports_type& ports) {
                  p.shielded("collate", [&] {
                    std::vector<WorkPtr> completed;
                    for (SampleWork& sample : group->samples) p.collect(SamplePtr(group, &sample), completed);
                    const uint64_t collated_ns = completed.empty() ? 0 : p.now_ns();
                    for (WorkPtr& work : completed) {
                      if (!work->samples.empty()) {  // Note [batch path]
                        work->marks.planned = work->samples.front()->plan->planned_ns;
                        work->marks.collated = collated_ns;
                      }
                      std::get<0>(ports).try_put(std::move(work));
                    }
                  });
                }),
        pack(g, tbb::flow::serial,
             [&p](const WorkPtr& work, PackNode::output_ports_type& ports) {
               p.shielded("pack", [&] {
                 p.run_batch_stage(kPack, *work);
                 // Packed: the decoded tensors are no longer needed, unless h2d keeps them in the
                 // dataset cache (Note [dataset cache] in dataset_cache.h).
                 if (!p.stages_.cache) p.release(std::move(work->samples));
                 std::get<0>(ports).try_put(work);
               });
             }),
        h2d(g, tbb::flow::serial, [&p](const WorkPtr& work) {
          p.shielded("h2d", [&] {
            p.run_batch_stage(kH2D, *work);
            p.release(std::move(work->samples));
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
  tbb::flow::function_node<GroupPtr, GroupPtr> decode;
  tbb::flow::sequencer_node<GroupPtr> reorder;
  CollateNode collate;
  PackNode pack;
  tbb::flow::function_node<WorkPtr, tbb::flow::continue_msg> h2d;
};

size_t PipelineGraph::arena_slots(size_t decode_threads, size_t gpu_groups) noexcept {
  // Decode runs decode_threads tasks at once beside the serial nodes, and gpu_groups more, which wait on
  // the GPU decoder.
  return decode_threads + gpu_groups + kSerialNodes;
}

PipelineGraph::PipelineGraph(StageSet stages, const EngineOptions& options, std::shared_ptr<SharedArena> arena)
    : stages_(std::move(stages)),
      prefetch_(options.prefetch),
      decode_threads_(options.resolved_decode_threads()),
      decode_threads_shared_by_(options.decode_threads == 0 ? std::max<size_t>(1, options.local_processes) : 1),
      gpu_groups_(stages_.decode ? stages_.decode->gpu_groups() : 0),
      wide_groups_(stages_.decode != nullptr && stages_.decode->wide_groups()),
      max_releasing_(std::max<size_t>(2, options.prefetch / 2)),
      on_error_(options.on_error),
      replace_(options.on_error == OnError::kSkip && options.skip_replaces),
      device_(options.device),
      started_(Clock::now()),
      cutter_(BatchCutter::Options::of(options)),
      run_(options.prefetch),
      // Note [tokens]: at most prefetch_ items (batches or the end marker) exist downstream of the
      // limiter, so neither queue can fill up.
      in_flight_(options.prefetch + 1),
      in_flight_lane_(in_flight_.make_producer()),
      ready_(options.prefetch + 1) {
  if (!stages_.batches || !stages_.decode || !stages_.collate || !stages_.pack || !stages_.h2d || !stages_.event_wait) {
    throw Error("a pipeline needs every stage: batches, decode, collate, pack, h2d and event_wait");
  }
  span_names_ = trace_span_names();
  for (const std::string& name : span_names_) torch_names_.push_back("ferry::" + name);
  if (!options.trace.empty()) {
    Trace::Opened opened = Trace::open(options.trace, "ferry " + device_, started_, span_names_);
    trace_ = std::move(opened.trace);
    track_ = opened.track;
  }
  // A pipeline of its own gets an arena of its own; a PipelineGroup's pipelines share one, sized for them all.
  arena_ = arena ? std::move(arena) : std::make_shared<SharedArena>(arena_slots(decode_threads_, gpu_groups_));
  // A graph belongs to the arena it is built in; its tasks, including those that the consumer's
  // token returns start, run there and never on the consumer's thread.
  arena_->arena().execute([this] {
    graph_ = std::make_unique<tbb::flow::graph>();
    nodes_ = std::make_unique<Nodes>(*graph_, *this);
  });
  completion_ = start_thread("the event-wait thread of the pipeline on " + device_,
                             [this] { shielded("event-wait", [this] { completion_loop(); }); });
  arena_->arena().execute([this] { nodes_->source.activate(); });
}

PipelineGraph::~PipelineGraph() {
  close();
  while (consumers_inside_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
  if (completion_.joinable()) completion_.join();
  if (graph_) {
    arena_->arena().execute([this] {
      graph_->cancel();
      try {
        // Isolated: in a PipelineGroup's shared arena this thread would otherwise help run the other
        // devices' tasks (GPU groups among them) while it waits for this graph's.
        tbb::this_task_arena::isolate([this] { graph_->wait_for_all(); });
      } catch (...) {
        // Bodies are shielded; nothing is left to report to a consumer that is gone.
      }
    });
  }
  // The samples still being released hold tensors that may point into the stages' data.
  while (releasing_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
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
  const uint64_t ended = now_ns();
  if (ended_ns_.compare_exchange_strong(running, static_cast<int64_t>(ended), std::memory_order_acq_rel) && trace_) {
    trace_->end_track(track_, ended);  // the run is over for the consumer: what follows is the shutdown
  }
}

std::vector<std::string> PipelineGraph::trace_span_names() const {
  std::vector<std::string> names(kTraceSpanCount);
  const BatchStage* batch_stages[] = {stages_.collate.get(), stages_.pack.get(), stages_.h2d.get(),
                                      stages_.event_wait.get()};
  names[kDecode] = std::string(stages_.decode->name());
  for (size_t id = kCollate; id < kStageCount; ++id) names[id] = std::string(batch_stages[id - kCollate]->name());
  names[kPlanSpan] = "plan";
  names[kWaitSpan] = "wait in next()";
  return names;
}

void PipelineGraph::trace_slabs(const char* role) {
  if (!trace_ || !stages_.pool) return;
  std::lock_guard lock(trace_slabs_mutex_);
  trace_->count(track_, Trace::Counter::kSlabs, now_ns(), stages_.pool->slabs_in_use(), role);
}

void PipelineGraph::close() noexcept {
  mark_ended();
  stop_.store(true, std::memory_order_release);
  in_flight_.close();
  ready_.close();
}

template <typename Body>
std::optional<Error> PipelineGraph::guarded(StageId id, const ErrorContext& where, Body&& body, Span* span) {
  const uint64_t start_ns = now_ns();
  std::optional<Error> error;
  try {
    body();
  } catch (...) {
    error = error_from(std::current_exception(), where);
  }
  const uint64_t end_ns = now_ns();
  if (span != nullptr) *span = Span{start_ns, end_ns};
  RunCounters::StageCounter& counter = run_.stages[id];
  counter.busy_ns.fetch_add(end_ns - start_ns, std::memory_order_relaxed);
  // Release, both: a stats() reader that sees a run also sees the samples collate counted before
  // it, and one that sees a failure also sees its run, so items_out never exceeds items_in.
  // (On x86 a relaxed and a release add are the same instruction.)
  counter.items.fetch_add(1, std::memory_order_release);
  if (error) {
    count_failure(id);
  } else if (stop_.load(std::memory_order_acquire)) {
    counter.not_out.fetch_add(1, std::memory_order_release);
  }
  return error;
}

void PipelineGraph::count_failure(StageId id) {
  run_.stages[id].not_out.fetch_add(1, std::memory_order_release);
  // A failure ends planning: nothing planned after it could be delivered. Except a sample that
  // on_error: skip will drop (decode is the only sample stage): the run goes on without it.
  if (!(id == kDecode && on_error_ == OnError::kSkip)) failed_.store(true, std::memory_order_release);
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
  ProfilerRange range(span_names_[kPlanSpan].c_str(), torch_names_[kPlanSpan].c_str(), next_batch_sequence_);
  run_.in_flight.change(0, start_ns, /*producer_waiting=*/false);  // planning is work, not waiting
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
  run_.planning_ns.fetch_add(end_ns - start_ns, std::memory_order_relaxed);
  if (plan->kind == BatchPlan::Kind::kSamples) {
    // Samples first, and release: a stats() reader that sees the batch sees its samples (in >= out).
    run_.planned_samples.fetch_add(plan->slots(), std::memory_order_relaxed);
    run_.planned_batches.fetch_add(1, std::memory_order_release);
  } else if (plan->kind != BatchPlan::Kind::kEpochEnd) {
    planned_last_ = true;
  }
  // A plan that will give its token back counts as a batch in flight (Note [refilling batches]).
  // After the last plan the planner has nothing left to wait for.
  const bool holds_token = plan->kind == BatchPlan::Kind::kSamples || plan->kind == BatchPlan::Kind::kEpochEnd;
  const Occupancy::Change holding = run_.in_flight.change(holds_token ? +1 : 0, end_ns, !planned_last_);
  if (trace_) {
    if (plan->kind == BatchPlan::Kind::kSamples) {
      trace_span(kPlanSpan, start_ns, end_ns, plan->epoch, plan->index, plan->slots(), "worker");
    }
    if (holds_token) trace_count(Trace::Counter::kTokens, holding, "worker");
  }
  plan->sequence = next_batch_sequence_++;
  plan->planned_ns = end_ns;
  return std::make_shared<const BatchPlan>(std::move(*plan));
}

// Note [sample groups]
// ~~~~~~~~~~~~~~~~~~~~
// Every task the graph runs costs a few microseconds of handing over, and the split, reorder and collate
// nodes pay theirs one after another: with one task per sample, a batch of 32 cheap samples (token
// windows, small arrays) spent most of its time being handed around, not decoded. So samples travel in
// groups: consecutive samples of one plan, decoded one after another by one task, put back in order and
// collated together. A group is sized from the decode time measured so far to take about
// kGroupTargetNs, so that expensive samples (a JPEG) still get a task each, while keeping at least one
// group per decode thread among the prefetched plans. A stage that pays a round trip per group (samples
// made by worker processes, SampleStage::prepare()) gets the widest groups from the start
// (SampleStage::wide_groups()): its decode threads mostly wait for the workers, so their time says
// nothing of a sample's cost. Grouping changes only which thread decodes a sample, never what it decodes
// or where it lands: results, order and resumption are the same.
size_t PipelineGraph::group_size(size_t samples) const {
  const size_t widest = std::max<size_t>(1, prefetch_ * samples / decode_threads_);
  if (wide_groups_) return std::min(samples, widest);
  const RunCounters::StageCounter& counter = run_.stages[kDecode];
  const uint64_t decoded = counter.items.load(std::memory_order_relaxed);
  if (decoded < kGroupWarmupSamples) return 1;
  const uint64_t per_sample = std::max<uint64_t>(1, counter.busy_ns.load(std::memory_order_relaxed) / decoded);
  const size_t wanted =
      static_cast<size_t>(std::min<uint64_t>(samples, (kGroupTargetNs + per_sample - 1) / per_sample));
  return std::max<size_t>(1, std::min(wanted, widest));
}

template <typename Put>
void PipelineGraph::split(const PlanPtr& plan, Put&& put) {
  const size_t slots = plan->slots();
  size_t position = 0;
  // Note [placing samples]: the plan's slab, before any of its samples is decoded.
  std::shared_ptr<PlacedSlab> slab;
  if (stages_.placer && plan->kind == BatchPlan::Kind::kSamples) {
    try {
      slab = stages_.placer->reserve(slots, stop_, run_.split_slab_wait_ns);
    } catch (...) {
      // A CUDA error while reclaiming slabs: pack meets it again leasing one, and fails this batch in
      // order with it, where an error here would end the run out of band.
    }
  }
  auto put_group = [&](size_t count, bool on_gpu, bool gpu_candidate = false) {
    auto group = std::make_shared<SampleGroup>();
    group->sequence = next_group_sequence_++;
    group->on_gpu = on_gpu;
    group->gpu_candidate = gpu_candidate;
    group->slab = slab;
    group->samples.resize(count);
    for (SampleWork& sample : group->samples) {
      sample.plan = plan;
      sample.position = static_cast<uint32_t>(position++);
      sample.slab = slab.get();
      sample.stop = &stop_;
    }
    put(std::move(group));
  };
  const SampleStage::GpuShare share = stages_.decode->gpu_share();
  if (plan->kind == BatchPlan::Kind::kSamples && share != SampleStage::GpuShare::kNone) {
    // Note [GPU JPEG decode]: groups of about kGpuGroup images, sizes equal within one. Under `gpu` each
    // goes to the GPU; under `auto` each goes where auto_choice_ says when its task starts (Note [auto:
    // the faster decoder] in auto_decode_choice.h).
    const bool all = share == SampleStage::GpuShare::kAll;
    const size_t groups = (slots + kGpuGroup - 1) / kGpuGroup;
    for (size_t g = 0; g < groups; ++g) put_group(slots / groups + (g < slots % groups ? 1 : 0), all, !all);
    return;
  }
  if (slots == 0) return;
  const size_t size = group_size(slots);
  const size_t groups = (slots + size - 1) / size;
  // Sizes differ by at most one, so that no group is left with a straggler or two.
  for (size_t g = 0; g < groups; ++g) put_group(slots / groups + (g < slots % groups ? 1 : 0), /*on_gpu=*/false);
}

void PipelineGraph::decode(SampleWork& sample) {
  // Only shutdown skips decoding. After another sample's failure, samples of earlier batches must
  // still be decoded: those batches are delivered before the error (Note [in-band errors and markers]).
  if (sample.is_marker() || stop_.load(std::memory_order_acquire)) return;
  const ErrorContext where{"decode", sample.index(), sample.plan->epoch, sample.plan->index};
  if (auto error = guarded(kDecode, where, [&] { stages_.decode->run(sample); })) sample.error = std::move(error);
  if (sample.error) decode_failed(sample);
  place(sample);
}

void PipelineGraph::place(SampleWork& sample) {
  // Into the plan's slab while the bytes are in this thread's cache (Note [placing samples]); a
  // replacement is placed as the sample it replaces. Timed as decode's: it is the copy pack skips.
  if (sample.error || sample.slab == nullptr || stop_.load(std::memory_order_acquire)) return;
  const uint64_t start_ns = now_ns();
  run_.placed_bytes.fetch_add(stages_.placer->place(sample), std::memory_order_relaxed);
  run_.stages[kDecode].busy_ns.fetch_add(now_ns() - start_ns, std::memory_order_relaxed);
}

void PipelineGraph::decode_failed(SampleWork& sample) {
  sample.pending.clear();
  if (!replace_) return;
  sample.on_gpu = false;  // a replacement is decoded here, on the CPU
  replace(sample);
}

void PipelineGraph::decode_group(SampleGroup& group) {
  const uint64_t started_ns = now_ns();
  const BatchPlan* plan = group.samples.empty() ? nullptr : group.samples.front().plan.get();
  ProfilerRange range(span_names_[kDecode].c_str(), torch_names_[kDecode].c_str(), plan != nullptr ? plan->index : 0);
  AutoDecodeChoice::Path path = AutoDecodeChoice::Path::kCpu;
  if (group.gpu_candidate) {
    const SampleStage::GpuReadiness readiness = stages_.decode->gpu_readiness();
    path = auto_choice_.route(readiness != SampleStage::GpuReadiness::kStarting,
                              readiness == SampleStage::GpuReadiness::kWarm);
    group.on_gpu = path == AutoDecodeChoice::Path::kGpu;
  }
  // The samples follow their group (DecodeStage::run reads theirs), here only: a replacement clears its own.
  for (SampleWork& sample : group.samples) sample.on_gpu = group.on_gpu;
  decode_samples(group);
  decode_pending(group, started_ns);
  if (group.gpu_candidate) auto_choice_.finished(path, group.samples.size(), now_ns());
  if (trace_ && plan != nullptr && plan->kind == BatchPlan::Kind::kSamples) {
    trace_span(kDecode, started_ns, now_ns(), plan->epoch, plan->index, group.samples.size(), "worker");
  }
}

void PipelineGraph::decode_samples(SampleGroup& group) {
  // A GPU group is a large part of a plan (Note [GPU JPEG decode]). Its samples' reads,
  // headers and hardware checks run on every idle decode thread, not one after another before the
  // hardware starts: the GPU path's CPU work was 0.32 ms an image on the H200 (bench/augment.py), up to
  // 80 ms for a batch of 256 on one thread. A group `auto` sends to the CPU is decoded the same way
  // (Note [auto: the faster decoder] in auto_decode_choice.h). Each sample is its own, as in groups that
  // different threads decode at once. Isolated: while it waits for its parts, this thread takes no other
  // group's task (which could block it in the GPU decoder's queue for states, NvJpegDecoder::kMaxWorkers).
  if (group.on_gpu || group.gpu_candidate) {
    tbb::this_task_arena::isolate([&] {
      tbb::parallel_for(tbb::blocked_range<size_t>(0, group.samples.size(), kGpuGroupReadGrain),
                        [&](const tbb::blocked_range<size_t>& range) {
                          for (size_t i = range.begin(); i != range.end(); ++i) decode(group.samples[i]);
                        });
    });
    return;
  }
  prepare(group);
  for (SampleWork& sample : group.samples) decode(sample);
}

void PipelineGraph::prepare(SampleGroup& group) {
  if (!wide_groups_ || stop_.load(std::memory_order_acquire)) return;
  std::vector<SampleWork*> samples;
  samples.reserve(group.samples.size());
  for (SampleWork& sample : group.samples) {
    if (!sample.is_marker()) samples.push_back(&sample);
  }
  if (samples.empty()) return;
  // Decode's time, spread over the samples that run() then counts.
  const uint64_t start_ns = now_ns();
  try {
    stages_.decode->prepare(samples);
  } catch (...) {
    // Nothing was read ahead, or part of it: run() reads the rest and meets any error itself.
  }
  run_.stages[kDecode].busy_ns.fetch_add(now_ns() - start_ns, std::memory_order_relaxed);
}

void PipelineGraph::decode_pending(SampleGroup& group, uint64_t started_ns) {
  // The group's flag, not its first sample's: a sample replaced after a failure was decoded on the CPU.
  if (!group.on_gpu || stop_.load(std::memory_order_acquire)) return;
  std::vector<SampleWork*> pending;
  for (SampleWork& sample : group.samples) {
    if (!sample.pending.empty() && !sample.error) pending.push_back(&sample);
  }
  if (!pending.empty()) {
    stages_.decode->run_pending(pending, [this](SampleWork& sample, std::exception_ptr failure) {
      const ErrorContext where{"decode", sample.index(), sample.plan->epoch, sample.plan->index};
      sample.error = error_from(failure, where);
      count_failure(kDecode);
      decode_failed(sample);
      place(sample);  // its replacement, decoded on the CPU
    });
  }
  // Not decode's busy time: the thread sleeps while the GPU decoder works, which the report shows as a
  // stage of its own (gpu_decode's states in use); its CPU fallbacks here are few. The group's whole time
  // (its samples' reads and CPU work, and this call) is gpu_group_seconds.
  gpu_group_ns_.fetch_add(now_ns() - started_ns, std::memory_order_relaxed);
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
  // Fields placed before another field failed (a GPU-decoded image, Note [GPU JPEG decode]) are the
  // failed sample's: the replacement's take their slots, placed again or packed (Note [placing samples]).
  if (sample.placed != 0) run_.placed_bytes.fetch_sub(SamplePlacer::unplace(sample), std::memory_order_relaxed);
  for (uint64_t k = 1;; ++k) {
    sample.skipped.push_back(SkippedSample{sample.index(), sample.key, sample.error->stage(), sample.error->cause()});
    std::optional<uint64_t> next;
    if (k <= kMaxReplacementTries) next = stages_.batches->sample_at(plan.epoch, sample.epoch_position() + k);
    if (!next || stop_.load(std::memory_order_acquire)) break;
    sample.replacement = *next;
    sample.prepared.reset();
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
                       "on_error: skip found no readable sample to take the place of sample " +
                           std::to_string(first.index) + (first.key.empty() ? "" : " (" + first.key + ")") +
                           " among the " + std::to_string(sample.skipped.size() - 1) +
                           " after it in the epoch's order (so that every rank "
                           "keeps the same number of batches, a skipped sample is replaced): " +
                           first.reason);
  sample.unskippable = true;
  failed_.store(true, std::memory_order_release);  // the run ends with this error: plan no more
}

void PipelineGraph::collect(SamplePtr sample, std::vector<WorkPtr>& out) {
  BatchCutter::Cut cut = cutter_.add(std::move(sample));
  for (const SkippedSample& skipped : cut.skipped) record_skipped(skipped);
  for (WorkPtr& work : cut.items) {
    if (work->kind == BatchWork::Kind::kBatch) {
      take_placed_slab(*work);
      run_batch_stage(kCollate, *work);
    }
    // The end, or an error the cutter found (an epoch that made no batch): plan no more.
    if (work->kind == BatchWork::Kind::kEnd || work->kind == BatchWork::Kind::kError) {
      enough_.store(true, std::memory_order_release);
    }
    out.push_back(std::move(work));
  }
}

void PipelineGraph::take_placed_slab(BatchWork& work) {
  if (work.samples.empty() || work.samples.front()->slab == nullptr) return;
  // Note [placing samples]: only where a batch is its plan's samples in the plan's order (batches are
  // not re-cut), so the slab holds exactly this batch's placed bytes. Pack checks each placed field.
  PlacedSlab& slab = *work.samples.front()->slab;
  bool whole = work.samples.size() == slab.samples && static_cast<bool>(slab.lease);
  for (size_t s = 0; whole && s < work.samples.size(); ++s) {
    whole = work.samples[s]->slab == &slab && work.samples[s]->position == s;
  }
  if (whole) work.slab = std::move(slab.lease);
}

void PipelineGraph::record_skipped(const SkippedSample& skipped) {
  const uint64_t count = run_.add_skipped(skipped);
  if (trace_) trace_->skipped(track_, now_ns(), skipped.index, skipped.key, skipped.stage, skipped.reason, "worker");
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
  const uint64_t at_ns = now_ns();
  trace_count(Trace::Counter::kTokens, run_.in_flight.change(-1, at_ns), "event-wait thread");
  nodes_->tokens.decrementer().try_put(tbb::flow::continue_msg());
}

// Note [releasing samples]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Once a batch is packed its decoded samples are garbage: a batch of 32 small samples is about a hundred
// heap blocks (tensors, their storage, the group's vectors), allocated by the decode threads. Freed on
// the pack node's thread, they cost it more than packing did (H200: 29-33 us a batch of 32 x 1 KiB
// samples against 8-10 us of packing; 0.87 ms a 38.5 MB image batch): each free of a block from another
// thread's malloc arena takes that arena's lock, which the decode threads allocate under, and pack is a
// serial node that every batch waits for. So pack hands the samples to a task of the arena's that frees
// them beside decode, off the batch's path. At most
// max_releasing_ batches' samples wait for such a task, so memory stays bounded when the workers are
// all busy: beyond that pack frees them itself, as before. The tasks wait behind decode's, so the bound
// grows with the batches in flight: half of prefetch, at least 2. (At prefetch 16, a bound of 2 had pack
// free 38% of the 1 KiB batches itself, at 31-33k batches/s; a bound of 8, 1-2%, at 38-41k.) Decoded
// samples thus hold at most prefetch + 1 + max_releasing_ batches' worth of memory. The destructor waits
// for those tasks: a sample's tensors may point into a stage's data (a memory-mapped file).
void PipelineGraph::release(std::vector<SamplePtr>&& samples) {
  if (samples.empty()) return;
  // Bounded: with the decode threads too busy to free what is handed to them, freeing goes on here.
  if (releasing_.load(std::memory_order_relaxed) >= max_releasing_) {
    samples.clear();
    return;
  }
  // oneTBB calls a task's functor as const; the samples it frees are its own, hence mutable.
  struct Release {
    std::atomic<size_t>* releasing;
    mutable std::vector<SamplePtr> samples;
    void operator()() const {
      samples.clear();
      releasing->fetch_sub(1, std::memory_order_release);
    }
  };
  releasing_.fetch_add(1, std::memory_order_relaxed);
  arena_->arena().enqueue(Release{&releasing_, std::move(samples)});
}

// Note [work ahead]
// ~~~~~~~~~~~~~~~~~
// Every batch waits for each serial node in turn, so a serial node's time a batch sets the pipeline's
// rate once batches are small: h2d's was 10-11 us a batch of 32 x 2049 tokens (H200), of which
// queueing the copy and recording its event took 5.5-6 and taking the device buffer, an event and
// making the views 2.7, against pack's 1.5. The views need only the layout collate made and the buffer,
// not the copy, so a batch stage may do such work in prepare(), which the node before it calls right
// after its own stage (collate's node for pack, pack's for h2d), in batch order. Its time is that
// node's (its busy time and trace span); what it throws is kept and thrown at the stage's own turn, so
// the error names the stage whose work failed. Measured (H200, bench/latency, 3 runs each alternated):
// h2d's busy time 11.0-11.8 -> 9.5-10.0 us a batch of tokens, 8.3-9.2 -> 7.3-7.4 of 32 x 1 KiB; pack's
// rose 1.8 -> 6.0 and 1.4 -> 3.9 (the same work costs more on pack's node, which is far from the bound).
// The rest of h2d is the CUDA calls themselves: cudaMemcpyAsync 4.1-5.2 us, the event's record 1.0-1.5.
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
  if (id == kCollate) run_.stages[id].units_in.fetch_add(work.samples.size(), std::memory_order_relaxed);
  BatchStage* const next = id == kCollate ? stages_.pack.get() : id == kPack ? stages_.h2d.get() : nullptr;
  Span span;
  {
    ProfilerRange range(span_names_[id].c_str(), torch_names_[id].c_str(), work.info.index);
    auto body = [&] {
      if (work.prepare_error) std::rethrow_exception(std::exchange(work.prepare_error, nullptr));
      stage->run(work, stop_);
      if (next == nullptr || stop_.load(std::memory_order_acquire)) return;
      try {  // Note [work ahead]
        next->prepare(work);
      } catch (...) {
        work.prepare_error = std::current_exception();
      }
    };
    if (auto error = guarded(id, work.where(std::string(stage->name())), body, &span)) work.error = std::move(error);
  }
  if (trace_) {
    const char* role = id == kEventWait ? "event-wait thread" : "worker";
    trace_span(id, span.start_ns, span.end_ns, work.info.epoch, work.info.index,
               id == kCollate ? work.samples.size() : 0, role);
    if (id == kPack) trace_slabs(role);
  }
  // Note [batch path]: the clock reads that time the stage stamp the batch too.
  switch (id) {
    case kPack:
      work.marks.pack_start = span.start_ns;
      work.marks.pack_end = span.end_ns;
      break;
    case kH2D:
      work.marks.h2d_start = span.start_ns;
      work.marks.h2d_end = span.end_ns;
      break;
    case kEventWait: work.marks.wait_start = span.start_ns; break;
    default: break;
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
      deliver(Delivery{Delivery::Kind::kError,
                       {},
                       Error(ErrorContext{"event-wait", {}, {}, {}},
                             "internal error: item " + std::to_string(work->sequence) +
                                 " arrived out of order (expected " + std::to_string(expected - 1) + ")")});
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
    // The slab goes back before the consumer can take the batch and give its token back: the plan that
    // token admits leases a slab at once (Note [placing samples]), and must find this one.
    work->slab.release();
    trace_slabs("event-wait thread");
    deliver(Delivery{Delivery::Kind::kBatch, std::move(work->batch), std::nullopt, work->next, work->marks});
  }
}

void PipelineGraph::deliver(Delivery delivery) {
  const bool batch = delivery.kind == Delivery::Kind::kBatch;
  const uint64_t start_ns = now_ns();
  if (batch) {
    // Before the push: Note [occupancy].
    trace_count(Trace::Counter::kReady, run_.ready.change(+1, start_ns), "event-wait thread");
    delivery.marks.delivered = start_ns;
  }
  // Never waits while Note [tokens] holds; close() wakes it at shutdown regardless. Handing over
  // (waking the consumer) is work; only a push that found the queue full was blocked.
  QueueStatus status = ready_.try_push(std::move(delivery));  // a refused push leaves `delivery` as it was
  const bool full = status == QueueStatus::kTimeout;
  if (full) status = ready_.push(std::move(delivery));
  const uint64_t end_ns = now_ns();
  RunCounters::StageCounter& counter = run_.stages[kEventWait];
  (full ? counter.blocked_ns : counter.busy_ns).fetch_add(end_ns - start_ns, std::memory_order_relaxed);
  if (batch && status != QueueStatus::kOk) run_.ready.change(-1, end_ns);  // shutting down: not traced
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
  const bool waits = ready_.size() == 0;
  if (waits && !resumed_wait_.exchange(false, std::memory_order_relaxed)) {
    run_.consumer_waits.fetch_add(1, std::memory_order_relaxed);
  }
  const uint64_t start_ns = now_ns();
  QueueStatus status;
  {
    std::optional<ProfilerRange> range;
    if (waits) {
      range.emplace(span_names_[kWaitSpan].c_str(), torch_names_[kWaitSpan].c_str(),
                    run_.delivered_batches.load(std::memory_order_relaxed));
    }
    status =
        ready_.pop(delivery, timeout < std::chrono::microseconds::zero() ? BoundedQueue<Delivery>::kForever : timeout);
  }
  const uint64_t popped_ns = now_ns();
  run_.consumer_wait_ns.fetch_add(popped_ns - start_ns, std::memory_order_relaxed);
  if (trace_ && waits) {  // every wait, those that timed out too: the report's consumer_wait_seconds
    const bool batch = status == QueueStatus::kOk && delivery.kind == Delivery::Kind::kBatch;
    trace_span(kWaitSpan, start_ns, popped_ns, batch ? delivery.batch.epoch() : 0,
               batch ? delivery.batch.index() : run_.delivered_batches.load(std::memory_order_relaxed), 0, "consumer");
  }
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
      trace_count(Trace::Counter::kReady, run_.ready.change(-1, popped_ns), "consumer");
      run_.add_batch_path(delivery.marks, popped_ns);
      try {
        delivery.batch.ready_on_current_stream();  // the consumer's stream, on the consumer's thread
      } catch (...) {
        // The batch cannot be handed over; skipping it would break the order, so the run ends here.
        std::lock_guard lock(consumer_mutex_);
        sticky_error_ = error_from(std::current_exception(),
                                   ErrorContext{"consumer", {}, delivery.batch.epoch(), delivery.batch.index()});
        ready_.close();
        throw *sticky_error_;
      }
      const uint64_t returned_ns = now_ns();
      // Before the token returns and planning resumes.
      trace_count(Trace::Counter::kTokens, run_.in_flight.change(-1, returned_ns), "consumer");
      nodes_->tokens.decrementer().try_put(tbb::flow::continue_msg());
      outcome.batch = true;
      {
        std::lock_guard lock(consumer_mutex_);
        last_delivered_ =
            Delivered{delivery.batch.sequence(), delivery.batch.epoch(), delivery.batch.index(), delivery.next};
      }
      if (run_.first_batch_samples.load(std::memory_order_relaxed) == 0) {
        // One consumer thread wins; its samples are stored before its time, so that a snapshot that
        // sees the time (acquire) sees them too.
        uint64_t none = 0;
        const uint64_t samples = std::max<uint64_t>(1, delivery.batch.batch_size());
        if (run_.first_batch_samples.compare_exchange_strong(none, samples, std::memory_order_acq_rel)) {
          run_.first_batch_ns.store(std::max<uint64_t>(1, now_ns()), std::memory_order_release);
        }
      }
      run_.delivered_batches.fetch_add(1, std::memory_order_relaxed);
      run_.delivered_samples.fetch_add(delivery.batch.batch_size(), std::memory_order_relaxed);
      run_.delivered_bytes.fetch_add(delivery.batch.nbytes(), std::memory_order_relaxed);
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

PipelineStats PipelineGraph::stats() const {
  PipelineStats stats =
      run_.snapshot(RunCounters::Setting{run_ns(),
                                         device_,
                                         decode_threads_,
                                         prefetch_,
                                         {stages_.decode->name(), stages_.collate->name(), stages_.pack->name(),
                                          stages_.h2d->name(), stages_.event_wait->name()},
                                         stages_.pool.get()});
  if (stages_.cache) stats.cache = stages_.cache->stats();
  stats.decode_threads_shared_by = decode_threads_shared_by_;
  stats.gpu_decode = stages_.decode->gpu_stats();
  stats.user_code = stages_.decode->user_code();
  stats.source_parts = stages_.decode->source_parts();
  stats.remote = stages_.decode->remote_data();
  if (stages_.decode->gpu_share() == SampleStage::GpuShare::kAuto) {
    const AutoDecodeChoice::Outcome outcome = auto_choice_.outcome();
    stats.gpu_decode.auto_choice = AutoDecodeChoice::phase_name(outcome.phase);
    stats.gpu_decode.auto_cpu_images_per_second = outcome.cpu_images_per_second;
    stats.gpu_decode.auto_gpu_images_per_second = outcome.gpu_images_per_second;
  }
  stats.gpu_decode.gpu_group_seconds = static_cast<double>(gpu_group_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return stats;
}

void PipelineGraph::cache_to(int device) {
  if (!stages_.cache) throw Error("cache_to: this pipeline has no dataset cache (cache.memory is off)");
  stages_.cache->move_to(device);
}

}  // namespace ferry::detail
