"""A packing scheduler with the shape of Megatron-LM's hook (docs/python.md, "Megatron-LM").

Megatron-LM's sequence-packing schedulers take the (sample id, sequence length) pairs of a
global batch and return, per micro-batch, the sample ids each data-parallel rank packs
into it: groups[microbatch][dp_rank] -> sample ids. This one asks the hydraulis planner.
Megatron's model is homogeneous (dp identical pipelines of one tp/pp), so the candidate
set given to the planner must hold strategies of exactly dp identical pipelines (usually
one); what hydraulis adds there is the dispatch of documents to ranks and their packing
into micro-batches under the cost model (balanced 1F1B time, memory capacity). Choosing
among heterogeneous strategies per step needs ranks that can switch layouts: the
hydraulis runtime, not Megatron-LM.
"""
import numpy as np


class MegatronPackingScheduler:
    """scheduler(samples) -> groups[microbatch][dp_rank] -> list of sample ids.

    `samples` is a sequence of (sample_id, seqlen) pairs (one global batch). Ranks whose
    pipeline has fewer micro-batches than the longest get empty groups at the end (a rank
    with an empty micro-batch skips it; gradients are reduced after all of them). After a
    call, `packed_params[dp_rank]` lists per micro-batch what Megatron's packed-sequence
    parameters need: cu_seqlens (int32 NumPy array), max_seqlen and total_tokens; and
    `last_plan` is the Plan (documents cut by the long-document rule are in
    last_plan.truncated, their seqlen in last_plan.lengths)."""

    def __init__(self, planner, dp_size):
        if not isinstance(dp_size, int) or isinstance(dp_size, bool) or dp_size < 1:
            raise ValueError(f"dp_size: must be an integer >= 1, got {dp_size!r}")
        self.planner = planner
        self.dp_size = dp_size
        self.last_plan = None
        self.packed_params = []

    def __call__(self, samples):
        pairs = list(samples)
        if not pairs:
            raise ValueError("samples: the global batch is empty")
        ids = [p[0] for p in pairs]
        plan = self.planner.plan([p[1] for p in pairs])
        if len(plan.pipelines) != self.dp_size:
            raise ValueError(
                f"the planner chose strategy {plan.strategy} with {len(plan.pipelines)} "
                f"pipeline(s), but Megatron runs dp_size = {self.dp_size} identical ones: give "
                "the planner candidates of exactly dp_size pipelines")
        schemes = {p.scheme for p in plan.pipelines}
        if len(schemes) != 1:
            raise ValueError(f"strategy {plan.strategy} mixes pipelines {sorted(schemes)}; "
                             "Megatron's model is homogeneous")
        count = max(len(p.micro_batches) for p in plan.pipelines)
        groups = [[[] for _ in range(self.dp_size)] for _ in range(count)]
        self.packed_params = []
        for rank, pipeline in enumerate(plan.pipelines):
            params = []
            for m, (docs, cu) in enumerate(zip(pipeline.micro_batches, pipeline.cu_seqlens)):
                groups[m][rank] = [ids[int(d)] for d in docs]
                params.append({"cu_seqlens": cu.astype(np.int32),
                               "max_seqlen": int(np.diff(cu).max()),
                               "total_tokens": int(cu[-1])})
            self.packed_params.append(params)
        self.last_plan = plan
        return groups
