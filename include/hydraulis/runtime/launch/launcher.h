// The local launcher behind `hydraulis train --nproc N`: starts N ranks of a command on this
// machine with the torchrun environment, forwards their output line by line with a rank prefix,
// and stops all of them when one fails. POSIX processes only; it knows nothing of libtorch.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace hydraulis {

// Which stream of a rank a piece of output came from (and so where it is forwarded).
enum class OutputStream { kStdout, kStderr };

// Receives forwarded output one whole line at a time: `text` holds the prefix (when enabled) and
// ends with '\n' (one is added to a last line the rank left unterminated). `rank` is -1 for the
// launcher's own messages, which always go to kStderr. Called only from the launching thread.
using OutputSink = std::function<void(int rank, OutputStream stream, std::string_view text)>;

// How LaunchLocal starts and stops the ranks.
struct LaunchOptions {
  // Ranks to start on this machine, >= 1. Each rank costs two file descriptors while it runs.
  int nproc = 1;
  // Address the ranks rendezvous on (MASTER_ADDR); a numeric address or a resolvable host name.
  std::string master_addr = "127.0.0.1";
  // Port the ranks rendezvous on (MASTER_PORT), 0..65535; 0 picks a free one (PickFreePort).
  int master_port = 0;
  // After the first failure (or a forwarded signal) the other ranks get SIGTERM; those still
  // running after `grace` get SIGKILL. >= 0.
  std::chrono::milliseconds grace = std::chrono::seconds(5);
  // Put "[rank 3] " before each forwarded line.
  bool prefix_output = true;
  // One line per failure instead of one per rank: a rank's error line (stderr, starting with
  // "hydraulis: error: " or "hydraulis: internal error: ") is held instead of forwarded, the
  // first failed rank's is returned in LaunchResult::rank_error for the caller to print, and
  // the launcher's own messages about stopping the other ranks are not written. Every other
  // line is forwarded as usual. False: everything is forwarded (--verbose).
  bool hold_rank_errors = false;
  // Where forwarded lines and the launcher's messages go; empty writes them to this process's
  // file descriptors 1 and 2 (one write per line, so lines of different ranks never mix).
  OutputSink output;
};

// How a launch ended.
struct LaunchResult {
  // 0 when every rank exited 0; otherwise the first failed rank's exit code, 128 + signal when it
  // was killed by a signal, 127 when it could not be started, or 128 + signal when this process
  // was interrupted by SIGINT/SIGTERM.
  int exit_code = 0;
  // Empty on success; otherwise one line saying why, e.g. "rank 1 exited with code 3".
  std::string failure;
  // The rank that failed first; -1 on success or when this process was interrupted.
  int failed_rank = -1;
  // The MASTER_PORT the ranks were given (the picked one when options.master_port was 0).
  int master_port = 0;
  // With hold_rank_errors: the error line the first failed rank wrote (without its newline
  // or a prefix), empty when it wrote none (killed by a signal, exited without one).
  std::string rank_error;
};

// Starts `argv` (program looked up in PATH, then its arguments) options.nproc times, each in its
// own process group, with this process's environment plus RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun's convention; single node, so
// LOCAL_RANK == RANK). Forwards each rank's stdout and stderr line by line to options.output,
// and returns when every rank's process has exited and been reaped. Output a rank's descendants
// write after the rank's own process exited is not forwarded.
//
// The first rank that exits non-zero or by a signal (or cannot be started) makes the launcher
// report it on stderr, send SIGTERM to the process group of every rank still running, and
// SIGKILL after options.grace; later exits of those ranks do not change the result. SIGINT or
// SIGTERM received meanwhile is forwarded the same way (a second one sends SIGKILL). The launcher's
// handlers for SIGINT, SIGTERM and SIGCHLD are installed only for the duration of the call, so only
// one LaunchLocal may run per process. Children get no file descriptor of this process other than
// 0, 1 and 2.
//
// Throws InvalidInput naming the field when argv or options are invalid, and Error when the
// system refuses resources (pipes, fork) or another LaunchLocal is running; ranks already
// started are then killed and reaped before the throw.
LaunchResult LaunchLocal(const std::vector<std::string>& argv, const LaunchOptions& options);

// Returns a TCP port that was free on `addr` a moment ago: binds port 0 there, reads the port
// the system chose, and closes the socket (another process may take it before the ranks do).
// Throws InvalidInput when `addr` does not resolve, Error when no socket can be bound.
int PickFreePort(const std::string& addr);

// For commands with --nproc (train, profile): true in a rank LaunchSelf started, so that
// rank joins the job instead of launching again.
bool IsLaunchedRank();

// Re-runs this process's command line `argv` (argv[0] is replaced by this executable) as
// `nproc` local ranks marked as launched, reports a failure on stderr, and returns the exit
// code of the job (0 when every rank succeeded). A failure is one line: the first failed
// rank's own error line when it wrote one (the cause; the same message from other ranks and
// their consequences are dropped), else the launcher's ("rank 1 was killed by signal 9 (SIGKILL)").
// `verbose` forwards every rank's lines and the launcher's messages instead.
int LaunchSelf(std::vector<std::string> argv, int nproc, int master_port, bool verbose = false);

// glibc malloc settings for CPU training and profiling: never mmap a block of its own, never
// return the heap to the kernel, as a GPU caching allocator keeps device memory. Otherwise
// every large tensor (a long document's attention scores, a step's logits) is page-faulted
// afresh, and a CPU step spends much of its time in the kernel (docs/runtime.md, "Profiler",
// has the figure). Read when the process starts: `train`, `profile` and gpu_train_bench
// restart themselves once with them (RestartSelfWith) unless GLIBC_TUNABLES is set.
inline constexpr char kAllocatorTunables[] =
    "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1099511627776";

// An environment variable and the value a restarted process gets.
struct EnvironmentSetting {
  const char* name;
  const char* value;
};

// Replaces this process with this executable run again on `argv` (argv[0] is kept), with
// `settings` set in its environment (overwriting): for settings libraries read only when a
// process starts (glibc's allocator tunables, BLAS thread counts). Returns only when exec
// fails, with errno set; the caller then goes on as it is.
void RestartSelfWith(const std::vector<EnvironmentSetting>& settings,
                     const std::vector<std::string>& argv);

}  // namespace hydraulis
