#include <fmt/core.h>

#include "commands.h"
#include "hydraulis/cost/kv_exchange.h"
#include "hydraulis/spec/spec_io.h"
#include "number_flags.h"
#include "output_paths.h"

namespace hydraulis::tools {

Command AddImportProfileCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "import-profile", "Convert a published Hydraulis A800 profile to the project's format");
  struct Args {
    std::string input, output;
    ModelShape shape;
    std::vector<int> cp;
    KvExchangeLinks links;
    std::string recompute = "none";
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--a800", args->input, "published profile (shared/reference/a800-profiles)")
      ->required();
  cmd->add_option("--name", args->shape.name, "model name")->required();
  cmd->add_option("--ffn", args->shape.ffn, "MLP hidden size")->required()->check(PositiveNumber());
  cmd->add_option("--heads", args->shape.heads, "attention heads")
      ->required()
      ->check(PositiveNumber());
  cmd->add_option("--kv-heads", args->shape.kv_heads, "key/value heads")
      ->required()
      ->check(PositiveNumber());
  cmd->add_option("--cp", args->cp,
                  "derive <cp, tp, 1> schemes for these cp sizes from the <1, tp, 1> fits "
                  "plus the key/value exchange (docs/design.md, \"Context parallelism\")")
      ->delimiter(',')
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--nvlink-gbytes-per-s", args->links.nvlink_gbytes_per_s,
                  "NVLink bandwidth per GPU for the derived cp schemes, GB/s")
      ->check(PositiveNumber());
  cmd->add_option("--network-gbits-per-s-per-node", args->links.network_gbits_per_s_per_node,
                  "network bandwidth per node for the derived cp schemes, Gb/s")
      ->check(PositiveNumber());
  cmd->add_option("--recompute-granularity", args->recompute,
                  "the activation recomputation the published profile was measured under: "
                  "none, selective or full (recorded in the profile; train must match it)")
      ->capture_default_str();
  cmd->add_option("-o,--output", args->output, "output file (stdout when absent)")
      ->check(NonEmptyPath());
  return [args] {
    RefuseOutputOverInput({"-o/--output", args->output}, {{"--a800", args->input}});
    const Recompute recompute = ParseRecompute(args->recompute, "--recompute-granularity");
    Profile p = ImportA800Profile(args->input, args->shape);
    p.recompute = recompute;
    AddDerivedContextParallelSchemes(p, args->cp, args->links);
    const std::string text = ProfileToJson(p);
    if (args->output.empty()) {
      fmt::print("{}", text);
    } else {
      WriteFileAtomically(args->output, text);
    }
    return 0;
  };
}

}  // namespace hydraulis::tools
