// What the planner-level tests share: the case-study and long-context settings and real
// batches drawn from the shared Wikipedia lengths.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/assign/plan_checker.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/spec/spec_io.h"

namespace hydraulis {

inline const std::string kRoot = HYDRAULIS_SOURCE_DIR;

struct CaseStudy {
  Profile profile = LoadProfile(kRoot + "/configs/profiles/llama-32b-a800.json");
  CandidateSet candidates =
      LoadCandidates(kRoot + "/configs/candidates/llama-32b-64gpu.json", profile);
};

// The 128K benchmark's proposed candidates on 256 GPUs, planned at 128K context.
struct LongContextStudy {
  Profile profile = LoadProfile(kRoot + "/configs/profiles/llama-32b-a800.json");
  CandidateSet candidates =
      LoadCandidates(kRoot + "/configs/candidates/llama-32b-256gpu-128k.json", profile);
  PlannerOptions options = [] {
    PlannerOptions o;
    o.context_tokens = 131'072;
    return o;
  }();
};

// Real batches: the shared Wikipedia lengths when present, else the bundled sample.
inline std::vector<std::vector<std::int64_t>> RealBatches(int count, std::int64_t tokens,
                                                          std::uint64_t seed,
                                                          std::int64_t max_len = 32'768) {
  static const std::vector<std::int64_t> dataset = ReadLengths(test_support::RealLengthsPath());
  BatchSampler sampler(dataset, {tokens, max_len, seed});
  std::vector<std::vector<std::int64_t>> out;
  for (int i = 0; i < count; ++i) out.push_back(sampler.Next().lengths);
  return out;
}

inline Assignment ToAssignment(const Plan& plan) {
  Assignment a;
  for (const auto& p : plan.pipelines) {
    a.pipelines.push_back(p.micro_batches);
    a.pipeline_ms.push_back(p.estimated_ms);
  }
  a.step_ms = plan.estimated_step_ms;
  return a;
}

}  // namespace hydraulis
