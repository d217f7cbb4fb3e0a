// Exact solver for small instances (tests and certificates): the optimal step time over
// every assignment of documents to pipelines, packing into micro-batches and micro-batch
// order, under the exact 1F1B time.
#pragma once

#include "hydraulis/assign/problem.h"

namespace hydraulis {

struct ExactOptions {
  // Largest instance accepted (documents); larger ones throw InvalidInput.
  int max_documents = 10;
};

struct ExactResult {
  Assignment assignment;  // an optimal assignment (checked by CheckAssignment)
  double optimal_ms = 0;  // its step time
};

// Solves `problem` to optimality. Precondition: every document fits some pipeline.
ExactResult SolveExact(const AssignProblem& problem, const ExactOptions& options = {});

}  // namespace hydraulis
