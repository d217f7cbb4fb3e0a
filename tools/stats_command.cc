// `hydraulis stats`: count, percentiles and a bucketed length histogram of a dataset.
#include <fmt/core.h>

#include <memory>
#include <string>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/length_source.h"
#include "hydraulis/data/length_stats.h"
#include "length_flags.h"

namespace hydraulis::tools {
namespace {

struct StatsArgs {
  std::string lengths;
  LengthFlags source;
  std::int64_t max_len = 0;
  std::int64_t resolution = 0;
};

constexpr double kPercent = 100.0;

// "-1234567" -> "-1,234,567": counts of millions of documents are read at a glance.
std::string GroupDigits(const std::string& number) {
  const bool negative = !number.empty() && number[0] == '-';
  const std::string digits = negative ? number.substr(1) : number;
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return negative ? "-" + out : out;
}

std::string Grouped(std::int64_t v) { return GroupDigits(std::to_string(v)); }

// 1013.648 -> "1,013.6" (on the digits, so no value is too large to print).
std::string GroupedFixed(double v) {
  const std::string fixed = fmt::format("{:.1f}", v);
  const std::size_t dot = fixed.find('.');
  if (dot == std::string::npos) return fixed;  // inf, nan
  return GroupDigits(fixed.substr(0, dot)) + fixed.substr(dot);
}

int RunStats(const StatsArgs& a) {
  const LengthSourceOptions source = a.source.ToOptions();
  LengthStatsOptions options;
  options.max_len = a.max_len;
  options.resolution_tokens = a.resolution;
  ValidateLengthStatsOptions(options);
  const std::vector<std::int64_t> lengths = LoadLengths(a.lengths, source);
  const LengthStats s = ComputeLengthStats(lengths, options);

  fmt::print("{}: {} documents, {} tokens\n", a.lengths == "-" ? "<stdin>" : a.lengths,
             Grouped(s.documents), Grouped(s.tokens));
  fmt::print("mean {}  min {}  p50 {}  p90 {}  p99 {}  max {}\n", GroupedFixed(s.mean),
             Grouped(s.min), Grouped(s.p50), Grouped(s.p90), Grouped(s.p99), Grouped(s.max));
  if (a.max_len > 0) {
    const double lost = static_cast<double>(s.truncated_tokens) /
                        static_cast<double>(s.tokens + s.truncated_tokens);
    fmt::print("cut to {} tokens: {} of {} documents truncated, {} tokens lost ({:.2f}%)\n",
               Grouped(a.max_len), Grouped(s.truncated_documents), Grouped(s.documents),
               Grouped(s.truncated_tokens), kPercent * lost);
  }
  fmt::print("{:>21} {:>11} {:>7} {:>8} {:>10} {:>10} {:>12}\n", "length", "docs", "docs %",
             "tokens %", "tokens^2 %", "cum docs %", "cum tokens %");
  double cum_docs = 0, cum_tokens = 0;
  for (const LengthBucket& b : s.buckets) {
    cum_docs += b.document_share;
    cum_tokens += b.token_share;
    // Empty buckets carry no information; the ranges printed still show the gap.
    if (b.documents == 0) continue;
    fmt::print("{:>9} - {:>9} {:>11} {:>7.2f} {:>8.2f} {:>10.2f} {:>10.2f} {:>12.2f}\n",
               Grouped(b.min_tokens), Grouped(b.max_tokens), Grouped(b.documents),
               kPercent * b.document_share, kPercent * b.token_share, kPercent * b.square_share,
               kPercent * cum_docs, kPercent * cum_tokens);
  }
  return 0;
}

}  // namespace

Command AddStatsCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "stats", "Print count, percentiles and a length histogram (token and attention shares)");
  auto a = std::make_shared<StatsArgs>();
  cmd->add_option("--lengths", a->lengths,
                  "dataset: .txt (one integer per line), .jsonl, Megatron-LM .idx; - for stdin")
      ->required();
  cmd->add_option("--max-len", a->max_len,
                  "context length: documents are cut to it first (0: no cut)")
      ->capture_default_str();
  cmd->add_option("--resolution", a->resolution,
                  "bucket width in tokens (0: powers of two from 128)")
      ->capture_default_str();
  a->source.AddTo(cmd);
  return [a] { return RunStats(*a); };
}

}  // namespace hydraulis::tools
