#include "propose_args.h"

#include <charconv>
#include <string_view>
#include <vector>

#include "hydraulis/base/error.h"
#include "output_paths.h"
#include "parsed_option.h"

namespace hydraulis::tools {

void ProposeArgs::AddTo(CLI::App* cmd) {
  cmd->add_option("--profile", profile, "profile JSON (docs/spec-format.md)")->required();
  recompute.AddTo(cmd);
  source.AddTo(cmd);
  cmd->add_option("--lengths", lengths,
                  "dataset document lengths: text, JSON array, .jsonl or .idx; - for stdin")
      ->required();
  cmd->add_option("--gpus", gpus, "cluster size N")->required();
  cmd->add_option("--max-len", max_len,
                  "context length: documents are truncated to it; must fit some scheme")
      ->required();
  cmd->add_option("--resolution", resolution, "histogram bin width (tokens)")
      ->capture_default_str();
  cmd->add_option("--optimizer-layout", optimizer_layout,
                  "DP,TP,PP of the optimizer layout (default: the homogeneous layout whose "
                  "scheme has the largest capacity)");
  cmd->add_option("--tokens-per-batch", tokens_per_batch,
                  "global batch the histogram is scaled to; 0 plans for the whole dataset")
      ->capture_default_str();
  max_strategies_flag =
      cmd->add_option("--max-strategies", max_strategies,
                      "keep at most this many proposed strategies besides the fallback (0: all; 8 "
                      "when documents need cp and none of --top-documents, --max-strategies, "
                      "--select-batches is given)")
          ->capture_default_str();
  select_batches_flag =
      cmd->add_option(
             "--select-batches", select_batches,
             "with --max-strategies: plan this many sampled batches (at most 10000) with "
             "every proposed strategy and keep those that most lower their planned steps "
             "(0: keep by batch share; 16 with the long-context defaults, docs/propose.md)")
          ->capture_default_str();
  cmd->add_option_function<double>(
      "--select-tolerance",
      [this](double v) {
        select_tolerance = v;
        select_tolerance_given = true;
      },
      "with --select-batches: skip planning a strategy on a batch when its lower "
      "bound is within this fraction of the best plan found (e.g. 0.02; default 0)");
  select_seed_flag =
      cmd->add_option("--select-seed", select_seed,
                      "seed of the --select-batches batches (as plan --seed draws them)")
          ->capture_default_str();
  top_documents_flag =
      cmd->add_option(
             "--top-documents", top_documents,
             "also propose, for k = 2..this, a strategy per bin holding a batch's k "
             "longest documents (1: only its longest; 2 with the long-context defaults; at "
             "most 10000); capped at the "
             "expected documents of one batch, --tokens-per-batch / mean length")
          ->capture_default_str()
          ->check(CLI::Range(1, ProposeOptions::kMaxTopDocuments));
  AddEnumOption(cmd, "--cp-schemes", cp_schemes, kCpSchemesNames,
                "when the profile's context-parallel schemes take part (needed: only when "
                "the longest document fits no cp = 1 scheme)");
  cmd->add_flag("--quiet", quiet, "do not print the summary on stderr");
  cmd->add_option("-o,--output", output, "output file, written atomically; - for stdout")
      ->check(NonEmptyPath())
      ->capture_default_str();
}

OptimizerLayout ParseOptimizerLayout(const std::string& text) {
  std::vector<int> parts;
  std::string_view rest = text;
  for (;;) {
    const std::size_t comma = rest.find(',');
    const std::string_view part = rest.substr(0, comma);
    int value = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (ec != std::errc() || end != part.data() + part.size() || value < 1) {
      throw InvalidInput("--optimizer-layout \"" + text +
                         "\": expected DP,TP,PP with three integers >= 1");
    }
    parts.push_back(value);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (parts.size() != 3) {
    throw InvalidInput("--optimizer-layout \"" + text +
                       "\": expected DP,TP,PP with three integers >= 1");
  }
  return {parts[0], parts[1], parts[2]};
}

}  // namespace hydraulis::tools
