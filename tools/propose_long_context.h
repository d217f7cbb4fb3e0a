// propose's long-context defaults (docs/propose.md, "Defaults"): the flag values it takes
// when documents need context-parallel schemes and the user chose none of them.
#pragma once

#include <cstdint>
#include <span>

#include "hydraulis/propose/propose.h"
#include "hydraulis/spec/profile.h"
#include "propose_args.h"

namespace hydraulis::tools {

// When cp schemes take part and none of --top-documents, --max-strategies, --select-batches
// was given: sets those three, --select-tolerance and --select-seed (unless given) and the
// screening effort in `a`, and says so on stderr (unless --quiet). Otherwise leaves `a` as
// it is.
void ApplyLongContextDefaults(const Profile& profile, std::span<const std::int64_t> lengths,
                              const ProposeOptions& options, ProposeArgs& a);

}  // namespace hydraulis::tools
