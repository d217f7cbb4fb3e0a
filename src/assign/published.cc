// Placeholder body replaced by the published-planner implementation (CBC MILP).
#include "hydraulis/assign/baselines.h"
#include "hydraulis/base/error.h"

namespace hydraulis {

Assignment AssignPublished(const AssignProblem&, const PublishedOptions&, std::uint64_t, double*) {
  throw Error("published planner is not built yet");
}

}  // namespace hydraulis
