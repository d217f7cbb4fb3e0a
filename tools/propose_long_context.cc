#include "propose_long_context.h"

#include <fmt/core.h>

#include <algorithm>

#include "hydraulis/propose/long_document_count.h"

namespace hydraulis::tools {
namespace {

// The long-context defaults: with cp schemes taking part, strategies per bin for batches that
// draw up to K2 documents longer than half the longest (K2 what 9 batches in 10 draw, at least 2;
// at most 4, as each k costs a DP answer per bin and the selection plans them all), and 8 kept by
// planning 16 sampled batches with the screening effort and a 2 % prune tolerance, on seed 2 (not
// the seed 1 plan, simulate and train sample by default); docs/benchmarks.md has what they give.
constexpr double kLongDocumentQuantile = 0.9;
constexpr int kLongContextMinTopDocuments = 2;
constexpr int kLongContextMaxTopDocuments = 4;
constexpr int kLongContextMaxStrategies = 8;
constexpr int kLongContextSelectBatches = 16;
constexpr double kLongContextSelectTolerance = 0.02;
constexpr std::uint64_t kLongContextSelectSeed = 2;

}  // namespace

void ApplyLongContextDefaults(const Profile& profile, std::span<const std::int64_t> lengths,
                              const ProposeOptions& options, ProposeArgs& a) {
  if (a.top_documents_flag->count() > 0 || a.max_strategies_flag->count() > 0 ||
      a.select_batches_flag->count() > 0 || a.tokens_per_batch < 1 || lengths.empty()) {
    return;
  }
  const OptimizerLayout layout = options.optimizer_layout
                                     ? *options.optimizer_layout
                                     : DefaultOptimizerLayout(profile, options.gpus);
  const std::int64_t longest =
      std::min(a.max_len, *std::max_element(lengths.begin(), lengths.end()));
  if (!CpSchemesTakePart(UsableSchemes(profile, options.gpus, layout), longest, a.cp_schemes)) {
    return;
  }
  // Documents longer than half the longest: a micro-batch that holds the longest holds at
  // most one of them, so k of them in a batch need k such micro-batches or pipelines.
  const std::int64_t half = longest / 2;
  const int drawn =
      LongDocumentsPerBatch(lengths, a.max_len, a.tokens_per_batch, half, kLongDocumentQuantile);
  a.top_documents = std::clamp(drawn, kLongContextMinTopDocuments, kLongContextMaxTopDocuments);
  a.max_strategies = kLongContextMaxStrategies;
  a.select_batches = kLongContextSelectBatches;
  if (!a.select_tolerance_given) a.select_tolerance = kLongContextSelectTolerance;
  if (a.select_seed_flag->count() == 0) a.select_seed = kLongContextSelectSeed;
  a.screen = true;
  if (!a.quiet) {
    fmt::print(stderr,
               "hydraulis: long context (documents of {} tokens need cp; 9 batches in 10 draw "
               "at most {} above {}): --top-documents {} --max-strategies {} --select-batches "
               "{} (give any of them to choose)\n",
               longest, drawn, half, a.top_documents, a.max_strategies, a.select_batches);
  }
}

}  // namespace hydraulis::tools
