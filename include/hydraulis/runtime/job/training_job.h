// The training driver: every step it samples a global batch, plans it, fetches the plan's
// documents, runs the step on the DistributedTrainer (which packs what the plan keeps of
// them) and saves a checkpoint on cadence; it resumes from the newest checkpoint when asked. The
// CLI (`hydraulis train`) only parses flags, builds these pieces and prints what RunStep returns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hydraulis/assign/measured_run.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/checkpoint/checkpoint_meta.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/document_pieces.h"
#include "hydraulis/data/megatron_dataset.h"
#include "hydraulis/runtime/job/plan_ahead.h"
#include "hydraulis/runtime/step/distributed_trainer.h"
#include "hydraulis/runtime/step/lr_schedule.h"

namespace hydraulis {

struct TrainingJobOptions {
  int steps = 10;              // total steps of the run (a resumed run continues up to it), >= 1
  std::uint64_t seed = 1;      // recorded in checkpoints: resuming under another seed is refused
  std::string checkpoint_dir;  // empty: no checkpoints
  int checkpoint_every = 0;    // steps between checkpoints (>= 0; 0: at the end only)
  int keep_checkpoints = 0;    // keep the newest K complete checkpoints (>= 0; 0: all)
  // A step whose loss or gradient norm is not finite: false stops the run with an error
  // naming the step, before the update (the default); true skips the update and goes on,
  // counting it, as Megatron does.
  bool skip_nonfinite_steps = false;
  // Testing: at this step the parameters are NaN for the step's computation only (then put
  // back), so the non-finite path runs end to end. -1: never.
  int poison_step = -1;
  // The learning rate per step, scaling the optimizer's lr (its peak); constant by default.
  LrSchedule lr_schedule;
  // What the sampler's indices count (the pieces' rule and context length): recorded in
  // checkpoints, and a resume under a rule or length that makes other pieces is refused.
  LongDocuments long_documents = LongDocuments::kTruncate;
  std::int64_t max_len = 0;  // >= 1
  // Refit the cost model from the measured steps (StepCalibration) and plan on the fit;
  // false keeps the profile as given.
  bool calibrate = true;
  CalibrationOptions calibration;
  // Gather each step's measurement (TrainingStepRecord::measured) even with calibrate off,
  // for a file a replay reads (MeasuredRun).
  bool record_measurements = false;
  // Evaluate the held-out documents (TrainingJob::SetEvaluation) every this many steps and
  // after the last one; 0: never.
  int eval_every = 0;
  // Pieces held out of the sampler's data for evaluation: recorded in checkpoints, and a
  // resume that holds out another number (another --eval-tokens or --eval-data) is refused.
  std::int64_t held_out_pieces = 0;
};

// One evaluation: the held-out documents' mean next-token loss after step `step`'s update.
struct EvaluationRecord {
  int step = 0;
  double loss = 0;
  std::int64_t targets = 0;
  std::int64_t tokens = 0;
  std::int64_t documents = 0;
  double eval_ms = 0;
};

// What one step did, for the console line and the JSON log.
struct TrainingStepRecord {
  int step = 0;
  DistributedStepResult result;
  std::int64_t tokens = 0;  // tokens of the global batch after the planner's cuts
  std::size_t documents = 0;
  std::size_t truncated = 0;  // documents the long-document rule cut
  // Tokens the long-document rule cut (no candidate's capacity holds them): the part of
  // cut_tokens that a layout with more memory per micro-batch (e.g. --cp) would train.
  std::int64_t truncated_tokens = 0;
  // Documents cut by the context length or the long-document rule, and the tokens lost.
  std::size_t cut_documents = 0;
  std::int64_t cut_tokens = 0;
  bool skipped = false;  // not applied: non-finite loss or gradient norm, skipping allowed
  double lr = 0;         // the learning rate of this step's update (lr_schedule)
  std::string strategy;  // the candidate's name, or its description
  int strategy_index = 0;
  bool switched = false;  // another candidate than the previous step's
  // The planner's estimate of the step (compute plus the fit's overhead of the strategy),
  // by the fit it was planned on: fit_version (0: the profile as given).
  double predicted_step_ms = 0;
  int fit_version = 0;
  bool fit_adopted = false;         // this step's measurement made a new fit (calibration)
  std::string calibration_refused;  // why this step's measurement was not used, or ""
  // What the ranks agreed the step measured (JobOptions::record_measurements; else null).
  std::shared_ptr<const MeasuredStep> measured;
  double planning_ms = 0;
  // How long the step waited for its plan: planning runs ahead on a thread (PlanAhead), so
  // this is 0 unless planning is slower than training (the first step waits for its own).
  double plan_wait_ms = 0;
  std::vector<int> micro_batches;  // per pipeline
  // The step's model FLOPs (TrainingFlops of the tokens it trained; the MFU numerator).
  double model_flops = 0;
  // The most memory any rank held during the step (PeakMemoryBytes, measured on every rank
  // after its step and the largest taken).
  std::int64_t peak_memory_bytes = 0;
};

class TrainingJob {
 public:
  // Every argument must outlive the job. InvalidInput on out-of-range options. From the
  // first RunStep on, the job's look-ahead thread owns `sampler` (PlanAhead).
  // `pieces`: what the sampler's indices name (MakeDocumentPieces over `dataset`).
  // `profile`: what `planner` was made from, which the calibration refits.
  TrainingJob(const Planner& planner, const Profile& profile, BatchSampler& sampler,
              const MegatronDataset& dataset, std::span<const DocumentPiece> pieces,
              DistributedTrainer& trainer, const TrainingJobOptions& options);

  // Loads the newest checkpoint of options.checkpoint_dir into the optimizer, the sampler
  // and (calibrating, when it holds one for these candidates) the calibration's fit; returns
  // its path, or nullopt when there is none (the job starts at step 0).
  // InvalidInput without a checkpoint_dir, when the checkpoint's seed differs, or when it
  // records a model of another weight layout than the trainer's.
  std::optional<std::string> Resume();

  int next_step() const { return next_step_; }
  bool done() const { return next_step_ >= options_.steps; }

  // Runs step next_step() (a collective over all ranks) and saves a checkpoint when the
  // cadence or the end says so. A non-finite loss or gradient norm without
  // skip_nonfinite_steps throws Error naming the step, before any update or checkpoint
  // (the same on every rank). `on_step`, when given, gets the step's record before its
  // checkpoint is saved, so a step log it writes is never behind the newest checkpoint.
  TrainingStepRecord RunStep(const std::function<void(const TrainingStepRecord&)>& on_step = {});

  // Totals over the steps this process ran (a resumed run counts from its resume).
  struct Totals {
    int skipped_steps = 0;
    std::int64_t cut_documents = 0;
    std::int64_t cut_tokens = 0;
  };
  const Totals& totals() const { return totals_; }

  // The documents every evaluation runs (whole; the planner's long-document rule applies),
  // planned once here on the job's first planner. Call before the first RunStep.
  // InvalidInput when there is no document or no target.
  void SetEvaluation(std::vector<std::vector<std::int64_t>> documents);
  // After RunStep: when options.eval_every says so (every eval_every steps, and after the
  // last), the evaluation documents' loss on the parameters now, forward only on every
  // rank (a collective); else nullopt.
  std::optional<EvaluationRecord> EvaluateIfDue();

  // The cost model the job plans on now: the profile as given, or the calibration's fit.
  const CalibratedFit& fit() const { return calibration_.fit(); }
  // What a replay of this run's measurements starts from: the calibration's profile,
  // candidates, schedule and options, and the fit in use now.
  MeasuredRunHeader measurements_header() const;

 private:
  void Save(int steps_done);
  void CheckSameDocuments(const CheckpointMeta& meta, const std::string& path) const;
  // RunStep's phases, in order (training_job.cc).
  std::vector<std::vector<std::int64_t>> FetchDocuments(const PlanAhead::Step& planned,
                                                        TrainingStepRecord& record);
  DistributedStepResult Train(const Plan& plan,
                              const std::vector<std::vector<std::int64_t>>& documents, int step);
  void CheckUpdate(TrainingStepRecord& record);
  void Calibrate(const Plan& plan, TrainingStepRecord& record);
  // A planner of `fit` with the job's candidates and options.
  std::shared_ptr<const Planner> PlannerOf(const CalibratedFit& fit) const;
  void Describe(const Plan& plan, TrainingStepRecord& record);

  const Planner& planner_;
  StepCalibration calibration_;
  BatchSampler& sampler_;
  const MegatronDataset& dataset_;
  std::span<const DocumentPiece> pieces_;
  DistributedTrainer& trainer_;
  TrainingJobOptions options_;
  int next_step_ = 0;
  int previous_strategy_ = -1;
  // Where the sampler stood after the last step run (the look-ahead has drawn further).
  SamplerPosition position_;
  bool restored_fit_ = false;                  // Resume found a fit this run can plan on
  std::unique_ptr<PlannerTimeline> timeline_;  // with plans_
  std::unique_ptr<PlanAhead> plans_;           // started at the first RunStep, after any Resume
  Totals totals_;
  std::vector<std::vector<std::int64_t>> eval_documents_;
  Plan eval_plan_;
};

// Checks `checkpoint_dir` (may be empty: no checkpoints) before training starts, creating
// it when missing. InvalidInput when it is not a directory, cannot be created or written;
// when `resume`, when its `latest` or the newest meta.json is damaged; when not `resume`,
// when it already holds checkpoints (a run that does not resume must not overwrite
// another run's). `verify_shards`: when resuming, also every shard of the newest checkpoint
// (VerifyCheckpoint), as a launcher does once before starting ranks.
void CheckCheckpointDir(const std::string& checkpoint_dir, bool resume, bool verify_shards = false);

// One JSON object (one line, no newline) for the step log: step, loss, tokens, tokens_per_s,
// model_tflops_per_s (the step's TrainingFlops over its time), mfu (that over the peak of
// the job's `world_size` devices, where PeakTflops knows the device), peak_memory_bytes
// (the step's largest over the ranks), targets, documents, step_ms, strategy, strategy_index,
// switched, predicted_step_ms, planning_ms, plan_wait_ms, compute_ms, wait_ms, sync_ms,
// grad_buckets, grad_buckets_overlapped, grad_reduce_wait_ms, param_gather_wait_ms,
// micro_batches, truncated, truncated_tokens, cut_documents, cut_tokens, grad_norm, skipped,
// device, precision; and "profile": "derived" when the planner ran on a derived profile.
std::string StepLogLine(const TrainingStepRecord& record, const ComputeOptions& compute,
                        int world_size, bool profile_derived = false);

// The step log's evaluation record (no training loss): step, eval_loss, eval_ppl (its
// exponential), eval_targets, eval_tokens, eval_documents, eval_ms.
std::string EvaluationLogLine(const EvaluationRecord& record);

}  // namespace hydraulis
