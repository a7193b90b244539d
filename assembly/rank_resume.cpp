#include "ferry/assembly/rank_resume.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "ferry/assembly/config_error.h"
#include "ferry/assembly/pipeline_state_loader.h"
#include "ferry/io/formats/mixture_source.h"

namespace ferry {

// Note [resuming on other ranks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// W ranks deal an epoch's order round-robin (ShardedSampler): rank r takes positions r, r + W, ...,
// and every rank stands at the same position p of its share (batches keep their size; under
// on_error: skip several ranks replace samples rather than drop them). Together they have taken the
// first g = p x W samples of the order (at most n), which each state records as next.consumed, so
// any rank's state says where all of them are.
//
// W' ranks resuming deal the rest, R = n - g samples, round-robin from g: rank r' takes g + r',
// g + r' + W', ..., m = ceil(R / W') of them under remainder: pad (the last round wraps to the
// epoch's first samples, as a padded epoch does), floor(R / W') under drop. So that every rank
// delivers the same number of batches and the epoch ends where a fresh one would, the rest fills
// the end of this rank's epoch of E' positions: E' - m .. E' - 1, and the batches before them count
// as delivered. Under drop_last only whole batches are kept, so the rest starts at a batch boundary,
// and its last m mod batch_size samples are dropped as a last, smaller batch is. Later epochs are
// dealt as usual among W'.
//
// On the same W at the usual position g = p x W, so E' - m = p and the mapping is ShardedSampler's
// own: such a state resumes as saved, bit for bit. A resumed run records g too, so it can be resumed
// again on yet another number of ranks. A mixture deals its parts' streams in rounds of its own
// (Note [mixture order]) and resumes on the number of ranks that saved it only.

bool rank_order_key(const std::string& key) { return key == "sampler.rank" || key == "sampler.world_size"; }

namespace {

uint64_t product(uint64_t a, uint64_t b) { return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b; }

// ceil(a / b) without a + b - 1, which overflows near 2^64.
uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Where a rank of `world` starts the rest of an epoch of `samples` of which all ranks together took
// `consumed` (< samples): the batch and the position in its share, and the batches of a whole epoch.
struct Placed {
  uint64_t index = 0;
  uint64_t position = 0;
  uint64_t per_epoch = 0;
};

Placed place(uint64_t samples, uint64_t consumed, uint64_t world, bool drop_remainder, const EngineOptions& options) {
  const uint64_t batch = std::max<uint64_t>(options.batch_size, 1);
  const uint64_t share = drop_remainder ? samples / world : ceil_div(samples, world);
  const uint64_t left = samples - consumed;
  const uint64_t mine = drop_remainder ? left / world : ceil_div(left, world);  // <= share
  Placed placed;
  placed.per_epoch = options.drop_last ? share / batch : ceil_div(share, batch);
  if (options.drop_last && !options.refills()) {
    placed.index = placed.per_epoch - mine / batch;
    placed.position = placed.index * batch;
  } else {
    // Under refill (one rank, on_error: skip) the planner plans the whole epoch and collate cuts; a batch
    // then starts no earlier than index x batch_size.
    placed.position = share - mine;
    placed.index =
        std::min(placed.per_epoch - std::min(placed.per_epoch, ceil_div(mine, batch)), placed.position / batch);
  }
  return placed;
}

}  // namespace

std::optional<RankResume> resume_on_ranks(const PipelineState& saved, const Config& config,
                                          const EngineOptions& options, const Placement& placement,
                                          const Source& source) {
  const std::string origin = saved.origin.empty() ? "the saved state" : saved.origin;
  const auto refuse = [&](const std::string& key, const std::string& message) {
    throw ConfigError({{origin, key, message}});
  };
  const auto text = [](uint64_t value) { return std::to_string(value); };

  uint64_t saved_world = 1;  // states of one rank may not record it
  if (const auto written = saved.order.find("sampler.world_size"); written != saved.order.end()) {
    const std::string& value = written->second;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), saved_world);
    if (error != std::errc() || end != value.data() + value.size() || saved_world == 0) {
      refuse("order.sampler.world_size", "expected a number of ranks, found '" + value + "'");
    }
  }
  const uint64_t world = placement.world_size;
  const bool mixture = dynamic_cast<const MixtureSource*>(&source) != nullptr;
  if (mixture && saved_world != world) {
    throw ConfigError(
        {{config.where("sampler.world_size"), "sampler.world_size",
          "the saved state comes from " + text(saved_world) + " rank" + (saved_world == 1 ? "" : "s") +
              " and this run has " + text(world) + ": a mixture resumes on the number of ranks that saved it"}});
  }
  // Checked as the run that saved it would have it: its ranks' share of an epoch, and whether its
  // batches refilled after skips (one rank) or replaced skipped samples (several).
  Placement saved_placement;
  saved_placement.world_size = saved_world;
  EngineOptions saved_options = options;
  saved_options.skip_replaces = saved_world > 1;
  check_resume_state(saved, saved_options, *make_sampler(config.sampler, saved_placement, source));
  const uint64_t samples = make_sampler(config.sampler, Placement{}, source)->epoch_size();
  if (!saved.next) {
    if (saved_world == world) return std::nullopt;
    refuse("next", "is missing: a state without its position resumes on the " + text(saved_world) +
                       " ranks that saved it only, and this run has " + text(world));
  }
  const BatchCursor& at = *saved.next;
  const uint64_t usual = std::min(samples, product(at.position, saved_world));
  const uint64_t consumed = saved.consumed.value_or(usual);
  if (consumed > samples) {
    refuse("next.consumed", text(consumed) + " is past the " + text(samples) + " samples of an epoch");
  }
  if (consumed != usual && saved_options.refills()) {
    // One rank refilling batches after skips stands at the position all ranks (it alone) took.
    refuse("next.consumed", text(consumed) + " does not fit next.position " + text(at.position) +
                                ": a state of one rank under on_error: skip has them equal");
  }
  if (consumed != usual && !saved_options.refills() && at.epoch < options.epochs) {
    // A run resumed on other ranks stands where the rest of the epoch fills the end of each rank's share
    // (below, in the saved run's terms): its position follows from next.consumed.
    const Placed placed = place(samples, consumed, saved_world, config.sampler.drop_remainder, saved_options);
    if (at.position != placed.position || at.index != placed.index) {
      refuse("next.position", text(at.position) + " does not fit next.batch " + text(at.index) + " and next.consumed " +
                                  text(consumed) + ": on " + text(saved_world) + " rank" +
                                  (saved_world == 1 ? "" : "s") + " the rest of the epoch starts at batch " +
                                  text(placed.index) + ", position " + text(placed.position));
    }
  }
  if (saved_world == world && consumed == usual) return std::nullopt;
  if (mixture) {
    refuse("next.consumed", text(consumed) + " is not where the mixture's ranks stand (" + text(usual) + ")");
  }

  RankResume out;
  out.state = saved;
  out.state.last_epoch.reset();  // a batch of the saved ranks, not of these
  out.state.last_index.reset();
  BatchCursor next{at.epoch, 0, 0};
  const uint64_t per_epoch = place(samples, 0, world, config.sampler.drop_remainder, options).per_epoch;
  if (at.epoch == options.epochs || consumed == samples || consumed == 0) {
    // An epoch's start (or the run's end) is the same place on any number of ranks.
    if (at.epoch < options.epochs && consumed == samples) next.epoch += 1;
    out.state.consumed = 0;
  } else {
    const Placed placed = place(samples, consumed, world, config.sampler.drop_remainder, options);
    next.index = placed.index;
    next.position = placed.position;
    out.sampler = ShardedSampler::Resume{at.epoch, consumed, next.position};
    out.state.consumed = consumed;
  }
  out.state.next = next;
  out.state.next_batch = product(next.epoch, per_epoch) + next.index;
  if (options.max_batches != 0 && out.state.next_batch > options.max_batches) {
    refuse("next_batch", "on " + text(world) + " rank" + (world == 1 ? "" : "s") + " the saved position is batch " +
                             text(out.state.next_batch) + ", past max_batches (" + text(options.max_batches) + ")");
  }
  return out;
}

}  // namespace ferry
