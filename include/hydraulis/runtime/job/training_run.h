// Setting up a training run: the options `hydraulis train` binds its flags to, their checks
// before any rank starts, and every piece one rank trains with (model, profile, candidates,
// data, planner, sampler, rendezvous, DistributedTrainer, TrainingJob), built in order and
// owned together. The CLI parses flags, launches ranks, and prints what the job's steps
// return.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hydraulis/assign/planner.h"
#include "hydraulis/checkpoint/hf_checkpoint.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/megatron_dataset.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/job/training_job.h"
#include "hydraulis/runtime/model/compute.h"
#include "hydraulis/runtime/step/adamw.h"
#include "hydraulis/runtime/step/distributed_trainer.h"
#include "hydraulis/runtime/step/shard_layout.h"
#include "hydraulis/spec/model_config.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

struct TrainingInputs;  // what a run reads from files, checked (training_run.cc)

// The profile fitted on this engine that ships with the project (relative to the
// repository, where `hydraulis train` runs by default), for the bundled tiny model.
inline constexpr char kEngineProfile[] = "configs/profiles/tiny-cpu.json";

// One field per flag of `hydraulis train` (docs/runtime.md); messages name the flags.
struct TrainingRunOptions {
  std::string model = "configs/models/tiny.json";  // model config JSON
  std::string init_from;  // a Hugging Face checkpoint to start from; its config.json is the model
  std::string data;       // Megatron dataset prefix; empty: the demo corpus beside the build
  // Cost and memory profile of the model on this engine; empty: engine_profile when it is
  // the model's, else one derived from it (DeriveProfile).
  std::string profile;
  std::string engine_profile = kEngineProfile;  // the fitted profile no --profile falls back to
  // Candidate strategies JSON (chosen per step); empty: one strategy of identical
  // cp x tp x pp pipelines over every rank.
  std::string candidates;
  // >= 1, without candidates. A <cp, tp, 1> scheme the profile lacks is derived from its
  // <1, tp, 1> fit (AddDerivedContextParallelSchemes); cp > 1 with pp > 1 needs the scheme
  // in the profile.
  int cp = 1;
  int tp = 1;                           // >= 1, without candidates
  int pp = 1;                           // >= 1, without candidates
  std::string plan_algorithm = "ours";  // ours or static-fixed
  std::string device;                   // cpu or cuda; empty: cuda when a GPU is visible
  std::string precision;                // fp32 or bf16; empty: bf16 on cuda, fp32 on cpu
  std::string comm_backend;             // gloo or nccl; empty: nccl on cuda, gloo on cpu
  // Activation recomputation: none, selective or full (--recompute-granularity). The
  // profile must be for the same mode; without --profile one is derived for it.
  std::string recompute = "none";
  // Evaluation every job.eval_every steps: the first documents of this Megatron dataset
  // (pieces under the long-document rule, each cut to max_len) holding eval_tokens tokens;
  // empty: the last pieces of `data` holding eval_tokens, held out of training.
  std::string eval_data;
  std::int64_t eval_tokens = 8192;       // >= 2
  std::int64_t tokens_per_batch = 8192;  // tokens per global batch, >= 1
  std::int64_t max_len = 1024;           // context length: tokens per document, >= 2
  // What a document longer than max_len becomes: split, truncate or reject
  // (MakeDocumentPieces).
  std::string long_documents = "split";
  // Elements per gradient bucket of the optimizer (shard_layout.h), >= 1.
  std::int64_t ddp_bucket_size = kDefaultBucketElements;
  double timeout_s = 60;   // a collective waiting longer fails (a peer died or hangs), > 0
  bool resume = false;     // continue from the newest checkpoint of job.checkpoint_dir
  AdamWOptions adam;       // lr is the peak of job.lr_schedule
  TrainingJobOptions job;  // steps, seed (also the model's and the data order's), checkpoints
};

// Checks everything a rank would check before meeting its peers, for a job of `world_size`
// ranks: the launcher runs it before starting any, so an input error is one line, not one
// per rank; it also verifies every shard of the checkpoint a --resume would load (ranks check
// only meta.json up front). InvalidInput naming the flag, file or value.
void CheckTrainingRun(const TrainingRunOptions& options, int world_size);

// InvalidInput naming the flag (--lr, --adam-beta1, --adam-beta2, --adam-eps,
// --weight-decay, --clip-grad, --lr-warmup-steps, --lr-decay-steps, --min-lr) when an
// optimisation option is out of range or the schedule does not fit the run's steps.
void CheckOptimizerOptions(const TrainingRunOptions& options);

// InvalidInput, before anything is allocated, when the training state a rank must hold
// whatever the strategy (the fp32 master weights and the fp32 gradient buffer, 8 bytes per
// parameter on every rank, and its share of AdamW's two fp32 moments, 8 bytes per parameter
// over the ranks) exceeds the memory of the device it trains on: "the model needs 1.0 TiB
// per rank ...; this machine has 24.0 GiB", instead of an allocator's failure
// (CheckModelMemoryFits, which eval shares with its own bytes per parameter).
void CheckTrainingStateFits(const ModelConfig& model, int world_size,
                            const ComputeOptions& compute);

// --device and --precision with their defaults (local_rank: this rank's GPU), checked
// against this machine, and --recompute-granularity.
ComputeOptions ResolveCompute(const TrainingRunOptions& options, int local_rank);

// --comm-backend with its default (NCCL on cuda, Gloo on cpu), checked against the device.
CommBackend ResolveCommBackend(const TrainingRunOptions& options, const ComputeOptions& compute);

// One rank's training run: joins the rendezvous described by `distributed` (rank,
// world_size, address; timeout, device and backend are set here from the options) and
// builds everything the run needs. A collective: every rank constructs it with the same
// options. InvalidInput on bad input, as CheckTrainingRun.
class TrainingRun {
 public:
  TrainingRun(const TrainingRunOptions& options, const DistributedOptions& distributed,
              int local_rank);
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  TrainingJob& job() { return *job_; }
  DistributedTrainer& trainer() { return *trainer_; }
  const ComputeOptions& compute() const { return compute_; }
  int rank() const { return distributed_.rank; }
  int world_size() const { return distributed_.world_size; }
  // No --profile was given and the model is not the bundled profile's: the planner runs
  // on DeriveProfile's estimate.
  bool profile_derived() const;
  // The <cp, tp, 1> scheme the run's homogeneous candidate uses when it was derived from the
  // profile's <1, tp, 1> fit (--cp without the scheme in the profile), else "".
  const std::string& derived_cp_scheme() const;

 private:
  ComputeOptions compute_;
  DistributedOptions distributed_;
  std::unique_ptr<TrainingInputs> inputs_;
  std::unique_ptr<Planner> planner_;
  std::unique_ptr<BatchSampler> sampler_;
  std::unique_ptr<Rendezvous> rendezvous_;
  std::unique_ptr<DistributedTrainer> trainer_;
  std::unique_ptr<TrainingJob> job_;
};

}  // namespace hydraulis
