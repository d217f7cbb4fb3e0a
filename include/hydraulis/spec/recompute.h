// Activation recomputation: what a stage keeps from its forward for the backward, and
// what it computes again instead (docs/design.md, "Activation recomputation").
#pragma once

#include <string>

namespace hydraulis {

// none: every activation is kept. selective (Megatron's --recompute-granularity
// selective): the attention core and the MLP's activation function are run again in the
// backward from their inputs, so what they keep inside (the attention's grouped-query key
// and value copies off the flash path, the SwiGLU's silu) is not kept. full: each layer
// keeps only its input and runs its whole forward again in the backward.
enum class Recompute { kNone, kSelective, kFull };

// "none", "selective", "full".
std::string ToString(Recompute mode);
// InvalidInput naming `what` (the flag or field the text came from) and the accepted values.
Recompute ParseRecompute(const std::string& text, const std::string& what);

}  // namespace hydraulis
