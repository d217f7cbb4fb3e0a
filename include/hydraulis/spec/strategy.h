// Strategies (lists of pipelines) and the candidate set a run chooses from each step.
#pragma once

#include <string>
#include <vector>

#include "hydraulis/spec/scheme.h"

namespace hydraulis {

// A list of pipelines (data-parallel replicas), each with its own scheme. Pipelines are
// kept in a canonical order: widest (most GPUs) first, ties by (cp, tp, pp) descending.
struct Strategy {
  std::string name;
  std::vector<Scheme> pipelines;

  int Gpus() const;
};

// "TP16 + 12 x TP4": a compact human-readable description.
std::string StrategyDescription(const Strategy& strategy);

// Where the fp32 master weights and optimizer states live (fixed for the whole run):
// a homogeneous ZeRO-1 layout of dp replicas of <tp, pp>.
struct OptimizerLayout {
  int dp = 1;
  int tp = 1;
  int pp = 1;
};

// The candidate strategies of a run, on a cluster of `gpus` GPUs.
struct CandidateSet {
  int gpus = 0;
  OptimizerLayout optimizer_layout;
  std::vector<Strategy> strategies;
};

}  // namespace hydraulis
