#include "hydraulis/assign/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "hydraulis/assign/lower_bound.h"
#include "hydraulis/assign/plan_checker.h"
#include "hydraulis/base/error.h"
#include "hydraulis/cost/capacity.h"

namespace hydraulis {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// About 30 years: no real micro-batch takes longer; beyond it sums could overflow.
constexpr double kMaxMicroBatchMs = 1e12;

bool Homogeneous(const Strategy& s) {
  return std::all_of(s.pipelines.begin(), s.pipelines.end(),
                     [&](const Scheme& x) { return x == s.pipelines.front(); });
}

}  // namespace

std::string AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kOurs:
      return "ours";
    case Algorithm::kStaticFixed:
      return "static-fixed";
    case Algorithm::kPublished:
      return "published";
    case Algorithm::kKarmarkarKarp:
      return "kk";
  }
  return "?";
}

Algorithm ParseAlgorithm(const std::string& name) {
  for (Algorithm a : {Algorithm::kOurs, Algorithm::kStaticFixed, Algorithm::kPublished,
                      Algorithm::kKarmarkarKarp}) {
    if (AlgorithmName(a) == name) return a;
  }
  throw InvalidInput("--algorithm: unknown algorithm '" + name +
                     "' (expected ours, static-fixed, published or kk)");
}

std::string CandidateStatusName(CandidateStatus s) {
  switch (s) {
    case CandidateStatus::kPlanned:
      return "planned";
    case CandidateStatus::kPruned:
      return "pruned";
    case CandidateStatus::kCannotHold:
      return "cannot-hold";
    case CandidateStatus::kNotUsed:
      return "not-used";
  }
  return "?";
}

Planner::Planner(const Profile& profile, const CandidateSet& candidates,
                 const PlannerOptions& options)
    : candidates_(candidates), options_(options), relaxations_(options.schedule) {
  if (options_.only_strategy >= static_cast<int>(candidates.strategies.size())) {
    throw InvalidInput("only_strategy " + std::to_string(options_.only_strategy) +
                       " is not a candidate index (there are " +
                       std::to_string(candidates.strategies.size()) + ")");
  }
  if (!options_.strategy_overhead_ms.empty() &&
      options_.strategy_overhead_ms.size() != candidates.strategies.size()) {
    throw InvalidInput("strategy_overhead_ms has " +
                       std::to_string(options_.strategy_overhead_ms.size()) + " entries for " +
                       std::to_string(candidates.strategies.size()) + " candidates");
  }
  for (double x : options_.strategy_overhead_ms) {
    if (!(x >= 0)) throw InvalidInput("strategy_overhead_ms must be >= 0");
  }
  if (options_.context_tokens < 1) {
    throw InvalidInput("context length must be >= 1, got " +
                       std::to_string(options_.context_tokens));
  }
  std::int64_t static_cap = -1;
  for (std::size_t i = 0; i < candidates_.strategies.size(); ++i) {
    const Strategy& st = candidates_.strategies[i];
    std::vector<PipelineModel> models;
    for (const Scheme& scheme : st.pipelines) {
      const SchemeProfile* sp = profile.Find(scheme);
      if (!sp) {
        throw InvalidInput("strategy '" + st.name + "': scheme " + SchemeName(scheme) +
                           " has no fitted entry in the profile");
      }
      PipelineModel m{scheme, TimeModel::From(*sp),
                      CapacityTokens(profile, scheme, candidates_.optimizer_layout)};
      // Every estimate and bound sums such times: a full micro-batch must cost a finite,
      // sane time, or plans would carry infinities (null in JSON) with exit status 0.
      const double full_ms =
          m.time.DocumentMs(std::max<std::int64_t>(m.capacity_tokens, 1)) + m.time.c_ms;
      if (!std::isfinite(full_ms) || full_ms > kMaxMicroBatchMs) {
        throw InvalidInput(
            "profile: scheme " + SchemeName(scheme) +
            ": its time model gives a full micro-batch (" + std::to_string(m.capacity_tokens) +
            " tokens) " +
            (std::isfinite(full_ms) ? std::to_string(full_ms) + " ms" : "an infinite time") +
            ", more than " + std::to_string(kMaxMicroBatchMs) +
            " ms; its coefficients are out of range");
      }
      if (m.capacity_tokens <= 0) {
        throw InvalidInput("strategy '" + st.name + "': scheme " + SchemeName(scheme) +
                           " cannot hold even " + std::to_string(kTokenAlignment) +
                           " tokens in GPU memory with this optimizer layout");
      }
      models.push_back(m);
    }
    models_.push_back(std::move(models));
    if (Homogeneous(st) && models_.back()[0].capacity_tokens > static_cap) {
      static_cap = models_.back()[0].capacity_tokens;
      static_index_ = static_cast<int>(i);
    }
  }
}

std::int64_t Planner::MaxCapacity(int i) const {
  std::int64_t cap = 0;
  for (const auto& m : models_[static_cast<std::size_t>(i)]) cap = std::max(cap, m.capacity_tokens);
  return cap;
}

AssignProblem Planner::Problem(std::span<const std::int64_t> lengths, int i) const {
  AssignProblem p;
  p.lengths.assign(lengths.begin(), lengths.end());
  p.pipelines = models_[static_cast<std::size_t>(i)];
  p.schedule = options_.schedule;
  return p;
}

Plan Planner::PlanBatch(std::span<const std::int64_t> raw_lengths) const {
  const auto t0 = std::chrono::steady_clock::now();
  const Algorithm algo = options_.algorithm;
  const bool is_static = algo == Algorithm::kStaticFixed || algo == Algorithm::kKarmarkarKarp;
  const int static_index = options_.only_strategy >= 0 ? options_.only_strategy : static_index_;
  if (is_static && static_index < 0) {
    throw InvalidInput("--algorithm " + AlgorithmName(algo) +
                       ": the candidate set has no homogeneous strategy to run statically");
  }
  Plan plan;
  plan.algorithm = algo;
  const int S = static_cast<int>(candidates_.strategies.size());

  // The long-document rule, against what the algorithm can run at all.
  std::int64_t limit = 0;
  if (is_static || options_.only_strategy >= 0) {
    limit = MaxCapacity(is_static ? static_index : options_.only_strategy);
    if (algo == Algorithm::kStaticFixed) limit = std::min(limit, options_.context_tokens);
  } else {
    for (int i = 0; i < S; ++i) limit = std::max(limit, MaxCapacity(i));
  }
  plan.lengths.assign(raw_lengths.begin(), raw_lengths.end());
  for (std::size_t d = 0; d < plan.lengths.size(); ++d) {
    const std::int64_t s = plan.lengths[d];
    if (s < 1) {
      throw InvalidInput("document " + std::to_string(d) + ": length must be >= 1, got " +
                         std::to_string(s));
    }
    if (s <= limit) continue;
    if (options_.overlong == OverlongRule::kReject) {
      throw Infeasible("document " + std::to_string(d) + " has " + std::to_string(s) +
                       " tokens, more than any candidate can hold (" + std::to_string(limit) +
                       "); rerun with truncation allowed or shorten it");
    }
    plan.truncated.push_back({static_cast<int>(d), s, limit});
    plan.lengths[d] = limit;
  }
  const std::int64_t longest =
      plan.lengths.empty() ? 0 : *std::max_element(plan.lengths.begin(), plan.lengths.end());

  // Lower bounds for every candidate that can hold the batch.
  plan.candidates.resize(static_cast<std::size_t>(S));
  plan.lower_bound_ms = kInf;
  std::vector<int> feasible;
  for (int i = 0; i < S; ++i) {
    auto& rep = plan.candidates[static_cast<std::size_t>(i)];
    rep.index = i;
    rep.name = candidates_.strategies[static_cast<std::size_t>(i)].name;
    if (MaxCapacity(i) < longest) {
      rep.status = CandidateStatus::kCannotHold;
      rep.lower_bound_ms = kInf;
      continue;
    }
    // Ours computes the full bound lazily (below): it can prune on this cheap one.
    const bool usable = options_.only_strategy < 0 || i == options_.only_strategy;
    rep.lower_bound_ms = algo == Algorithm::kOurs && usable
                             ? LongestDocumentBoundMs(Problem(plan.lengths, i))
                             : ComputeLowerBound(Problem(plan.lengths, i), &relaxations_).ms;
    rep.status = CandidateStatus::kNotUsed;
    if (usable) feasible.push_back(i);
  }
  if (feasible.empty()) throw InternalError("no candidate can hold the truncated batch");

  Assignment best;
  int best_index = -1;
  double best_score = kInf;  // what the algorithm minimises
  auto consider = [&](int i, Assignment a, double score) {
    auto& rep = plan.candidates[static_cast<std::size_t>(i)];
    rep.status = CandidateStatus::kPlanned;
    rep.estimated_step_ms = a.step_ms;
    if (best_index < 0 || score < best_score - 1e-9 * std::max(1.0, best_score)) {
      best_score = score;
      best_index = i;
      best = std::move(a);
    }
  };
  switch (algo) {
    case Algorithm::kOurs: {
      auto lb_of = [&](int i) -> double& {
        return plan.candidates[static_cast<std::size_t>(i)].lower_bound_ms;
      };
      // What ours minimises is compute time plus the candidate's fixed overhead.
      auto overhead = [&](int i) {
        return options_.strategy_overhead_ms.empty()
                   ? 0.0
                   : options_.strategy_overhead_ms[static_cast<std::size_t>(i)];
      };
      auto run = [&](int i) {
        TwoStageOptions opts = options_.two_stage;
        opts.pack.relaxations = &relaxations_;
        opts.stop_below_ms = std::max(opts.stop_below_ms, lb_of(i));
        Assignment a = AssignTwoStage(Problem(plan.lengths, i), opts);
        const double score = a.step_ms + overhead(i);
        consider(i, std::move(a), score);
      };
      // Plan the candidate with the least cheap bound first, so a good plan is known
      // early; then the others whose bounds can still beat it, most promising first.
      std::stable_sort(feasible.begin(), feasible.end(), [&](int x, int y) {
        return lb_of(x) + overhead(x) < lb_of(y) + overhead(y);
      });
      const int first = feasible.front();
      lb_of(first) = ComputeLowerBound(Problem(plan.lengths, first), &relaxations_).ms;
      run(first);
      std::vector<int> rest;
      for (std::size_t k = 1; k < feasible.size(); ++k) {
        const int i = feasible[k];
        if (lb_of(i) + overhead(i) < best_score) {
          lb_of(i) = ComputeLowerBound(Problem(plan.lengths, i), &relaxations_).ms;
        }
        rest.push_back(i);
      }
      std::stable_sort(rest.begin(), rest.end(), [&](int x, int y) {
        return lb_of(x) + overhead(x) < lb_of(y) + overhead(y);
      });
      for (int i : rest) {
        if (lb_of(i) + overhead(i) >= best_score) {
          plan.candidates[static_cast<std::size_t>(i)].status = CandidateStatus::kPruned;
        } else {
          run(i);
        }
      }
      break;
    }
    case Algorithm::kPublished:
      for (int i : feasible) {
        double published_ms = 0;
        Assignment a = AssignPublished(Problem(plan.lengths, i), options_.published, options_.seed,
                                       &published_ms);
        consider(i, std::move(a), published_ms);
      }
      break;
    case Algorithm::kStaticFixed:
      consider(static_index, AssignStaticFixed(Problem(plan.lengths, static_index), limit), 0);
      break;
    case Algorithm::kKarmarkarKarp:
      consider(static_index,
               AssignKarmarkarKarp(Problem(plan.lengths, static_index), options_.two_stage.pack),
               0);
      break;
  }
  // Candidates pruned on the cheap bound never set the minimum: their bound is >= the
  // chosen plan's time >= the chosen candidate's own bound.
  for (const auto& r : plan.candidates) {
    plan.lower_bound_ms = std::min(plan.lower_bound_ms, r.lower_bound_ms);
  }
  const AssignProblem problem = Problem(plan.lengths, best_index);
#ifndef NDEBUG
  if (std::string err = CheckAssignment(problem, best); !err.empty()) {
    throw InternalError(AlgorithmName(algo) + " produced an invalid plan: " + err);
  }
#endif
  plan.strategy_index = best_index;
  if (!options_.strategy_overhead_ms.empty()) {
    plan.overhead_ms = options_.strategy_overhead_ms[static_cast<std::size_t>(best_index)];
  }
  plan.strategy = candidates_.strategies[static_cast<std::size_t>(best_index)];
  for (std::size_t p = 0; p < problem.pipelines.size(); ++p) {
    PipelinePlan pp;
    pp.scheme = problem.pipelines[p].scheme;
    pp.capacity_tokens = problem.pipelines[p].capacity_tokens;
    pp.micro_batches = best.pipelines[p];
    pp.estimated_ms = best.pipeline_ms[p];
    std::vector<double> stage_ms;
    for (const auto& mb : pp.micro_batches) {
      double t = problem.pipelines[p].time.c_ms;
      for (int d : mb) {
        pp.tokens += plan.lengths[static_cast<std::size_t>(d)];
        t += problem.pipelines[p].time.DocumentMs(plan.lengths[static_cast<std::size_t>(d)]);
      }
      stage_ms.push_back(t);
    }
    pp.closed_form_ms = OneFOneBUpperBoundMs(stage_ms, pp.scheme.pp);
    plan.pipelines.push_back(std::move(pp));
  }
  plan.estimated_step_ms = best.step_ms;
  plan.planning_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return plan;
}

}  // namespace hydraulis
