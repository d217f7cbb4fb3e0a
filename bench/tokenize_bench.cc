// Tokenizer speed: every text of a JSON-lines corpus encoded by one tokenizer on one
// thread, a few passes; prints one JSON object (bytes, tokens, median seconds per pass,
// MB/s). bench/tokenizer_speed.py runs it beside the `tokenizers` package on the same
// text and reports the ratio (docs/benchmarks.md).
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bench_main.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/hf_tokenizer.h"
#include "hydraulis/data/json_lines_text.h"
#include "hydraulis/data/tokenizer.h"

namespace hydraulis {
namespace {

int Run(int argc, char** argv) {
  CLI::App app{"tokenize_bench: single-thread encoding speed of a tokenizer.json"};
  std::string tokenizer_path, input, key = "text";
  int passes = 5;
  app.add_option("--tokenizer", tokenizer_path, "a Hugging Face tokenizer.json")->required();
  app.add_option("--input", input, "JSON lines")->required();
  app.add_option("--json-key", key)->capture_default_str();
  app.add_option("--passes", passes)->capture_default_str()->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  const HfTokenizer tokenizer = HfTokenizer::Load(tokenizer_path);
  std::vector<std::string> texts;
  std::size_t bytes = 0;
  JsonLinesTextReader reader(input, key);
  for (std::string text; reader.Next(text);) {
    bytes += text.size();
    texts.push_back(std::move(text));
  }
  if (bytes == 0) throw InvalidInput(input + ": no text");
  std::vector<double> seconds;
  std::size_t tokens = 0;
  for (int pass = 0; pass < passes; ++pass) {
    tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::string& text : texts) tokens += tokenizer.Encode(text).size();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  fmt::print(
      R"({{"documents": {}, "bytes": {}, "tokens": {}, "seconds": {:.4f}, "mb_per_s": {:.3f}}})"
      "\n",
      texts.size(), bytes, tokens, median, static_cast<double>(bytes) / median / 1e6);
  return 0;
}

}  // namespace
}  // namespace hydraulis

int main(int argc, char** argv) {
  return hydraulis::BenchMain("tokenize_bench", hydraulis::Run, argc, argv);
}
