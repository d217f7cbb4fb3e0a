#include "hydraulis/spec/model.h"

namespace hydraulis {

double ParameterCount(const ModelSpec& m, bool tied_embeddings) {
  const double h = m.hidden, l = m.layers, v = m.vocab, ffn = m.ffn;
  const double kv_share = m.heads > 0 ? static_cast<double>(m.kv_heads) / m.heads : 1.0;
  const double per_layer = 2 * h * h + 2 * h * h * kv_share + 3 * h * ffn + 2 * h;
  return l * per_layer + (tied_embeddings ? 1.0 : 2.0) * v * h + h;
}

}  // namespace hydraulis
