#include "profile_args.h"

#include <algorithm>
#include <cstddef>
#include <exception>
#include <stdexcept>
#include <vector>

#include "hydraulis/base/error.h"
#include "number_flags.h"
#include "parsed_option.h"

namespace hydraulis::tools {
namespace {

// "1x1,2x1,2x1x1" -> schemes in the given order: TPxPP, or CPxTPxPP for a cp scheme.
// InvalidInput naming --schemes.
std::vector<Scheme> ParseSchemes(const std::string& text) {
  std::vector<Scheme> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(begin, end - begin);
    std::vector<int> parts;
    try {
      std::size_t at = 0;
      while (true) {
        const std::size_t x = item.find('x', at);
        const std::string part = item.substr(at, x == std::string::npos ? x : x - at);
        if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) {
          throw std::invalid_argument("");
        }
        parts.push_back(std::stoi(part));
        if (x == std::string::npos) break;
        at = x + 1;
      }
      if (parts.size() != 2 && parts.size() != 3) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw InvalidInput("--schemes: " + QuoteForMessage(item) +
                         " is not TPxPP or CPxTPxPP (e.g. 2x1, 2x1x1)");
    }
    Scheme s;
    if (parts.size() == 3) s.cp = parts[0];
    s.tp = parts[parts.size() - 2];
    s.pp = parts.back();
    if (s.cp < 1 || s.tp < 1 || s.pp < 1) {
      throw InvalidInput("--schemes: " + QuoteForMessage(item) + ": cp, tp and pp must be >= 1");
    }
    if (std::find(out.begin(), out.end(), s) != out.end()) {
      throw InvalidInput("--schemes: " + QuoteForMessage(item) + " is listed twice");
    }
    out.push_back(s);
    begin = end + 1;
  }
  return out;
}

}  // namespace

void ProfileArgs::AddTo(CLI::App* cmd) {
  cmd->add_option("--model", options.model, "model config JSON")->required();
  AddParsedOption(cmd, "--schemes", options.schemes, ParseSchemes,
                  "comma-separated TPxPP schemes, e.g. 1x1,2x1,1x2, and CPxTPxPP cp schemes (tp 1, "
                  "pp 1; 1x1 listed too), e.g. 2x1x1: timed with every document sharded",
                  "1x1");
  cmd->add_option("--output,-o", output, "profile JSON to write (rank 0)")->required();
  cmd->add_option("--samples-json", samples_json,
                  "also write every measured micro-batch and its fitted time (rank 0)");
  cmd->add_option("--nproc", nproc,
                  "start this many ranks here (>= the largest tp); without it, join a "
                  "torchrun/Slurm job, or run alone when every tp is 1")
      ->check(PositiveNumber());
  cmd->add_option("--max-len", options.max_len, "longest document and largest micro-batch timed")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--min-len", options.min_len, "shortest single document timed")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--packed", options.packed,
                  "packed micro-batches timed (besides single documents)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--lengths", options.lengths,
                  "document lengths the packed micro-batches draw from")
      ->capture_default_str();
  cmd->add_option("--warmup", options.warmup, "untimed passes before timing")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--repeats", options.repeats, "timed passes; each sample is their median")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--memory-bytes", options.memory_bytes,
                  "memory per rank the profile's capacities are computed for")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--seed", options.seed, "model initialisation, token ids and packed lengths")
      ->capture_default_str();
  cmd->add_flag("--verbose", verbose,
                "with --nproc: forward every rank's error lines and the launcher's messages "
                "(default: a failed job prints its cause once)");
  cmd->add_option("--device", device,
                  "cpu or cuda (one GPU per rank: LOCAL_RANK); default: cuda when a GPU is "
                  "visible, else cpu");
  cmd->add_option("--precision", precision, "fp32 or bf16; default: bf16 on cuda, fp32 on cpu");
  cmd->add_option("--recompute-granularity", recompute,
                  "activation recomputation the profile is for: none, selective or full (the "
                  "stages are timed under it; train --recompute-granularity must match)")
      ->capture_default_str();
  cmd->add_option("--master-port", master_port, "rendezvous port with --nproc (0: a free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--timeout-s", timeout_s,
                  "a rank that died or hangs fails the others after this long (idle ranks wait "
                  "at a barrier while a scheme runs, so it must exceed the longest scheme)")
      ->check(PositiveNumber())
      ->capture_default_str();
}

}  // namespace hydraulis::tools
