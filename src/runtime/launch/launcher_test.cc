// Tests of the local launcher with real processes (/bin/sh), capturing the forwarded output
// through LaunchOptions::output instead of this process's file descriptors.
#include "hydraulis/runtime/launch/launcher.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Collects everything the launcher forwards.
struct Capture {
  std::vector<std::string> out;  // whole lines, newline included
  std::vector<std::string> err;
  std::vector<std::string> messages;  // the launcher's own (rank -1)
  std::function<void(int, OutputStream, std::string_view)> on_line;

  OutputSink Sink() {
    return [this](int rank, OutputStream stream, std::string_view text) {
      if (rank < 0) {
        EXPECT_EQ(stream, OutputStream::kStderr);
        messages.emplace_back(text);
      } else {
        (stream == OutputStream::kStdout ? out : err).emplace_back(text);
      }
      if (on_line) on_line(rank, stream, text);
    };
  }
};

std::vector<std::string> Sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

LaunchOptions Options(int nproc, Capture& capture) {
  LaunchOptions options;
  options.nproc = nproc;
  options.output = capture.Sink();
  return options;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Pids the ranks printed as "pid N".
std::vector<pid_t> PrintedPids(const std::vector<std::string>& lines) {
  std::vector<pid_t> pids;
  for (const std::string& line : lines) {
    auto at = line.find("pid ");
    if (at != std::string::npos) pids.push_back(std::stoi(line.substr(at + 4)));
  }
  return pids;
}

void ExpectGone(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    errno = 0;
    EXPECT_EQ(kill(pid, 0), -1) << "process " << pid << " is still alive";
    EXPECT_EQ(errno, ESRCH);
  }
}

// Every child the launcher started was reaped: this test process has none left.
void ExpectNoChildren() {
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

std::size_t OpenFdCount() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++n;
  }
  return n;
}

// A job whose ranks all fail on the same input: held, the cause is returned once (the first
// failed rank's own line, exit status its), no rank's error line and no launcher message
// is forwarded, and other lines still are; not held, every line is forwarded as before.
TEST(LaunchLocalTest, HeldRankErrorsGiveOneLinePerFailure) {
  const std::vector<std::string> argv =
      Sh("echo \"progress $RANK\"; echo \"hydraulis: error: --max-len 1: no target\" >&2; "
         "echo \"warning $RANK\" >&2; exit 2");
  Capture held;
  LaunchOptions options = Options(3, held);
  options.hold_rank_errors = true;
  const LaunchResult r = LaunchLocal(argv, options);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.rank_error, "hydraulis: error: --max-len 1: no target");
  EXPECT_TRUE(held.messages.empty()) << held.messages.front();
  for (const std::string& line : held.err) {
    EXPECT_EQ(line.find("hydraulis: error"), std::string::npos) << line;
  }
  EXPECT_FALSE(held.err.empty());  // the other stderr lines were forwarded
  EXPECT_FALSE(held.out.empty());

  Capture all;
  const LaunchResult plain = LaunchLocal(argv, Options(3, all));
  EXPECT_EQ(plain.exit_code, 2);
  EXPECT_TRUE(plain.rank_error.empty());
  EXPECT_FALSE(all.messages.empty());
  EXPECT_GE(std::count_if(all.err.begin(), all.err.end(),
                          [](const std::string& l) {
                            return l.find("hydraulis: error") != std::string::npos;
                          }),
            1);

  // A rank that fails without an error line (a signal) leaves the cause to the launcher.
  Capture killed;
  LaunchOptions kill_options = Options(2, killed);
  kill_options.hold_rank_errors = true;
  const LaunchResult k = LaunchLocal(Sh("kill -KILL $$"), kill_options);
  EXPECT_EQ(k.exit_code, 128 + SIGKILL);
  EXPECT_TRUE(k.rank_error.empty());
  EXPECT_NE(k.failure.find("(SIGKILL)"), std::string::npos) << k.failure;
}

// The rank whose peer died exits first and says only that; the rank that hit the fault
// (here it ignores the stop signal, writes its own error and exits 1 a moment later) is the
// one reported.
TEST(LaunchLocalTest, AFailureCausedByALostPeerGivesWayToTheCause) {
  Capture capture;
  LaunchOptions options = Options(2, capture);
  options.hold_rank_errors = true;
  options.grace = milliseconds(3000);
  // Rank 1 fails only once rank 0 ignores SIGTERM (the file says so), else the launcher's
  // stop could kill rank 0 before it writes its error.
  const std::string ready =
      (std::filesystem::temp_directory_path() / ("lost-peer-" + std::to_string(getpid()))).string();
  std::filesystem::remove(ready);
  const LaunchResult r = LaunchLocal(
      Sh("if [ \"$RANK\" = 1 ]; then while [ ! -e " + ready +
         " ]; do sleep 0.01; done; echo \"hydraulis: error: rank 1 of 2: all-reduce failed "
         "(a peer rank may have exited or be stuck; timeout 4000 ms): closed\" >&2; exit 1; fi; "
         "trap '' TERM; touch " +
         ready +
         "; sleep 0.3; echo \"hydraulis: error: ckpt: No space left on device\" >&2; "
         "exit 1"),
      options);
  std::filesystem::remove(ready);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.failed_rank, 0);
  EXPECT_EQ(r.rank_error, "hydraulis: error: ckpt: No space left on device");
  EXPECT_EQ(r.failure, "rank 0 exited with code 1");

  // Without another rank's own error the lost peer's line stands.
  Capture alone;
  LaunchOptions alone_options = Options(2, alone);
  alone_options.hold_rank_errors = true;
  const LaunchResult a = LaunchLocal(
      Sh("if [ \"$RANK\" = 1 ]; then echo \"hydraulis: error: (a peer rank may have exited)\" "
         ">&2; exit 1; fi; sleep 30"),
      alone_options);
  EXPECT_EQ(a.failed_rank, 1);
  EXPECT_EQ(a.rank_error, "hydraulis: error: (a peer rank may have exited)");
}

TEST(LaunchLocalTest, EveryRankSeesTheTorchrunEnvironment) {
  Capture capture;
  LaunchResult result = LaunchLocal(
      Sh("echo \"env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT\""),
      Options(3, capture));
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.failure, "");
  EXPECT_EQ(result.failed_rank, -1);
  ASSERT_GT(result.master_port, 0);
  ASSERT_EQ(capture.out.size(), 3u);
  std::vector<std::string> sorted = capture.out;
  std::sort(sorted.begin(), sorted.end());
  const std::string port = std::to_string(result.master_port);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(sorted[static_cast<std::size_t>(r)], "[rank " + std::to_string(r) + "] env " +
                                                       std::to_string(r) + " " + std::to_string(r) +
                                                       " 3 3 127.0.0.1 " + port + "\n");
  }
  EXPECT_TRUE(capture.err.empty());
  EXPECT_TRUE(capture.messages.empty());
  ExpectNoChildren();
}

TEST(LaunchLocalTest, KeepsTheEnvironmentButOverridesLaunchVariables) {
  ASSERT_EQ(setenv("RANK", "99", 1), 0);
  ASSERT_EQ(setenv("HYDRAULIS_LAUNCHER_TEST", "kept", 1), 0);
  Capture capture;
  LaunchOptions options = Options(1, capture);
  options.master_port = 12345;
  options.master_addr = "localhost";
  LaunchResult result =
      LaunchLocal(Sh("echo \"$RANK $HYDRAULIS_LAUNCHER_TEST $MASTER_ADDR $MASTER_PORT\""), options);
  unsetenv("RANK");
  unsetenv("HYDRAULIS_LAUNCHER_TEST");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.master_port, 12345);
  ASSERT_EQ(capture.out.size(), 1u);
  EXPECT_EQ(capture.out[0], "[rank 0] 0 kept localhost 12345\n");
}

TEST(LaunchLocalTest, PrefixesLinesKeepsStreamsApartAndFlushesThePartialLastLine) {
  Capture capture;
  LaunchResult result = LaunchLocal(Sh("echo one; echo oops >&2; echo two; printf 'no newline'"),
                                    Options(1, capture));
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(capture.out, (std::vector<std::string>{"[rank 0] one\n", "[rank 0] two\n",
                                                   "[rank 0] no newline\n"}));
  EXPECT_EQ(capture.err, (std::vector<std::string>{"[rank 0] oops\n"}));

  Capture raw;
  LaunchOptions options = Options(1, raw);
  options.prefix_output = false;
  LaunchLocal(Sh("echo one; echo oops >&2"), options);
  EXPECT_EQ(raw.out, (std::vector<std::string>{"one\n"}));
  EXPECT_EQ(raw.err, (std::vector<std::string>{"oops\n"}));
}

TEST(LaunchLocalTest, ManyLinesFromManyRanksStayWhole) {
  constexpr int kRanks = 4;
  constexpr int kLines = 2000;
  Capture capture;
  LaunchResult result = LaunchLocal(
      Sh("i=0; while [ $i -lt " + std::to_string(kLines) +
         " ]; do echo \"r$RANK line $i of a moderately long line to fill the pipe quickly\"; "
         "i=$((i+1)); done"),
      Options(kRanks, capture));
  EXPECT_EQ(result.exit_code, 0);
  ASSERT_EQ(capture.out.size(), static_cast<std::size_t>(kRanks * kLines));
  std::map<int, int> next_line;
  for (const std::string& line : capture.out) {
    int rank = line[6] - '0';
    ASSERT_EQ(line.substr(0, 11), "[rank " + std::to_string(rank) + "] r" + std::to_string(rank))
        << line;
    int index = std::stoi(line.substr(line.find("line ") + 5));
    EXPECT_EQ(index, next_line[rank]++) << line;
  }
}

TEST(LaunchLocalTest, FirstFailureStopsTheOtherRanksQuickly) {
  Capture capture;
  auto start = Clock::now();
  LaunchResult result = LaunchLocal(
      Sh("if [ \"$RANK\" = 1 ]; then sleep 0.5; exit 3; fi; echo \"pid $$\"; exec sleep 30"),
      Options(4, capture));
  EXPECT_LT(SecondsSince(start), 10.0);
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.failed_rank, 1);
  EXPECT_EQ(result.failure, "rank 1 exited with code 3");
  ASSERT_FALSE(capture.messages.empty());
  EXPECT_EQ(capture.messages[0],
            "hydraulis: rank 1 exited with code 3; stopping the other 3 ranks\n");
  std::vector<pid_t> pids = PrintedPids(capture.out);
  EXPECT_EQ(pids.size(), 3u);
  ExpectGone(pids);
  ExpectNoChildren();
}

TEST(LaunchLocalTest, ReportsARankKilledBySignal) {
  Capture capture;
  LaunchResult result = LaunchLocal(Sh("kill -9 $$"), Options(1, capture));
  EXPECT_EQ(result.exit_code, 128 + SIGKILL);
  EXPECT_EQ(result.failed_rank, 0);
  EXPECT_EQ(result.failure, "rank 0 was killed by signal 9 (SIGKILL)");
}

TEST(LaunchLocalTest, RankIgnoringSigtermIsKilledAfterGrace) {
  Capture capture;
  LaunchOptions options = Options(2, capture);
  options.grace = milliseconds(300);
  auto start = Clock::now();
  LaunchResult result = LaunchLocal(
      Sh("if [ \"$RANK\" = 0 ]; then sleep 0.5; exit 1; fi; trap '' TERM; echo \"pid $$\"; "
         "sleep 30"),
      options);
  double seconds = SecondsSince(start);
  EXPECT_LT(seconds, 5.0);
  EXPECT_GE(seconds, 0.75);  // 0.5 s before the failure, then the 300 ms grace
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.failed_rank, 0);
  ASSERT_EQ(capture.messages.size(), 2u);
  EXPECT_EQ(capture.messages[1], "hydraulis: rank 1 did not stop within 300 ms; sending SIGKILL\n");
  ExpectGone(PrintedPids(capture.out));
  ExpectNoChildren();

  // Holding rank errors silences that message, never the SIGKILL.
  Capture quiet;
  options.output = quiet.Sink();
  options.hold_rank_errors = true;
  start = Clock::now();
  result = LaunchLocal(
      Sh("if [ \"$RANK\" = 0 ]; then sleep 0.5; exit 1; fi; trap '' TERM; echo \"pid $$\"; "
         "sleep 30"),
      options);
  EXPECT_LT(SecondsSince(start), 5.0);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_TRUE(quiet.messages.empty());
  ExpectGone(PrintedPids(quiet.out));
  ExpectNoChildren();
}

TEST(LaunchLocalTest, MissingProgramExitsWith127AndNamesIt) {
  Capture capture;
  LaunchResult result = LaunchLocal({"hydraulis-no-such-program", "--flag"}, Options(2, capture));
  EXPECT_EQ(result.exit_code, 127);
  EXPECT_EQ(result.failed_rank, 0);
  EXPECT_EQ(result.failure,
            "rank 0 could not run 'hydraulis-no-such-program': No such file or directory");
  ASSERT_EQ(capture.messages.size(), 1u);
  EXPECT_NE(capture.messages[0].find("hydraulis-no-such-program"), std::string::npos);
  ExpectNoChildren();
}

TEST(LaunchLocalTest, LeaksNoDescriptorAndPassesNoneToTheRanks) {
  int stray = open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  ASSERT_GE(stray, 0);
  std::size_t before = OpenFdCount();
  Capture capture;
  LaunchResult result = LaunchLocal(Sh("if [ -e /proc/$$/fd/" + std::to_string(stray) +
                                       " ]; then echo leaked; else echo clean; fi"),
                                    Options(2, capture));
  EXPECT_EQ(result.exit_code, 0);
  std::sort(capture.out.begin(), capture.out.end());
  EXPECT_EQ(capture.out, (std::vector<std::string>{"[rank 0] clean\n", "[rank 1] clean\n"}));
  EXPECT_EQ(OpenFdCount(), before);
  close(stray);
}

TEST(LaunchLocalTest, ForwardsSigtermToTheRanksAndRestoresTheHandler) {
  struct sigaction before {};
  sigaction(SIGTERM, nullptr, &before);
  Capture capture;
  int ready = 0;
  capture.on_line = [&](int rank, OutputStream, std::string_view text) {
    if (rank >= 0 && text.find("ready") != std::string_view::npos && ++ready == 2) raise(SIGTERM);
  };
  auto start = Clock::now();
  LaunchResult result =
      LaunchLocal(Sh("echo \"ready pid $$\"; exec sleep 30"), Options(2, capture));
  EXPECT_LT(SecondsSince(start), 10.0);
  EXPECT_EQ(result.exit_code, 128 + SIGTERM);
  EXPECT_EQ(result.failed_rank, -1);
  EXPECT_EQ(result.failure, "interrupted by SIGTERM");
  ASSERT_FALSE(capture.messages.empty());
  EXPECT_EQ(capture.messages[0],
            "hydraulis: received SIGTERM; forwarding it to the 2 ranks still running\n");
  ExpectGone(PrintedPids(capture.out));
  ExpectNoChildren();
  struct sigaction after {};
  sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

TEST(LaunchLocalTest, RejectsInvalidOptionsNamingTheField) {
  auto message_of = [](const std::vector<std::string>& argv, const LaunchOptions& options) {
    try {
      LaunchLocal(argv, options);
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string("no InvalidInput");
  };
  LaunchOptions options;
  options.nproc = 0;
  EXPECT_NE(message_of(Sh("true"), options).find("nproc"), std::string::npos);
  options = LaunchOptions();
  options.master_port = 70000;
  EXPECT_NE(message_of(Sh("true"), options).find("master_port"), std::string::npos);
  options = LaunchOptions();
  options.grace = milliseconds(-1);
  EXPECT_NE(message_of(Sh("true"), options).find("grace"), std::string::npos);
  options = LaunchOptions();
  options.master_addr = "";
  EXPECT_NE(message_of(Sh("true"), options).find("master_addr"), std::string::npos);
  EXPECT_NE(message_of({}, LaunchOptions()).find("command"), std::string::npos);
}

TEST(PickFreePortTest, ReturnsABindablePort) {
  int port = PickFreePort("127.0.0.1");
  ASSERT_GT(port, 0);
  ASSERT_LE(port, 65535);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  close(fd);
}

TEST(PickFreePortTest, RejectsAnAddressOfAnotherMachine) {
  // 192.0.2.0/24 is reserved for documentation, so it is never an address of this machine.
  EXPECT_THROW(PickFreePort("192.0.2.1"), Error);
}

}  // namespace
}  // namespace hydraulis
