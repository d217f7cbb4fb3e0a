// The local launcher (launcher.h): fork/exec of the ranks, one poll() loop over their output
// pipes and a self-pipe fed by the signal handlers, and the stop-on-first-failure policy.
#include "hydraulis/runtime/launch/launcher.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "hydraulis/base/error.h"
#include "hydraulis/base/peer_lost.h"

extern char** environ;

namespace hydraulis {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExecFailedExitCode = 127;  // what shells return for "command not found"
constexpr int kSignalExitBase = 128;      // shells report death by signal s as 128 + s
constexpr int kMaxPort = 65535;
constexpr std::size_t kReadChunkBytes = 64 * 1024;
// Output without a newline (progress bars) is forwarded in pieces of at most this size, so a
// rank cannot make the launcher buffer without bound.
constexpr std::size_t kMaxLineBytes = 64 * 1024;
// After a rank's process exited, at most this much of its leftover output is read, so a
// descendant that keeps writing cannot hold the launcher.
constexpr std::size_t kMaxDrainBytes = 1024 * 1024;
// SIGCHLD normally wakes the loop; this bounds the wait if it is lost (another thread blocking
// it, a handler replaced behind our back). It only affects latency, never results.
constexpr int kPollFallbackMs = 200;
// Environment variables the launcher sets; inherited values of the same names are dropped.
constexpr std::array<std::string_view, 6> kLaunchVariables = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};

std::string ErrnoText(int err) { return std::strerror(err); }

// Name of the common signals, so a failure reads "signal 9 (SIGKILL)"; empty for others.
std::string_view SignalName(int sig) {
  switch (sig) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "";
  }
}

std::string DescribeSignal(int sig) {
  std::string text = "signal " + std::to_string(sig);
  std::string_view name = SignalName(sig);
  if (!name.empty()) text += " (" + std::string(name) + ")";
  return text;
}

std::string RankCount(int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

// Owns one file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  Fd read;
  Fd write;
};

[[noreturn]] void ThrowSystemError(const std::string& what, int err) {
  std::string message = what + ": " + ErrnoText(err);
  if (err == EMFILE || err == ENFILE) {
    message += "; raise the open-file limit (ulimit -n) or start fewer ranks";
  } else if (err == EAGAIN || err == ENOMEM) {
    message += "; the system is out of processes or memory, start fewer ranks";
  }
  throw Error(message);
}

void SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    ThrowSystemError("cannot make a launcher pipe non-blocking", errno);
  }
}

// Both ends close on exec. Both are kept above 2, so that redirecting a child's stdout and
// stderr onto them can never overwrite one end with the other, even if this process was
// started with 0, 1 or 2 closed.
Pipe MakePipe(const char* purpose) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) ThrowSystemError(std::string("cannot create ") + purpose, errno);
  Pipe pipe{Fd(fds[0]), Fd(fds[1])};
  for (Fd* end : {&pipe.read, &pipe.write}) {
    if (end->get() > STDERR_FILENO) continue;
    int moved = fcntl(end->get(), F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    if (moved < 0) ThrowSystemError(std::string("cannot create ") + purpose, errno);
    *end = Fd(moved);
  }
  return pipe;
}

// Signal handling: the handlers only write the signal number to a self-pipe, which the launch
// loop polls along with the ranks' output.
std::atomic<int> g_signal_write_fd{-1};
std::atomic<bool> g_launch_running{false};

extern "C" void OnLauncherSignal(int sig) {
  int saved_errno = errno;
  int fd = g_signal_write_fd.load();
  if (fd >= 0) {
    auto byte = static_cast<unsigned char>(sig);
    // A full pipe drops the byte: the loop is awake anyway and reaps every rank each time.
    [[maybe_unused]] ssize_t written = ::write(fd, &byte, 1);
  }
  errno = saved_errno;
}

constexpr std::array<int, 3> kHandledSignals = {SIGINT, SIGTERM, SIGCHLD};

// Installs the launcher's handlers for the lifetime of one launch and restores the previous
// ones after. SIGINT/SIGTERM that this process was told to ignore (nohup, a background job) stay
// ignored.
class SignalScope {
 public:
  SignalScope() {
    if (g_launch_running.exchange(true)) {
      throw Error("a launch is already running in this process; start one launch at a time");
    }
    try {
      pipe_ = MakePipe("the launcher's signal pipe");
      SetNonBlocking(pipe_.read.get());
      SetNonBlocking(pipe_.write.get());
      g_signal_write_fd.store(pipe_.write.get());
      struct sigaction action {};
      action.sa_handler = OnLauncherSignal;
      sigemptyset(&action.sa_mask);
      for (std::size_t i = 0; i < kHandledSignals.size(); ++i) {
        int sig = kHandledSignals[i];
        action.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
        sigaction(sig, nullptr, &previous_[i]);
        if (sig != SIGCHLD && previous_[i].sa_handler == SIG_IGN) continue;
        sigaction(sig, &action, nullptr);
        installed_[i] = true;
      }
    } catch (...) {
      Restore();
      throw;
    }
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  ~SignalScope() { Restore(); }

  int read_fd() const { return pipe_.read.get(); }

 private:
  void Restore() {
    for (std::size_t i = 0; i < kHandledSignals.size(); ++i) {
      if (installed_[i]) sigaction(kHandledSignals[i], &previous_[i], nullptr);
      installed_[i] = false;
    }
    g_signal_write_fd.store(-1);
    g_launch_running.store(false);
  }

  Pipe pipe_;
  std::array<struct sigaction, kHandledSignals.size()> previous_{};
  std::array<bool, kHandledSignals.size()> installed_{};
};

// Blocks the handled signals in this thread between fork and the parent's bookkeeping, so the
// child cannot run the parent's handler (and write to its self-pipe) before exec.
class BlockSignals {
 public:
  BlockSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kHandledSignals) sigaddset(&set, sig);
    pthread_sigmask(SIG_BLOCK, &set, &previous_);
  }
  BlockSignals(const BlockSignals&) = delete;
  BlockSignals& operator=(const BlockSignals&) = delete;
  ~BlockSignals() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

 private:
  sigset_t previous_;
};

// Everything below up to exec runs in the forked child, where only async-signal-safe calls are
// allowed (the parent may have other threads holding locks).
[[noreturn]] void ChildFail(int status_fd, int err) {
  [[maybe_unused]] ssize_t written = ::write(status_fd, &err, sizeof(err));
  _exit(kExecFailedExitCode);
}

// Closes every descriptor >= 3 except `keep`, so the ranks inherit nothing of this process
// (sockets, files opened without O_CLOEXEC by libraries) but stdin and their output pipes.
void ChildCloseFds(int keep, int fallback_max_fd) {
#ifdef SYS_close_range
  bool low_done =
      keep == STDERR_FILENO + 1 || syscall(SYS_close_range, STDERR_FILENO + 1, keep - 1, 0) == 0;
  if (low_done && syscall(SYS_close_range, keep + 1, ~0U, 0) == 0) return;
#endif
  for (int fd = STDERR_FILENO + 1; fd < fallback_max_fd; ++fd) {
    if (fd != keep) ::close(fd);
  }
}

[[noreturn]] void ChildExec(char* const* argv, char** envp, int out_fd, int err_fd, int status_fd,
                            int fallback_max_fd) {
  setpgid(0, 0);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int sig : kHandledSignals) {
    struct sigaction current {};
    sigaction(sig, nullptr, &current);
    // Inherited SIG_IGN stays (exec keeps it too); only our handlers are undone.
    if (current.sa_handler != SIG_IGN) sigaction(sig, &default_action, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0)
    ChildFail(status_fd, errno);
  ChildCloseFds(status_fd, fallback_max_fd);
  environ = envp;
  execvp(argv[0], argv);
  ChildFail(status_fd, errno);
}

int FallbackMaxFd() {
  constexpr int kDefault = 65536;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kDefault;
  return static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20));
}

bool IsLaunchVariable(std::string_view entry) {
  std::size_t eq = entry.find('=');
  std::string_view name = entry.substr(0, eq);
  return std::find(kLaunchVariables.begin(), kLaunchVariables.end(), name) !=
         kLaunchVariables.end();
}

void WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd wait{fd, POLLOUT, 0};
        ::poll(&wait, 1, -1);
        continue;
      }
      return;  // nowhere left to report it; the ranks' results still stand
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

// One of a rank's output streams: the read end of its pipe and the unfinished last line.
struct RankStream {
  OutputStream kind;
  Fd fd;
  std::string pending;
};

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;  // started and not yet reaped
  RankStream out{OutputStream::kStdout, {}, {}};
  RankStream err{OutputStream::kStderr, {}, {}};
  std::string first_error;  // hold_rank_errors: the first error line it wrote
};

bool IsRankErrorLine(std::string_view line) {
  return line.rfind("hydraulis: error: ", 0) == 0 ||
         line.rfind("hydraulis: internal error: ", 0) == 0;
}

// One launch: owns the ranks' processes and pipes. Its destructor kills and reaps whatever still
// runs, which only happens when an exception leaves Run.
class LocalLauncher {
 public:
  LocalLauncher(const LaunchOptions& options, int master_port, int signal_fd)
      : options_(options), signal_fd_(signal_fd) {
    result_.master_port = master_port;
    ranks_.resize(static_cast<std::size_t>(options.nproc));
    for (int r = 0; r < options.nproc; ++r) ranks_[static_cast<std::size_t>(r)].rank = r;
  }
  LocalLauncher(const LocalLauncher&) = delete;
  LocalLauncher& operator=(const LocalLauncher&) = delete;

  ~LocalLauncher() {
    for (RankProcess& p : ranks_) {
      if (!p.running) continue;
      kill(-p.pid, SIGKILL);
      while (waitpid(p.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }

  LaunchResult Run(const std::vector<std::string>& argv) {
    if (!options_.output) {
      // What this process printed before the launch comes before the ranks' output.
      std::fflush(stdout);
      std::fflush(stderr);
    }
    std::vector<std::string> args = argv;
    std::vector<char*> arg_ptrs;
    for (std::string& a : args) arg_ptrs.push_back(a.data());
    arg_ptrs.push_back(nullptr);
    std::vector<std::string> base_env;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      if (!IsLaunchVariable(*e)) base_env.emplace_back(*e);
    }
    int fallback_max_fd = FallbackMaxFd();
    for (RankProcess& p : ranks_) {
      if (!Start(p, arg_ptrs, base_env, fallback_max_fd)) break;
    }
    Loop();
    return result_;
  }

 private:
  // Starts one rank; false when it could not be started (the failure is recorded).
  bool Start(RankProcess& p, const std::vector<char*>& argv,
             const std::vector<std::string>& base_env, int fallback_max_fd) {
    std::vector<std::string> env = base_env;
    const std::string world = std::to_string(options_.nproc);
    env.push_back("RANK=" + std::to_string(p.rank));
    env.push_back("LOCAL_RANK=" + std::to_string(p.rank));
    env.push_back("WORLD_SIZE=" + world);
    env.push_back("LOCAL_WORLD_SIZE=" + world);
    env.push_back("MASTER_ADDR=" + options_.master_addr);
    env.push_back("MASTER_PORT=" + std::to_string(result_.master_port));
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    Pipe out = MakePipe("a pipe for a rank's stdout");
    Pipe err = MakePipe("a pipe for a rank's stderr");
    Pipe status = MakePipe("a pipe for a rank's start status");
    pid_t pid;
    {
      BlockSignals blocked;
      pid = fork();
      if (pid == 0) {
        ChildExec(argv.data(), envp.data(), out.write.get(), err.write.get(), status.write.get(),
                  fallback_max_fd);
      }
    }
    if (pid < 0) ThrowSystemError("cannot start rank " + std::to_string(p.rank), errno);
    // Also done by the child; whichever runs first, the group exists before it is signalled.
    setpgid(pid, pid);
    p.pid = pid;
    p.running = true;
    out.write.Reset();
    err.write.Reset();
    status.write.Reset();
    SetNonBlocking(out.read.get());
    SetNonBlocking(err.read.get());
    p.out.fd = std::move(out.read);
    p.err.fd = std::move(err.read);

    // The status pipe closes on a successful exec and carries errno otherwise.
    int child_errno = 0;
    ssize_t n;
    while ((n = ::read(status.read.get(), &child_errno, sizeof(child_errno))) < 0 &&
           errno == EINTR) {
    }
    if (n != static_cast<ssize_t>(sizeof(child_errno))) return true;
    int wait_status = 0;
    while (waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
    }
    p.running = false;
    p.out.fd.Reset();
    p.err.fd.Reset();
    RecordFailure(p.rank, kExecFailedExitCode,
                  "rank " + std::to_string(p.rank) + " could not run " + QuoteForMessage(argv[0]) +
                      ": " + ErrnoText(child_errno));
    return false;
  }

  void Loop() {
    std::vector<pollfd> fds;
    std::vector<std::pair<RankProcess*, RankStream*>> owners;
    while (RunningCount() > 0) {
      fds.clear();
      owners.clear();
      fds.push_back({signal_fd_, POLLIN, 0});
      owners.emplace_back(nullptr, nullptr);
      for (RankProcess& p : ranks_) {
        for (RankStream* s : {&p.out, &p.err}) {
          if (!s->fd.valid()) continue;
          fds.push_back({s->fd.get(), POLLIN, 0});
          owners.emplace_back(&p, s);
        }
      }
      int timeout_ms = kPollFallbackMs;
      if (stopping_ && !killed_) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - Clock::now());
        timeout_ms = static_cast<int>(
            std::clamp<std::chrono::milliseconds::rep>(left.count(), 0, kPollFallbackMs));
      }
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
        ThrowSystemError("the launcher cannot wait for its ranks", errno);
      }
      if (fds[0].revents != 0) HandleSignals();
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0 || !owners[i].second->fd.valid()) continue;
        ReadOnce(*owners[i].first, *owners[i].second);
      }
      ReapExited();
      if (stopping_ && !killed_ && Clock::now() >= deadline_) KillRunning();
    }
  }

  int RunningCount() const {
    return static_cast<int>(std::count_if(ranks_.begin(), ranks_.end(),
                                          [](const RankProcess& p) { return p.running; }));
  }

  // Reads and forwards what is available now; returns the bytes read, 0 when nothing was ready
  // or at end of stream (the stream is then flushed and closed).
  std::size_t ReadOnce(const RankProcess& p, RankStream& s) {
    char buffer[kReadChunkBytes];
    ssize_t n;
    while ((n = ::read(s.fd.get(), buffer, sizeof(buffer))) < 0 && errno == EINTR) {
    }
    if (n > 0) {
      s.pending.append(buffer, static_cast<std::size_t>(n));
      ForwardLines(p, s);
      return static_cast<std::size_t>(n);
    }
    if (n < 0 && errno == EAGAIN) return 0;
    FlushPending(p, s);
    s.fd.Reset();
    return 0;
  }

  // After a rank's process exited: forwards what is left in its pipes and closes them.
  void Drain(RankProcess& p) {
    for (RankStream* s : {&p.out, &p.err}) {
      std::size_t drained = 0;
      while (s->fd.valid() && drained < kMaxDrainBytes) {
        std::size_t n = ReadOnce(p, *s);
        if (n == 0) break;
        drained += n;
      }
      FlushPending(p, *s);
      s->fd.Reset();
    }
  }

  void ForwardLines(const RankProcess& p, RankStream& s) {
    std::size_t start = 0;
    for (std::size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      Emit(p.rank, s.kind, std::string_view(s.pending).substr(start, nl - start));
    }
    s.pending.erase(0, start);
    if (s.pending.size() >= kMaxLineBytes) FlushPending(p, s);
  }

  void FlushPending(const RankProcess& p, RankStream& s) {
    if (s.pending.empty()) return;
    Emit(p.rank, s.kind, s.pending);
    s.pending.clear();
  }

  // Forwards one line of a rank (without its newline) as one piece, so lines never mix.
  void Emit(int rank, OutputStream kind, std::string_view line) {
    if (options_.hold_rank_errors && kind == OutputStream::kStderr && IsRankErrorLine(line)) {
      std::string& held = ranks_[static_cast<std::size_t>(rank)].first_error;
      if (held.empty()) held = line;
      return;
    }
    std::string text;
    if (options_.prefix_output) text = "[rank " + std::to_string(rank) + "] ";
    text.append(line);
    text.push_back('\n');
    Write(rank, kind, text);
  }

  void Message(const std::string& message) {
    Write(-1, OutputStream::kStderr, "hydraulis: " + message + "\n");
  }

  void Write(int rank, OutputStream kind, std::string_view text) {
    if (options_.output) {
      options_.output(rank, kind, text);
    } else {
      WriteAll(kind == OutputStream::kStdout ? STDOUT_FILENO : STDERR_FILENO, text);
    }
  }

  void ReapExited() {
    for (RankProcess& p : ranks_) {
      if (!p.running) continue;
      int status = 0;
      pid_t r;
      while ((r = waitpid(p.pid, &status, WNOHANG)) < 0 && errno == EINTR) {
      }
      if (r == 0) continue;
      p.running = false;
      Drain(p);
      if (r < 0) {
        // Only possible if other code in this process reaps children it does not own.
        if (!stopping_) {
          RecordFailure(p.rank, 1,
                        "rank " + std::to_string(p.rank) +
                            "'s exit status was taken by other code in this process");
        }
        continue;
      }
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      if (stopping_) {
        PreferRootCause(p, status);
        continue;
      }
      if (WIFEXITED(status)) {
        RecordFailure(p.rank, WEXITSTATUS(status),
                      "rank " + std::to_string(p.rank) + " exited with code " +
                          std::to_string(WEXITSTATUS(status)));
      } else {
        RecordFailure(p.rank, kSignalExitBase + WTERMSIG(status),
                      "rank " + std::to_string(p.rank) + " was killed by " +
                          DescribeSignal(WTERMSIG(status)));
      }
    }
  }

  // Which rank exits first after a fault is a race: a rank whose peer died (its collective's
  // connection closed) may be reaped before the rank that hit the fault (a full disk) and
  // wrote why. So when the recorded failure is such a consequence (kPeerRankLostText) and a
  // rank failing during the stop wrote an error of its own, that rank's failure is reported.
  void PreferRootCause(const RankProcess& p, int status) {
    if (result_.failed_rank < 0 ||
        result_.rank_error.find(kPeerRankLostText) == std::string::npos) {
      return;
    }
    const std::string& own = ranks_[static_cast<std::size_t>(p.rank)].first_error;
    if (own.empty() || own.find(kPeerRankLostText) != std::string::npos) return;
    result_.failed_rank = p.rank;
    result_.rank_error = own;
    if (WIFEXITED(status)) {
      result_.exit_code = WEXITSTATUS(status);
      result_.failure = "rank " + std::to_string(p.rank) + " exited with code " +
                        std::to_string(result_.exit_code);
    } else {
      result_.exit_code = kSignalExitBase + WTERMSIG(status);
      result_.failure =
          "rank " + std::to_string(p.rank) + " was killed by " + DescribeSignal(WTERMSIG(status));
    }
  }

  // The first failure decides the result and stops the others; later exits are consequences
  // (but see PreferRootCause).
  void RecordFailure(int rank, int exit_code, const std::string& failure) {
    result_.exit_code = exit_code;
    result_.failure = failure;
    result_.failed_rank = rank;
    result_.rank_error = ranks_[static_cast<std::size_t>(rank)].first_error;
    int others = RunningCount();
    if (!options_.hold_rank_errors) {
      Message(failure + (others > 0 ? "; stopping the other " + RankCount(others) : ""));
    }
    BeginStop(SIGTERM);
  }

  void BeginStop(int sig) {
    stopping_ = true;
    deadline_ = Clock::now() + options_.grace;
    SignalRunning(sig);
  }

  // Signals the process group of every rank whose process is not reaped yet (so its pid, and so
  // its group id, cannot have been reused by an unrelated process).
  void SignalRunning(int sig) {
    for (RankProcess& p : ranks_) {
      if (p.running) kill(-p.pid, sig);
    }
  }

  void KillRunning() {
    killed_ = true;
    std::string late;
    for (const RankProcess& p : ranks_) {
      if (p.running) late += (late.empty() ? "" : ", ") + std::to_string(p.rank);
    }
    if (late.empty()) return;
    if (!options_.hold_rank_errors) {
      Message((RunningCount() == 1 ? "rank " : "ranks ") + late + " did not stop within " +
              std::to_string(options_.grace.count()) + " ms; sending SIGKILL");
    }
    SignalRunning(SIGKILL);
  }

  void HandleSignals() {
    unsigned char received[64];
    ssize_t n;
    while ((n = ::read(signal_fd_, received, sizeof(received))) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        int sig = received[i];
        if (sig != SIGINT && sig != SIGTERM) continue;  // SIGCHLD: ReapExited follows
        std::string name(SignalName(sig));
        if (interrupted_) {
          Message("received " + name + " again; killing the " + RankCount(RunningCount()) +
                  " still running");
          killed_ = true;
          SignalRunning(SIGKILL);
          continue;
        }
        interrupted_ = true;
        Message("received " + name + "; forwarding it to the " + RankCount(RunningCount()) +
                " still running");
        if (!stopping_) {
          result_.exit_code = kSignalExitBase + sig;
          result_.failure = "interrupted by " + name;
          result_.failed_rank = -1;
          stopping_ = true;
          deadline_ = Clock::now() + options_.grace;
        }
        SignalRunning(sig);
      }
    }
  }

  const LaunchOptions& options_;
  int signal_fd_;
  std::vector<RankProcess> ranks_;
  LaunchResult result_;
  bool stopping_ = false;     // a failure or signal happened: later exits are not failures
  bool killed_ = false;       // SIGKILL was sent
  bool interrupted_ = false;  // this process got SIGINT or SIGTERM
  Clock::time_point deadline_{};
};

void Validate(const std::vector<std::string>& argv, const LaunchOptions& options) {
  if (argv.empty() || argv[0].empty()) {
    throw InvalidInput(
        "no command to launch: give the program to run on every rank and its "
        "arguments");
  }
  if (options.nproc < 1) {
    throw InvalidInput("nproc must be at least 1 (got " + std::to_string(options.nproc) + ")");
  }
  if (options.master_port < 0 || options.master_port > kMaxPort) {
    throw InvalidInput("master_port must be in 0..65535, 0 to pick a free port (got " +
                       std::to_string(options.master_port) + ")");
  }
  if (options.master_addr.empty()) {
    throw InvalidInput("master_addr must not be empty (e.g. 127.0.0.1 for one machine)");
  }
  if (options.grace.count() < 0) {
    throw InvalidInput("grace must be >= 0 ms (got " + std::to_string(options.grace.count()) +
                       " ms)");
  }
}

}  // namespace

LaunchResult LaunchLocal(const std::vector<std::string>& argv, const LaunchOptions& options) {
  Validate(argv, options);
  int port = options.master_port != 0 ? options.master_port : PickFreePort(options.master_addr);
  SignalScope signals;
  LocalLauncher launcher(options, port, signals.read_fd());
  return launcher.Run(argv);
}

int PickFreePort(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(addr.c_str(), "0", &hints, &found);
  if (rc != 0) {
    throw InvalidInput("master_addr " + QuoteForMessage(addr) +
                       " does not resolve: " + gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> list(found, freeaddrinfo);
  int last_errno = 0;
  for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    Fd socket_fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!socket_fd.valid()) {
      last_errno = errno;
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    if (::bind(socket_fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 ||
        ::getsockname(socket_fd.get(), reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
      last_errno = errno;
      continue;
    }
    if (bound.ss_family == AF_INET) {
      return ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
    }
    if (bound.ss_family == AF_INET6) {
      return ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port);
    }
  }
  std::string message = "cannot pick a free port on master_addr " + QuoteForMessage(addr);
  if (last_errno != 0) message += ": " + ErrnoText(last_errno);
  if (last_errno == EADDRNOTAVAIL) {
    message += "; it is not an address of this machine, so give the master port explicitly";
  }
  throw Error(message);
}

namespace {
constexpr char kLaunchedEnv[] = "HYDRAULIS_LAUNCHED";
}  // namespace

bool IsLaunchedRank() { return std::getenv(kLaunchedEnv) != nullptr; }

int LaunchSelf(std::vector<std::string> argv, int nproc, int master_port, bool verbose) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0 && !argv.empty()) argv[0] = std::string(exe, static_cast<std::size_t>(n));
  LaunchOptions options;
  options.nproc = nproc;
  options.master_port = master_port;
  options.hold_rank_errors = !verbose;
  setenv(kLaunchedEnv, "1", 1);
  // As torchrun does: ranks sharing this machine's cores should not each start a thread per
  // core (libtorch and OpenBLAS size their pools from these when they load).
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const std::string threads = std::to_string(std::max(1L, cores / std::max(1, nproc)));
  setenv("OMP_NUM_THREADS", threads.c_str(), 0);
  setenv("OPENBLAS_NUM_THREADS", threads.c_str(), 0);
  const LaunchResult result = LaunchLocal(argv, options);
  unsetenv(kLaunchedEnv);
  if (result.exit_code != 0) {
    if (!verbose && !result.rank_error.empty()) {
      std::fprintf(stderr, "%s\n", result.rank_error.c_str());
    } else {
      std::fprintf(stderr, "hydraulis: the job failed: %s\n", result.failure.c_str());
    }
  }
  return result.exit_code;
}

void RestartSelfWith(const std::vector<EnvironmentSetting>& settings,
                     const std::vector<std::string>& argv) {
  for (const EnvironmentSetting& s : settings) setenv(s.name, s.value, 1);
  std::vector<std::string> args = argv;
  std::vector<char*> pointers;
  for (std::string& arg : args) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  execv("/proc/self/exe", pointers.data());
}

}  // namespace hydraulis
