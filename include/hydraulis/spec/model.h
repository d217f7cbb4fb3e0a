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
  // Width of each attention head when it is not hidden / heads (Qwen3-4B: hidden 2560, 32
  // heads of 128); 0: hidden / heads, which heads then divides.
  int head_dim = 0;
};

// Each head's width: head_dim when set, else hidden / heads.
inline int HeadDim(const ModelSpec& m) {
  return m.head_dim > 0 ? m.head_dim : (m.heads > 0 ? m.hidden / m.heads : 0);
}
// Width of all query heads together (q's and the attention output's): hidden unless the
// model sets its own head_dim.
inline double QueryWidth(const ModelSpec& m) {
  return m.head_dim > 0 ? static_cast<double>(m.heads) * m.head_dim : m.hidden;
}

// Parameters of a LLaMA-style decoder: per layer 2 H^2 (q, o) + 2 H^2 kv_heads/heads
// (k, v) + 3 H ffn (SwiGLU) + 2 H (norms), with H heads x head_dim for q, o and H
// kv_heads x head_dim for k, v when head_dim is set, plus V H (embedding) + V H (the output head,
// unless tied to the embedding) + H (final norm). In double: sizes whose product passes
// int64 are counted, not wrapped. For the 32B profile (H 6656, ffn 17920, L 60, V 30592,
// untied): 32.51e9.
double ParameterCount(const ModelSpec& model, bool tied_embeddings = false);

}  // namespace hydraulis
