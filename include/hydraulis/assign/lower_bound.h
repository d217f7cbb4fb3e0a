// Lower bounds on the optimal step time of one batch on one strategy, so every plan
// carries its distance from the optimum (docs/lower-bound.md explains each bound).
#pragma once

#include "hydraulis/assign/problem.h"

namespace hydraulis {

struct LowerBound {
  double ms = 0;              // the best (largest) of the bounds below
  double fractional_ms = 0;   // LP relaxation: fractional documents, fractional micro-batches
  double longest_doc_ms = 0;  // the costliest document's own pipeline time
};

// Valid lower bound on min over assignments of the step time. +infinity when some
// document fits no pipeline.
LowerBound ComputeLowerBound(const AssignProblem& problem);

}  // namespace hydraulis
