#include "hydraulis/spec/model.h"

namespace hydraulis {

double ParameterCount(const ModelSpec& m, bool tied_embeddings) {
  const double h = m.hidden, l = m.layers, v = m.vocab, ffn = m.ffn;
  const double kv_share = m.heads > 0 ? static_cast<double>(m.kv_heads) / m.heads : 1.0;
  // The q, k, v and o projections; with head_dim set they are not H wide.
  const double attention = m.head_dim > 0 ? 2 * h * static_cast<double>(m.heads + m.kv_heads) *
                                                static_cast<double>(m.head_dim)
                                          : 2 * h * h + 2 * h * h * kv_share;
  const double per_layer = attention + 3 * h * ffn + 2 * h;
  return l * per_layer + (tied_embeddings ? 1.0 : 2.0) * v * h + h;
}

}  // namespace hydraulis
