#include "planning_inputs.h"

#include "hydraulis/spec/spec_io.h"

namespace hydraulis::tools {

void PlanningInputFlags::AddTo(CLI::App* cmd) {
  cmd->add_option("--profile", profile, "profile JSON (docs/spec-format.md)")->required();
  cmd->add_option("--candidates", candidates, "candidate strategies JSON")->required();
  recompute.AddTo(cmd);
}

PlanningInputs PlanningInputFlags::Load() const {
  PlanningInputs inputs;
  inputs.profile = recompute.Apply(LoadProfile(profile), profile);
  inputs.candidates = LoadCandidates(candidates, inputs.profile);
  return inputs;
}

}  // namespace hydraulis::tools
