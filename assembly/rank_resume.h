#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "ferry/assembly/config.h"
#include "ferry/io/samplers/sharded_sampler.h"
#include "ferry/pipeline/engine_options.h"
#include "ferry/pipeline/pipeline_state.h"

// Resuming a state on another number of ranks (Note [resuming on other ranks] in rank_resume.cpp).
// Internal to the assembly, not installed.

namespace ferry {

/// Keys of a state's order that may differ from the resuming run's: which rank saved it, among how many.
/// (sampler.remainder too where one side has a single rank, which records none.)
bool rank_order_key(const std::string& key);

/// A saved state moved to the ranks of the run that resumes it.
struct RankResume {
  PipelineState state;                            // next, next_batch and consumed in this run's terms
  std::optional<ShardedSampler::Resume> sampler;  // where this rank's sampler deals the rest of the epoch
};

/// The sampler of make_sampler() (config.h), dealing the rest of `resume`'s epoch to this rank. Not
/// for mixtures.
std::shared_ptr<const Sampler> make_resumed_sampler(const SamplerConfig& sampler, const Placement& placement,
                                                    const Source& source, const ShardedSampler::Resume& resume);

/// How a run with `options` at `placement` over `source` resumes `saved`, which any rank of a run over
/// the same data in the same order saved (its rank, world size and remainder aside). First checks the
/// state against the run that saved it (check_resume_state()). nullopt: as saved, bit for bit (the
/// same number of ranks, at the position every rank reaches together). Throws ConfigError naming the
/// state's key (or the config's sampler.world_size: a mixture resumes on the same number of ranks
/// only) for a state it cannot place.
std::optional<RankResume> resume_on_ranks(const PipelineState& saved, const Config& config,
                                          const EngineOptions& options, const Placement& placement,
                                          const Source& source);

}  // namespace ferry
