#include "hydraulis/runtime/job/training_run.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "derived_profile.h"
#include "hydraulis/base/enum_names.h"
#include "hydraulis/base/error.h"
#include "hydraulis/cost/kv_exchange.h"
#include "hydraulis/runtime/job/checkpoint.h"
#include "hydraulis/runtime/model/hf_weights.h"
#include "hydraulis/runtime/model/memory_fit.h"
#include "hydraulis/runtime/step/sharded_optimizer.h"
#include "hydraulis/spec/spec_io.h"

namespace hydraulis {
namespace {

// The homogeneous layout's flags as a message names them: "--tp 2 x --pp 1", with
// "--cp N x " in front when cp > 1.
std::string LayoutFlags(const TrainingRunOptions& o) {
  return (o.cp > 1 ? "--cp " + std::to_string(o.cp) + " x " : std::string()) + "--tp " +
         std::to_string(o.tp) + " x --pp " + std::to_string(o.pp);
}

// Makes sure `profile` has the homogeneous candidate's <cp, tp, pp> scheme for --cp > 1:
// derived from its <1, tp, 1> fit as the planning layer derives cp schemes (placed
// documents run as on the tp group; the key/value exchange at the simulator's link
// speeds). Only pp = 1 is derived: cp x pp needs the scheme in the profile, because the
// derivation is defined on single-stage fits (docs/design.md) and a pipeline's fit would
// carry its stage's exchange differently. Returns the derived scheme's name, or "".
std::string DeriveContextParallelScheme(const TrainingRunOptions& o, Profile& profile,
                                        const Scheme& scheme) {
  if (scheme.cp == 1 || profile.Find(scheme) != nullptr) return "";
  const std::string source = o.profile.empty() ? o.engine_profile : o.profile;
  if (scheme.pp > 1) {
    throw InvalidInput("train: " + LayoutFlags(o) + ": " + source + " has no " +
                       SchemeName(scheme) +
                       " scheme, and cp schemes are derived only for --pp 1; profile it with "
                       "`hydraulis profile` or use --pp 1");
  }
  Scheme base = scheme;
  base.cp = 1;
  if (profile.Find(base) == nullptr) {
    throw InvalidInput("train: " + LayoutFlags(o) + ": " + source + " has neither " +
                       SchemeName(scheme) + " nor " + SchemeName(base) +
                       " to derive it from (profile it with `hydraulis profile`, or pick a "
                       "profiled --tp)");
  }
  const int cp_sizes[] = {scheme.cp};
  AddDerivedContextParallelSchemes(profile, cp_sizes);
  return SchemeName(scheme);
}

// The candidate set this run chooses from: the file, or one strategy of
// world / (cp * tp * pp) identical pipelines.
CandidateSet Candidates(const TrainingRunOptions& o, const Profile& profile, int world) {
  if (!o.candidates.empty()) {
    CandidateSet set = LoadCandidates(o.candidates, profile);
    if (set.gpus != world) {
      throw InvalidInput(o.candidates + ": gpus: the candidate set is for " +
                         std::to_string(set.gpus) + " ranks, the job has " + std::to_string(world));
    }
    return set;
  }
  const std::int64_t width = std::int64_t{o.cp} * o.tp * o.pp;
  if (world % width != 0) {
    throw InvalidInput("train: " + LayoutFlags(o) + " does not divide the " +
                       std::to_string(world) + " ranks");
  }
  Scheme scheme;
  scheme.cp = o.cp;
  scheme.tp = o.tp;
  scheme.pp = o.pp;
  if (profile.Find(scheme) == nullptr) {
    throw InvalidInput((o.profile.empty() ? o.engine_profile : o.profile) +
                       ": schemes: no entry for " + SchemeName(scheme) +
                       " (profile it with `hydraulis profile`, or pick a profiled --tp/--pp)");
  }
  CandidateSet set;
  set.gpus = world;
  set.optimizer_layout = {world, 1, 1};
  Strategy s;
  s.name = std::to_string(world / width) + "x" + SchemeName(scheme);
  s.pipelines.assign(static_cast<std::size_t>(world / width), scheme);
  set.strategies.push_back(s);
  return set;
}

// Whether `profile` was made for `model`'s shape.
bool ProfiledFor(const Profile& profile, const ModelConfig& model) {
  return profile.model.layers == model.shape.layers && profile.model.hidden == model.shape.hidden;
}

// The run's sampler: split and reject lose no token to the budget either (a document that
// does not fit what is left of a batch starts the next); truncate cuts as it always has.
SamplerOptions SamplerFor(const TrainingRunOptions& o, LongDocuments rule) {
  SamplerOptions options{o.tokens_per_batch, o.max_len, o.job.seed};
  options.whole_documents = rule != LongDocuments::kTruncate;
  return options;
}

// --plan-algorithm: the planner algorithms a training run can execute (a subset of the
// planner's names, so the message lists only these).
constexpr EnumNames<Algorithm, 2> kTrainingAlgorithms{
    {{Algorithm::kOurs, "ours"}, {Algorithm::kStaticFixed, "static-fixed"}}};

// The flags that contradict each other or leave nothing to train on.
void CheckFlagCombinations(const TrainingRunOptions& o) {
  if (o.max_len < 2) {
    throw InvalidInput("--max-len " + std::to_string(o.max_len) +
                       ": every document would be cut to fewer than 2 tokens, which leaves no "
                       "next-token target to train on; give at least 2");
  }
  if (!o.candidates.empty() && o.cp != 1) {
    // A candidates file names each scheme's cp itself.
    throw InvalidInput("train: --cp " + std::to_string(o.cp) +
                       " and --candidates: give one (a candidates file sets each scheme's cp)");
  }
  if (!o.candidates.empty() && (o.tp != 1 || o.pp != 1)) {
    throw InvalidInput("train: give --candidates or --tp/--pp, not both");
  }
  if (o.resume && o.job.checkpoint_dir.empty()) {
    throw InvalidInput("train: --resume needs --checkpoint-dir");
  }
}

}  // namespace

// Everything a rank needs besides its peers, loaded and checked.
struct TrainingInputs {
  ModelConfig model;
  Profile profile;
  CandidateSet candidates;
  std::unique_ptr<MegatronDataset> dataset;
  // What the sampler draws from: the dataset's documents or their pieces, and their lengths.
  std::vector<DocumentPiece> pieces;
  std::vector<std::int64_t> lengths;
  LongDocuments long_documents = LongDocuments::kSplit;
  PlannerOptions planner;
  std::unique_ptr<HfCheckpoint> init;  // --init-from, opened and validated
  // --eval-every: the documents each evaluation runs, and the pieces of --data held out of
  // the sampler's for them (0 with --eval-data).
  std::vector<std::vector<std::int64_t>> eval_documents;
  std::int64_t held_out_pieces = 0;
  bool profile_derived = false;   // no --profile: DeriveProfile from kEngineProfile
  std::string derived_cp_scheme;  // --cp's scheme, derived from <1, tp, 1>; else ""

  // `in_launcher`: checked once before ranks start, so the checkpoint's shards too.
  // `compute`: the device the training state must fit (CheckTrainingStateFits).
  TrainingInputs(const TrainingRunOptions& o, int world_size, const ComputeOptions& compute,
                 bool in_launcher = false) {
    CheckFlagCombinations(o);
    CheckCheckpointDir(o.job.checkpoint_dir, o.resume, in_launcher);
    const std::string model_source = o.init_from.empty() ? o.model : o.init_from + "/config.json";
    if (!o.init_from.empty()) {
      init = std::make_unique<HfCheckpoint>(o.init_from);
      model = init->config();
    } else {
      model = LoadModelConfig(o.model);
    }
    RequireWithinSlidingWindow(model, o.max_len, "--max-len", model_source);
    // Before anything of the model's size is built: the flat layout below lists every
    // parameter (2^31 layers would exhaust memory listing them) and counts in int64.
    CheckTrainingStateFits(model, world_size, compute);
    ChooseProfile(o, compute, model_source);
    if (o.candidates.empty() && world_size % (std::int64_t{o.cp} * o.tp * o.pp) == 0) {
      derived_cp_scheme = DeriveContextParallelScheme(o, profile, Scheme{o.cp, o.tp, o.pp});
    }
    candidates = Candidates(o, profile, world_size);
    try {
      MakeOptimizerShardLayout(MakeFlatLayout(model).numel, world_size, o.ddp_bucket_size);
    } catch (const InvalidInput& e) {
      throw InvalidInput(std::string("--ddp-bucket-size: ") + e.what());
    }
    long_documents = ParseName(o.long_documents, kLongDocumentsNames, "--long-documents");
    dataset = std::make_unique<MegatronDataset>(o.data);
    dataset->RequireIdsInVocabulary(model.shape.vocab, model_source);
    std::vector<std::int64_t> document_lengths;
    document_lengths.reserve(dataset->num_documents());
    for (std::size_t i = 0; i < dataset->num_documents(); ++i) {
      document_lengths.push_back(dataset->DocumentLength(i));
    }
    pieces = MakeDocumentPieces(document_lengths, o.max_len, long_documents, "--data " + o.data);
    if (o.job.eval_every > 0) HoldOutEvaluation(o, model, model_source);
    lengths.reserve(pieces.size());
    for (const DocumentPiece& p : pieces) lengths.push_back(p.length);
    planner.algorithm = ParseName(o.plan_algorithm, kTrainingAlgorithms, "--plan-algorithm");
    planner.context_tokens = o.max_len;
    planner.seed = o.job.seed;
  }

  // --profile, which must be this model's and this recompute's, or without it the engine's
  // bundled profile when it is this model's, else one derived from it.
  void ChooseProfile(const TrainingRunOptions& o, const ComputeOptions& compute,
                     const std::string& model_source) {
    if (o.profile.empty()) {
      profile = LoadProfile(o.engine_profile);
      if (!ProfiledFor(profile, model) || profile.recompute != compute.recompute) {
        profile = DeriveProfile(profile, model, compute.recompute);
        profile_derived = true;
      }
      return;
    }
    profile = LoadProfile(o.profile);
    if (profile.recompute != compute.recompute) {
      throw InvalidInput(o.profile + ": recompute: the profile is for " +
                         ToString(profile.recompute) + ", the run asks " +
                         "--recompute-granularity " + ToString(compute.recompute) +
                         ": its capacities and times are another run's (fit one with "
                         "`hydraulis profile --recompute-granularity " +
                         ToString(compute.recompute) + "`, or leave --profile out to derive one)");
    }
    if (!ProfiledFor(profile, model)) {
      throw InvalidInput(o.profile + ": model: profiled for " +
                         std::to_string(profile.model.layers) + " layers of hidden " +
                         std::to_string(profile.model.hidden) + ", " + model_source + " has " +
                         std::to_string(model.shape.layers) + " of " +
                         std::to_string(model.shape.hidden) +
                         " (fit one for this model with `hydraulis profile --model "
                         "MODEL.json -o PROFILE.json`, or leave --profile out to derive one)");
    }
  }

  // --eval-every's documents: from --eval-data, or the last pieces of --data, which leave
  // the sampler's data.
  void HoldOutEvaluation(const TrainingRunOptions& o, const ModelConfig& config,
                         const std::string& model_source) {
    if (o.eval_tokens < 2) {
      throw InvalidInput("--eval-tokens " + std::to_string(o.eval_tokens) +
                         ": must be >= 2 (a next-token target needs two tokens)");
    }
    auto cut = [&](std::vector<std::int64_t> doc) {
      if (static_cast<std::int64_t>(doc.size()) > o.max_len)
        doc.resize(static_cast<std::size_t>(o.max_len));
      return doc;
    };
    std::int64_t total = 0;
    if (!o.eval_data.empty()) {
      const MegatronDataset eval(o.eval_data);
      eval.RequireIdsInVocabulary(config.shape.vocab, model_source);
      std::vector<std::int64_t> eval_lengths;
      for (std::size_t i = 0; i < eval.num_documents(); ++i) {
        eval_lengths.push_back(eval.DocumentLength(i));
      }
      for (const DocumentPiece& p : MakeDocumentPieces(eval_lengths, o.max_len, long_documents,
                                                       "--eval-data " + o.eval_data)) {
        if (total >= o.eval_tokens) break;
        std::vector<std::int64_t> doc =
            cut(PieceTokens(eval.Document(static_cast<std::size_t>(p.document)), p));
        if (doc.size() < 2) continue;
        total += static_cast<std::int64_t>(doc.size());
        eval_documents.push_back(std::move(doc));
      }
      if (eval_documents.empty()) {
        throw InvalidInput("--eval-data " + o.eval_data + ": no document of 2 tokens or more");
      }
      return;
    }
    std::size_t held = 0;
    while (held < pieces.size() && total < o.eval_tokens) {
      total += std::min(pieces[pieces.size() - 1 - held].length, o.max_len);
      ++held;
    }
    if (held >= pieces.size()) {
      throw InvalidInput("--eval-tokens " + std::to_string(o.eval_tokens) +
                         ": holding that many tokens of --data " + o.data +
                         " out for evaluation leaves none to train on; give fewer, or "
                         "--eval-data");
    }
    for (std::size_t i = pieces.size() - held; i < pieces.size(); ++i) {
      std::vector<std::int64_t> doc = cut(
          PieceTokens(dataset->Document(static_cast<std::size_t>(pieces[i].document)), pieces[i]));
      if (doc.size() >= 2) eval_documents.push_back(std::move(doc));
    }
    pieces.resize(pieces.size() - held);
    held_out_pieces = static_cast<std::int64_t>(held);
  }
};

void CheckTrainingStateFits(const ModelConfig& model, int world_size,
                            const ComputeOptions& compute) {
  CheckModelMemoryFits(model, 8.0 + 8.0 / std::max(1, world_size),
                       "per rank for its training state (fp32 master weights and gradient buffer "
                       "on every rank, AdamW's moments over " +
                           std::to_string(world_size) + " rank(s))",
                       compute);
}

void CheckOptimizerOptions(const TrainingRunOptions& options) {
  const AdamWOptions& a = options.adam;
  auto require = [](bool ok, const char* flag, const char* rule, double value) {
    if (!ok)
      throw InvalidInput(std::string(flag) + ": " + rule + ", got " + fmt::format("{}", value));
  };
  require(a.lr >= 0 && std::isfinite(a.lr), "--lr", "must be a finite number >= 0", a.lr);
  require(a.beta1 >= 0 && a.beta1 < 1, "--adam-beta1", "must be in [0, 1)", a.beta1);
  require(a.beta2 >= 0 && a.beta2 < 1, "--adam-beta2", "must be in [0, 1)", a.beta2);
  require(a.eps > 0 && std::isfinite(a.eps), "--adam-eps", "must be a finite number > 0", a.eps);
  require(a.weight_decay >= 0 && std::isfinite(a.weight_decay), "--weight-decay",
          "must be a finite number >= 0", a.weight_decay);
  require(a.clip_grad >= 0 && std::isfinite(a.clip_grad), "--clip-grad",
          "must be a finite number >= 0 (0: no clipping)", a.clip_grad);
  ValidateLrSchedule(options.job.lr_schedule, a.lr, options.job.steps);
}

void CheckTrainingRun(const TrainingRunOptions& options, int world_size) {
  CheckOptimizerOptions(options);
  const ComputeOptions compute = ResolveCompute(options, 0);
  ResolveCommBackend(options, compute);
  const TrainingInputs in(options, world_size, compute, /*in_launcher=*/true);
  // Both check the candidates against the profile and the budget against the data.
  const Planner planner(in.profile, in.candidates, in.planner);
  const BatchSampler sampler(in.lengths, SamplerFor(options, in.long_documents));
}

ComputeOptions ResolveCompute(const TrainingRunOptions& o, int local_rank) {
  ComputeOptions compute =
      ResolveComputeOptions(o.device, o.precision, local_rank, "--device", "--precision");
  compute.recompute = ParseRecompute(o.recompute, "--recompute-granularity");
  return compute;
}

CommBackend ResolveCommBackend(const TrainingRunOptions& o, const ComputeOptions& compute) {
  if (o.comm_backend.empty()) {
    return compute.device == DeviceKind::kCuda ? CommBackend::kNccl : CommBackend::kGloo;
  }
  const CommBackend backend = ParseCommBackend(o.comm_backend, "--comm-backend");
  if (backend == CommBackend::kNccl && compute.device != DeviceKind::kCuda) {
    throw InvalidInput("--comm-backend nccl needs --device cuda");
  }
  return backend;
}

TrainingRun::TrainingRun(const TrainingRunOptions& options, const DistributedOptions& distributed,
                         int local_rank)
    : compute_(ResolveCompute(options, local_rank)), distributed_(distributed) {
  CheckOptimizerOptions(options);
  UseDevice(compute_);  // before the first CUDA call: the rendezvous' NCCL groups, the model
  distributed_.timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(options.timeout_s * 1000));
  distributed_.device_index = compute_.device_index;
  distributed_.backend = ResolveCommBackend(options, compute_);
  inputs_ = std::make_unique<TrainingInputs>(options, distributed_.world_size, compute_);
  planner_ = std::make_unique<Planner>(inputs_->profile, inputs_->candidates, inputs_->planner);
  sampler_ = std::make_unique<BatchSampler>(inputs_->lengths,
                                            SamplerFor(options, inputs_->long_documents));
  rendezvous_ = std::make_unique<Rendezvous>(distributed_);
  trainer_ = std::make_unique<DistributedTrainer>(
      inputs_->model, options.job.seed, options.adam, *rendezvous_, inputs_->candidates.strategies,
      compute_, inputs_->init ? HfInitialWeights(*inputs_->init) : InitialWeights(),
      options.ddp_bucket_size);
  // The calibration reads each micro-batch's device time (CUDA events on a GPU).
  trainer_->set_time_on_device(options.job.calibrate);
  TrainingJobOptions job = options.job;
  job.long_documents = inputs_->long_documents;
  job.max_len = options.max_len;
  job.held_out_pieces = inputs_->held_out_pieces;
  job_ = std::make_unique<TrainingJob>(*planner_, inputs_->profile, *sampler_, *inputs_->dataset,
                                       inputs_->pieces, *trainer_, job);
  if (options.job.eval_every > 0) job_->SetEvaluation(std::move(inputs_->eval_documents));
}

TrainingRun::~TrainingRun() = default;

bool TrainingRun::profile_derived() const { return inputs_->profile_derived; }

const std::string& TrainingRun::derived_cp_scheme() const { return inputs_->derived_cp_scheme; }

}  // namespace hydraulis
