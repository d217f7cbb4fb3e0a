#include "bundled_files.h"

#include <unistd.h>

#include <filesystem>

#include "hydraulis/runtime/job/training_run.h"

namespace hydraulis::tools {
namespace {

// The build directory this executable lives in (build/<preset>, above its tools/), or ""
// when it cannot be read.
std::string BuildDirectory() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "";
  std::string path(exe, static_cast<std::size_t>(n));
  path = path.substr(0, path.rfind('/'));  // .../tools
  return path.substr(0, path.rfind('/'));
}

}  // namespace

std::string DefaultCorpusPrefix() {
  const std::string build = BuildDirectory();
  return build.empty() ? "demo-corpus" : build + "/demo-corpus";
}

std::string EngineProfilePath() {
  if (std::filesystem::exists(kEngineProfile)) return kEngineProfile;
  const std::string build = BuildDirectory();
  const std::string beside = build + "/../../" + kEngineProfile;
  return !build.empty() && std::filesystem::exists(beside) ? beside : kEngineProfile;
}

}  // namespace hydraulis::tools
