#include "profile_fit_table.h"

#include <fmt/core.h>
#include <fmt/format.h>

#include <string>

#include "hydraulis/cost/capacity.h"

namespace hydraulis::tools {

void PrintFitTable(const ProfileRun& run) {
  const OptimizerLayout layout{run.world_size, 1, 1};
  fmt::print("{:<10} {:>14} {:>12} {:>10} {:>9} {:>9} {:>9} {:>10} {:>12}\n", "scheme",
             "a ms/tok^2", "b ms/tok", "c ms", "R^2", "max rel", "rms rel", "capacity",
             "kv ms/tok");
  for (std::size_t i = 0; i < run.fits.size(); ++i) {
    const TimeFit& f = run.fits[i];
    const Scheme& scheme = run.profile.schemes[i].scheme;
    // A cp scheme keeps its <1, tp, 1> a, b, c; its R^2 and errors are of the sharded
    // samples under those plus the fitted kv.
    fmt::print("{:<10} {:>14.4e} {:>12.4e} {:>10.3f} {:>9.4f} {:>9.3f} {:>9.3f} {:>10} {:>12}\n",
               SchemeName(scheme), f.model.a_ms_per_token2, f.model.b_ms_per_token, f.model.c_ms,
               f.r_squared, f.max_relative_error, f.rms_relative_error,
               CapacityTokens(run.profile, scheme, layout),
               scheme.cp > 1 ? fmt::format("{:.4e}", run.profile.schemes[i].kv_ms_per_token)
                             : std::string("-"));
  }
}

}  // namespace hydraulis::tools
