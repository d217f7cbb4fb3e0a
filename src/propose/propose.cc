#include "hydraulis/propose/propose.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/cost/capacity.h"

namespace hydraulis {
namespace {

std::string LayoutName(const OptimizerLayout& l) {
  return std::to_string(l.dp) + "," + std::to_string(l.tp) + "," + std::to_string(l.pp);
}

// The order ParseCandidates keeps pipelines in: widest first, ties by scheme descending.
void Canonicalize(std::vector<Scheme>& pipelines) {
  std::sort(pipelines.begin(), pipelines.end(), [](const Scheme& a, const Scheme& b) {
    if (a.Gpus() != b.Gpus()) return a.Gpus() > b.Gpus();
    return b < a;
  });
}

void CheckOptions(const ProposeOptions& o) {
  if (o.gpus < 1) throw InvalidInput("gpus: must be >= 1, got " + std::to_string(o.gpus));
  if (o.tokens_per_batch < 0) {
    throw InvalidInput("tokens-per-batch: must be >= 0, got " + std::to_string(o.tokens_per_batch));
  }
  if (o.top_documents < 1 || o.top_documents > ProposeOptions::kMaxTopDocuments) {
    throw InvalidInput("top-documents: must be from 1 to " +
                       std::to_string(ProposeOptions::kMaxTopDocuments) + ", got " +
                       std::to_string(o.top_documents));
  }
  if (o.max_strategies < 0) {
    throw InvalidInput("max-strategies: must be >= 0, got " + std::to_string(o.max_strategies));
  }
}

void CheckLayout(const Profile& profile, const OptimizerLayout& l, int gpus) {
  if (l.dp < 1 || l.tp < 1 || l.pp < 1) {
    throw InvalidInput("optimizer-layout " + LayoutName(l) + ": every degree must be >= 1");
  }
  const std::int64_t product = std::int64_t{l.dp} * l.tp * l.pp;
  if (product != gpus) {
    throw InvalidInput("optimizer-layout " + LayoutName(l) + ": dp*tp*pp = " +
                       std::to_string(product) + " must equal gpus = " + std::to_string(gpus));
  }
  // The fallback strategy runs the layout's own scheme, so it must be profiled.
  const Scheme scheme{1, l.tp, l.pp};
  if (!profile.Find(scheme)) {
    throw InvalidInput("optimizer-layout " + LayoutName(l) + ": scheme " + SchemeName(scheme) +
                       " has no fitted entry in the profile");
  }
}

// n, the expected documents of one batch of tokens_per_batch tokens (1 when 0).
double BatchDocuments(const LengthHistogram& h, std::int64_t tokens_per_batch) {
  if (tokens_per_batch <= 0) return 1.0;
  return std::max(1.0, static_cast<double>(tokens_per_batch) * static_cast<double>(h.documents) /
                           static_cast<double>(h.tokens));
}

// P(the k-th longest of n documents lies in bin b) = P_k(b) - P_k(b-1), with
// P_k(x) = sum_{i<k} C(n, i) (1 - F(x))^i F(x)^(n-i) the chance that fewer than k lie above
// x, F the histogram's cumulative document share and n = tokens_per_batch / mean length
// (1 when 0). k = 1: the longest, F(b)^n - F(b-1)^n. Next() adds the sum's next term at
// every bin boundary, so k = 1..K costs O(K * bins), not O(K^2 * bins).
class KthLongestBinShares {
 public:
  KthLongestBinShares(const LengthHistogram& h, std::int64_t tokens_per_batch)
      : n_(BatchDocuments(h, tokens_per_batch)) {
    const double documents = static_cast<double>(h.documents);
    std::int64_t below = 0;
    boundaries_.push_back({0.0});
    for (const HistogramBin& b : h.bins) {
      below += b.documents;
      boundaries_.push_back({static_cast<double>(below) / documents});
    }
  }

  // The shares per bin for k = 1, 2, ... on successive calls.
  std::vector<double> Next() {
    // Term i of the sum is C(n, i) (1 - F)^i F^(n - i): F^n for i = 0; from i = 1 in logs
    // (lgamma for the real n), as C(n, i) overflows a double for a batch of a few thousand
    // documents while the term itself is tiny. i < n: --top-documents is capped at ceil(n).
    const double i = i_;
    const double log_binomial =
        i_ == 0 ? 0.0 : std::lgamma(n_ + 1) - std::lgamma(i + 1) - std::lgamma(n_ - i + 1);
    for (Boundary& x : boundaries_) {
      if (i_ == 0) {
        x.fewer_than_k_above += std::pow(x.below, n_);
      } else if (n_ - i > 0) {
        x.fewer_than_k_above +=
            std::exp(log_binomial + i * std::log1p(-x.below) + (n_ - i) * std::log(x.below));
      }
    }
    ++i_;
    std::vector<double> share;
    for (std::size_t b = 1; b < boundaries_.size(); ++b) {
      share.push_back(boundaries_[b].fewer_than_k_above - boundaries_[b - 1].fewer_than_k_above);
    }
    return share;
  }

 private:
  struct Boundary {
    double below;  // F at the boundary
    double fewer_than_k_above = 0;
  };
  double n_;
  int i_ = 0;
  std::vector<Boundary> boundaries_;
};

}  // namespace

OptimizerLayout DefaultOptimizerLayout(const Profile& profile, int gpus) {
  if (gpus < 1) throw InvalidInput("gpus: must be >= 1, got " + std::to_string(gpus));
  OptimizerLayout best;
  std::int64_t best_capacity = 0;
  for (const SchemeProfile& sp : profile.schemes) {
    const Scheme& s = sp.scheme;
    const int per_replica = s.tp * s.pp;
    if (s.cp != 1 || per_replica > gpus || gpus % per_replica != 0) continue;
    const OptimizerLayout layout{gpus / per_replica, s.tp, s.pp};
    const std::int64_t capacity = CapacityTokens(profile, s, layout);
    const int best_replica = best.tp * best.pp;
    if (capacity > best_capacity ||
        (capacity == best_capacity && capacity > 0 &&
         (per_replica < best_replica || (per_replica == best_replica && s.tp < best.tp)))) {
      best = layout;
      best_capacity = capacity;
    }
  }
  if (best_capacity == 0) {
    throw InvalidInput("gpus " + std::to_string(gpus) +
                       ": no profiled scheme with cp = 1 and tp*pp dividing it fits the model "
                       "in memory as a homogeneous optimizer layout; give the optimizer layout");
  }
  return best;
}

std::vector<DpScheme> UsableSchemes(const Profile& profile, int gpus,
                                    const OptimizerLayout& layout) {
  std::vector<DpScheme> out;
  bool any_tiles = false;
  for (const SchemeProfile& sp : profile.schemes) {
    const Scheme& s = sp.scheme;
    // Tensor/context groups must tile the cluster (the rule ParseCandidates applies).
    if (s.Gpus() > gpus || gpus % (s.tp * s.cp) != 0) continue;
    any_tiles = true;
    const std::int64_t capacity = CapacityTokens(profile, s, layout);
    if (capacity < 1) continue;
    const ShardCost shard = MakeShardCost(profile, sp, capacity);
    out.push_back({s, shard.Balanced(), capacity, shard});
  }
  if (!any_tiles) {
    const std::string n = std::to_string(gpus);
    throw InvalidInput("gpus " + n + ": no profiled scheme fits: each needs more GPUs or has " +
                       "a tp*cp that does not divide " + n);
  }
  if (out.empty()) {
    throw InvalidInput("gpus " + std::to_string(gpus) +
                       ": no profiled scheme fits the model in memory with optimizer layout " +
                       LayoutName(layout));
  }
  return out;
}

bool CpSchemesTakePart(const std::vector<DpScheme>& schemes, std::int64_t longest, CpSchemes rule) {
  if (rule == CpSchemes::kNever) return false;
  if (rule == CpSchemes::kAlways) return true;
  std::int64_t cp1_capacity = 0;
  for (const DpScheme& s : schemes) {
    if (s.scheme.cp == 1) cp1_capacity = std::max(cp1_capacity, s.capacity_tokens);
  }
  return longest > cp1_capacity;
}

namespace {

// The schemes the DP may use: the usable ones, without cp schemes when they take no part;
// refuses a resolution or a max_len that no scheme can hold.
std::vector<DpScheme> ProposalSchemes(const Profile& profile, const LengthHistogram& histogram,
                                      const ProposeOptions& options,
                                      const OptimizerLayout& layout) {
  const int gpus = options.gpus;
  std::vector<DpScheme> schemes = UsableSchemes(profile, gpus, layout);
  // cp schemes shard long documents; when every document fits a cp = 1 scheme they are
  // left out unless asked for, so such distributions keep the proposals they had without.
  if (!CpSchemesTakePart(schemes, histogram.bins.back().longest, options.cp_schemes)) {
    std::erase_if(schemes, [](const DpScheme& s) { return s.scheme.cp > 1; });
  }
  if (schemes.empty()) {
    throw InvalidInput("gpus " + std::to_string(gpus) +
                       ": no usable scheme with cp = 1 (cp schemes were left out)");
  }
  std::int64_t max_capacity = 0;
  for (const DpScheme& s : schemes) max_capacity = std::max(max_capacity, s.capacity_tokens);
  const std::string capacity_note = " (largest capacity " + std::to_string(max_capacity) +
                                    " tokens, optimizer layout " + LayoutName(layout) + ")";
  if (max_capacity < std::min(histogram.resolution_tokens, histogram.max_len)) {
    throw InvalidInput("resolution " + std::to_string(histogram.resolution_tokens) +
                       ": no scheme can hold even one bin of it" + capacity_note);
  }
  // Documents are truncated to max_len first; a context no scheme can hold is an error
  // rather than a silent second truncation.
  if (histogram.max_len > max_capacity) {
    throw InvalidInput("max-len " + std::to_string(histogram.max_len) +
                       ": longer than every scheme's capacity" + capacity_note);
  }
  return schemes;
}

ProposedStrategy FallbackStrategy(const OptimizerLayout& layout) {
  ProposedStrategy fallback;
  fallback.fallback = true;
  fallback.strategy.name = "homogeneous";
  fallback.strategy.pipelines.assign(static_cast<std::size_t>(layout.dp),
                                     Scheme{1, layout.tp, layout.pp});
  return fallback;
}

// One DP answer per longest-document bin in decreasing order of that bin; then, for
// k = 2..top_documents, one per bin that holds the k longest. An answer equal to an
// earlier strategy joins it.
void AddDpAnswers(const ProposalDp& dp, const LengthHistogram& histogram,
                  const std::vector<DpScheme>& schemes, int top_documents,
                  const ProposeOptions& options, std::vector<ProposedStrategy>& found) {
  KthLongestBinShares shares(histogram, options.tokens_per_batch);
  for (int k = 1; k <= top_documents; ++k) {
    const std::vector<double> share = shares.Next();
    for (int bin = dp.bin_count() - 1; bin >= 0; --bin) {
      const DpSolution solution = dp.SolveForLongest(bin, k);
      if (solution.groups.empty()) {
        throw InternalError("proposal: no strategy holds bin " + std::to_string(bin));
      }
      Strategy strategy;
      for (const DpGroup& g : solution.groups) {
        strategy.pipelines.insert(strategy.pipelines.end(), static_cast<std::size_t>(g.replicas),
                                  schemes[static_cast<std::size_t>(g.scheme)].scheme);
      }
      Canonicalize(strategy.pipelines);
      auto same = std::find_if(found.begin(), found.end(), [&](const ProposedStrategy& p) {
        return p.strategy.pipelines == strategy.pipelines;
      });
      const std::int64_t longest = histogram.bins[static_cast<std::size_t>(bin)].longest;
      if (same == found.end()) {
        same = found.insert(found.end(), ProposedStrategy{});
        same->strategy = std::move(strategy);
        same->top_documents = k;
        // Named after its first answer: every (k, bin) answers once and distinct bins have
        // distinct longest documents, so names are unique by construction.
        same->strategy.name =
            "up-to-" + std::to_string(longest) + (k == 1 ? "" : "-x" + std::to_string(k));
      }
      if (same->longest_tokens.empty() && same->shared_top_tokens.empty()) {
        same->estimated_ms = solution.makespan_ms;
      }
      (k == 1 ? same->longest_tokens : same->shared_top_tokens).push_back(longest);
      same->batch_share += share[static_cast<std::size_t>(bin)];
    }
    if (options.progress) options.progress(k, top_documents);
  }
}

// Megatron's shape beside the DP's answers: every GPU in identical pipelines of one cp
// scheme that holds the longest document. The DP plans for an expected batch; a batch
// that draws many long documents is served best by pools that shard them all, and
// these keep that layout among the strategies a selection or a run can choose.
void AddCpPools(const std::vector<DpScheme>& schemes, std::int64_t longest_document, int gpus,
                std::vector<ProposedStrategy>& found) {
  for (const DpScheme& s : schemes) {
    if (s.scheme.cp < 2 || gpus % s.scheme.Gpus() != 0 || s.capacity_tokens < longest_document) {
      continue;
    }
    std::vector<Scheme> pipelines(static_cast<std::size_t>(gpus / s.scheme.Gpus()), s.scheme);
    if (std::any_of(found.begin(), found.end(),
                    [&](const ProposedStrategy& p) { return p.strategy.pipelines == pipelines; })) {
      continue;
    }
    ProposedStrategy& pool = found.emplace_back();
    pool.cp_pool = true;
    pool.strategy.pipelines = std::move(pipelines);
    pool.strategy.name = "pool-cp" + std::to_string(s.scheme.cp) + "-tp" +
                         std::to_string(s.scheme.tp) +
                         (s.scheme.pp > 1 ? "-pp" + std::to_string(s.scheme.pp) : "");
  }
}

// Indices into `found` of the strategies kept, ascending. found[1] (or found[0] when the
// DP proposed the fallback for the longest bin) serves the longest bin and is always kept;
// the other DP strategies are ranked by share (stable: ties keep the longer-document
// strategy).
std::vector<std::size_t> KeptStrategies(const std::vector<ProposedStrategy>& found,
                                        std::int64_t longest_document, int max_strategies) {
  std::vector<std::size_t> ranked;
  for (std::size_t i = 1; i < found.size(); ++i) ranked.push_back(i);
  if (max_strategies > 0 && static_cast<int>(ranked.size()) > max_strategies) {
    const bool longest_is_fallback =
        !found[0].longest_tokens.empty() && found[0].longest_tokens.front() == longest_document;
    const auto first = ranked.begin() + (longest_is_fallback ? 0 : 1);
    std::stable_sort(first, ranked.end(), [&](std::size_t a, std::size_t b) {
      return found[a].batch_share > found[b].batch_share;
    });
    ranked.resize(static_cast<std::size_t>(max_strategies));
    std::sort(ranked.begin(), ranked.end());
  }
  ranked.insert(ranked.begin(), 0);
  return ranked;
}

}  // namespace

Proposal ProposeStrategies(const Profile& profile, std::span<const std::int64_t> lengths,
                           const ProposeOptions& options) {
  CheckOptions(options);
  return ProposeFromHistogram(
      profile, BuildLengthHistogram(lengths, options.max_len, options.resolution_tokens), options);
}

Proposal ProposeFromHistogram(const Profile& profile, const LengthHistogram& histogram,
                              const ProposeOptions& options) {
  CheckOptions(options);
  const int gpus = options.gpus;
  if (histogram.bins.empty()) throw InvalidInput("lengths: the dataset has no documents");
  const OptimizerLayout layout =
      options.optimizer_layout ? *options.optimizer_layout : DefaultOptimizerLayout(profile, gpus);
  CheckLayout(profile, layout, gpus);

  Proposal out;
  out.schemes = ProposalSchemes(profile, histogram, options, layout);
  DpOptions dp_options;
  if (options.tokens_per_batch > 0) {
    dp_options.document_scale =
        static_cast<double>(options.tokens_per_batch) / static_cast<double>(histogram.tokens);
  }
  const auto start = std::chrono::steady_clock::now();
  const ProposalDp dp(out.schemes, histogram, gpus, dp_options);

  // The fallback first, then the DP's answers, then the cp pools.
  std::vector<ProposedStrategy> found{FallbackStrategy(layout)};
  const double batch_documents = std::ceil(BatchDocuments(histogram, options.tokens_per_batch));
  out.top_documents = batch_documents < options.top_documents ? static_cast<int>(batch_documents)
                                                              : options.top_documents;
  AddDpAnswers(dp, histogram, out.schemes, out.top_documents, options, found);
  const std::int64_t longest_document = histogram.bins.back().longest;
  AddCpPools(out.schemes, longest_document, gpus, found);
  out.dp_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.bins = dp.bin_count();
  out.gpu_step = dp.gpu_step();
  out.evaluations = dp.evaluations();

  for (std::size_t i : KeptStrategies(found, longest_document, options.max_strategies)) {
    ProposedStrategy& p = found[i];
    std::sort(p.longest_tokens.begin(), p.longest_tokens.end());
    std::sort(p.shared_top_tokens.begin(), p.shared_top_tokens.end());
    out.strategies.push_back(std::move(p));
  }

  out.candidates.gpus = gpus;
  out.candidates.optimizer_layout = layout;
  for (const ProposedStrategy& p : out.strategies) out.candidates.strategies.push_back(p.strategy);
  return out;
}

}  // namespace hydraulis
