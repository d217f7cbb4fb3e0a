#include "exact.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <deque>
#include <iterator>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/base/tolerance.h"
#include "hydraulis/cost/pipeline_time.h"

namespace hydraulis {
namespace {

using Mask = std::uint32_t;

constexpr int kNoPacking = std::numeric_limits<int>::max();
// The subset DPs below cost 3^n per capacity and per pipeline level; beyond this they stop
// being a "small instance" tool whatever max_documents says.
constexpr int kHardMaxDocuments = 16;

// A bound within the tolerance of the best time (base/tolerance.h) can only tie it, so the
// branch is pruned; the optimum found is then exact up to that tolerance.
bool CannotBeat(double lower_bound, double best) { return !DefinitelyLess(lower_bound, best); }

int LowestDoc(Mask m) { return std::countr_zero(m); }

// Fewest micro-batches each subset of documents needs under one capacity, with one
// micro-batch of such a packing per subset so the packing can be rebuilt.
struct BinTable {
  std::int64_t capacity = 0;
  std::vector<int> bins;    // kNoPacking when a document exceeds the capacity
  std::vector<Mask> block;  // the micro-batch holding the subset's lowest document

  BinTable(std::int64_t cap, const std::vector<std::int64_t>& tokens) : capacity(cap) {
    const std::size_t subsets = tokens.size();
    bins.assign(subsets, kNoPacking);
    block.assign(subsets, 0);
    bins[0] = 0;
    for (Mask s = 1; s < subsets; ++s) {
      // Fixing the lowest document's micro-batch enumerates each partition once.
      const Mask low = s & (~s + 1);
      const Mask others = s ^ low;
      for (Mask sub = others;; sub = (sub - 1) & others) {
        const Mask b = sub | low;
        if (tokens[b] <= capacity && bins[s ^ b] != kNoPacking && bins[s ^ b] + 1 < bins[s]) {
          bins[s] = bins[s ^ b] + 1;
          block[s] = b;
        }
        if (sub == 0) break;
      }
    }
  }

  std::vector<Mask> Packing(Mask s) const {
    std::vector<Mask> out;
    for (; s != 0; s ^= block[s]) out.push_back(block[s]);
    return out;
  }
};

// Everything known about one distinct pipeline model, per subset of documents: the best
// micro-batch sequence found so far (exact once `exact` is set) and a lower bound.
struct Model {
  const PipelineModel* pipe = nullptr;
  const BinTable* bins = nullptr;
  int pp = 1;
  double c = 0;
  double fwd = 0, bwd = 0;  // forward / backward shares of a stage time
  // Lower bounds assume no negative cost (more micro-batches or documents never help);
  // fitted models can violate that, and then every subset is enumerated in full.
  bool bounded = true;
  std::vector<double> doc_ms;
  std::vector<double> work, min_doc, max_doc;  // per subset
  std::vector<double> ms, lb;
  std::vector<char> exact;
  std::vector<std::vector<Mask>> seq;
};

// OneFOneBMs's schedule built one micro-batch at a time, so a search over orders can
// bound a prefix before choosing the rest. Each operation is computed exactly as
// OneFOneBMs computes it (end = max(ready, stage free) + duration), so a full order gets
// the same time to the bit; SolveSubset cross-checks its winner against OneFOneBMs.
class IncrementalOneFOneB {
 public:
  void Start(int pp, double fwd_share, int v) {
    pp_ = pp;
    v_ = v;
    fwd_ = fwd_share;
    const std::size_t cells = static_cast<std::size_t>(pp) * static_cast<std::size_t>(v);
    f_end_.assign(cells, 0.0);
    b_end_.assign(cells, 0.0);
    time_.assign(static_cast<std::size_t>(v), 0.0);
    free_at_.assign(static_cast<std::size_t>(pp), 0.0);
  }

  // Stage s runs Megatron's order: Warmup(s) forwards, then alternately one forward and
  // one backward, then the remaining backwards. Placing micro-batch position r runs, on
  // each stage, its forward and the backward that follows it; stage s-1's forward comes
  // first, and the backward's input from stage s+1 was produced when position r-1 was
  // placed.
  void Place(int r, double t) {
    time_[static_cast<std::size_t>(r)] = t;
    for (int s = 0; s < pp_; ++s) {
      Run(s, r, true, s == 0 ? 0.0 : f_end_[At(s - 1, r)]);
      const int w = Warmup(s);
      if (r >= w) Backward(s, r - w);
    }
  }

  // Runs the remaining backwards (last stage first, as each waits for the stage above)
  // and returns the makespan.
  double Finish() {
    for (int s = pp_ - 1; s >= 0; --s) {
      for (int j = v_ - Warmup(s); j < v_; ++j) Backward(s, j);
    }
    return *std::max_element(free_at_.begin(), free_at_.end());
  }

  // Lower bound on the makespan once positions [0, placed) are set, the unplaced stage
  // times sum to `unplaced_sum` and the smallest is `unplaced_min`: each stage still has its
  // pending work to do, and after its final backward the last micro-batch's backward still
  // crosses every stage below it.
  double Bound(int placed, double unplaced_sum, double unplaced_min) const {
    double bound = 0;
    for (int s = 0; s < pp_; ++s) {
      double pending = unplaced_sum;
      for (int j = std::max(0, placed - Warmup(s)); j < placed; ++j) {
        pending += time_[static_cast<std::size_t>(j)] * (1.0 - fwd_);
      }
      bound = std::max(
          bound, free_at_[static_cast<std::size_t>(s)] + pending + s * (1.0 - fwd_) * unplaced_min);
    }
    return bound;
  }

  const std::vector<double>& free_at() const { return free_at_; }
  void set_free_at(const std::vector<double>& f) { free_at_ = f; }

 private:
  int Warmup(int s) const { return std::min(pp_ - 1 - s, v_); }
  std::size_t At(int s, int j) const {
    return static_cast<std::size_t>(s) * static_cast<std::size_t>(v_) + static_cast<std::size_t>(j);
  }
  void Backward(int s, int j) {
    Run(s, j, false, s == pp_ - 1 ? f_end_[At(s, j)] : b_end_[At(s + 1, j)]);
  }
  void Run(int s, int j, bool forward, double ready) {
    double& free_at = free_at_[static_cast<std::size_t>(s)];
    const double start = std::max(ready, free_at);
    const double dur = time_[static_cast<std::size_t>(j)] * (forward ? fwd_ : 1.0 - fwd_);
    free_at = start + dur;
    (forward ? f_end_ : b_end_)[At(s, j)] = free_at;
  }

  int pp_ = 1, v_ = 0;
  double fwd_ = 0;
  std::vector<double> f_end_, b_end_, time_, free_at_;
};

class ExactSolver {
 public:
  ExactSolver(const AssignProblem& problem, const ExactOptions& options)
      : problem_(problem),
        n_(static_cast<int>(problem.lengths.size())),
        P_(static_cast<int>(problem.pipelines.size())) {
    Validate(options);
    full_ = n_ == 0 ? 0 : static_cast<Mask>((std::uint64_t{1} << n_) - 1);
    subsets_ = std::size_t{1} << n_;
    tokens_.assign(subsets_, 0);
    for (Mask s = 1; s < subsets_; ++s) {
      tokens_[s] = tokens_[s & (s - 1)] + Length(LowestDoc(s));
    }
  }

  ExactResult Run() {
    BuildModels();
    // A feasible plan first, so whole subsets and pipeline prefixes that cannot beat it
    // are never enumerated.
    RunDp(/*enumerate=*/false);
    upper_ = best_[static_cast<std::size_t>(P_ - 1)][full_];
    RunDp(/*enumerate=*/true);

    ExactResult result;
    result.assignment.pipelines.resize(static_cast<std::size_t>(P_));
    Mask mask = full_;
    for (int k = P_ - 1; k >= 0; --k) {
      const Mask s = choice_[static_cast<std::size_t>(k)][mask];
      const Model& m = models_[model_of_[static_cast<std::size_t>(k)]];
      for (Mask b : m.seq[s])
        result.assignment.pipelines[static_cast<std::size_t>(k)].push_back(Docs(b));
      mask ^= s;
    }
    if (mask != 0) throw InternalError("exact solver left documents unassigned");
    Evaluate(problem_, result.assignment);
    result.optimal_ms = result.assignment.step_ms;
    return result;
  }

 private:
  std::int64_t Length(int d) const { return problem_.lengths[static_cast<std::size_t>(d)]; }

  void Validate(const ExactOptions& options) const {
    if (P_ == 0) throw InvalidInput("strategy has no pipelines");
    const int limit = std::min(options.max_documents, kHardMaxDocuments);
    if (n_ > limit) {
      throw InvalidInput("exact solver accepts at most " + std::to_string(limit) +
                         " documents, got " + std::to_string(n_));
    }
    for (const auto& p : problem_.pipelines) {
      if (p.scheme.pp < 1) {
        throw InvalidInput("pipeline degree pp must be >= 1, got " + std::to_string(p.scheme.pp));
      }
    }
    for (int d = 0; d < n_; ++d) {
      if (Length(d) < 1) {
        throw InvalidInput("document " + std::to_string(d) + " has length " +
                           std::to_string(Length(d)) + " (must be >= 1)");
      }
      const bool fits =
          std::any_of(problem_.pipelines.begin(), problem_.pipelines.end(),
                      [&](const PipelineModel& p) { return Length(d) <= p.capacity_tokens; });
      if (!fits) {
        throw InvalidInput("document " + std::to_string(d) + " of " + std::to_string(Length(d)) +
                           " tokens fits no pipeline");
      }
    }
  }

  std::vector<int> Docs(Mask b) const {
    std::vector<int> out;
    for (; b != 0; b &= b - 1) out.push_back(LowestDoc(b));
    return out;
  }

  // Summed in the order PipelineMs sums, so recorded times match Evaluate bit for bit; a
  // cp pipeline's micro-batch is laid out as MicroBatchStageMs lays it out.
  double BlockMs(const Model& m, Mask b) const {
    if (m.pipe->scheme.cp > 1) {
      std::vector<std::int64_t> lengths;
      for (; b != 0; b &= b - 1) lengths.push_back(Length(LowestDoc(b)));
      return MicroBatchMs(lengths, *m.pipe);
    }
    double t = m.c;
    for (; b != 0; b &= b - 1) t += m.doc_ms[static_cast<std::size_t>(LowestDoc(b))];
    return t;
  }

  double SequenceMs(const Model& m, const std::vector<Mask>& seq) const {
    std::vector<double> stage(seq.size());
    for (std::size_t j = 0; j < seq.size(); ++j) stage[j] = BlockMs(m, seq[j]);
    return OneFOneBMs(stage, m.pp, problem_.schedule);
  }

  void BuildModels() {
    for (const auto& p : problem_.pipelines) {
      std::size_t id = 0;
      while (id < models_.size() && !models_[id].pipe->SameAs(p)) ++id;
      model_of_.push_back(id);
      if (id < models_.size()) continue;
      auto table = std::find_if(tables_.begin(), tables_.end(),
                                [&](const BinTable& t) { return t.capacity == p.capacity_tokens; });
      if (table == tables_.end()) {
        tables_.emplace_back(p.capacity_tokens, tokens_);
        table = std::prev(tables_.end());
      }
      models_.push_back(MakeModel(p, *table));
    }
  }

  Model MakeModel(const PipelineModel& p, const BinTable& table) const {
    Model m;
    m.pipe = &p;
    m.bins = &table;
    m.pp = p.scheme.pp;
    m.c = p.time.c_ms;
    m.fwd = 1.0 / (1.0 + problem_.schedule.backward_to_forward);
    m.bwd = 1.0 - m.fwd;
    m.bounded = m.c >= 0 && m.fwd > 0 && m.bwd >= 0;
    for (int d = 0; d < n_; ++d) {
      m.doc_ms.push_back(p.time.DocumentMs(Length(d)));
      if (!(m.doc_ms.back() >= 0)) m.bounded = false;
    }
    m.work.assign(subsets_, 0);
    m.min_doc.assign(subsets_, kInf);
    m.max_doc.assign(subsets_, 0);
    m.ms.assign(subsets_, kInf);
    m.lb.assign(subsets_, -kInf);
    m.exact.assign(subsets_, 0);
    m.seq.assign(subsets_, {});
    m.ms[0] = 0;
    m.lb[0] = 0;
    m.exact[0] = 1;
    for (Mask s = 1; s < subsets_; ++s) {
      const double w = m.doc_ms[static_cast<std::size_t>(LowestDoc(s))];
      const Mask rest = s & (s - 1);
      m.work[s] = m.work[rest] + w;
      m.min_doc[s] = std::min(m.min_doc[rest], w);
      m.max_doc[s] = std::max(m.max_doc[rest], w);
      if (table.bins[s] == kNoPacking) continue;  // some document exceeds the capacity
      // With c >= 0 the fewest micro-batches are best for pp == 1; with c < 0 the most.
      std::vector<Mask> packing = m.c >= 0 ? table.Packing(s) : Singletons(s);
      // A cp pipeline's micro-batch time is its layout's, not a sum: fewer micro-batches
      // need not be faster, so its partitions are searched as for pp > 1.
      if (m.pp == 1 && m.pipe->scheme.cp == 1) {
        m.seq[s] = std::move(packing);
        m.ms[s] = SequenceMs(m, m.seq[s]);
        m.lb[s] = m.ms[s];
        m.exact[s] = 1;
        continue;
      }
      if (m.bounded) {
        const double ppm1 = m.pp - 1;
        m.lb[s] = std::max(m.work[s] + m.c * table.bins[s] + ppm1 * (m.c + m.min_doc[s]),
                           m.pp * (m.c + m.max_doc[s]));
      }
      std::vector<std::vector<Mask>> candidates = {std::move(packing), Singletons(s)};
      for (auto& candidate : candidates) {
        for (int order = 0; order < 3; ++order) {
          OrderHeuristically(m, candidate, order);
          const double t = SequenceMs(m, candidate);
          if (t < m.ms[s]) m.ms[s] = t, m.seq[s] = candidate;
        }
      }
    }
    return m;
  }

  static std::vector<Mask> Singletons(Mask s) {
    std::vector<Mask> out;
    for (; s != 0; s &= s - 1) out.push_back(s & (~s + 1));
    return out;
  }

  // Cheap 1F1B orders for the starting plan: ascending, descending, and short micro-batches
  // at both ends (the ends are where the warm-up and cool-down expose a stage time).
  void OrderHeuristically(const Model& m, std::vector<Mask>& seq, int order) const {
    std::stable_sort(seq.begin(), seq.end(),
                     [&](Mask x, Mask y) { return BlockMs(m, x) < BlockMs(m, y); });
    if (order == 1) std::reverse(seq.begin(), seq.end());
    if (order == 2) {
      std::vector<Mask> front, back;
      for (std::size_t j = 0; j < seq.size(); ++j) (j % 2 == 0 ? front : back).push_back(seq[j]);
      front.insert(front.end(), back.rbegin(), back.rend());
      seq = std::move(front);
    }
  }

  // Best time of pipeline level k (its model) on subset s, given the best of the earlier
  // levels on the remaining documents. With `enumerate`, subsets whose optimal sequence
  // could still improve a plan are solved exactly first.
  void RunDp(bool enumerate) {
    best_.assign(static_cast<std::size_t>(P_), std::vector<double>(subsets_, kInf));
    choice_.assign(static_cast<std::size_t>(P_), std::vector<Mask>(subsets_, 0));
    for (int k = 0; k < P_; ++k) {
      Model& m = models_[model_of_[static_cast<std::size_t>(k)]];
      auto& best = best_[static_cast<std::size_t>(k)];
      auto& choice = choice_[static_cast<std::size_t>(k)];
      auto prev = [&](Mask r) {
        if (k == 0) return r == 0 ? 0.0 : kInf;
        return best_[static_cast<std::size_t>(k - 1)][r];
      };
      // Only the whole batch matters on the last level.
      const Mask first = k == P_ - 1 ? full_ : 0;
      for (Mask mask = first; mask <= full_ && mask < subsets_; ++mask) {
        double current = kInf;
        Mask chosen = 0;
        for (Mask s = mask;; s = (s - 1) & mask) {
          const double t = std::max(prev(mask ^ s), m.ms[s]);
          if (t < current) current = t, chosen = s;
          if (s == 0) break;
        }
        if (enumerate) {
          for (Mask s = mask;; s = (s - 1) & mask) {
            if (!m.exact[s] && m.ms[s] < kInf) {
              const double bound = std::max(prev(mask ^ s), m.lb[s]);
              if (!CannotBeat(bound, current) && !CannotBeat(bound, upper_)) {
                SolveSubset(m, s);
                const double t = std::max(prev(mask ^ s), m.ms[s]);
                if (t < current) current = t, chosen = s;
              }
            }
            if (s == 0) break;
          }
        }
        best[mask] = current;
        choice[mask] = chosen;
        if (mask == full_) break;
      }
    }
  }

  // Exact best time of a pp > 1 model on subset s: every partition into micro-batches
  // within the capacity, every distinct order of each, pruned by lower bounds.
  void SolveSubset(Model& m, Mask s) {
    search_model_ = &m;
    search_best_ = m.ms[s];
    search_seq_ = m.seq[s];
    blocks_.clear();
    times_.clear();
    Partition(s, 0.0, 0.0, kInf, kInf);
    // The search's own simulation must agree with the cost model's; a change to
    // OneFOneBMs that is not mirrored here would otherwise go unnoticed.
    const double reference = SequenceMs(m, search_seq_);
    if (!NearlyEqual(reference, search_best_)) {
      throw InternalError("exact solver's 1F1B simulation gives " + std::to_string(search_best_) +
                          " ms where OneFOneBMs gives " + std::to_string(reference));
    }
    m.ms[s] = reference;
    m.seq[s] = search_seq_;
    m.exact[s] = 1;
  }

  // 1F1B exposes (pp-1) * (forward of the first + backward of the last micro-batch), and
  // each of those is at least the smallest or second-smallest micro-batch time.
  double BubbleFloor(double small, double second) const {
    const Model& m = *search_model_;
    const double hi = std::max(m.fwd, m.bwd), lo = std::min(m.fwd, m.bwd);
    return (m.pp - 1) * (second == kInf ? small : hi * small + lo * second);
  }

  // Chooses the micro-batch of the lowest document in `rest`, so each partition of the
  // subset is visited once. small/second: the two smallest chosen micro-batch times.
  void Partition(Mask rest, double sum, double peak, double small, double second) {
    const Model& m = *search_model_;
    if (rest == 0) {
      Orders(sum);
      return;
    }
    const Mask low = rest & (~rest + 1);
    const Mask others = rest ^ low;
    for (Mask sub = others;; sub = (sub - 1) & others) {
      const Mask b = sub | low;
      if (tokens_[b] <= m.bins->capacity) {
        const double t = BlockMs(m, b);
        const Mask left = rest ^ b;
        double s1 = small, s2 = second;
        auto add = [&](double x) {
          if (x < s1) {
            s2 = s1, s1 = x;
          } else if (x < s2) {
            s2 = x;
          }
        };
        add(t);
        const double new_peak = std::max(peak, t);
        bool prune = false;
        if (m.bounded) {
          double bound_sum = sum + t, bound_peak = new_peak;
          double f1 = s1, f2 = s2;
          if (left != 0) {
            // The rest needs at least bins[left] more micro-batches, each at least c plus its
            // cheapest document, and one of them holds the costliest remaining document.
            bound_sum += m.work[left] + m.c * m.bins->bins[left];
            bound_peak = std::max(bound_peak, m.c + m.max_doc[left]);
            // Two of them, as the rest may need more than one micro-batch.
            const double r = m.c + m.min_doc[left];
            if (r <= f1) {
              f1 = f2 = r;
            } else {
              f2 = std::min(f2, r);
            }
          }
          prune = CannotBeat(bound_sum + BubbleFloor(f1, f2), search_best_) ||
                  CannotBeat(m.pp * bound_peak, search_best_);
        }
        if (!prune) {
          blocks_.push_back(b);
          times_.push_back(t);
          Partition(left, sum + t, new_peak, s1, s2);
          blocks_.pop_back();
          times_.pop_back();
        }
      }
      if (sub == 0) break;
    }
  }

  // Every distinct order of the current partition (micro-batches of equal time are
  // interchangeable), built position by position and cut once a prefix cannot win.
  void Orders(double sum) {
    const std::size_t v = blocks_.size();
    by_time_.resize(v);
    std::iota(by_time_.begin(), by_time_.end(), std::size_t{0});
    std::stable_sort(by_time_.begin(), by_time_.end(),
                     [&](std::size_t x, std::size_t y) { return times_[x] < times_[y]; });
    used_.assign(v, 0);
    order_.resize(v);
    saved_free_.resize(v);
    sim_.Start(search_model_->pp, search_model_->fwd, static_cast<int>(v));
    PlaceNext(0, sum);
  }

  void PlaceNext(std::size_t r, double unplaced_sum) {
    const std::size_t v = blocks_.size();
    if (r == v) {
      const double t = sim_.Finish();
      if (t < search_best_) {
        search_best_ = t;
        search_seq_.resize(v);
        for (std::size_t j = 0; j < v; ++j) search_seq_[j] = blocks_[order_[j]];
      }
      return;
    }
    saved_free_[r] = sim_.free_at();
    double tried = -kInf;
    bool any_tried = false;
    for (std::size_t k = 0; k < v; ++k) {
      const std::size_t x = by_time_[k];
      if (used_[x] || (any_tried && times_[x] == tried)) continue;
      any_tried = true;
      tried = times_[x];
      sim_.Place(static_cast<int>(r), times_[x]);
      used_[x] = 1;
      bool prune = false;
      if (search_model_->bounded && r + 1 < v) {
        double unplaced_min = kInf;
        for (std::size_t y : by_time_) {
          if (!used_[y]) {
            unplaced_min = times_[y];
            break;
          }
        }
        prune =
            CannotBeat(sim_.Bound(static_cast<int>(r + 1), unplaced_sum - times_[x], unplaced_min),
                       search_best_);
      }
      if (!prune) {
        order_[r] = x;
        PlaceNext(r + 1, unplaced_sum - times_[x]);
      }
      used_[x] = 0;
      sim_.set_free_at(saved_free_[r]);
    }
  }

  const AssignProblem& problem_;
  const int n_, P_;
  Mask full_ = 0;
  std::size_t subsets_ = 1;
  std::vector<std::int64_t> tokens_;
  std::deque<BinTable> tables_;  // models point into it, so it must not relocate
  std::vector<Model> models_;
  std::vector<std::size_t> model_of_;
  std::vector<std::vector<double>> best_;
  std::vector<std::vector<Mask>> choice_;
  double upper_ = kInf;

  // State of the current SolveSubset search.
  const Model* search_model_ = nullptr;
  double search_best_ = kInf;
  IncrementalOneFOneB sim_;
  std::vector<std::size_t> by_time_, order_;
  std::vector<char> used_;
  std::vector<std::vector<double>> saved_free_;  // per position, the stages before placing
  std::vector<Mask> search_seq_;
  std::vector<Mask> blocks_;
  std::vector<double> times_;
};

}  // namespace

ExactResult SolveExact(const AssignProblem& problem, const ExactOptions& options) {
  ExactSolver solver(problem, options);
  return solver.Run();
}

}  // namespace hydraulis
