// Data-distribution-aware strategy proposal (method.md 2.4): from a dataset's length
// histogram, a profile and the cluster size, the candidate heterogeneous strategies a run
// chooses from every step (one per longest-document bin, duplicates dropped, plus the
// homogeneous optimizer layout as a fallback), in the form `hydraulis plan` reads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "hydraulis/base/enum_names.h"
#include "hydraulis/propose/histogram.h"
#include "hydraulis/propose/proposal_dp.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

// When the proposal may use context-parallel (cp > 1) schemes of the profile.
enum class CpSchemes {
  kWhenNeeded,  // only when the histogram's longest document exceeds every usable cp = 1
                // scheme's capacity (docs/propose.md)
  kAlways,      // whenever the profile has them
  kNever,
};
// "needed", "always", "never".
inline constexpr EnumNames<CpSchemes, 3> kCpSchemesNames = {{{CpSchemes::kWhenNeeded, "needed"},
                                                             {CpSchemes::kAlways, "always"},
                                                             {CpSchemes::kNever, "never"}}};

struct ProposeOptions {
  // Cluster size N (GPUs, >= 1).
  int gpus = 0;
  // Context length (tokens, >= 1): documents are truncated to it. Must not exceed the
  // largest capacity of a usable scheme.
  std::int64_t max_len = 32'768;
  // Histogram bin width R (tokens, >= 1): finer bins cost time (the DP is quadratic in the
  // number of bins) and buy finer interval boundaries.
  std::int64_t resolution_tokens = 128;
  // Where optimizer states live; it fixes every scheme's capacity and the fallback
  // strategy. Unset: DefaultOptimizerLayout(profile, gpus).
  std::optional<OptimizerLayout> optimizer_layout;
  // Tokens of one global batch (>= 0). > 0 scales the histogram to the expected documents
  // of one batch of this many tokens, so the per-micro-batch and pipeline warm-up terms
  // weigh what they weigh in a step, and the longest-document bin holds one whole
  // document (docs/propose.md). 0 plans for the whole histogram at once (method.md 2.4
  // read literally), which lets the warm-up vanish and favours deep pipelines.
  std::int64_t tokens_per_batch = 200'000;
  // Keep at most this many DP strategies (>= 0; 0 keeps all): the one for the longest
  // bin (so every document up to max_len stays plannable), then those with the largest
  // batch_share. The fallback is kept in addition.
  int max_strategies = 0;
  // Besides one strategy per bin that holds a batch's longest document, one per bin that
  // holds its k longest, for k = 2..top_documents (>= 1; 1: the longest only). The
  // expected histogram of one batch has fractions of a long document; a batch that draws
  // two long ones needs two pipelines that hold them (docs/propose.md). Capped at the
  // expected documents of one batch, ceil(tokens_per_batch / mean length) (1 when
  // tokens_per_batch is 0): a batch has no k-th longest document beyond them. At most
  // kMaxTopDocuments (each k costs a pass over every bin; what a batch of a few long
  // documents needs is a handful).
  static constexpr int kMaxTopDocuments = 10'000;
  int top_documents = 1;
  // Whether cp > 1 schemes of the profile take part.
  CpSchemes cp_schemes = CpSchemes::kWhenNeeded;
  // Called after each k of 1..Proposal::top_documents with (k, that count), for a
  // progress display; may be empty.
  std::function<void(int done, int total)> progress;
};

struct ProposedStrategy {
  Strategy strategy;
  // The homogeneous optimizer-layout strategy (also when the DP proposed it too).
  bool fallback = false;
  // Every GPU in identical pipelines of one cp scheme (Megatron's shape), proposed beside
  // the DP's answers when cp schemes take part (docs/propose.md, "cp pools").
  bool cp_pool = false;
  // Longest document (tokens) of every bin this strategy was the DP's answer for,
  // ascending; empty for a fallback the DP never proposed.
  std::vector<std::int64_t> longest_tokens;
  // The same for the bins it was the answer for with k >= 2 documents in them
  // (ProposeOptions::top_documents), ascending.
  std::vector<std::int64_t> shared_top_tokens;
  // The k of its first answer (1: a batch's longest document).
  int top_documents = 1;
  // DP makespan (ms, at the DpOptions scale) for the largest of those bins; 0 if none.
  double estimated_ms = 0;
  // Probability that a batch's longest document lies in one of those bins, for batches
  // of tokens_per_batch / mean length independent documents (0 tokens_per_batch: one),
  // plus, for each k >= 2 answer, that its k-th longest does: the weight by which
  // max_strategies ranks strategies.
  double batch_share = 0;
};

struct Proposal {
  // Ready for CandidatesToJson: the fallback first, then the DP's strategies by decreasing
  // longest document served. Every strategy uses at most `gpus` GPUs, schemes from the
  // profile whose tp*cp divides `gpus`, and its widest-capacity pipeline holds the
  // longest document of every bin it was proposed for.
  CandidateSet candidates;
  std::vector<ProposedStrategy> strategies;  // parallel to candidates.strategies
  std::vector<DpScheme> schemes;             // the schemes the DP could use
  int bins = 0;                              // non-empty histogram bins
  int gpu_step = 1;                          // G, the DP's GPU granularity
  int top_documents = 1;                     // ProposeOptions::top_documents after its cap
  std::int64_t evaluations = 0;              // group-time evaluations of the DP table
  double dp_seconds = 0;                     // wall-clock of the DP and trace-backs
};

// The homogeneous optimizer layout used when none is given: over every profiled scheme
// with cp = 1 whose tp*pp divides `gpus` (layout (gpus/(tp*pp), tp, pp)), the one whose own
// scheme has the largest capacity under it; ties go to the smaller tp*pp (then the smaller
// tp). InvalidInput naming gpus when no such layout fits the model in memory.
OptimizerLayout DefaultOptimizerLayout(const Profile& profile, int gpus);

// The profiled schemes a strategy on `gpus` GPUs may use: cp*tp*pp <= gpus, tp*cp
// dividing gpus, and a capacity of at least one token under `layout`. InvalidInput
// naming gpus when none is left.
std::vector<DpScheme> UsableSchemes(const Profile& profile, int gpus,
                                    const OptimizerLayout& layout);

// Builds the histogram of `lengths` (ProposeOptions::max_len, resolution_tokens) and
// proposes from it. InvalidInput naming the value on bad options or data.
// Whether the profile's cp > 1 schemes take part in a proposal under `rule`
// (ProposeOptions::cp_schemes) over `schemes` (UsableSchemes) for a longest document of
// `longest` tokens (after max_len): kAlways, or kWhenNeeded and `longest` exceeds every cp = 1
// scheme's capacity. This is the long-context regime, where `propose` keeps fewer strategies
// by planning sample batches (docs/propose.md).
bool CpSchemesTakePart(const std::vector<DpScheme>& schemes, std::int64_t longest, CpSchemes rule);

Proposal ProposeStrategies(const Profile& profile, std::span<const std::int64_t> lengths,
                           const ProposeOptions& options);

// Proposes from a prepared histogram; options.max_len and resolution_tokens are taken
// from the histogram.
Proposal ProposeFromHistogram(const Profile& profile, const LengthHistogram& histogram,
                              const ProposeOptions& options);

}  // namespace hydraulis
