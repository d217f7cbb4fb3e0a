// hydraulis._core: the planner (assign/planner.h) and its inputs (spec_io.h) for Python.
// The package's Python layer (python/hydraulis/__init__.py) documents the API; this file
// only converts. Plans come back with NumPy arrays, one per micro-batch, so no Python
// object is made per document. The GIL is released while planning.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hydraulis/assign/candidate_selection.h"
#include "hydraulis/assign/lookahead.h"
#include "hydraulis/assign/micro_batch_layout.h"
#include "hydraulis/assign/plan_json.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/assign/published.h"
#include "hydraulis/assign/step_calibration.h"
#include "hydraulis/base/error.h"
#include "hydraulis/cost/capacity.h"
#include "hydraulis/cost/recomputed_profile.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/document_length.h"
#include "hydraulis/data/length_source.h"
#include "hydraulis/propose/propose.h"
#include "hydraulis/sim/dynamic_cp.h"
#include "hydraulis/sim/report.h"
#include "hydraulis/sim/simulator.h"
#include "hydraulis/sim/system.h"
#include "hydraulis/spec/ddp_buckets.h"
#include "hydraulis/spec/scheme.h"
#include "hydraulis/spec/spec_io.h"

namespace nb = nanobind;

namespace hydraulis {
namespace {

using Int64Array = nb::ndarray<nb::numpy, std::int64_t, nb::ndim<1>>;

// A NumPy array owning a copy of `values`.
template <typename T>
Int64Array ToNumpy(const std::vector<T>& values) {
  auto* data = new std::int64_t[values.size()];
  for (std::size_t i = 0; i < values.size(); ++i) data[i] = static_cast<std::int64_t>(values[i]);
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<std::int64_t*>(p); });
  return Int64Array(data, {values.size()}, owner);
}

// Candidates as loaded from a file or dict: validated against a profile only when a
// Planner is made, since the same file may serve several profiles.
struct CandidatesText {
  std::string json;
  std::string source;
};

// A Plan with its arrays made once.
struct PyPipeline {
  std::string scheme;
  std::int64_t capacity_tokens;
  double estimated_ms;
  std::int64_t tokens;
  nb::list micro_batches;         // int64 arrays of document indices
  nb::object micro_batch_tokens;  // int64 array: tokens per micro-batch
  nb::list kept_lengths;          // per micro-batch: the tokens kept of each of its documents
  nb::list cu_seqlens;    // per micro-batch: 0, then the running sum of its documents' lengths
  nb::object max_seqlen;  // int64 array: per micro-batch, its longest document
  int cp = 1;
  // cp > 1: per micro-batch, a list with each document's place as the plan format writes it
  // (docs/plan-format.md): its cp rank when it is whole on one, -1 when it is sharded over
  // every cp rank, else the list of its ranks (cost/cp_layout.h); empty for cp = 1.
  nb::list cp_layouts;
};

// The plan, and its pipelines' arrays made on first access (planning returns without
// building them, so plan() costs what planning costs).
struct PyPlan {
  Plan plan;
  nb::object pipelines;  // list of Pipeline, once accessed
};

nb::object MakePipelines(const Plan& plan) {
  std::vector<PyPipeline> out;
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
    const PipelinePlan& p = plan.pipelines[i];
    PyPipeline pp;
    pp.scheme = SchemeName(p.scheme);
    pp.capacity_tokens = p.capacity_tokens;
    pp.estimated_ms = p.estimated_ms;
    pp.tokens = p.tokens;
    pp.cp = p.scheme.cp;
    for (const CpLayout& layout : p.cp_layouts) {
      nb::list places;
      for (std::size_t d = 0; d < layout.size(); ++d) {
        const std::span<const int> ranks = layout.Ranks(d);
        if (ranks.size() == 1) {
          places.append(ranks[0]);
        } else if (static_cast<int>(ranks.size()) == p.scheme.cp) {
          places.append(kSharded);
        } else {
          places.append(nb::cast(std::vector<int>(ranks.begin(), ranks.end())));
        }
      }
      pp.cp_layouts.append(places);
    }
    std::vector<std::int64_t> tokens, longest;
    // The packing rule the runtime's step uses too (micro_batch_layout.h).
    for (const MicroBatchLayout& layout : PipelineLayouts(plan, static_cast<int>(i))) {
      pp.micro_batches.append(nb::cast(ToNumpy(layout.documents)));
      pp.kept_lengths.append(nb::cast(ToNumpy(layout.lengths)));
      pp.cu_seqlens.append(nb::cast(ToNumpy(layout.cu_seqlens)));
      tokens.push_back(layout.cu_seqlens.back());
      std::int64_t max_len = 0;
      for (const std::int64_t len : layout.lengths) max_len = std::max(max_len, len);
      longest.push_back(max_len);
    }
    pp.micro_batch_tokens = nb::cast(ToNumpy(tokens));
    pp.max_seqlen = nb::cast(ToNumpy(longest));
    out.push_back(std::move(pp));
  }
  return nb::cast(std::move(out));
}

// An integer array of another dtype, converted to int64.
std::vector<std::int64_t> IntegerArrayLengths(nb::handle obj,
                                              const nb::ndarray<nb::ro, nb::ndim<1>>& array) {
  const nb::dlpack::dtype t = array.dtype();
  if (t.code != static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int) &&
      t.code != static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt)) {
    throw nb::type_error(("lengths: expected integers, got an array of dtype " +
                          nb::cast<std::string>(obj.attr("dtype").attr("name")) +
                          "; lengths are token counts, never cast from floats")
                             .c_str());
  }
  nb::ndarray<nb::ro, std::int64_t, nb::ndim<1>> as64;
  nb::object converted =
      nb::module_::import_("numpy").attr("ascontiguousarray")(obj, nb::arg("dtype") = "int64");
  if (t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt) && t.bits == 64) {
    // uint64 values above 2^63 would wrap; check them before converting.
    nb::object too_big =
        nb::module_::import_("numpy").attr("any")(obj.attr("__gt__")(nb::int_(INT64_MAX)));
    if (PyObject_IsTrue(too_big.ptr()) == 1)
      throw InvalidInput("lengths: a length is above 2^63 - 1");
  }
  as64 = nb::cast<nb::ndarray<nb::ro, std::int64_t, nb::ndim<1>>>(converted);
  return std::vector<std::int64_t>(as64.data(), as64.data() + as64.shape(0));
}

// A Python sequence of integers, item by item.
std::vector<std::int64_t> SequenceLengths(nb::handle obj) {
  std::vector<std::int64_t> lengths;
  // An array of another shape (a 2-D batch): iterating it would give rows, and NumPy's
  // own error names neither the argument nor the shape.
  if (nb::hasattr(obj, "ndim") && nb::hasattr(obj, "shape") && nb::hasattr(obj, "__array__") &&
      !obj.attr("ndim").equal(nb::int_(1))) {
    throw InvalidInput("lengths: expected a 1-D array of integers, got " +
                       std::string(nb::repr(obj.attr("ndim")).c_str()) + "-D with shape " +
                       std::string(nb::repr(obj.attr("shape")).c_str()));
  }
  nb::iterator it;
  try {
    it = nb::iter(obj);
  } catch (const nb::python_error&) {
    throw nb::type_error(("lengths: expected a sequence of integers, got " +
                          std::string(nb::type_name(obj.type()).c_str()))
                             .c_str());
  }
  std::size_t i = 0;
  for (nb::handle item : obj) {
    // Python ints and anything with __index__ (NumPy integer scalars); never bools or
    // floats.
    if (PyBool_Check(item.ptr()) || !PyIndex_Check(item.ptr())) {
      throw nb::type_error(("lengths[" + std::to_string(i) + "]: expected an integer, got " +
                            std::string(nb::type_name(item.type()).c_str()) + " " +
                            std::string(nb::repr(item).c_str()))
                               .c_str());
    }
    nb::object index = nb::steal(PyNumber_Index(item.ptr()));
    if (!index.is_valid()) throw nb::python_error();
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow != 0) {
      throw InvalidInput("lengths[" + std::to_string(i) +
                         "]: " + std::string(nb::repr(item).c_str()) + " is beyond 64 bits");
    }
    lengths.push_back(v);
    ++i;
  }
  return lengths;
}

// Refuses an empty batch, and a length below 1 or above kMaxDocumentTokens.
void CheckLengthRange(const std::vector<std::int64_t>& lengths) {
  if (lengths.empty()) throw InvalidInput("lengths: the batch is empty");
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1) {
      throw InvalidInput("lengths[" + std::to_string(i) +
                         "]: a document has at least one "
                         "token, got " +
                         std::to_string(lengths[i]));
    }
    if (lengths[i] > kMaxDocumentTokens) {
      throw InvalidInput("lengths[" + std::to_string(i) +
                         "]: " + DocumentTooLongMessage(lengths[i]));
    }
  }
}

// Lengths from a Python sequence of ints or an integer NumPy array; TypeError for anything
// else (floats are never cast), InvalidInput (InvalidInputError, a ValueError) naming an
// array that is not 1-D, an empty batch, or the first length below 1 or above
// kMaxDocumentTokens (data/document_length.h), as the length files' readers reject them.
std::vector<std::int64_t> Lengths(nb::handle obj) {
  std::vector<std::int64_t> lengths;
  nb::ndarray<nb::ro, std::int64_t, nb::ndim<1>> int64_array;
  nb::ndarray<nb::ro, nb::ndim<1>> array;
  // Before the array casts: bytes export a buffer, which would read as an array of uint8.
  if (nb::isinstance<nb::str>(obj) || nb::isinstance<nb::bytes>(obj) ||
      PyByteArray_Check(obj.ptr())) {
    throw nb::type_error("lengths: expected a sequence of integers, got a string");
  }
  if (nb::try_cast(obj, int64_array, false)) {
    // The common case, read in place: a 1-D int64 array.
    for (std::size_t i = 0; i < int64_array.shape(0); ++i) lengths.push_back(int64_array(i));
  } else if (nb::try_cast(obj, array, false)) {
    lengths = IntegerArrayLengths(obj, array);
  } else {
    lengths = SequenceLengths(obj);
  }
  CheckLengthRange(lengths);
  return lengths;
}

// A Planner and the lock that serialises its calls: its bound cache is not thread-safe,
// and Python threads may share one Planner (the GIL is released while planning).
struct PyPlanner {
  PyPlanner(const Profile& profile, const CandidateSet& candidates, const PlannerOptions& options)
      : planner(profile, candidates, options) {}
  Planner planner;
  std::mutex mutex;
};

// The look-ahead (assign/lookahead.h) over batches a Python callable draws: it is called on
// the planning thread holding the GIL, returns the next batch's lengths or None; plans are
// made without the GIL, under the planner's lock. `planner` keeps the Planner alive.
struct PyLookahead {
  using Engine = Lookahead<std::vector<std::int64_t>>;
  nb::object planner;
  std::unique_ptr<Engine> engine;

  ~PyLookahead() { Close(); }
  // Stops and joins the thread without the GIL, which it may be waiting for.
  void Close() {
    if (!engine) return;
    {
      nb::gil_scoped_release release;
      engine->Stop();
    }
    engine.reset();  // with the GIL: the source holds Python objects
  }
};

// A BatchSampler with the dataset it reads (the C++ sampler keeps a view of it).
struct PySampler {
  std::vector<std::int64_t> dataset;
  std::unique_ptr<BatchSampler> sampler;
};

// The profile and candidates, read and written as the CLI does.
void BindSpecs(nb::module_& m) {
  nb::class_<Profile>(m, "Profile")
      .def_prop_ro("model_name", [](const Profile& p) { return p.model.name; })
      .def("to_json", [](const Profile& p) { return ProfileToJson(p); })
      // The activation recomputation the profile is for: "none", "selective" or "full".
      .def_prop_ro("recompute", [](const Profile& p) { return ToString(p.recompute); })
      // The profile for a run under `mode` (cost/recomputed_profile.h).
      .def(
          "recomputed",
          [](const Profile& p, const std::string& mode) {
            return RecomputedProfile(p, ParseRecompute(mode, "mode"));
          },
          nb::arg("mode"))
      // The planner's micro-batch capacity of <cp, tp, pp> in tokens (cost/capacity.h), with
      // the optimizer states laid out as (dp, tp, pp).
      .def(
          "capacity_tokens",
          [](const Profile& p, int cp, int tp, int pp, std::tuple<int, int, int> layout) {
            const auto [dp, ltp, lpp] = layout;
            return CapacityTokens(p, Scheme{cp, tp, pp}, OptimizerLayout{dp, ltp, lpp});
          },
          nb::kw_only(), nb::arg("cp") = 1, nb::arg("tp") = 1, nb::arg("pp") = 1,
          nb::arg("optimizer_layout") = std::make_tuple(1, 1, 1));
  // The multiple every capacity is rounded down to (cost/capacity.h).
  m.attr("TOKEN_ALIGNMENT") = kTokenAlignment;
  m.def("load_profile", [](const std::string& path) { return LoadProfile(path); });
  m.def("parse_profile", [](const std::string& text, const std::string& source) {
    return ParseProfile(text, source);
  });

  nb::class_<CandidatesText>(m, "Candidates")
      .def_ro("source", &CandidatesText::source)
      .def("to_json", [](const CandidatesText& c) { return c.json; });
  m.def("candidates_from_text", [](std::string text, std::string source) {
    return CandidatesText{std::move(text), std::move(source)};
  });
}

// A plan and its pipelines, with the arrays a data loader needs.
void BindPlanTypes(nb::module_& m) {
  nb::class_<PyPipeline>(m, "Pipeline")
      .def_ro("scheme", &PyPipeline::scheme)
      .def_ro("capacity_tokens", &PyPipeline::capacity_tokens)
      .def_ro("estimated_ms", &PyPipeline::estimated_ms)
      .def_ro("tokens", &PyPipeline::tokens)
      .def_ro("micro_batches", &PyPipeline::micro_batches)
      .def_ro("micro_batch_tokens", &PyPipeline::micro_batch_tokens)
      .def_ro("cu_seqlens", &PyPipeline::cu_seqlens)
      .def_ro("kept_lengths", &PyPipeline::kept_lengths)
      .def_ro("max_seqlen", &PyPipeline::max_seqlen)
      .def_ro("cp", &PyPipeline::cp)
      .def_ro("cp_layouts", &PyPipeline::cp_layouts);

  nb::class_<PyPlan>(m, "Plan")
      .def_prop_ro("strategy", [](const PyPlan& p) { return p.plan.strategy.name; })
      .def_prop_ro("strategy_index", [](const PyPlan& p) { return p.plan.strategy_index; })
      .def_prop_ro("algorithm", [](const PyPlan& p) { return AlgorithmName(p.plan.algorithm); })
      .def_prop_ro("estimated_step_ms", [](const PyPlan& p) { return p.plan.estimated_step_ms; })
      .def_prop_ro("lower_bound_ms", [](const PyPlan& p) { return p.plan.lower_bound_ms; })
      .def_prop_ro("planning_ms", [](const PyPlan& p) { return p.plan.planning_ms; })
      .def_prop_ro(
          "gap",
          [](const PyPlan& p) {
            return RelativeGap(p.plan.estimated_step_ms, p.plan.lower_bound_ms).value_or(0.0);
          })
      .def_prop_ro("status", [](const PyPlan& p) { return SolveStatusName(p.plan.status); })
      .def_prop_ro("time_limited_solves",
                   [](const PyPlan& p) { return p.plan.time_limited_solves; })
      .def_prop_ro("lengths", [](const PyPlan& p) { return nb::cast(ToNumpy(p.plan.lengths)); })
      .def_prop_ro("truncated",
                   [](const PyPlan& p) {
                     std::vector<std::tuple<int, std::int64_t, std::int64_t>> out;
                     for (const Truncation& t : p.plan.truncated) {
                       out.emplace_back(t.index, t.original, t.kept);
                     }
                     return out;
                   })
      .def_prop_ro("pipelines",
                   [](PyPlan& p) {
                     if (!p.pipelines.is_valid()) p.pipelines = MakePipelines(p.plan);
                     return p.pipelines;
                   })
      .def(
          "to_json",
          [](const PyPlan& p, bool pretty, bool include_timing) {
            return PlanToJson(p.plan, pretty, include_timing) + "\n";
          },
          nb::arg("pretty") = false, nb::arg("include_timing") = false)
      // Pickling (DataLoader workers, multiprocessing): the plan format with its timing, and
      // the lengths it does not hold; read back whole by PlanFromJson.
      .def("__getstate__",
           [](const PyPlan& p) {
             return std::make_tuple(PlanToJson(p.plan, false, true), p.plan.lengths);
           })
      .def("__setstate__",
           [](PyPlan& p, const std::tuple<std::string, std::vector<std::int64_t>>& state) {
             new (&p) PyPlan{PlanFromJson(std::get<0>(state), std::get<1>(state), "pickled plan"),
                             nb::object()};
           });
}

// Length files, and the dynamic-cp baseline's scheduler.
void BindLengthFunctions(nb::module_& m) {
  m.def(
      "read_lengths",
      [](const std::string& path, const std::string& format, const std::string& length_field,
         const std::string& text_field, const std::string& counter, bool skip_empty) {
        const LengthSourceOptions options =
            LengthSourceSpec{format, length_field, text_field, counter, skip_empty}.ToOptions(
                "format", "counter");
        std::vector<std::int64_t> lengths;
        {
          nb::gil_scoped_release release;
          lengths = LoadLengths(path, options);
        }
        return nb::cast(ToNumpy(lengths));
      },
      nb::arg("path"), nb::kw_only(), nb::arg("format") = "auto",
      nb::arg("length_field") = "length", nb::arg("text_field") = "", nb::arg("counter") = "bytes",
      nb::arg("skip_empty") = false);

  // The dynamic-cp baseline's scheduler (sim/dynamic_cp.h): groups[g][r] lists the batch
  // indices of the documents rank r runs in group g, as megatron-core's
  // BalancedCPScheduler.get_groups_and_subsamples returns sample ids.
  m.def(
      "dynamic_cp_schedule",
      [](nb::handle lengths, int ranks, std::int64_t max_tokens_per_rank) {
        const std::vector<std::int64_t> values = Lengths(lengths);
        return ScheduleDynamicCp(values, ranks, max_tokens_per_rank).groups;
      },
      nb::arg("lengths"), nb::arg("ranks"), nb::arg("max_tokens_per_rank"));
}

// Strategy proposal and candidate selection.
void BindProposal(nb::module_& m) {
  m.def(
      "propose",
      [](const Profile& profile, nb::handle lengths, int gpus, std::int64_t max_len,
         std::int64_t resolution, std::int64_t tokens_per_batch, int max_strategies,
         std::optional<std::tuple<int, int, int>> optimizer_layout, int top_documents) {
        ProposeOptions options;
        options.gpus = gpus;
        options.max_len = max_len;
        options.resolution_tokens = resolution;
        options.tokens_per_batch = tokens_per_batch;
        options.max_strategies = max_strategies;
        options.top_documents = top_documents;
        if (optimizer_layout) {
          const auto [dp, tp, pp] = *optimizer_layout;
          if (dp < 1 || tp < 1 || pp < 1) {
            throw InvalidInput("optimizer_layout: expected (dp, tp, pp), three integers >= 1");
          }
          options.optimizer_layout = OptimizerLayout{dp, tp, pp};
        }
        const std::vector<std::int64_t> values = Lengths(lengths);
        Proposal proposal;
        {
          nb::gil_scoped_release release;
          proposal = ProposeStrategies(profile, values, options);
        }
        std::string json = CandidatesToJson(proposal.candidates);
        ParseCandidates(json, "proposed candidates", profile);  // as `hydraulis propose` checks
        return CandidatesText{std::move(json), "proposed candidates"};
      },
      nb::arg("profile"), nb::arg("lengths"), nb::kw_only(), nb::arg("gpus"),
      nb::arg("max_len") = 32'768, nb::arg("resolution") = 128,
      nb::arg("tokens_per_batch") = 200'000, nb::arg("max_strategies") = 0,
      nb::arg("optimizer_layout") = nb::none(), nb::arg("top_documents") = 1);

  m.def(
      "select_candidates",
      [](const Profile& profile, const CandidatesText& candidates, nb::handle batches, int more,
         std::vector<int> always, std::int64_t max_len, int threads, double prune_tolerance) {
        if (max_len < 1) {
          throw InvalidInput("max_len: must be >= 1, got " + std::to_string(max_len));
        }
        if (threads < 0)
          throw InvalidInput("threads: must be >= 0, got " + std::to_string(threads));
        const CandidateSet set = ParseCandidates(candidates.json, candidates.source, profile);
        std::vector<std::vector<std::int64_t>> values;
        for (nb::handle b : batches) values.push_back(Lengths(b));
        PlannerOptions options;
        options.context_tokens = max_len;
        options.threads = threads;
        options.prune_tolerance = prune_tolerance;  // the Planner rejects a bad one
        CandidateSelection chosen;
        {
          nb::gil_scoped_release release;
          chosen = SelectCandidatesByPlans(profile, set, values, always, more, options);
        }
        const CandidateSet kept = KeptCandidates(set, chosen.kept);
        std::string json = CandidatesToJson(kept);
        return nb::make_tuple(CandidatesText{std::move(json), candidates.source + " (selected)"},
                              chosen.kept, chosen.kept_ms, chosen.all_ms);
      },
      nb::arg("profile"), nb::arg("candidates"), nb::arg("batches"), nb::kw_only(), nb::arg("more"),
      nb::arg("always"), nb::arg("max_len") = 32'768, nb::arg("threads") = 0,
      nb::arg("prune_tolerance") = 0.0);
}

// The step simulator.
void BindSimulation(nb::module_& m) {
  m.def(
      "simulate",
      [](const Profile& profile, const CandidatesText& candidates, nb::handle dataset,
         const std::string& system, int steps, std::int64_t tokens_per_batch, std::int64_t max_len,
         std::uint64_t seed, bool sync_aware, bool communication, bool overlap,
         std::int64_t ddp_bucket_size, double backward_to_forward) {
        SimOptions options;
        options.system = ParseSystem(system);
        options.steps = steps;
        options.sampler.tokens_per_batch = tokens_per_batch;
        options.sampler.max_len = max_len;
        options.sampler.seed = seed;
        options.planner_seed = seed;
        options.sync_aware = sync_aware;
        options.comm.enabled = communication;
        options.comm.overlap = overlap;
        options.comm.bucket_elements = ddp_bucket_size;
        options.schedule.backward_to_forward = backward_to_forward;
        ValidateSimOptions(options);
        const CandidateSet set = ParseCandidates(candidates.json, candidates.source, profile);
        const std::vector<std::int64_t> values = Lengths(dataset);
        std::string summary;
        {
          nb::gil_scoped_release release;
          summary = SimSummaryJson(Simulate(profile, set, values, options));
        }
        return summary;
      },
      nb::arg("profile"), nb::arg("candidates"), nb::arg("dataset"), nb::kw_only(),
      nb::arg("system") = "ours", nb::arg("steps") = 1, nb::arg("tokens_per_batch") = 200'000,
      nb::arg("max_len") = 32'768, nb::arg("seed") = 1, nb::arg("sync_aware") = true,
      nb::arg("communication") = true, nb::arg("overlap") = true,
      nb::arg("ddp_bucket_size") = kDefaultBucketElements, nb::arg("backward_to_forward") = 2.0);
}

// The seeded batch sampler.
void BindSampler(nb::module_& m) {
  nb::class_<PySampler>(m, "BatchSampler")
      .def(
          "__init__",
          [](PySampler* self, nb::handle dataset, std::int64_t tokens_per_batch,
             std::int64_t max_len, std::uint64_t seed, std::int64_t documents_per_batch) {
            new (self) PySampler();
            self->dataset = Lengths(dataset);
            SamplerOptions options;
            options.tokens_per_batch = tokens_per_batch;
            options.max_len = max_len;
            options.seed = seed;
            options.documents_per_batch = documents_per_batch;
            self->sampler = std::make_unique<BatchSampler>(self->dataset, options);
          },
          nb::arg("dataset"), nb::kw_only(), nb::arg("tokens_per_batch") = 200'000,
          nb::arg("max_len") = 32'768, nb::arg("seed") = 1, nb::arg("documents_per_batch") = 0)
      .def("next",
           [](PySampler& s) {
             SampledBatch batch = s.sampler->Next();
             return std::make_tuple(nb::cast(ToNumpy(batch.lengths)),
                                    nb::cast(ToNumpy(batch.dataset_indices)));
           })
      .def_prop_ro("position",
                   [](const PySampler& s) {
                     const SamplerPosition p = s.sampler->position();
                     return std::make_tuple(p.epoch, p.offset);
                   })
      .def(
          "restore",
          [](PySampler& s, std::tuple<std::int64_t, std::int64_t> position) {
            s.sampler->Restore({std::get<0>(position), std::get<1>(position)});
          },
          nb::arg("position"));
}

// The planner, shared between threads.
void BindPlanner(nb::module_& m) {
  nb::class_<PyPlanner>(m, "Planner")
      .def(
          "__init__",
          [](PyPlanner* self, const Profile& profile, const CandidatesText& candidates,
             const std::string& algorithm, std::uint64_t seed, std::int64_t max_len,
             bool reject_overlong, double backward_to_forward, int threads, double prune_tolerance,
             const std::string& cp_layouts, const std::vector<double>& strategy_overhead_ms) {
            if (max_len < 1) {
              throw InvalidInput("max_len: must be >= 1, got " + std::to_string(max_len));
            }
            if (!std::isfinite(backward_to_forward) || backward_to_forward <= 0) {
              throw InvalidInput("backward_to_forward: must be a positive finite number");
            }
            const CandidateSet set = ParseCandidates(candidates.json, candidates.source, profile);
            PlannerOptions options;
            options.algorithm = ParseAlgorithm(algorithm);
            options.published_assigner = AssignPublished;
            options.overlong = reject_overlong ? OverlongRule::kReject : OverlongRule::kTruncate;
            options.context_tokens = max_len;
            options.seed = seed;
            options.schedule.backward_to_forward = backward_to_forward;
            options.threads = threads;
            options.prune_tolerance = prune_tolerance;  // the Planner rejects a bad one
            options.cp_layout_space = ParseCpLayoutSpace(cp_layouts, "cp_layouts");
            options.strategy_overhead_ms = strategy_overhead_ms;  // the Planner checks them
            new (self) PyPlanner(profile, set, options);
          },
          nb::arg("profile"), nb::arg("candidates"), nb::kw_only(), nb::arg("algorithm") = "ours",
          nb::arg("seed") = 1, nb::arg("max_len") = 32'768, nb::arg("reject_overlong") = false,
          nb::arg("backward_to_forward") = 2.0, nb::arg("threads") = 1,
          nb::arg("prune_tolerance") = 0.0, nb::arg("cp_layouts") = "subsets",
          nb::arg("strategy_overhead_ms") = std::vector<double>{})
      .def(
          "plan",
          [](PyPlanner& planner, nb::handle lengths) {
            const std::vector<std::int64_t> values = Lengths(lengths);
            Plan plan;
            {
              nb::gil_scoped_release release;
              const std::lock_guard<std::mutex> lock(planner.mutex);
              plan = planner.planner.PlanBatch(values);
            }
            return PyPlan{std::move(plan), nb::object()};
          },
          nb::arg("lengths"));
}

// Calibration from measured steps, and planning ahead of the steps.
void BindPlanningAhead(nb::module_& m) {
  nb::class_<StepCalibration>(m, "StepCalibration")
      .def(
          "__init__",
          [](StepCalibration* self, const Profile& profile, const CandidatesText& candidates,
             double backward_to_forward, int window, int holdout) {
            if (!std::isfinite(backward_to_forward) || backward_to_forward <= 0) {
              throw InvalidInput("backward_to_forward: must be a positive finite number");
            }
            ScheduleOptions schedule;
            schedule.backward_to_forward = backward_to_forward;
            CalibrationOptions options;
            options.window = window;
            options.holdout = holdout;
            new (self) StepCalibration(profile,
                                       ParseCandidates(candidates.json, candidates.source, profile),
                                       schedule, options);
          },
          nb::arg("profile"), nb::arg("candidates"), nb::kw_only(),
          nb::arg("backward_to_forward") = 2.0, nb::arg("window") = 16, nb::arg("holdout") = 4)
      .def(
          "add",
          [](StepCalibration& self, const PyPlan& plan,
             std::vector<std::vector<std::vector<double>>> stage_ms, double step_ms) {
            MeasuredStep step;
            step.plan = plan.plan;
            step.stage_ms = std::move(stage_ms);
            step.step_ms = step_ms;
            const StepCalibration::Outcome o = self.Add(std::move(step));
            return nb::make_tuple(o.adopted, o.rejected, o.in_use_error, o.refit_error);
          },
          nb::arg("plan"), nb::arg("stage_ms"), nb::arg("step_ms"))
      .def("predict_ms", [](const StepCalibration& self,
                            const PyPlan& plan) { return self.PredictMs(plan.plan); })
      .def_prop_ro("profile", [](const StepCalibration& self) { return self.fit().profile; })
      .def_prop_ro("overhead_ms",
                   [](const StepCalibration& self) { return self.fit().overhead_ms; })
      .def_prop_ro("version", [](const StepCalibration& self) { return self.fit().version; })
      .def("to_json", [](const StepCalibration& self) { return CalibratedFitToJson(self.fit()); });

  nb::class_<PyLookahead>(m, "Lookahead")
      .def(
          "__init__",
          [](PyLookahead* self, nb::object planner_object, nb::object next_lengths, int depth) {
            PyPlanner& planner = nb::cast<PyPlanner&>(planner_object);
            new (self) PyLookahead{planner_object, nullptr};
            self->engine = std::make_unique<PyLookahead::Engine>(
                [next_lengths]() -> std::optional<std::vector<std::int64_t>> {
                  nb::gil_scoped_acquire gil;
                  nb::object lengths = next_lengths();
                  if (lengths.is_none()) return std::nullopt;
                  return Lengths(lengths);
                },
                [&planner](const std::vector<std::int64_t>& lengths) {
                  const std::lock_guard<std::mutex> lock(planner.mutex);
                  return planner.planner.PlanBatch(lengths);
                },
                depth);
          },
          nb::arg("planner"), nb::arg("next_lengths"), nb::arg("depth"))
      .def("next",
           [](PyLookahead& self) -> nb::object {
             if (!self.engine) return nb::none();
             double waited_ms = 0;
             std::optional<PyLookahead::Engine::Step> step;
             {
               nb::gil_scoped_release release;
               step = self.engine->Next(waited_ms);
             }
             if (!step) return nb::none();
             return nb::make_tuple(PyPlan{std::move(step->plan), nb::object()}, waited_ms);
           })
      .def_prop_ro("ready",
                   [](PyLookahead& self) { return self.engine ? self.engine->Ready() : 0; })
      .def("close", [](PyLookahead& self) { self.Close(); });
}

}  // namespace
}  // namespace hydraulis

NB_MODULE(_core, m) {
  using namespace hydraulis;
  m.doc() = "hydraulis' planning layers (see the hydraulis package for the documented API)";
  // The library's input errors are ValueErrors carrying the message the CLI prints.
  // nanobind tries translators newest first: the base class is registered first.
  nb::exception<Error>(m, "HydraulisError", PyExc_RuntimeError);
  nb::exception<InvalidInput>(m, "InvalidInputError", PyExc_ValueError);
  nb::exception<Infeasible>(m, "InfeasibleError", PyExc_ValueError);
  BindSpecs(m);
  BindPlanTypes(m);
  BindLengthFunctions(m);
  BindProposal(m);
  BindSimulation(m);
  BindSampler(m);
  BindPlanner(m);
  BindPlanningAhead(m);
}
