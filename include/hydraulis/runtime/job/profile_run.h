// A profile run (`hydraulis profile`): fits the planner's cost model (method.md 2.1) on this
// engine. For each scheme (tp x pp) it times forward+backward of one pipeline stage on single
// documents and packed micro-batches (stage_profiler.h), fits T(mb) = sum_i (a s_i^2 + b s_i)
// + c by non-negative least squares, and builds a profile in the project's format with the
// engine's analytic memory model (docs/runtime.md, "Profiler"). Schemes with tp > 1 run on
// the ranks of a distributed job (profile_ranks.h). A <cp, 1, 1> scheme is timed on cp ranks
// with every document sharded (ProfileShardedStage) and keeps the <1, 1, 1> fit's a, b, c,
// fitting only kv_ms_per_token (FitShardedTimeModel).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hydraulis/cost/time_fit.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/compute.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/scheme.h"

namespace hydraulis {

struct ProfileOptions {
  std::string model;  // model config file (LoadModelConfig)
  // Profiled, in this order, distinct: <1, tp, pp>, and <cp, 1, 1> beside <1, 1, 1>.
  std::vector<Scheme> schemes = {Scheme{}};
  // Document lengths (ReadLengths) the packed micro-batches draw from.
  std::string lengths = "data/wikipedia-sample-lengths.txt";
  std::int64_t max_len = 2048;  // longest document and largest micro-batch timed, >= 1
  std::int64_t min_len = 32;    // shortest single document timed, >= 1 (at most max_len)
  int packed = 8;               // packed micro-batches timed besides single documents, >= 0
  int warmup = 1;               // untimed passes first, >= 0
  int repeats = 3;              // timed passes; each sample is their median, >= 1
  // Memory per rank the profile's capacities are computed for, > 0: the A800's 80 GB as the
  // published profiles give it, the GPU the planner plans for.
  std::int64_t memory_bytes = 85198897152;
  std::uint64_t seed = 1;  // model initialisation, token ids and packed lengths
  // Where each rank times its stage (its GPU: LOCAL_RANK) and in which precision; ranks on
  // GPUs form their groups over NCCL. InvalidInput from RunProfile when it cannot run here.
  ComputeOptions compute;
};

// The checks that need no timing, for a caller to make before starting ranks: every scheme
// splits the model (ValidateTensorParallel, ModelPart::Stage), memory_bytes > 0, and every
// scheme holds a micro-batch of kTokenAlignment tokens beside the model states with the
// optimizer sharded over `ranks` ranks (a profile of capacity 0 is useless), and every cp
// scheme has tp 1, pp 1, <1, 1, 1> beside it and cp <= ranks. InvalidInput naming the flag
// (--schemes, --memory-bytes) otherwise.
void CheckProfileOptions(const ProfileOptions& options, int ranks);

// InvalidInput when `fit` of `scheme` does not grow with tokens (a = b = 0: the samples
// were too short or too few to time), naming --max-len and --repeats with their values in
// `options` so the user knows what to change; no profile is written then.
void RequireGrowingFit(const Scheme& scheme, const TimeModel& fit, const ProfileOptions& options);

// What a profile run measured.
struct ProfileRun {
  int rank = 0;  // this process's rank in the run, and the run's ranks
  int world_size = 1;
  // On rank 0 only (empty on the others), in options.schemes' order: the profile, which
  // passed ParseProfile (the planner reads it), each scheme's fit and its samples.
  Profile profile;
  std::vector<TimeFit> fits;
  std::vector<std::vector<TimeSample>> samples;
};

// Called on rank 0 after each scheme: its micro-batches timed and the seconds that took.
using ProfileProgress =
    std::function<void(const Scheme& scheme, std::size_t micro_batches, double seconds)>;

// Profiles every scheme of `options` (CheckProfileOptions first). `distributed` is this
// rank's place in a job of ranks (then a collective: every rank calls it with the same
// options; for each tp the world is cut into blocks of tp ranks that time together, and rank
// 0's block's samples are kept), or nullptr to run as one process, which needs every tp to
// be 1. Sets the process's intra-op threads to 1: the profile describes one rank's compute.
// The times depend on the BLAS threads and memory allocator the process started with
// (docs/runtime.md, "Profiler"). InvalidInput on bad options or files (--lengths); Error when
// a fit does not grow with tokens (a = b = 0: too few repeats or too short documents).
ProfileRun RunProfile(const ProfileOptions& options, const DistributedOptions* distributed,
                      const ProfileProgress& progress = {});

// Rank 0's samples of `run`, each with its fitted time, as JSON: an array with per scheme
// {"tp", "pp", "samples": [{"lengths", "ms", "fitted_ms"}, ...]}.
std::string ProfileSamplesToJson(const ProfileRun& run);

}  // namespace hydraulis
