// Shape of a decoder-only Transformer, as far as planning and memory need it.
#pragma once

#include <string>

namespace hydraulis {

// A LLaMA-style model. All sizes are counts (> 0); kv_heads divides heads.
struct ModelSpec {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int ffn = 0;
  int heads = 0;
  int kv_heads = 0;
  int vocab = 0;
};

}  // namespace hydraulis
