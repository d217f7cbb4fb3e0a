#include "train_console.h"

#include <fmt/core.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "hydraulis/runtime/model/compute.h"

namespace hydraulis::tools {

void PrintRunStart(const TrainingRun& run, int world_size) {
  const bool chief = run.rank() == 0;
  // Every GPU rank says which GPU it took: a node where all ranks name cuda:0 is misconfigured.
  if (run.compute().device == DeviceKind::kCuda) {
    fmt::print("{}\n", DeviceLine(run.compute(), run.rank(), world_size));
  }
  if (chief && run.profile_derived()) {
    fmt::print(
        "profile: derived from {} for this model's shape and recompute {} (no --profile; step "
        "times are estimates until `hydraulis profile` fits one)\n",
        kEngineProfile, ToString(run.compute().recompute));
  }
  if (chief && !run.derived_cp_scheme().empty()) {
    fmt::print(
        "profile: {} derived from its cp = 1 fit (placed documents as on the tp group, the "
        "key/value exchange at the simulator's link speeds; `hydraulis profile --schemes` "
        "fits it)\n",
        run.derived_cp_scheme());
  }
}

void PrintStep(const TrainingStepRecord& r) {
  fmt::print(
      "step {:>4}  loss {:.4f}  lr {:.3e}  grad_norm {:.3g}  tokens {:>7}  strategy {}{}  step "
      "{:.1f} ms  predicted {:.1f} ms{}{}{}\n",
      r.step, r.result.loss, r.lr, r.result.grad_norm, r.tokens, r.strategy,
      r.switched ? " (switched)" : "", r.result.step_ms, r.predicted_step_ms,
      r.fit_version > 0 ? fmt::format(" (fit {})", r.fit_version) : "",
      r.cut_documents > 0
          ? fmt::format("  cut {} doc(s), {} token(s)", r.cut_documents, r.cut_tokens)
          : "",
      r.skipped ? "  SKIPPED (non-finite)" : "");
  std::fflush(stdout);
}

void PrintEvaluation(const EvaluationRecord& e) {
  fmt::print("eval   step {:4d}  loss {:.4f}  ppl {:.2f}  ({} tokens, {:.0f} ms)\n", e.step, e.loss,
             std::exp(e.loss), e.tokens, e.eval_ms);
}

void PrintRunEnd(const TrainingJob::Totals& t, const TrainingRunOptions& options,
                 const PredictionError& prediction) {
  if (t.cut_documents == 0) {
    fmt::print("done: no token lost (--long-documents {})", options.long_documents);
  } else {
    fmt::print("done: {} document(s) cut to the context length or capacity ({} token(s) lost)",
               t.cut_documents, t.cut_tokens);
  }
  if (options.job.skip_nonfinite_steps) {
    fmt::print("; {} step(s) skipped (non-finite)", t.skipped_steps);
  }
  fmt::print("\n");
  std::size_t used = 0;
  const double error = prediction.Mean(5, used);
  if (used > 0) {
    fmt::print(
        "prediction: step time predicted within {:.1f} % of measured over the last {} "
        "step(s) (fit {}{}){}\n",
        100 * error, used, prediction.fit_version,
        options.job.calibrate ? ", calibrated from measured steps" : ", the profile as given",
        error <= 0.10 ? ""
        : options.job.calibrate
            ? fmt::format("; not yet within 10 %: the calibration needs more steps (it "
                          "refits from the {}th on, over the newest {})",
                          options.job.calibration.holdout + 1, options.job.calibration.window)
            : std::string("; more than 10 % off: --calibrate on fits this machine"));
  }
}

}  // namespace hydraulis::tools
