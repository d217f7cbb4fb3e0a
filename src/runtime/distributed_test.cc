// Data- and tensor-parallel training over real Gloo ranks. The test binary launches itself: with
// `--dp-worker SCENARIO OUTFILE` it is one rank (rendezvous from RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, as under torchrun), otherwise it runs the tests, which start
// the ranks, wait for them with a deadline (a hang fails the test instead of blocking
// ctest) and compare what they wrote with one process training on the same global batches.
// Processes are spawned fresh rather than forked: forking a process that has started
// libtorch's and OpenMP's threads is not safe.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/distributed.h"
#include "hydraulis/runtime/model.h"
#include "hydraulis/runtime/model_config.h"
#include "hydraulis/runtime/packed_batch.h"
#include "hydraulis/runtime/trainer.h"
#include "test_documents.h"

extern char** environ;

namespace hydraulis {
namespace {

using test_support::Documents;
using test_support::RandomDocuments;
using Split = std::vector<std::vector<int>>;  // micro-batches as lists of document indices

constexpr int kSteps = 3;
const std::vector<int> kGlobalBatchLengths = {9, 1, 30, 4, 17, 2, 11};
// The global batch of each step split into micro-batches of different shapes; the 1-token
// document 1 alone makes a micro-batch without a target (step 0).
const std::vector<Split> kStepSplits = {
    {{0}, {1}, {2, 3}, {4, 5, 6}}, {{6, 2}, {5, 0, 4}, {3, 1}}, {{0, 1, 2, 3, 4, 5, 6}}};

ModelConfig Tiny() {
  return LoadModelConfig(std::string(HYDRAULIS_SOURCE_DIR) + "/configs/models/tiny.json");
}

// Which rank runs micro-batch `mb` of a step: "round-robin" deals them out (rank 1 gets
// none in step 2, which has one micro-batch); "rank0-only" leaves rank 1 idle every step.
int Owner(const std::string& assignment, std::size_t mb, int world_size) {
  if (assignment == "rank0-only") return 0;
  return static_cast<int>(mb % static_cast<std::size_t>(world_size));
}

// The micro-batches of `step` that `rank` runs (all of them when rank < 0).
std::vector<PackedBatch> MicroBatches(const ModelConfig& c, int step, const std::string& assignment,
                                      int rank, int world_size) {
  const Documents docs = RandomDocuments(
      kGlobalBatchLengths, 100 + static_cast<std::uint64_t>(step), static_cast<int>(c.shape.vocab));
  const Split& split = kStepSplits[static_cast<std::size_t>(step)];
  std::vector<PackedBatch> out;
  for (std::size_t mb = 0; mb < split.size(); ++mb) {
    if (rank >= 0 && Owner(assignment, mb, world_size) != rank) continue;
    Documents d;
    for (int i : split[mb]) d.push_back(docs[static_cast<std::size_t>(i)]);
    out.push_back(PackDocuments(d, c.shape.vocab));
  }
  return out;
}

AdamWOptions Adam(double eps) {
  AdamWOptions o;
  o.weight_decay = 0.1;
  o.eps = eps;
  return o;
}

struct Outcome {
  std::string error;  // empty when training finished
  std::vector<double> losses;
  std::vector<std::int64_t> targets;
  std::vector<float> parameters;  // all parameters flattened, in model order
  // Tensor parallelism: the last step's gradients of the replicated parameters (embedding,
  // norms, head), flattened in model order.
  std::vector<float> replicated_grads;
};

void Append(const at::Tensor& tensor, std::vector<float>& out) {
  at::Tensor t = tensor.detach().contiguous();
  out.insert(out.end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
}

std::vector<float> Flatten(const Transformer& model) {
  std::vector<float> out;
  for (const at::Tensor& p : model.parameters()) Append(p, out);
  return out;
}

// The logits of the whole global batch of step 0 packed as one micro-batch.
std::vector<float> ForwardOutput(const Transformer& model) {
  Documents docs =
      RandomDocuments(kGlobalBatchLengths, 100, static_cast<int>(model.config().shape.vocab));
  std::vector<float> out;
  Append(model.Forward(PackDocuments(docs, model.config().shape.vocab)), out);
  return out;
}

// One process training on the whole global batches.
Outcome Reference(double eps) {
  const ModelConfig c = Tiny();
  Transformer model(c, 11);
  Trainer trainer(model, Adam(eps));
  Outcome o;
  for (int step = 0; step < kSteps; ++step) {
    StepResult r = trainer.Step(MicroBatches(c, step, "", -1, 1));
    o.losses.push_back(r.loss);
    o.targets.push_back(r.targets);
  }
  o.parameters = Flatten(model);
  return o;
}

void Write(const Outcome& o, const std::string& path) {
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

Outcome Read(const std::string& path) {
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

// Tensor parallelism over `group`: scenario "tp-forward" writes the logits of one batch
// (as the parameters), "tp-train:EPS" trains kSteps steps on the whole global batches (every
// tp rank runs every micro-batch) and writes the gathered full parameters.
void TensorParallelWorker(const std::string& scenario, CommGroup& group, Outcome& o) {
  const ModelConfig c = Tiny();
  Transformer model(c, 11, &group);
  if (scenario == "tp-forward") {
    o.parameters = ForwardOutput(model);
    return;
  }
  Trainer trainer(model, Adam(std::stod(scenario.substr(9))));
  for (int step = 0; step < kSteps; ++step) {
    StepResult r = trainer.Step(MicroBatches(c, step, "", -1, 1));
    o.losses.push_back(r.loss);
    o.targets.push_back(r.targets);
  }
  for (const NamedParameter& p : model.named_parameters()) {
    const std::string& n = p.name;
    if (n == "embed" || n == "head" || n.ends_with("norm"))
      Append(p.value.grad(), o.replicated_grads);
  }
  for (const NamedParameter& p : model.GatherFullParameters()) Append(p.value, o.parameters);
}

// Scenario "train:ASSIGNMENT:EPS" trains kSteps steps; "die" makes rank 1 exit with
// status 3 right after the rendezvous, "stall" makes it sleep 6 s (then exit with 4),
// while rank 0 tries to train and reports its error.
int WorkerMain(const std::string& scenario, const std::string& path) {
  at::set_num_threads(1);
  Outcome o;
  try {
    DistributedOptions options = DistributedOptionsFromEnvironment();  // the test edge
    const bool die = scenario == "die";
    const bool stall = scenario == "stall";
    options.timeout = std::chrono::milliseconds(die || stall ? 3000 : 20000);
    Rendezvous rendezvous(options);
    const bool tp = scenario.starts_with("tp-");
    CommGroup group(rendezvous, tp ? "tp" : "dp");
    if (tp) {
      TensorParallelWorker(scenario, group, o);
      group.Barrier();
      Write(o, path);
      return 0;
    }
    if (die && group.rank() == 1) std::_Exit(3);
    if (stall && group.rank() == 1) {
      // Alive but stuck (e.g. in a slow data loader): only the timeout can end rank 0's wait.
      std::this_thread::sleep_for(std::chrono::seconds(6));
      std::_Exit(4);
    }
    std::string assignment = "round-robin";
    double eps = 1e-4;
    if (!die && !stall) {
      const std::size_t colon = scenario.find(':', 6);
      assignment = scenario.substr(6, colon - 6);
      eps = std::stod(scenario.substr(colon + 1));
    }
    const ModelConfig c = Tiny();
    Transformer model(c, 11);
    AllReduceGradientSync sync(group);
    Trainer trainer(model, Adam(eps), &sync);
    for (int step = 0; step < kSteps; ++step) {
      StepResult r = trainer.Step(MicroBatches(c, step, assignment, group.rank(), group.size()));
      o.losses.push_back(r.loss);
      o.targets.push_back(r.targets);
    }
    o.parameters = Flatten(model);
    // No rank leaves (and rank 0 takes the store down) while another still needs it.
    group.Barrier();
  } catch (const std::exception& e) {
    o.error = e.what();
    for (char& ch : o.error) {
      if (ch == '\n') ch = ' ';
    }
  }
  Write(o, path);
  return 0;
}

// A port nothing listens on now (the kernel's choice for port 0); the rendezvous binds it
// a moment later. Each test takes its own, so tests can run in parallel.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw Error(std::string("no free port: ") + std::strerror(errno));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

struct RankRun {
  int status = -1;      // exit status; -1 when killed at the deadline
  double exit_s = 0.0;  // seconds from the start of the ranks to this one's exit
  Outcome outcome;
};

// Starts `world_size` ranks of this binary running `scenario`, waits at most `deadline`
// for all of them (killing the rest then) and returns their exit statuses and outputs.
std::vector<RankRun> RunRanks(int world_size, const std::string& scenario,
                              std::chrono::seconds deadline) {
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
    std::vector<std::string> args = {exe, "--dp-worker", scenario, paths.back()};
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

// max |a - b| / max |b| per parameter tensor, the largest over the tensors.
double MaxParameterError(const std::vector<float>& a, const std::vector<float>& b) {
  Transformer shapes(Tiny(), 11);
  double worst = 0.0;
  std::size_t offset = 0;
  for (const at::Tensor& p : shapes.parameters()) {
    const auto n = static_cast<std::size_t>(p.numel());
    double diff = 0.0, scale = 0.0;
    for (std::size_t i = offset; i < offset + n; ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
      scale = std::max(scale, static_cast<double>(std::abs(b[i])));
    }
    worst = std::max(worst, diff / (scale > 0.0 ? scale : 1.0));
    offset += n;
  }
  return worst;
}

std::string EpsText(double eps) {
  std::ostringstream text;
  text.precision(17);
  text << eps;
  return text.str();
}

// Expects one rank's run to match the single-process reference: a clean exit, losses
// within 1e-5 relative, the same global target counts, parameters within `tolerance`
// (max-relative per tensor). Returns the parameter error, or -1 when a fatal check failed.
double ExpectRankMatchesReference(const RankRun& run, const Outcome& reference, double tolerance) {
  EXPECT_EQ(run.status, 0);
  EXPECT_EQ(run.outcome.error, "");
  EXPECT_EQ(run.outcome.losses.size(), reference.losses.size());
  EXPECT_EQ(run.outcome.parameters.size(), reference.parameters.size());
  if (run.status != 0 || run.outcome.losses.size() != reference.losses.size() ||
      run.outcome.parameters.size() != reference.parameters.size()) {
    return -1;
  }
  for (std::size_t s = 0; s < reference.losses.size(); ++s) {
    EXPECT_NEAR(run.outcome.losses[s], reference.losses[s], 1e-5 * reference.losses[s])
        << "step " << s;
    EXPECT_EQ(run.outcome.targets[s], reference.targets[s]) << "step " << s;
  }
  const double error = MaxParameterError(run.outcome.parameters, reference.parameters);
  EXPECT_LE(error, tolerance);
  return error;
}

// Trains with `world_size` ranks and expects every rank to match the single-process
// reference and the replicas to be bitwise identical.
void ExpectSameAsOneProcess(int world_size, const std::string& assignment, double eps,
                            double tolerance) {
  const Outcome reference = Reference(eps);
  std::vector<RankRun> runs =
      RunRanks(world_size, "train:" + assignment + ":" + EpsText(eps), std::chrono::seconds(60));
  for (int rank = 0; rank < world_size; ++rank) {
    const RankRun& run = runs[static_cast<std::size_t>(rank)];
    SCOPED_TRACE("rank " + std::to_string(rank));
    const double error = ExpectRankMatchesReference(run, reference, tolerance);
    if (error < 0) continue;
    std::cout << "[ dp=" << world_size << " " << assignment << " eps " << eps << " rank " << rank
              << " ] max parameter error " << error << "\n";
    // The all-reduce gives every rank the same bits, so the replicas never drift apart.
    EXPECT_TRUE(run.outcome.parameters == runs[0].outcome.parameters);
  }
}

// Adam eps 1e-4 removes the amplification of summation-order differences by 1 / eps
// (docs/runtime.md), so 1e-5 holds; with the default 1e-8 the parameters agree to ~1e-4.
// One rank runs exactly the single-process computation (the all-reduce over one rank is
// the identity), so it must match bit for bit.
TEST(DataParallelTest, OneRankMatchesOneProcess) {
  ExpectSameAsOneProcess(1, "round-robin", 1e-4, 0.0);
}

TEST(DataParallelTest, TwoRanksMatchOneProcess) {
  ExpectSameAsOneProcess(2, "round-robin", 1e-4, 1e-5);
}

TEST(DataParallelTest, TwoRanksMatchOneProcessWithDefaultEps) {
  ExpectSameAsOneProcess(2, "round-robin", AdamWOptions{}.eps, 1e-3);
}

// Rank 1 runs no micro-batch in any step yet joins every collective with zero gradients.
// Adding its zeros is exact, so the result is bit for bit the single-process one.
TEST(DataParallelTest, IdleRankStillSynchronises) {
  ExpectSameAsOneProcess(2, "rank0-only", 1e-4, 0.0);
}

TEST(DataParallelTest, DeadRankMakesTheOtherFailWithinTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<RankRun> runs = RunRanks(2, "die", std::chrono::seconds(30));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(runs[1].status, 3);
  ASSERT_EQ(runs[0].status, 0) << "rank 0 hung or crashed";
  const std::string& error = runs[0].outcome.error;
  EXPECT_NE(error.find("rank 0 of 2, group 'dp': all-reduce"), std::string::npos) << error;
  EXPECT_NE(error.find("a peer rank may have exited"), std::string::npos) << error;
  // The 3 s Gloo timeout plus process start-up; a hang would reach the 30 s deadline.
  EXPECT_LT(seconds, 15.0);
  std::cout << "[ dead rank ] rank 0 failed after " << seconds << " s: " << error << "\n";
}

TEST(DataParallelTest, StuckRankMakesTheOtherFailAtTheTimeout) {
  std::vector<RankRun> runs = RunRanks(2, "stall", std::chrono::seconds(30));
  EXPECT_EQ(runs[1].status, 4);
  ASSERT_EQ(runs[0].status, 0) << "rank 0 hung or crashed";
  const std::string& error = runs[0].outcome.error;
  EXPECT_NE(error.find("rank 0 of 2, group 'dp': all-reduce"), std::string::npos) << error;
  // Gloo's 3 s timeout, not rank 1's exit at 6 s, ended rank 0's wait.
  EXPECT_LT(runs[0].exit_s, runs[1].exit_s - 1.0);
  std::cout << "[ stuck rank ] rank 0 failed after " << runs[0].exit_s << " s (rank 1 exited at "
            << runs[1].exit_s << " s): " << error << "\n";
}

// Rows of the same matrix products split over two ranks and summed by the all-reduce:
// only the summation order differs from one process.
TEST(TensorParallelTest, TwoRanksForwardMatchesOneProcess) {
  const std::vector<float> reference = ForwardOutput(Transformer(Tiny(), 11));
  std::vector<RankRun> runs = RunRanks(2, "tp-forward", std::chrono::seconds(60));
  for (int rank = 0; rank < 2; ++rank) {
    const RankRun& run = runs[static_cast<std::size_t>(rank)];
    SCOPED_TRACE("rank " + std::to_string(rank));
    ASSERT_EQ(run.status, 0);
    ASSERT_EQ(run.outcome.error, "");
    ASSERT_EQ(run.outcome.parameters.size(), reference.size());
    double diff = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < reference.size(); ++i) {
      diff =
          std::max(diff, static_cast<double>(std::abs(run.outcome.parameters[i] - reference[i])));
      scale = std::max(scale, static_cast<double>(std::abs(reference[i])));
    }
    EXPECT_LE(diff / scale, 1e-5);
    std::cout << "[ tp=2 forward rank " << rank << " ] max |logit error| " << diff
              << ", relative to max |logit| " << diff / scale << "\n";
    // The all-reduced activations are the same bits on every rank, so are the logits.
    EXPECT_TRUE(run.outcome.parameters == runs[0].outcome.parameters);
  }
}

void ExpectTensorParallelSameAsOneProcess(double eps, double tolerance) {
  const Outcome reference = Reference(eps);
  std::vector<RankRun> runs = RunRanks(2, "tp-train:" + EpsText(eps), std::chrono::seconds(60));
  for (int rank = 0; rank < 2; ++rank) {
    const RankRun& run = runs[static_cast<std::size_t>(rank)];
    SCOPED_TRACE("rank " + std::to_string(rank));
    const double error = ExpectRankMatchesReference(run, reference, tolerance);
    if (error < 0) continue;
    double loss_error = 0.0;
    for (std::size_t s = 0; s < reference.losses.size(); ++s) {
      loss_error = std::max(
          loss_error, std::abs(run.outcome.losses[s] - reference.losses[s]) / reference.losses[s]);
    }
    std::cout << "[ tp=2 eps " << eps << " rank " << rank << " ] max parameter error " << error
              << ", max relative loss error " << loss_error << "\n";
    // Replicated parameters see identical activations and gradients on every tp rank, so
    // their gradients (never all-reduced) agree bit for bit, as do the gathered parameters.
    ASSERT_FALSE(run.outcome.replicated_grads.empty());
    EXPECT_TRUE(run.outcome.replicated_grads == runs[0].outcome.replicated_grads);
    EXPECT_TRUE(run.outcome.parameters == runs[0].outcome.parameters);
  }
}

TEST(TensorParallelTest, TwoRanksTrainLikeOneProcess) {
  ExpectTensorParallelSameAsOneProcess(1e-4, 1e-5);
}

TEST(TensorParallelTest, TwoRanksTrainLikeOneProcessWithDefaultEps) {
  ExpectTensorParallelSameAsOneProcess(AdamWOptions{}.eps, 1e-3);
}

TEST(TensorParallelTest, RejectsShapesThatDoNotSplit) {
  const ModelConfig c = Tiny();  // heads 4, kv_heads 2, ffn 172
  ValidateTensorParallel(c, 1);
  ValidateTensorParallel(c, 2);
  EXPECT_THROW(ValidateTensorParallel(c, 0), InvalidInput);
  try {
    ValidateTensorParallel(c, 4);
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()), "tensor parallelism: kv_heads = 2 is not divisible by tp = 4");
  }
  EXPECT_THROW(ValidateTensorParallel(c, 3), InvalidInput);
}

// Without a tp group the gather is a copy of the parameters.
TEST(TensorParallelTest, GatherWithoutGroupCopiesTheParameters) {
  Transformer model(Tiny(), 11);
  std::vector<float> gathered;
  for (const NamedParameter& p : model.GatherFullParameters()) Append(p.value, gathered);
  EXPECT_TRUE(gathered == Flatten(model));
}

TEST(DistributedOptionsTest, RejectsOutOfRangeOptions) {
  DistributedOptions o;
  o.world_size = 2;
  o.rank = 2;
  EXPECT_THROW(ValidateDistributedOptions(o), InvalidInput);
  o.rank = 1;
  o.master_port = 70000;
  EXPECT_THROW(ValidateDistributedOptions(o), InvalidInput);
  o.master_port = 29500;
  ValidateDistributedOptions(o);
}

TEST(DistributedOptionsTest, EnvironmentErrorsNameTheVariable) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "two", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  try {
    DistributedOptionsFromEnvironment();
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()), "environment: WORLD_SIZE: expected an integer, got 'two'");
  }
  setenv("WORLD_SIZE", "2", 1);
  unsetenv("MASTER_PORT");
  EXPECT_THROW(DistributedOptionsFromEnvironment(), InvalidInput);
  setenv("MASTER_PORT", "29501", 1);
  DistributedOptions o = DistributedOptionsFromEnvironment();
  EXPECT_EQ(o.world_size, 2);
  EXPECT_EQ(o.master_port, 29501);
  for (const char* k : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(k);
}

}  // namespace
}  // namespace hydraulis

int main(int argc, char** argv) {
  // OpenBLAS sizes its thread pool from OMP_NUM_THREADS when the library loads, before
  // main, and a different thread count changes the summation order of matrix products:
  // the ranks and the single-process reference must all run with one thread, so the test
  // restarts itself with it set (the ranks inherit it).
  const char* threads = std::getenv("OMP_NUM_THREADS");
  if (threads == nullptr || std::string(threads) != "1") {
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
  if (argc == 4 && std::string(argv[1]) == "--dp-worker") {
    return hydraulis::WorkerMain(argv[2], argv[3]);
  }
  at::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
