// Support for tests that run real Gloo ranks (header-only): the test binary relaunches
// itself as the ranks, each rank writes what it trained to a file, and the test compares
// the files with one process training on the same global batches. Processes are spawned
// fresh rather than forked: forking a process that has started libtorch's and OpenMP's
// threads is not safe.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <arpa/inet.h>
#include <c10/core/AutogradState.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "hydraulis/base/error.h"

extern char** environ;

namespace hydraulis::test_support {

struct Outcome {
  std::string error;  // empty when training finished
  std::vector<double> losses;
  std::vector<std::int64_t> targets;
  std::vector<float> parameters;  // all parameters flattened, in model order
  // Tensor parallelism: the last step's gradients of the replicated parameters (embedding,
  // norms, head), flattened in model order.
  std::vector<float> replicated_grads;
};

inline void Append(const at::Tensor& tensor, std::vector<float>& out) {
  at::Tensor t = tensor.detach().contiguous();
  out.insert(out.end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
}

inline void Write(const Outcome& o, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  out << o.error << '\n' << o.losses.size() << '\n';
  out.precision(17);
  for (std::size_t i = 0; i < o.losses.size(); ++i)
    out << o.losses[i] << ' ' << o.targets[i] << '\n';
  for (const std::vector<float>* v : {&o.parameters, &o.replicated_grads}) {
    out << v->size() << '\n';
    out.write(reinterpret_cast<const char*>(v->data()),
              static_cast<std::streamsize>(v->size() * sizeof(float)));
  }
}

inline Outcome Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  Outcome o;
  if (!in) {
    o.error = "no output file " + path;
    return o;
  }
  std::getline(in, o.error);
  std::size_t n = 0, p = 0;
  in >> n;
  o.losses.resize(n);
  o.targets.resize(n);
  for (std::size_t i = 0; i < n; ++i) in >> o.losses[i] >> o.targets[i];
  for (std::vector<float>* v : {&o.parameters, &o.replicated_grads}) {
    p = 0;
    in >> p;
    in.get();
    v->resize(p);
    in.read(reinterpret_cast<char*>(v->data()), static_cast<std::streamsize>(p * sizeof(float)));
  }
  return o;
}

// c10d's flight recorder (on by default in PyTorch 2.11) adds a process group to a map
// outside its lock the first time the group records a collective, so ranks run as threads
// of one process (OnThreads) race there and crash now and then (about one run in 40 of
// ContextParallelAttentionTest under load). One rank per process, as the runtime runs,
// does not. Off in every test binary that includes this header, before main, so before the
// recorder reads its size.
inline const bool kFlightRecorderOff = [] {
  setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
  return true;
}();

// Runs body(rank) for ranks 0..n-1, each on its own thread (one intra-op thread each),
// and rethrows the first failure: ranks as threads of one process, for the in-process
// communicator and for c10d ranks that share one device. Each thread runs its own backward
// passes: autograd otherwise runs every CUDA node of a device on one worker thread shared
// by the process, where one rank's backward all-reduce would wait for its peer's, queued
// behind it on that same thread, until the timeout.
inline void OnThreads(int n, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      at::set_num_threads(1);
      c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
      try {
        body(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// A port nothing listens on now; the rendezvous binds it a moment later. Taken below the
// kernel's ephemeral range (32768-60999 by default), from an offset set by the process id
// and advanced per call: a port the kernel picked for port 0 could be handed a moment later
// to another test's connection (ctest runs tests in parallel), which then broke this
// test's rendezvous (a crash seen once in three CI runs); ports below the range are never
// handed out, and concurrent test processes start at different offsets.
inline int FreePort() {
  constexpr int kFirst = 20000, kCount = 12000;
  static std::atomic<int> calls{0};
  const int start = static_cast<int>((static_cast<long>(getpid()) * 7919L) % kCount);
  for (int tries = 0; tries < kCount; ++tries) {
    const int port = kFirst + (start + 97 * calls++) % kCount;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw Error(std::string("no free port: ") + std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (free) return port;
  }
  throw Error("no free port in 20000-31999");
}

struct RankRun {
  int status = -1;      // exit status; -1 when killed at the deadline
  double exit_s = 0.0;  // seconds from the start of the ranks to this one's exit
  Outcome outcome;
};

// Starts `world_size` ranks of this binary (`exe worker_flag scenario outfile`) running `scenario`,
// waits at most `deadline` for all of them (killing the rest then) and returns their exit statuses
// and outputs.
inline std::vector<RankRun> RunRanks(int world_size, const std::string& worker_flag,
                                     const std::string& scenario, std::chrono::seconds deadline) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) throw Error("cannot read /proc/self/exe");
  exe[n] = '\0';
  const int port = FreePort();
  const std::string dir = ::testing::TempDir();
  std::vector<pid_t> pids;
  std::vector<std::string> paths;
  for (int rank = 0; rank < world_size; ++rank) {
    paths.push_back(dir + "/hydraulis_dp_" + std::to_string(getpid()) + "_" + std::to_string(port) +
                    "_" + std::to_string(rank));
    std::remove(paths.back().c_str());
    std::vector<std::string> env = {
        "RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world_size),
        "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port), "OMP_NUM_THREADS=1"};
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      bool ours = false;
      for (const char* k :
           {"RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=", "OMP_NUM_THREADS="}) {
        ours = ours || kv.rfind(k, 0) == 0;
      }
      if (!ours) env.push_back(kv);
    }
    std::vector<std::string> args = {exe, worker_flag, scenario, paths.back()};
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, exe, nullptr, nullptr, argv.data(), envp.data()) != 0) {
      throw Error("posix_spawn failed");
    }
    pids.push_back(pid);
  }
  std::vector<RankRun> runs(pids.size());
  std::vector<bool> done(pids.size(), false);
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + deadline;
  for (std::size_t left = pids.size(); left > 0;) {
    for (std::size_t r = 0; r < pids.size(); ++r) {
      int status = 0;
      if (done[r] || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      done[r] = true;
      --left;
      runs[r].status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      runs[r].exit_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > end) {
      for (std::size_t r = 0; r < pids.size(); ++r) {
        if (!done[r]) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (std::size_t r = 0; r < pids.size(); ++r) {
    runs[r].outcome = Read(paths[r]);
    std::remove(paths[r].c_str());
  }
  return runs;
}

// OpenBLAS sizes its thread pool from OMP_NUM_THREADS when the library loads, before
// main, and a different thread count changes the summation order of matrix products: the
// ranks and the single-process reference must all run with one thread, so the test binary
// restarts itself with it set (the ranks inherit it). Call first thing in main.
inline void RestartWithOneThread(char** argv) {
  const char* threads = std::getenv("OMP_NUM_THREADS");
  if (threads != nullptr && std::string(threads) == "1") return;
  setenv("OMP_NUM_THREADS", "1", 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    execv(exe, argv);
  }
  std::cerr << "warning: could not restart with OMP_NUM_THREADS=1; results may differ\n";
}

}  // namespace hydraulis::test_support
