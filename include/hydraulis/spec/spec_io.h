// Reading, validating and writing the project's JSON spec files (docs/spec-format.md),
// and importing the published A800 profiles. Every error is an InvalidInput naming the
// file and the field path, e.g. "p.json: schemes[3].tp: must be >= 1, got 0".
#pragma once

#include <string>

#include "hydraulis/base/file_io.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

class JsonObjectReader;

// The {cp, tp, pp} object `r` reads (an absent degree is 1): each degree, and their product,
// from 1 to 2^20 GPUs; InvalidInput naming the field otherwise.
Scheme ReadScheme(JsonObjectReader& r);

// Loads and validates a profile in the project's format.
Profile LoadProfile(const std::string& path);
Profile ParseProfile(const std::string& json_text, const std::string& source_name);

// Loads a candidate set and validates it against `profile`: every scheme profiled, the
// GPUs of every strategy <= the cluster's, every scheme's tp*cp dividing the cluster size
// (tensor groups tile the cluster; pipeline depths need not, e.g. (TP8,PP3) on 64 GPUs),
// the optimizer layout's dp*tp*pp equal to the cluster size.
CandidateSet LoadCandidates(const std::string& path, const Profile& profile);
CandidateSet ParseCandidates(const std::string& json_text, const std::string& source_name,
                             const Profile& profile);

// The profile and candidate set as JSON text in the project's format (stable key order).
std::string ProfileToJson(const Profile& profile);
std::string CandidatesToJson(const CandidateSet& candidates);

// Model shape facts the published files lack (ffn, heads, kv_heads, name).
struct ModelShape {
  std::string name;
  int ffn = 0;
  int heads = 0;
  int kv_heads = 0;
};

// Converts a published Hydraulis A800 profile (shared/reference/a800-profiles) into the
// project's format; `shape` supplies the fields that file does not carry.
Profile ImportA800Profile(const std::string& path, const ModelShape& shape);

}  // namespace hydraulis
