// Runs the installed training runtime's Transformer: the logits of two documents packed
// into one micro-batch must equal each document's alone (attention never crosses a
// document). Prints the largest difference; exits 1 when it is above 1e-5.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"

int main() {
  try {
    hydraulis::ModelConfig config;
    config.shape = {"consumer", 2, 32, 64, 4, 2, 50, 0};
    const hydraulis::Transformer model(config, /*seed=*/7);
    const std::vector<std::int64_t> a = {1, 5, 9, 3, 3, 8, 2};
    const std::vector<std::int64_t> b = {4, 4, 11, 0, 6};
    const at::Tensor packed = model.Forward(hydraulis::PackDocuments({a, b}, config.shape.vocab));
    const at::Tensor alone =
        at::cat({model.Forward(hydraulis::PackDocuments({a}, config.shape.vocab)),
                 model.Forward(hydraulis::PackDocuments({b}, config.shape.vocab))});
    const double diff = (packed - alone).abs().max().item<double>();
    std::printf("packed_forward: %lld logits, max difference %.3g\n",
                static_cast<long long>(packed.numel()), diff);
    return diff <= 1e-5 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "packed_forward: %s\n", e.what());
    return 1;
  }
}
