#include "hydraulis/runtime/job/training_job.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/job/checkpoint.h"
#include "hydraulis/spec/model_flops.h"

namespace hydraulis {
namespace {

// "nan", "inf" or the value (std::to_string prints "-nan" for some NaNs).
std::string NumberText(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return std::to_string(x);
}

}  // namespace

// Steps planned ahead of the one training: one hides planning behind each step; two
// absorb a step whose plan happens to take longer.
constexpr int kPlanAheadDepth = 2;

TrainingJob::TrainingJob(const Planner& planner, const Profile& profile, BatchSampler& sampler,
                         const MegatronDataset& dataset, std::span<const DocumentPiece> pieces,
                         DistributedTrainer& trainer, const TrainingJobOptions& options)
    : planner_(planner),
      calibration_(profile, planner.candidates(), planner.options().schedule, options.calibration),
      sampler_(sampler),
      dataset_(dataset),
      pieces_(pieces),
      trainer_(trainer),
      options_(options),
      position_(sampler.position()) {
  if (options_.steps < 1) {
    throw InvalidInput("training job: steps must be >= 1, got " + std::to_string(options_.steps));
  }
  if (options_.keep_checkpoints < 0) {
    throw InvalidInput("training job: keep_checkpoints must be >= 0, got " +
                       std::to_string(options_.keep_checkpoints));
  }
  if (options_.eval_every < 0) {
    throw InvalidInput("--eval-every: must be >= 0 (0: never), got " +
                       std::to_string(options_.eval_every));
  }
  if (options_.max_len < 1) {
    throw InvalidInput("training job: max_len must be >= 1, got " +
                       std::to_string(options_.max_len));
  }
  if (options_.checkpoint_every < 0) {
    throw InvalidInput("training job: checkpoint_every must be >= 0, got " +
                       std::to_string(options_.checkpoint_every));
  }
  ValidateLrSchedule(options_.lr_schedule, trainer_.optimizer().base_lr(), options_.steps);
}

std::optional<std::string> TrainingJob::Resume() {
  if (options_.checkpoint_dir.empty()) {
    throw InvalidInput("training job: resuming needs a checkpoint directory");
  }
  const std::optional<std::string> path = LatestCheckpoint(options_.checkpoint_dir);
  if (!path) return std::nullopt;
  if (const std::optional<ModelConfig> recorded = CheckpointModel(*path)) {
    const std::string difference = WeightLayoutDifference(*recorded, trainer_.config());
    if (!difference.empty()) {
      throw InvalidInput(*path + "/" + kCheckpointModelFile +
                         ": the checkpoint is of another model than this run's (" + difference +
                         ")");
    }
  }
  const CheckpointMeta meta = LoadCheckpoint(*path, trainer_.optimizer());
  if (meta.seed != options_.seed) {
    throw InvalidInput(*path + "/meta.json: seed: the checkpoint was written with seed " +
                       std::to_string(meta.seed) + ", this run has " +
                       std::to_string(options_.seed) + " (the data order would differ)");
  }
  CheckSameDocuments(meta, *path);
  if (plans_) throw InternalError("TrainingJob::Resume: steps have run already");
  const std::string fit_path = *path + "/" + kCheckpointCalibrationFile;
  if (options_.calibrate && std::filesystem::exists(fit_path)) {
    // A fit for other candidates (a resume under another set) is left: the run starts
    // again from the profile.
    restored_fit_ = calibration_.Restore(ParseCalibratedFit(ReadFileText(fit_path), fit_path));
  }
  sampler_.Restore({meta.sampler_epoch, meta.sampler_offset});
  position_ = sampler_.position();
  next_step_ = static_cast<int>(meta.step);
  return path;
}

// The sampler's position counts pieces: a checkpoint of another rule, or of another context
// length under split, would continue from a position in another list.
void TrainingJob::CheckSameDocuments(const CheckpointMeta& meta, const std::string& path) const {
  const std::string rule(NameOf(options_.long_documents, kLongDocumentsNames));
  // Checkpoints from before pieces sampled as truncate does.
  const std::string recorded = meta.long_documents.empty() ? "truncate" : meta.long_documents;
  const bool split = options_.long_documents == LongDocuments::kSplit;
  if (recorded != rule) {
    throw InvalidInput(path +
                       "/meta.json: data: the checkpoint was written with --long-documents " +
                       recorded + ", this run has " + rule +
                       " (the data order would differ); resume with --long-documents " + recorded);
  }
  if (meta.held_out_pieces != options_.held_out_pieces) {
    throw InvalidInput(path + "/meta.json: data: the checkpoint was written holding out " +
                       std::to_string(meta.held_out_pieces) +
                       " piece(s) of --data for evaluation, this run holds out " +
                       std::to_string(options_.held_out_pieces) +
                       " (the training data would differ); resume with the same --eval-every, "
                       "--eval-data and --eval-tokens");
  }
  if (split && meta.max_len != options_.max_len) {
    throw InvalidInput(path + "/meta.json: data: the checkpoint was written with --max-len " +
                       std::to_string(meta.max_len) + ", this run has " +
                       std::to_string(options_.max_len) +
                       " (--long-documents split makes other pieces of another length)");
  }
}

void CheckCheckpointDir(const std::string& checkpoint_dir, bool resume, bool verify_shards) {
  if (checkpoint_dir.empty()) return;
  namespace fs = std::filesystem;
  const std::string flag = "checkpoint directory " + checkpoint_dir + ": ";
  std::error_code ec;
  if (fs::exists(checkpoint_dir, ec) && !fs::is_directory(checkpoint_dir, ec)) {
    throw InvalidInput(flag + "exists and is not a directory");
  }
  if (!fs::create_directories(checkpoint_dir, ec) && ec) {
    throw InvalidInput(flag + "cannot create it: " + ec.message());
  }
  if (::access(checkpoint_dir.c_str(), W_OK | X_OK) != 0) {
    throw InvalidInput(flag + "not writable: " + std::strerror(errno));
  }
  if (resume) {
    // A damaged `latest` or meta.json is refused here, once; the shards too when asked (a
    // launcher, before any rank starts), else by every rank as it loads them.
    if (const auto latest = LatestCheckpoint(checkpoint_dir)) {
      if (verify_shards) {
        VerifyCheckpoint(*latest);
      } else {
        const std::string meta_path = *latest + "/meta.json";
        ParseCheckpointMeta(ReadFileText(meta_path), meta_path,
                            fs::path(*latest).filename().string());
      }
    }
    return;
  }
  bool exists = fs::exists(checkpoint_dir + "/latest");
  if (!exists) {
    try {
      exists = LatestCheckpoint(checkpoint_dir).has_value();
    } catch (const InvalidInput&) {  // complete checkpoints without `latest`
      exists = true;
    }
  }
  if (exists) {
    throw InvalidInput(flag +
                       "holds checkpoints already; resume to continue that run, or "
                       "choose an empty directory");
  }
}

void TrainingJob::Save(int steps_done) {
  CheckpointMeta meta;
  meta.step = steps_done;
  meta.sampler_epoch = position_.epoch;
  meta.sampler_offset = position_.offset;
  meta.seed = options_.seed;
  meta.long_documents = NameOf(options_.long_documents, kLongDocumentsNames);
  meta.max_len = options_.max_len;
  meta.held_out_pieces = options_.held_out_pieces;
  // A fit from measured steps goes with the checkpoint: the resumed run plans on it.
  std::vector<std::pair<std::string, std::string>> extra;
  if (options_.calibrate && calibration_.fit().version > 0) {
    extra.emplace_back(kCheckpointCalibrationFile, CalibratedFitToJson(calibration_.fit()));
  }
  SaveCheckpoint(options_.checkpoint_dir, meta, trainer_.optimizer(), trainer_.config(),
                 trainer_.control(), options_.keep_checkpoints, extra);
}

TrainingStepRecord TrainingJob::RunStep(
    const std::function<void(const TrainingStepRecord&)>& on_step) {
  if (done()) throw InternalError("TrainingJob::RunStep: the job is done");
  TrainingStepRecord record;
  record.step = next_step_;
  if (!plans_) {
    // The job's own planner stands for the fit in use until the calibration adopts one, or
    // the fit a resumed checkpoint holds does.
    timeline_ = std::make_unique<PlannerTimeline>(
        restored_fit_ ? PlannerOf(calibration_.fit())
                      : std::shared_ptr<const Planner>(&planner_, [](const Planner*) {}),
        next_step_, kPlanAheadDepth, calibration_.fit().version);
    plans_ = std::make_unique<PlanAhead>(*timeline_, sampler_, next_step_, options_.steps,
                                         kPlanAheadDepth);
  }
  const PlanAhead::Step planned = plans_->Next(record.plan_wait_ms);
  record.fit_version = planned.fit_version;
  position_ = planned.position_after;
  const std::vector<std::vector<std::int64_t>> documents = FetchDocuments(planned, record);
  // A function of the step alone, so a resumed run continues the schedule exactly.
  record.lr = LearningRate(options_.lr_schedule, trainer_.optimizer().base_lr(), options_.steps,
                           record.step);
  trainer_.optimizer().set_lr(record.lr);
  record.result = Train(planned.plan, documents, record.step);
  CheckUpdate(record);
  Calibrate(planned.plan, record);
  ++next_step_;
  Describe(planned.plan, record);
  // Before the checkpoint: a process killed in between must not leave a saved step that
  // its log never recorded (the resume would start after it).
  if (on_step) on_step(record);
  if (!options_.checkpoint_dir.empty() &&
      (done() || (options_.checkpoint_every > 0 && next_step_ % options_.checkpoint_every == 0))) {
    Save(next_step_);
  }
  return record;
}

// The plan's documents (pieces) read from the dataset, whole, counting what the plan cuts
// (the sampler's and the planner's cuts; the step packs what it keeps: micro_batch_layout.h).
std::vector<std::vector<std::int64_t>> TrainingJob::FetchDocuments(const PlanAhead::Step& planned,
                                                                   TrainingStepRecord& record) {
  const Plan& plan = planned.plan;
  std::vector<std::vector<std::int64_t>> documents;
  for (std::size_t i = 0; i < plan.lengths.size(); ++i) {
    const DocumentPiece& piece =
        pieces_[static_cast<std::size_t>(planned.batch.dataset_indices[i])];
    std::vector<std::int64_t> doc =
        PieceTokens(dataset_.Document(static_cast<std::size_t>(piece.document)), piece);
    if (static_cast<std::int64_t>(doc.size()) > plan.lengths[i]) {
      ++record.cut_documents;
      record.cut_tokens += static_cast<std::int64_t>(doc.size()) - plan.lengths[i];
    }
    record.tokens += plan.lengths[i];
    documents.push_back(std::move(doc));
  }
  totals_.cut_documents += static_cast<std::int64_t>(record.cut_documents);
  totals_.cut_tokens += record.cut_tokens;
  record.model_flops = TrainingFlops(trainer_.config(), plan.lengths);
  return documents;
}

// The step on the trainer; at options.poison_step with NaN parameters for its computation
// (the master weights are restored before the update), to test the non-finite path.
DistributedStepResult TrainingJob::Train(const Plan& plan,
                                         const std::vector<std::vector<std::int64_t>>& documents,
                                         int step) {
  if (step != options_.poison_step) return trainer_.Step(plan, documents);
  at::Tensor full = trainer_.optimizer().full_parameters();
  const at::Tensor saved = full.clone();
  full.fill_(std::numeric_limits<float>::quiet_NaN());
  DistributedStepResult result = trainer_.Step(plan, documents);
  full.copy_(saved);
  return result;
}

// The step's measurement, the same on every rank (each stage's micro-batch times and the
// step time, the slowest rank's of each), added to the calibration; a fit it adopts plans
// the steps after the look-ahead's (PlannerTimeline), on every rank alike.
void TrainingJob::Calibrate(const Plan& plan, TrainingStepRecord& record) {
  // This rank's peak of the step (reading it starts the next step's count on a GPU).
  const auto peak = static_cast<double>(PeakMemoryBytes(trainer_.compute()));
  if (!options_.calibrate && !options_.record_measurements) {
    at::Tensor most = at::full({1}, peak, at::kDouble);
    trainer_.control().AllReduceMax(most);
    record.peak_memory_bytes = static_cast<std::int64_t>(most.item<double>());
    timeline_->Publish(record.step);
    return;
  }
  // One slot per (pipeline, stage, micro-batch), then the step time; a rank fills its own.
  std::vector<std::size_t> offset;
  std::size_t slots = 0;
  for (const PipelinePlan& p : plan.pipelines) {
    offset.push_back(slots);
    slots += static_cast<std::size_t>(p.scheme.pp) * p.micro_batches.size();
  }
  // ... then the step time and the rank's peak memory.
  at::Tensor table = at::zeros({static_cast<std::int64_t>(slots) + 2}, at::kDouble);
  double* t = table.data_ptr<double>();
  const DistributedStepResult& r = record.result;
  if (r.pipeline >= 0 && r.stage >= 0) {
    const std::size_t v = plan.pipelines[static_cast<std::size_t>(r.pipeline)].micro_batches.size();
    if (r.micro_batch_ms.size() != v) {
      throw InternalError("calibration: " + std::to_string(r.micro_batch_ms.size()) +
                          " micro-batch times for " + std::to_string(v) + " micro-batches");
    }
    for (std::size_t j = 0; j < v; ++j) {
      t[offset[static_cast<std::size_t>(r.pipeline)] + static_cast<std::size_t>(r.stage) * v + j] =
          r.micro_batch_ms[j];
    }
  }
  t[slots] = r.step_ms;
  t[slots + 1] = peak;
  trainer_.control().AllReduceMax(table);
  record.peak_memory_bytes = static_cast<std::int64_t>(t[slots + 1]);
  MeasuredStep measured;
  measured.plan = plan;
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const std::size_t v = plan.pipelines[p].micro_batches.size();
    std::vector<std::vector<double>> stages(static_cast<std::size_t>(plan.pipelines[p].scheme.pp));
    for (std::size_t s = 0; s < stages.size(); ++s) {
      stages[s].assign(t + offset[p] + s * v, t + offset[p] + (s + 1) * v);
    }
    measured.stage_ms.push_back(std::move(stages));
  }
  measured.step_ms = t[slots];
  if (options_.record_measurements) record.measured = std::make_shared<MeasuredStep>(measured);
  if (!options_.calibrate) {
    timeline_->Publish(record.step);
    return;
  }
  const StepCalibration::Outcome outcome = calibration_.Add(std::move(measured));
  record.calibration_refused = outcome.rejected;
  record.fit_adopted = outcome.adopted;
  if (!outcome.adopted) {
    timeline_->Publish(record.step);
    return;
  }
  timeline_->Publish(record.step, PlannerOf(calibration_.fit()), calibration_.fit().version);
}

MeasuredRunHeader TrainingJob::measurements_header() const {
  return {calibration_.initial_profile(), calibration_.candidates(), calibration_.schedule(),
          calibration_.options(), calibration_.fit()};
}

std::shared_ptr<const Planner> TrainingJob::PlannerOf(const CalibratedFit& fit) const {
  PlannerOptions options = planner_.options();
  options.strategy_overhead_ms = fit.overhead_ms;
  return std::make_shared<const Planner>(fit.profile, planner_.candidates(), options);
}

// A step the optimizer did not apply (non-finite loss or gradient norm) stops the job, or
// is counted as skipped with skip_nonfinite_steps.
void TrainingJob::CheckUpdate(TrainingStepRecord& record) {
  if (record.result.applied) return;
  if (!options_.skip_nonfinite_steps) {
    const bool loss_bad = !std::isfinite(record.result.loss);
    throw Error("step " + std::to_string(record.step) + ": the " +
                (loss_bad ? "loss is " + NumberText(record.result.loss)
                          : "gradient norm is " + NumberText(record.result.grad_norm)) +
                "; stopped before the update, so the parameters are those after step " +
                std::to_string(record.step - 1) +
                " (the skip-nonfinite-steps option skips such steps instead, counting them)");
  }
  record.skipped = true;
  ++totals_.skipped_steps;
}

// What the step log says of the plan: sizes, the strategy and whether it switched, the
// prediction and the planning time.
void TrainingJob::Describe(const Plan& plan, TrainingStepRecord& record) {
  for (const PipelinePlan& p : plan.pipelines) {
    record.micro_batches.push_back(static_cast<int>(p.micro_batches.size()));
  }
  record.documents = plan.lengths.size();
  record.truncated = plan.truncated.size();
  for (const Truncation& t : plan.truncated) record.truncated_tokens += t.original - t.kept;
  record.strategy =
      plan.strategy.name.empty() ? StrategyDescription(plan.strategy) : plan.strategy.name;
  record.strategy_index = plan.strategy_index;
  record.switched = previous_strategy_ >= 0 && previous_strategy_ != plan.strategy_index;
  previous_strategy_ = plan.strategy_index;
  record.predicted_step_ms = plan.estimated_step_ms + plan.overhead_ms;
  record.planning_ms = plan.planning_ms;
}

std::string StepLogLine(const TrainingStepRecord& r, const ComputeOptions& compute, int world_size,
                        bool profile_derived) {
  nlohmann::json j;
  j["step"] = r.step;
  j["loss"] =
      std::isfinite(r.result.loss) ? nlohmann::json(r.result.loss) : nlohmann::json(nullptr);
  j["lr"] = r.lr;
  j["tokens"] = r.tokens;
  if (r.result.step_ms > 0) {
    j["tokens_per_s"] = static_cast<double>(r.tokens) / r.result.step_ms * 1000.0;
    const double flops_per_s = r.model_flops / r.result.step_ms * 1000.0;
    j["model_tflops_per_s"] = flops_per_s / 1e12;
    // Over the whole job's devices: the step's work is spread over all of them.
    if (const std::optional<double> peak = PeakTflops(compute); peak && world_size > 0) {
      j["mfu"] = flops_per_s / (*peak * 1e12 * world_size);
    }
  }
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["targets"] = r.result.targets;
  j["documents"] = r.documents;
  j["step_ms"] = r.result.step_ms;
  j["strategy"] = r.strategy;
  j["strategy_index"] = r.strategy_index;
  j["switched"] = r.switched;
  j["predicted_step_ms"] = r.predicted_step_ms;
  j["fit"] = r.fit_version;
  if (r.fit_adopted) j["fit_adopted"] = true;
  if (!r.calibration_refused.empty()) j["calibration_refused"] = r.calibration_refused;
  j["planning_ms"] = r.planning_ms;
  j["plan_wait_ms"] = r.plan_wait_ms;
  j["compute_ms"] = r.result.compute_ms;
  j["wait_ms"] = r.result.wait_ms;
  j["sync_ms"] = r.result.sync_ms;
  j["grad_buckets"] = r.result.grad_buckets;
  j["grad_buckets_overlapped"] = r.result.grad_buckets_overlapped;
  j["grad_reduce_wait_ms"] = r.result.grad_reduce_wait_ms;
  j["param_gather_wait_ms"] = r.result.param_gather_wait_ms;
  j["check_ms"] = r.result.check_ms;
  j["pack_ms"] = r.result.pack_ms;
  j["materialise_ms"] = r.result.materialise_ms;
  j["forward_ms"] = r.result.forward_ms;
  j["backward_ms"] = r.result.backward_ms;
  j["grad_collect_ms"] = r.result.grad_collect_ms;
  j["update_ms"] = r.result.update_ms;
  j["micro_batches"] = r.micro_batches;
  j["truncated"] = r.truncated;
  j["truncated_tokens"] = r.truncated_tokens;
  j["cut_documents"] = r.cut_documents;
  j["cut_tokens"] = r.cut_tokens;
  // JSON has no NaN: a non-finite value is logged as null, next to "skipped".
  j["grad_norm"] = std::isfinite(r.result.grad_norm) ? nlohmann::json(r.result.grad_norm)
                                                     : nlohmann::json(nullptr);
  j["skipped"] = r.skipped;
  j["device"] = ToString(compute.device);
  j["precision"] = ToString(compute.precision);
  if (profile_derived) j["profile"] = "derived";
  return j.dump();
}

}  // namespace hydraulis

namespace hydraulis {

void TrainingJob::SetEvaluation(std::vector<std::vector<std::int64_t>> documents) {
  std::vector<std::int64_t> lengths;
  std::int64_t targets = 0;
  for (const auto& d : documents) {
    lengths.push_back(static_cast<std::int64_t>(d.size()));
    targets += std::max<std::int64_t>(0, static_cast<std::int64_t>(d.size()) - 1);
  }
  if (targets <= 0) {
    throw InvalidInput("evaluation: the held-out documents have no next-token target");
  }
  // Planned once: the batch never changes, and the planner's look-ahead thread has not
  // started (PlanBatch here runs before the first RunStep).
  eval_plan_ = planner_.PlanBatch(lengths);
  eval_documents_ = std::move(documents);
}

std::optional<EvaluationRecord> TrainingJob::EvaluateIfDue() {
  if (options_.eval_every <= 0 || eval_documents_.empty() || next_step_ == 0) return std::nullopt;
  if (next_step_ % options_.eval_every != 0 && !done()) return std::nullopt;
  const auto start = std::chrono::steady_clock::now();
  const DistributedTrainer::EvalResult e = trainer_.Evaluate(eval_plan_, eval_documents_);
  EvaluationRecord record;
  record.step = next_step_ - 1;
  record.loss = e.loss;
  record.targets = e.targets;
  record.tokens = e.tokens;
  record.documents = static_cast<std::int64_t>(eval_documents_.size());
  record.eval_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return record;
}

std::string EvaluationLogLine(const EvaluationRecord& r) {
  nlohmann::json j;
  j["step"] = r.step;
  const bool finite = std::isfinite(r.loss);
  j["eval_loss"] = finite ? nlohmann::json(r.loss) : nlohmann::json(nullptr);
  j["eval_ppl"] = finite && std::isfinite(std::exp(r.loss)) ? nlohmann::json(std::exp(r.loss))
                                                            : nlohmann::json(nullptr);
  j["eval_targets"] = r.targets;
  j["eval_tokens"] = r.tokens;
  j["eval_documents"] = r.documents;
  j["eval_ms"] = r.eval_ms;
  return j.dump();
}

}  // namespace hydraulis
