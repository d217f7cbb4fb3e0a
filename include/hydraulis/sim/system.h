// The training systems the simulator compares on identical batches: the published
// ablation ladder plus today's practice (docs/simulator.md, "Systems").
#pragma once

#include <string>
#include <string_view>

namespace hydraulis {

enum class System {
  kPadding,         // static homogeneous strategy, one document per micro-batch padded to
                    // the context length
  kStaticFixed,     // static homogeneous strategy, fixed-length packing (Megatron-LM practice)
  kStaticBalanced,  // static homogeneous strategy, our dispatch + balanced packing
  kStaticCp,        // static homogeneous strategy, fixed-length packing, every document
                    // sharded over the cp ranks (Megatron-LM's context parallelism)
  kDynamicCp,       // Megatron-Core's dynamic context parallelism on the static candidate's
                    // <1, tp, 1> ranks: a cp size per document (sim/dynamic_cp.h)
  kPublished,       // dynamic heterogeneous strategies, the published planner
  kOurs,            // dynamic heterogeneous strategies, our planner
};

// "padding", "static-fixed", "static-balanced", "static-cp", "dynamic-cp", "published",
// "ours".
std::string SystemName(System system);

// The system named `name`; InvalidInput naming `what` (the caller's name for the value)
// and the value when unknown.
System ParseSystem(std::string_view name, std::string_view what = "system");

}  // namespace hydraulis
