#include "hydraulis/assign/plan.h"

#include <cmath>

#include "hydraulis/base/enum_names.h"

namespace hydraulis {
namespace {

constexpr EnumNames<Algorithm, 4> kAlgorithmNames{{{Algorithm::kOurs, "ours"},
                                                   {Algorithm::kStaticFixed, "static-fixed"},
                                                   {Algorithm::kPublished, "published"},
                                                   {Algorithm::kKarmarkarKarp, "kk"}}};

constexpr EnumNames<CandidateStatus, 4> kCandidateStatusNames{
    {{CandidateStatus::kPlanned, "planned"},
     {CandidateStatus::kPruned, "pruned"},
     {CandidateStatus::kCannotHold, "cannot-hold"},
     {CandidateStatus::kNotUsed, "not-used"}}};

constexpr EnumNames<SolveStatus, 3> kSolveStatusNames{{{SolveStatus::kOptimal, "optimal"},
                                                       {SolveStatus::kWithinGap, "within-gap"},
                                                       {SolveStatus::kTimeLimit, "time-limit"}}};

}  // namespace

std::string AlgorithmName(Algorithm a) { return std::string(NameOf(a, kAlgorithmNames)); }

Algorithm ParseAlgorithm(std::string_view name, std::string_view what) {
  return ParseName(name, kAlgorithmNames, what);
}

std::string CandidateStatusName(CandidateStatus s) {
  return std::string(NameOf(s, kCandidateStatusNames));
}

CandidateStatus ParseCandidateStatus(std::string_view name, std::string_view what) {
  return ParseName(name, kCandidateStatusNames, what);
}

std::string SolveStatusName(SolveStatus s) { return std::string(NameOf(s, kSolveStatusNames)); }

SolveStatus ParseSolveStatus(std::string_view name, std::string_view what) {
  return ParseName(name, kSolveStatusNames, what);
}

std::optional<double> RelativeGap(double estimated_step_ms, double lower_bound_ms) {
  if (!(lower_bound_ms > 0) || std::isinf(lower_bound_ms)) return std::nullopt;
  return estimated_step_ms / lower_bound_ms - 1.0;
}

}  // namespace hydraulis
