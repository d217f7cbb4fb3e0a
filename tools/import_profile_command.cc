#include <fmt/core.h>

#include "commands.h"
#include "hydraulis/spec/spec_io.h"
#include "number_flags.h"

namespace hydraulis::tools {

Command AddImportProfileCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "import-profile", "Convert a published Hydraulis A800 profile to the project's format");
  struct Args {
    std::string input, output;
    ModelShape shape;
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
  cmd->add_option("-o,--output", args->output, "output file (stdout when absent)");
  return [args] {
    Profile p = ImportA800Profile(args->input, args->shape);
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
