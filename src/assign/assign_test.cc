// Planner-level tests: invariants on real data for every algorithm, determinism, the
// long-document rule, candidate choice and pruning.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <thread>

#include "../base/test_support.h"
#include "assign_test_support.h"
#include "hydraulis/assign/micro_batch_layout.h"
#include "hydraulis/assign/pack.h"
#include "hydraulis/assign/pipeline_relaxation.h"
#include "hydraulis/assign/plan_checker.h"
#include "hydraulis/assign/plan_json.h"
#include "hydraulis/assign/plan_lines.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/assign/published.h"
#include "hydraulis/assign/two_stage.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/base/tolerance.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/spec/spec_io.h"
#include "lower_bound.h"

namespace hydraulis {
namespace {

TEST(PlannerTest, EveryAlgorithmGivesValidPlansOnRealBatches) {
  CaseStudy cs;
  const auto batches = RealBatches(12, 200'000, 7);
  for (Algorithm algo : {Algorithm::kOurs, Algorithm::kStaticFixed, Algorithm::kKarmarkarKarp}) {
    PlannerOptions options;
    options.algorithm = algo;
    Planner planner(cs.profile, cs.candidates, options);
    for (const auto& batch : batches) {
      SCOPED_TRACE(AlgorithmName(algo));
      Plan plan = planner.PlanBatch(batch);
      // Every document exactly once, capacities respected, times from the cost model.
      const AssignProblem problem = planner.Problem(plan.lengths, plan.strategy_index);
      EXPECT_EQ(CheckAssignment(problem, ToAssignment(plan)), "");
      EXPECT_LE(plan.lower_bound_ms, plan.estimated_step_ms * (1 + 1e-12));
      EXPECT_GT(plan.lower_bound_ms, 0);
      for (const auto& p : plan.pipelines) {
        EXPECT_GE(p.closed_form_ms, p.estimated_ms * (1 - 1e-12));
        if (p.scheme.pp == 1 && p.micro_batches.size() == 1) {
          EXPECT_DOUBLE_EQ(p.closed_form_ms, p.estimated_ms);
        }
      }
      if (algo != Algorithm::kOurs) {
        EXPECT_EQ(plan.strategy.name, "S0");  // the static homogeneous strategy
      }
      if (algo == Algorithm::kStaticFixed) {
        for (const auto& p : plan.pipelines) {
          for (const auto& mb : p.micro_batches) {
            std::int64_t tokens = 0;
            for (int d : mb) tokens += plan.lengths[static_cast<std::size_t>(d)];
            EXPECT_LE(tokens, options.context_tokens);
          }
        }
      }
    }
  }
}

TEST(PlannerTest, OursBeatsStaticFixedPackingOnRealBatches) {
  CaseStudy cs;
  PlannerOptions ours_options, static_options;
  static_options.algorithm = Algorithm::kStaticFixed;
  Planner ours(cs.profile, cs.candidates, ours_options);
  Planner fixed(cs.profile, cs.candidates, static_options);
  double ours_ms = 0, fixed_ms = 0;
  for (const auto& batch : RealBatches(20, 200'000, 3)) {
    const double o = ours.PlanBatch(batch).estimated_step_ms;
    const double f = fixed.PlanBatch(batch).estimated_step_ms;
    EXPECT_LE(o, f * (1 + 1e-9));
    ours_ms += o;
    fixed_ms += f;
  }
  EXPECT_GT(fixed_ms / ours_ms, 1.5);
}

TEST(PlannerTest, ChoosesTheFastestPlannedCandidateAndPrunesOnlyWhatCannotWin) {
  CaseStudy cs;
  Planner planner(cs.profile, cs.candidates, {});
  for (const auto& batch : RealBatches(10, 200'000, 11)) {
    Plan plan = planner.PlanBatch(batch);
    const std::int64_t longest = *std::max_element(plan.lengths.begin(), plan.lengths.end());
    double best = std::numeric_limits<double>::infinity();
    for (const auto& c : plan.candidates) {
      switch (c.status) {
        case CandidateStatus::kPlanned:
          best = std::min(best, c.estimated_step_ms);
          EXPECT_LE(c.lower_bound_ms, c.estimated_step_ms * (1 + 1e-12));
          break;
        case CandidateStatus::kPruned:
          EXPECT_GE(c.lower_bound_ms, plan.estimated_step_ms);
          break;
        case CandidateStatus::kCannotHold:
          EXPECT_LT(planner.MaxCapacity(c.index), longest);
          break;
        case CandidateStatus::kNotUsed:
          ADD_FAILURE() << "ours considers every candidate";
      }
      EXPECT_GE(c.lower_bound_ms, plan.lower_bound_ms);
    }
    EXPECT_DOUBLE_EQ(plan.estimated_step_ms, best);
  }
}

// The sequential search over every candidate's full bound, the reference for
// PlansWhatTheSearchOverEveryFullBoundPlans: one batch's usable candidates by cheap bound
// (ties: index), and every candidate's cheap and full bound.
struct ReferenceSearch {
  std::vector<int> usable;
  std::vector<double> cheap, full;
  double least = 0;  // the least cheap bound
};

ReferenceSearch BoundEveryCandidate(const Planner& planner, const Plan& plan,
                                    const std::vector<std::pair<std::int64_t, double>>& counts,
                                    RelaxationTable& table) {
  const auto distinct = DistinctLengths(plan.lengths);
  ReferenceSearch r;
  r.cheap.resize(plan.candidates.size());
  r.full.resize(plan.candidates.size());
  for (const CandidateReport& c : plan.candidates) {
    if (c.status == CandidateStatus::kCannotHold) continue;
    const auto i = static_cast<std::size_t>(c.index);
    r.usable.push_back(c.index);
    r.cheap[i] = LongestDocumentBoundMs(distinct, planner.Groups(c.index));
    r.full[i] =
        ComputeLowerBound(planner.Groups(c.index), counts, planner.options().schedule, &table).ms;
  }
  std::stable_sort(r.usable.begin(), r.usable.end(), [&](int x, int y) {
    return r.cheap[static_cast<std::size_t>(x)] < r.cheap[static_cast<std::size_t>(y)];
  });
  r.least = r.cheap[static_cast<std::size_t>(r.usable.front())];
  return r;
}

// The first planned: where at most 16 candidates tie at the least cheap bound, the least
// full bound's (ties: the cheap order), found by taking full bounds for the front of the
// order (cheap, or full once taken) until the front has one, or 16 of them (then the least
// of those); else the first at the least cheap bound.
int ReferenceFirst(const ReferenceSearch& r) {
  const auto tied = std::count_if(r.usable.begin(), r.usable.end(), [&](int i) {
    return r.cheap[static_cast<std::size_t>(i)] == r.least;
  });
  if (tied > 16) return r.usable.front();
  std::vector<char> taken(r.cheap.size(), 0);
  auto key = [&](int i) {
    const auto k = static_cast<std::size_t>(i);
    return taken[k] ? r.full[k] : r.cheap[k];
  };
  for (int count = 0;; ++count) {
    std::vector<int> order = r.usable;
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return key(x) < key(y); });
    auto known = std::find_if(order.begin(), order.end(),
                              [&](int i) { return taken[static_cast<std::size_t>(i)]; });
    if (taken[static_cast<std::size_t>(order.front())] || count == 16) return *known;
    taken[static_cast<std::size_t>(order.front())] = 1;
  }
}

// The candidates after `first` in the order they are taken: by full bound, ties in the
// cheap order, where the others tied at the least cheap bound go by their coarse load
// there, least first, when the first plan (`first_plan`) did not reach that bound.
std::vector<int> ReferenceRest(const ReferenceSearch& r, int first, double first_plan,
                               const Planner& planner,
                               const std::vector<std::pair<std::int64_t, double>>& counts) {
  std::vector<int> usable = r.usable;
  std::stable_partition(usable.begin(), usable.end(), [&](int i) { return i == first; });
  auto tied_end = std::find_if(usable.begin() + 1, usable.end(), [&](int i) {
    return r.cheap[static_cast<std::size_t>(i)] != r.least;
  });
  if (first_plan > r.least && tied_end - usable.begin() > 2) {
    std::vector<double> room(r.cheap.size(), 0.0);
    for (auto it = usable.begin() + 1; it != tied_end; ++it) {
      room[static_cast<std::size_t>(*it)] = CoarseLoadMs(planner.Groups(*it), counts, r.least);
    }
    std::stable_sort(usable.begin() + 1, tied_end, [&](int x, int y) {
      return room[static_cast<std::size_t>(x)] < room[static_cast<std::size_t>(y)];
    });
  }
  std::vector<int> rest(usable.begin() + 1, usable.end());
  std::stable_sort(rest.begin(), rest.end(), [&](int x, int y) {
    return r.full[static_cast<std::size_t>(x)] < r.full[static_cast<std::size_t>(y)];
  });
  return rest;
}

// Ours computes a candidate's full bound only when the candidate reaches the front of the
// search's order: what it plans and prunes must be what the sequential search over every
// candidate's full bound gives (the least full bound first, then by full bound, each
// planned while its bound beats the best plan so far), and some full bounds are skipped.
TEST(PlannerTest, PlansWhatTheSearchOverEveryFullBoundPlans) {
  CaseStudy cs;
  int skipped = 0;
  for (const char* name : {"llama-32b-64gpu.json", "llama-32b-256gpu-128k.json"}) {
    const bool long_context = std::string(name).find("128k") != std::string::npos;
    const std::int64_t max_len = long_context ? 131'072 : 32'768;
    PlannerOptions options;
    options.context_tokens = max_len;
    Planner planner(cs.profile, LoadCandidates(kRoot + "/configs/candidates/" + name, cs.profile),
                    options);
    RelaxationTable table(planner.options().schedule);
    for (const auto& batch : RealBatches(6, long_context ? 524'288 : 200'000, 21, max_len)) {
      const Plan plan = planner.PlanBatch(batch);
      const auto counts = LengthCounts(plan.lengths);
      const ReferenceSearch reference = BoundEveryCandidate(planner, plan, counts, table);
      const int first_index = ReferenceFirst(reference);
      const CandidateReport& first = plan.candidates[static_cast<std::size_t>(first_index)];
      const std::vector<int> rest =
          ReferenceRest(reference, first_index, first.estimated_step_ms, planner, counts);
      ASSERT_EQ(first.status, CandidateStatus::kPlanned);
      double best = first.estimated_step_ms;
      for (const int i : rest) {
        const CandidateReport& c = plan.candidates[static_cast<std::size_t>(i)];
        const double bound = reference.full[static_cast<std::size_t>(i)];
        if (bound >= best) {
          EXPECT_EQ(c.status, CandidateStatus::kPruned) << name << " candidate " << i;
          EXPECT_LE(c.lower_bound_ms, bound);
          EXPECT_GE(c.lower_bound_ms, plan.estimated_step_ms);
          if (c.lower_bound_ms < bound) ++skipped;
          continue;
        }
        ASSERT_EQ(c.status, CandidateStatus::kPlanned) << name << " candidate " << i;
        EXPECT_DOUBLE_EQ(c.lower_bound_ms, bound);
        if (DefinitelyLess(c.estimated_step_ms, best)) best = c.estimated_step_ms;
      }
      EXPECT_DOUBLE_EQ(plan.estimated_step_ms, best);
    }
  }
  EXPECT_GT(skipped, 0);
}

TEST(PlannerTest, SameInputSamePlanBytes) {
  CaseStudy cs;
  const auto batches = RealBatches(5, 200'000, 5);
  for (Algorithm algo : {Algorithm::kOurs, Algorithm::kStaticFixed, Algorithm::kKarmarkarKarp}) {
    PlannerOptions options;
    options.algorithm = algo;
    // A fresh planner and a warmed one (its relaxation cache already filled) agree.
    Planner warm(cs.profile, cs.candidates, options);
    for (const auto& b : batches) warm.PlanBatch(b);
    for (const auto& b : batches) {
      Planner fresh(cs.profile, cs.candidates, options);
      EXPECT_EQ(PlanToJson(fresh.PlanBatch(b), false, false),
                PlanToJson(warm.PlanBatch(b), false, false));
    }
  }
}

TEST(PlannerTest, PlansAreTheSameBytesOnAnyThreadCount) {
  // Batches large enough to plan on several threads (>= 2^16 pipeline-document pairs):
  // the proposed 1,024-GPU candidates and the 256-GPU 128K ones with cp pipelines.
  CaseStudy cs;
  for (const char* name : {"llama-32b-1024gpu-proposed.json", "llama-32b-256gpu-128k.json"}) {
    const CandidateSet candidates =
        LoadCandidates(kRoot + "/configs/candidates/" + name, cs.profile);
    const bool long_context = std::string(name).find("128k") != std::string::npos;
    const std::int64_t max_len = long_context ? 131'072 : 32'768;
    PlannerOptions one;
    one.context_tokens = max_len;
    PlannerOptions three = one;
    three.threads = 3;
    // 64: two threads for each usable candidate, all assigned at once before the search
    // (Speculate).
    PlannerOptions eight = one;
    eight.threads = 64;
    Planner a(cs.profile, candidates, one);
    Planner b(cs.profile, candidates, three);
    Planner c(cs.profile, candidates, eight);
    for (const auto& batch : RealBatches(3, long_context ? 2'097'152 : 1'638'400, 9, max_len)) {
      const std::string reference = PlanToJson(a.PlanBatch(batch), false, false);
      EXPECT_EQ(reference, PlanToJson(b.PlanBatch(batch), false, false));
      EXPECT_EQ(reference, PlanToJson(c.PlanBatch(batch), false, false));
    }
  }
  PlannerOptions bad;
  bad.threads = -1;
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              Planner(cs.profile, cs.candidates, bad);
            }).find("threads"),
            std::string::npos);
}

// A prune tolerance t skips candidates whose bound is within t of the best plan: the plan is
// never more than t above the exact search's, and no more candidates are planned.
TEST(PlannerTest, PruneToleranceBoundsTheLossAndPlansNoMore) {
  CaseStudy cs;
  PlannerOptions exact;
  PlannerOptions loose = exact;
  loose.prune_tolerance = 0.05;
  const Planner a(cs.profile, cs.candidates, exact);
  const Planner b(cs.profile, cs.candidates, loose);
  auto planned = [](const Plan& p) {
    int n = 0;
    for (const CandidateReport& c : p.candidates) n += c.status == CandidateStatus::kPlanned;
    return n;
  };
  int fewer = 0;
  for (const auto& batch : RealBatches(8, 200'000, 13)) {
    const Plan pa = a.PlanBatch(batch);
    const Plan pb = b.PlanBatch(batch);
    EXPECT_GE(pb.estimated_step_ms, pa.estimated_step_ms * (1 - 1e-12));
    EXPECT_LE(pb.estimated_step_ms, pa.estimated_step_ms * 1.05 * (1 + 1e-12));
    EXPECT_LE(planned(pb), planned(pa));
    fewer += planned(pb) < planned(pa);
  }
  // On the bundled sample's 8 batches (no shared data) no candidate falls within it.
  if (test_support::HaveSharedLengths()) {
    EXPECT_GT(fewer, 0);
  }
  for (const double bad :
       {-0.1, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    PlannerOptions o;
    o.prune_tolerance = bad;
    EXPECT_NE(test_support::InvalidInputMessage([&] {
                Planner(cs.profile, cs.candidates, o);
              }).find("prune tolerance"),
              std::string::npos);
  }
}

// Every plan says how it stands: time-limit exactly when a solver stopped at its limit,
// optimal exactly when its time meets the lower bound, within-gap otherwise.
TEST(PlannerTest, PlansCarryTheirSolveStatus) {
  CaseStudy cs;
  const auto batches = RealBatches(6, 200'000, 11);
  PlannerOptions options;
  Planner ours(cs.profile, cs.candidates, options);
  for (const auto& batch : batches) {
    const Plan plan = ours.PlanBatch(batch);
    EXPECT_EQ(plan.time_limited_solves, 0);
    EXPECT_EQ(plan.status, NearlyEqual(plan.estimated_step_ms, plan.lower_bound_ms)
                               ? SolveStatus::kOptimal
                               : SolveStatus::kWithinGap);
  }
  // One document: no assignment can beat running it alone on the fastest candidate.
  const Plan single = ours.PlanBatch(std::vector<std::int64_t>{5000});
  EXPECT_EQ(single.status, SolveStatus::kOptimal)
      << single.estimated_step_ms << " vs " << single.lower_bound_ms;
  EXPECT_NE(PlanToJson(single, false, false).find(R"("status":"optimal","time_limited_solves":0)"),
            std::string::npos);

  options.algorithm = Algorithm::kPublished;
  options.published.shuffles = 1;
  options.published.micro_batch_counts = 1;
  options.published.milp_time_limit_s = 1e-6;
  options.published_assigner = AssignPublished;
  Planner published(cs.profile, cs.candidates, options);
  const Plan rushed = published.PlanBatch(batches[0]);
  EXPECT_GT(rushed.time_limited_solves, 0);
  EXPECT_EQ(rushed.status, SolveStatus::kTimeLimit);
  EXPECT_EQ(CheckAssignment(published.Problem(rushed.lengths, rushed.strategy_index),
                            ToAssignment(rushed)),
            "");
  EXPECT_EQ(SolveStatusName(SolveStatus::kTimeLimit), "time-limit");
}

// The planner's library does not link CBC: the published algorithm runs only where a
// program passes the MILP planner in.
TEST(PlannerTest, PublishedNeedsTheMilpPlannerPassedIn) {
  CaseStudy cs;
  PlannerOptions options;
  options.algorithm = Algorithm::kPublished;
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              Planner(cs.profile, cs.candidates, options);
            }).find("algorithm published is not available here"),
            std::string::npos);
}

TEST(PlannerTest, RelativeGapIsEmptyWithoutAPositiveFiniteBound) {
  EXPECT_DOUBLE_EQ(RelativeGap(125.0, 100.0).value(), 0.25);
  EXPECT_DOUBLE_EQ(RelativeGap(100.0, 100.0).value(), 0.0);
  EXPECT_FALSE(RelativeGap(100.0, 0.0).has_value());
  EXPECT_FALSE(RelativeGap(100.0, -1.0).has_value());
  EXPECT_FALSE(RelativeGap(100.0, kInf).has_value());
  EXPECT_FALSE(RelativeGap(100.0, std::nan("")).has_value());
}

TEST(PlannerTest, OverlongDocumentsAreTruncatedAndListedOrRejected) {
  CaseStudy cs;
  Planner planner(cs.profile, cs.candidates, {});
  const std::int64_t largest = planner.MaxCapacity(0);  // S0: 4 x TP16
  std::vector<std::int64_t> batch = {500, 100'000, 2'000, largest, largest + 1};
  Plan plan = planner.PlanBatch(batch);
  ASSERT_EQ(plan.truncated.size(), 2u);
  EXPECT_EQ(plan.truncated[0].index, 1);
  EXPECT_EQ(plan.truncated[0].original, 100'000);
  EXPECT_EQ(plan.truncated[0].kept, largest);
  EXPECT_EQ(plan.truncated[1].index, 4);
  EXPECT_EQ(plan.lengths[1], largest);
  EXPECT_EQ(plan.lengths[3], largest);  // exactly the capacity is kept whole
  // Still every document, including the truncated ones, is planned exactly once.
  EXPECT_EQ(CheckAssignment(planner.Problem(plan.lengths, plan.strategy_index), ToAssignment(plan)),
            "");

  PlannerOptions reject;
  reject.overlong = OverlongRule::kReject;
  Planner strict(cs.profile, cs.candidates, reject);
  try {
    strict.PlanBatch(batch);
    ADD_FAILURE() << "expected Infeasible";
  } catch (const Infeasible& e) {
    EXPECT_NE(std::string(e.what()).find("document 1 has 100000 tokens"), std::string::npos)
        << e.what();
  }
}

TEST(PlannerTest, LongDocumentRulesOutNarrowCandidates) {
  CaseStudy cs;
  Planner planner(cs.profile, cs.candidates, {});
  // 30,000 tokens: only strategies with a TP16 pipeline (S0..S3) can hold it.
  std::vector<std::int64_t> batch(100, 1'000);
  batch.push_back(30'000);
  Plan plan = planner.PlanBatch(batch);
  for (const auto& c : plan.candidates) {
    const bool has_tp16 = c.index <= 3;
    EXPECT_EQ(c.status == CandidateStatus::kCannotHold, !has_tp16) << c.name;
  }
  EXPECT_LE(plan.strategy_index, 3);
}

// 128K context on 256 GPUs: the proposed candidates mix cp pipelines for the long documents
// with cp = 1 ones; every plan is valid, carries one layout per cp micro-batch, and keeps
// every token that the cp = 1 fallback alone would cut.
TEST(PlannerTest, CpCandidatesHoldLongDocumentsWithValidLayouts) {
  const LongContextStudy study;
  const Planner planner(study.profile, study.candidates, study.options);
  PlannerOptions fallback_only = study.options;
  fallback_only.only_strategy = 0;  // 16 x TP16, cp = 1: holds 43,520 tokens
  const Planner cp1(study.profile, study.candidates, fallback_only);
  int sharded_documents = 0, cut_by_cp1 = 0;
  for (const auto& batch : RealBatches(3, 2'097'152, 11, 131'072)) {
    const Plan plan = planner.PlanBatch(batch);
    EXPECT_TRUE(plan.truncated.empty());
    const AssignProblem problem = planner.Problem(plan.lengths, plan.strategy_index);
    EXPECT_EQ(CheckAssignment(problem, ToAssignment(plan)), "");
    EXPECT_GE(plan.estimated_step_ms, plan.lower_bound_ms * (1 - 1e-9));
    for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
      const PipelinePlan& pipe = plan.pipelines[p];
      EXPECT_EQ(CheckCpLayouts(pipe), "") << "pipeline " << p;
      if (pipe.scheme.cp == 1) continue;
      EXPECT_EQ(pipe.cp_layouts,
                MicroBatchLayouts(plan.lengths, problem.pipelines[p], pipe.micro_batches));
      for (std::size_t j = 0; j < pipe.micro_batches.size(); ++j) {
        for (std::size_t i = 0; i < pipe.micro_batches[j].size(); ++i) {
          const std::int64_t s = plan.lengths[static_cast<std::size_t>(pipe.micro_batches[j][i])];
          const bool sharded = pipe.cp_layouts[j].Width(i) > 1;
          sharded_documents += sharded ? 1 : 0;
          // A document no rank can hold whole is sharded.
          if (static_cast<double>(s) > problem.pipelines[p].shard.rank_capacity_tokens) {
            EXPECT_TRUE(sharded) << s;
          }
        }
      }
    }
    EXPECT_NE(PlanToJson(plan, false, false).find("\"cp_layouts\":[["), std::string::npos);
    cut_by_cp1 += static_cast<int>(cp1.PlanBatch(batch).truncated.size());
  }
  EXPECT_GT(sharded_documents, 0);
  EXPECT_GT(cut_by_cp1, 0);
}

TEST(PlannerTest, OnlyStrategyRestrictsOursToOneCandidate) {
  CaseStudy cs;
  PlannerOptions one;
  one.only_strategy = 0;  // S0, 4 x TP16: ours as a static strategy with balanced packing
  Planner restricted(cs.profile, cs.candidates, one);
  Planner dynamic(cs.profile, cs.candidates, {});
  for (const auto& batch : RealBatches(4, 200'000, 9)) {
    Plan r = restricted.PlanBatch(batch);
    EXPECT_EQ(r.strategy_index, 0);
    for (const auto& c : r.candidates) {
      if (c.index != 0 && c.status != CandidateStatus::kCannotHold) {
        EXPECT_EQ(c.status, CandidateStatus::kNotUsed);
      }
    }
    EXPECT_GE(r.estimated_step_ms, dynamic.PlanBatch(batch).estimated_step_ms * (1 - 1e-9));
  }
  PlannerOptions bad;
  bad.only_strategy = 7;
  EXPECT_THROW(Planner(cs.profile, cs.candidates, bad), InvalidInput);
  bad.only_strategy = -3;
  EXPECT_THROW(Planner(cs.profile, cs.candidates, bad), InvalidInput);
}

TEST(PlannerTest, TheStaticCandidateIsResolvedByThePlanner) {
  CaseStudy cs;
  PlannerOptions options;
  options.only_strategy = PlannerOptions::kStaticCandidate;
  const Planner planner(cs.profile, cs.candidates, options);
  ASSERT_GE(planner.StaticStrategyIndex(), 0);
  EXPECT_EQ(planner.options().only_strategy, planner.StaticStrategyIndex());
  EXPECT_EQ(planner.PlanBatch(RealBatches(1, 200'000, 3)[0]).strategy_index,
            planner.StaticStrategyIndex());
  // Without a homogeneous candidate there is nothing to resolve it to.
  CandidateSet heterogeneous = cs.candidates;
  std::erase_if(heterogeneous.strategies, [](const Strategy& s) {
    return std::all_of(s.pipelines.begin(), s.pipelines.end(),
                       [&](const Scheme& p) { return p == s.pipelines.front(); });
  });
  ASSERT_FALSE(heterogeneous.strategies.empty());
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              Planner(cs.profile, heterogeneous, options);
            }).find("no homogeneous strategy"),
            std::string::npos);
}

TEST(PlannerTest, StrategyOverheadsShiftTheChoiceButNotTheComputeEstimate) {
  CaseStudy cs;
  PlannerOptions options;
  // Everything but S0 costs an extra second per step.
  options.strategy_overhead_ms.assign(cs.candidates.strategies.size(), 1000.0);
  options.strategy_overhead_ms[0] = 0.0;
  Planner with(cs.profile, cs.candidates, options);
  Planner without(cs.profile, cs.candidates, {});
  int moved = 0;
  for (const auto& batch : RealBatches(8, 200'000, 13)) {
    Plan a = with.PlanBatch(batch), b = without.PlanBatch(batch);
    EXPECT_LE(a.estimated_step_ms + a.overhead_ms, b.estimated_step_ms + 1000.0 + 1e-6);
    EXPECT_GE(a.estimated_step_ms, b.estimated_step_ms * (1 - 1e-9));
    EXPECT_EQ(a.overhead_ms, a.strategy_index == 0 ? 0.0 : 1000.0);
    moved += a.strategy_index == 0 && b.strategy_index != 0;
  }
  EXPECT_GT(moved, 0);
  options.strategy_overhead_ms.pop_back();
  EXPECT_THROW(Planner(cs.profile, cs.candidates, options), InvalidInput);
}

TEST(PlannerTest, ManyShortDocumentsPlanCloseToTheBound) {
  // An instruction-tuning shape: 20,000 documents of 100..500 tokens in one batch.
  CaseStudy cs;
  Planner planner(cs.profile, cs.candidates, {});
  Rng rng(3);
  std::vector<std::int64_t> batch;
  for (int i = 0; i < 20'000; ++i) batch.push_back(100 + static_cast<std::int64_t>(rng.Below(401)));
  const Plan plan = planner.PlanBatch(batch);
  EXPECT_EQ(CheckAssignment(planner.Problem(plan.lengths, plan.strategy_index), ToAssignment(plan)),
            "");
  EXPECT_LE(plan.estimated_step_ms, plan.lower_bound_ms * 1.03);
}

}  // namespace
}  // namespace hydraulis
