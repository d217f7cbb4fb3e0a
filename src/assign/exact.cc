#include "hydraulis/assign/exact.h"

#include "hydraulis/base/error.h"

namespace hydraulis {

ExactResult SolveExact(const AssignProblem&, const ExactOptions&) {
  throw Error("exact solver is not built yet");
}

}  // namespace hydraulis
