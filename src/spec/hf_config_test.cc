#include "hydraulis/spec/hf_config.h"

#include <gtest/gtest.h>

#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

// A tiny LLaMA's config.json as transformers' save_pretrained writes it (its usual fields).
const char* kTinyLlama = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 64,
  "initializer_range": 0.02,
  "intermediate_size": 172,
  "max_position_embeddings": 2048,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "float32",
  "transformers_version": "4.57.1",
  "use_cache": true,
  "vocab_size": 256
})";

std::string ErrorOf(const std::string& text) {
  try {
    ParseHfConfig(text, "config.json");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

// `text` with `from` replaced by `to`.
std::string Replaced(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

// kTinyLlama with `from` replaced by `to`.
std::string With(const std::string& from, const std::string& to) {
  return Replaced(kTinyLlama, from, to);
}

// Sizes too large for their int, in Hugging Face's names: refused as too large.
TEST(HfConfigTest, SizesBeyondAnIntNameTheField) {
  EXPECT_EQ(ErrorOf(With("\"vocab_size\": 256", "\"vocab_size\": 18446744073709551615")),
            "config.json: vocab_size: must be <= 2147483647, got 18446744073709551615");
  EXPECT_EQ(ErrorOf(With("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1e30")),
            "config.json: num_hidden_layers: must be <= 2147483647, got 1e+30");
  EXPECT_EQ(ErrorOf(With("\"head_dim\": 16", "\"head_dim\": 9223372036854775808")),
            "config.json: head_dim: must be <= 2147483647, got 9223372036854775808");
}

TEST(HfConfigTest, ReadsTransformersLlamaConfig) {
  const ModelConfig c = ParseHfConfig(kTinyLlama, "config.json");
  EXPECT_EQ(c.shape.hidden, 64);
  EXPECT_EQ(c.shape.layers, 2);
  EXPECT_EQ(c.shape.heads, 4);
  EXPECT_EQ(c.shape.kv_heads, 2);
  EXPECT_EQ(c.shape.ffn, 172);
  EXPECT_EQ(c.shape.vocab, 256);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.norm_eps, 1e-5);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.shape.name, "hf-llama");
}

TEST(HfConfigTest, DefaultsAreTransformers) {
  const ModelConfig c = ParseHfConfig(
      R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
          "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 300,
          "tie_word_embeddings": true, "_name_or_path": "tiny"})",
      "config.json");
  EXPECT_EQ(c.shape.kv_heads, 4);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.shape.name, "tiny");
}

TEST(HfConfigTest, WritesWhatItReads) {
  ModelConfig c = ParseHfConfig(kTinyLlama, "config.json");
  c.tie_embeddings = true;
  c.rope_theta = 500000.0;
  const ModelConfig back = ParseHfConfig(HfConfigJson(c, "bfloat16"), "written.json");
  EXPECT_EQ(back.shape.hidden, c.shape.hidden);
  EXPECT_EQ(back.shape.kv_heads, c.shape.kv_heads);
  EXPECT_EQ(back.shape.ffn, c.shape.ffn);
  EXPECT_EQ(back.rope_theta, 500000.0);
  EXPECT_EQ(back.norm_eps, c.norm_eps);
  EXPECT_TRUE(back.tie_embeddings);
  EXPECT_NE(HfConfigJson(c, "bfloat16").find("\"torch_dtype\": \"bfloat16\""), std::string::npos);
}

TEST(HfConfigTest, RefusesWhatWouldComputeAnotherModel) {
  EXPECT_NE(ErrorOf(With("\"model_type\": \"llama\"", "\"model_type\": \"gemma\""))
                .find("config.json: model_type: 'gemma' is not supported"),
            std::string::npos);
  EXPECT_NE(ErrorOf(With("\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"linear\"}"))
                .find("config.json: rope_scaling: RoPE scaling is not supported"),
            std::string::npos);
  EXPECT_NE(ErrorOf(With("\"attention_bias\": false", "\"attention_bias\": true"))
                .find("config.json: attention_bias: biases are not supported"),
            std::string::npos);
  EXPECT_NE(ErrorOf(With("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\""))
                .find("config.json: hidden_act: only \"silu\""),
            std::string::npos);
  EXPECT_NE(ErrorOf(With("\"head_dim\": 16", "\"head_dim\": 15"))
                .find("config.json: head_dim: head_dim must be even for rotary embedding, got 15"),
            std::string::npos)
      << ErrorOf(With("\"head_dim\": 16", "\"head_dim\": 15"));
  EXPECT_NE(
      ErrorOf(With("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3"))
          .find("config.json: num_key_value_heads: must divide num_attention_heads (4), got 3"),
      std::string::npos);
  EXPECT_NE(ErrorOf(With("\"vocab_size\": 256", "\"vocab_size\": 0"))
                .find("config.json: vocab_size: must be >= 1"),
            std::string::npos);
  EXPECT_NE(ErrorOf(With("\"model_type\": \"llama\",", "")).find("model_type: missing"),
            std::string::npos);
  EXPECT_NE(ErrorOf(With("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": 0"))
                .find("tie_word_embeddings: expected true or false"),
            std::string::npos);
}

}  // namespace
}  // namespace hydraulis

namespace hydraulis {
namespace {

// A Mistral config.json: LLaMA's network with a sliding window. Read as the "mistral"
// architecture with its window, written back as MistralForCausalLM, kept through our model
// JSON; documents longer than the window are refused, and another family names its
// architectures.
TEST(HfConfigTest, MistralKeepsItsArchitectureAndWindow) {
  std::string text = With("\"model_type\": \"llama\"", "\"model_type\": \"mistral\"");
  text = text.replace(text.find("\"rope_scaling\": null"), 20, "\"sliding_window\": 4096");
  const ModelConfig c = ParseHfConfig(text, "config.json");
  EXPECT_EQ(c.architecture, "mistral");
  EXPECT_EQ(c.sliding_window, 4096);
  const std::string written = HfConfigJson(c, "float32");
  EXPECT_NE(written.find("\"MistralForCausalLM\""), std::string::npos);
  EXPECT_NE(written.find("\"sliding_window\": 4096"), std::string::npos);
  EXPECT_EQ(ParseHfConfig(written, "out.json").sliding_window, 4096);
  const ModelConfig back = ParseModelConfig(ModelConfigToJson(c), "model.json");
  EXPECT_EQ(back.architecture, "mistral");
  EXPECT_EQ(back.sliding_window, 4096);
  EXPECT_NO_THROW(RequireWithinSlidingWindow(c, 4096, "--max-len", "config.json"));
  EXPECT_THROW(RequireWithinSlidingWindow(c, 4097, "--max-len", "config.json"), InvalidInput);
  // No window (null): any length.
  std::string open = text;
  open.replace(open.find("\"sliding_window\": 4096"), 22, "\"sliding_window\": null");
  EXPECT_EQ(ParseHfConfig(open, "config.json").sliding_window, 0);
  // A LLaMA config names no window, and another family is refused with its architectures.
  EXPECT_EQ(ModelConfigToJson(ParseHfConfig(kTinyLlama, "c.json")).find("architecture"),
            std::string::npos);
  EXPECT_NE(ErrorOf(With("\"model_type\": \"llama\"", "\"model_type\": \"qwen2_moe\""))
                .find("'qwen2_moe' is not supported (architectures 'LlamaForCausalLM'); "
                      "supported: \"llama\" (LlamaForCausalLM), \"mistral\" "
                      "(MistralForCausalLM), \"qwen2\" (Qwen2ForCausalLM), \"qwen3\" "
                      "(Qwen3ForCausalLM)"),
            std::string::npos);
}

// A Qwen3 config.json as transformers 5 writes it: RoPE's base inside rope_parameters,
// layer_types, head_dim given.
const char* kTinyQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 64,
  "intermediate_size": 172,
  "layer_types": ["full_attention", "full_attention"],
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
  "sliding_window": null,
  "tie_word_embeddings": true,
  "use_sliding_window": false,
  "vocab_size": 256
})";

std::string QwenWith(const std::string& from, const std::string& to) {
  return Replaced(kTinyQwen3, from, to);
}

// Qwen2 (q/k/v biases) and Qwen3 (q/k norms) read with RoPE's base from rope_parameters,
// written back as their own class with the fields transformers needs to build the same
// network, and kept through our model JSON.
TEST(HfConfigTest, QwenFamiliesReadAndWriteBack) {
  const ModelConfig q3 = ParseHfConfig(kTinyQwen3, "config.json");
  EXPECT_EQ(q3.architecture, "qwen3");
  EXPECT_TRUE(q3.qk_norm());
  EXPECT_FALSE(q3.qkv_bias());
  EXPECT_EQ(q3.rope_theta, 1e6);
  EXPECT_EQ(q3.sliding_window, 0);
  EXPECT_TRUE(q3.tie_embeddings);
  const std::string written = HfConfigJson(q3, "float32");
  EXPECT_NE(written.find("\"Qwen3ForCausalLM\""), std::string::npos);
  EXPECT_NE(written.find("\"head_dim\": 16"), std::string::npos);  // not the default 128
  const ModelConfig back = ParseHfConfig(written, "out.json");
  EXPECT_EQ(back.architecture, "qwen3");
  EXPECT_EQ(back.rope_theta, 1e6);
  EXPECT_EQ(ParseModelConfig(ModelConfigToJson(q3), "m.json").architecture, "qwen3");

  const std::string qwen2_text = QwenWith("\"model_type\": \"qwen3\"", "\"model_type\": \"qwen2\"");
  const ModelConfig q2 = ParseHfConfig(qwen2_text, "config.json");
  EXPECT_TRUE(q2.qkv_bias());
  EXPECT_FALSE(q2.qk_norm());
  const std::string written2 = HfConfigJson(q2, "bfloat16");
  EXPECT_NE(written2.find("\"Qwen2ForCausalLM\""), std::string::npos);
  EXPECT_NE(written2.find("\"use_sliding_window\": false"), std::string::npos);
  EXPECT_EQ(ParseHfConfig(written2, "out.json").architecture, "qwen2");
  // Qwen2's own biases: transformers ignores attention_bias there, and so does the reader.
  EXPECT_EQ(ParseHfConfig(With("\"model_type\": \"llama\"", "\"model_type\": \"qwen2\""), "c.json")
                .architecture,
            "qwen2");
}

// A head width other than hidden / heads (Qwen3-4B: hidden 2560, 32 heads of 128) is kept,
// through our model JSON and back into config.json; Qwen3's absent head_dim is 128.
TEST(HfConfigTest, HeadWidthOtherThanHiddenOverHeads) {
  const ModelConfig wide = ParseHfConfig(With("\"head_dim\": 16", "\"head_dim\": 32"), "c.json");
  EXPECT_EQ(wide.head_dim(), 32);
  EXPECT_EQ(wide.shape.head_dim, 32);
  EXPECT_EQ(ParseHfConfig(HfConfigJson(wide, "float32"), "out.json").head_dim(), 32);
  const ModelConfig back = ParseModelConfig(ModelConfigToJson(wide), "m.json");
  EXPECT_EQ(back.head_dim(), 32);
  EXPECT_EQ(WeightLayoutDifference(wide, ParseHfConfig(kTinyLlama, "c.json")),
            "head_dim: 32 vs 16");
  // hidden / heads is not kept: the configs written before stay as they were.
  EXPECT_EQ(ParseHfConfig(kTinyLlama, "c.json").shape.head_dim, 0);
  EXPECT_EQ(ModelConfigToJson(ParseHfConfig(kTinyLlama, "c.json")).find("head_dim"),
            std::string::npos);
  std::string no_head_dim = kTinyQwen3;
  no_head_dim.erase(no_head_dim.find("\"head_dim\": 16,"), 15);
  const ModelConfig qwen3 = ParseHfConfig(no_head_dim, "config.json");
  EXPECT_EQ(qwen3.head_dim(), 128);
  EXPECT_NE(HfConfigJson(qwen3, "float32").find("\"head_dim\": 128"), std::string::npos);
  // Our JSON: heads need not divide hidden once head_dim is given; an odd width is refused.
  const std::string odd = R"({"name": "m", "layers": 1, "hidden": 60, "ffn": 8, "heads": 8,
                              "kv_heads": 4, "vocab": 16, "head_dim": 7})";
  try {
    ParseModelConfig(odd, "m.json");
    ADD_FAILURE() << "an odd head_dim was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("m.json: head_dim: head_dim must be even"),
              std::string::npos)
        << e.what();
  }
  std::string even = odd;
  even.replace(even.find("\"head_dim\": 7"), 13, "\"head_dim\": 8");
  EXPECT_EQ(ParseModelConfig(even, "m.json").head_dim(), 8);
}

// What the model here would compute differently is refused by name.
TEST(HfConfigTest, QwenFieldsItCannotHonourAreRefused) {
  EXPECT_NE(ErrorOf(QwenWith("\"attention_bias\": false", "\"attention_bias\": true"))
                .find("config.json: attention_bias: biases are not supported"),
            std::string::npos);
  EXPECT_NE(ErrorOf(QwenWith("\"use_sliding_window\": false", "\"use_sliding_window\": true"))
                .find("config.json: use_sliding_window: sliding-window attention on some layers"),
            std::string::npos);
  EXPECT_NE(ErrorOf(QwenWith("\"full_attention\", \"full_attention\"",
                             "\"full_attention\", \"sliding_attention\""))
                .find("config.json: layer_types: sliding-window attention"),
            std::string::npos);
  EXPECT_NE(ErrorOf(QwenWith("\"rope_type\": \"default\"", "\"rope_type\": \"yarn\""))
                .find("config.json: rope_parameters.rope_type: RoPE scaling is not supported"),
            std::string::npos)
      << ErrorOf(QwenWith("\"rope_type\": \"default\"", "\"rope_type\": \"yarn\""));
  // A LLaMA written by transformers 5 keeps its base in rope_parameters too.
  EXPECT_EQ(ParseHfConfig(
                With("\"rope_theta\": 10000.0", "\"rope_parameters\": {\"rope_theta\": 500000.0}"),
                "c.json")
                .rope_theta,
            500000.0);
}

}  // namespace
}  // namespace hydraulis
