#include "propose_summary.h"

#include <fmt/core.h>

#include <string>

namespace hydraulis::tools {

void PrintProposalSummary(const Proposal& p, const ProposeArgs& a) {
  const OptimizerLayout& l = p.candidates.optimizer_layout;
  if (p.top_documents < a.top_documents) {
    fmt::print(stderr,
               "hydraulis: --top-documents {} capped at {}, the expected documents of one batch "
               "of {} tokens\n",
               a.top_documents, p.top_documents, a.tokens_per_batch);
  }
  fmt::print(stderr,
             "hydraulis: {} strategies for {} GPUs (optimizer layout {},{},{}) from {} length "
             "bins of {} tokens in {:.3f} s\n",
             p.strategies.size(), p.candidates.gpus, l.dp, l.tp, l.pp, p.bins, a.resolution,
             p.dp_seconds);
  for (const ProposedStrategy& s : p.strategies) {
    std::string served = s.cp_pool ? "cp pool" : "fallback";
    if (!s.longest_tokens.empty()) {
      served = fmt::format("longest {}..{}", s.longest_tokens.front(), s.longest_tokens.back());
      if (s.fallback) served += ", fallback";
    } else if (!s.shared_top_tokens.empty()) {
      served = fmt::format("{} longest {}..{}", s.top_documents, s.shared_top_tokens.front(),
                           s.shared_top_tokens.back());
    }
    fmt::print(stderr, "  {:<14} {:<40} {:<26} batch share {:5.3f}\n", s.strategy.name,
               StrategyDescription(s.strategy), served, s.batch_share);
  }
}

}  // namespace hydraulis::tools
