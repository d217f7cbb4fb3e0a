// Model configs: hydraulis' own (`--model`, ParseModelConfig) when the first byte is even,
// Hugging Face's config.json (ParseHfConfig) when odd; a valid one is checked against the
// constraints the runtime relies on, and a Hugging Face one must round-trip.
#include "fuzz_input.h"
#include "hydraulis/spec/hf_config.h"
#include "hydraulis/spec/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hydraulis;
  if (size == 0) return 0;
  const std::string text = fuzz::AsText(data + 1, size - 1);
  const bool hf = data[0] % 2 == 1;
  fuzz::ExpectValidOrInvalidInput([&] {
    const ModelConfig c =
        hf ? ParseHfConfig(text, "config.json") : ParseModelConfig(text, "model.json");
    // heads divides hidden unless the head width is given (head_dim).
    fuzz::Require(c.shape.heads >= 1 &&
                      (c.shape.head_dim > 0 || c.shape.hidden % c.shape.heads == 0) &&
                      c.shape.kv_heads >= 1 && c.shape.heads % c.shape.kv_heads == 0 &&
                      c.head_dim() % 2 == 0 && c.shape.vocab >= 1 && c.norm_eps > 0,
                  "a valid config satisfies ValidateModelConfig");
    if (hf) {
      const ModelConfig back = ParseHfConfig(HfConfigJson(c, "float32"), "written.json");
      fuzz::Require(back.shape.hidden == c.shape.hidden &&
                        back.shape.kv_heads == c.shape.kv_heads &&
                        back.head_dim() == c.head_dim() && back.rope_theta == c.rope_theta &&
                        back.norm_eps == c.norm_eps,
                    "a Hugging Face config round-trips");
    }
  });
  return 0;
}
