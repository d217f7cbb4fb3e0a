#include "hydraulis/spec/model_flops.h"

namespace hydraulis {

double TrainingFlops(const ModelConfig& c, std::span<const std::int64_t> lengths) {
  const ModelSpec& s = c.shape;
  const double h = static_cast<double>(s.hidden), dim = static_cast<double>(c.head_dim());
  const double per_layer = h * static_cast<double>(s.heads) * dim * 2 +
                           2 * h * static_cast<double>(s.kv_heads) * dim +
                           3 * h * static_cast<double>(s.ffn);
  const double matmul =
      static_cast<double>(s.layers) * per_layer + static_cast<double>(s.vocab) * h;
  double tokens = 0, squares = 0;
  for (const std::int64_t len : lengths) {
    tokens += static_cast<double>(len);
    squares += static_cast<double>(len) * static_cast<double>(len);
  }
  return 6 * matmul * tokens + 6 * static_cast<double>(s.layers) * h * squares;
}

}  // namespace hydraulis
