#!/usr/bin/env python3
"""Peer training benchmark: the public PyTorch baseline hydraulis' GPU throughput is compared with.

Trains a LLaMA decoder on the packed variable-length batches the C++ side wrote
(format "hydraulis-batches-v1": steps -> micro-batches -> document lengths) and reports
tokens/s, per-step times, losses, FLOPs and MFU as JSON.

Token ids: step s, micro-batch m, packed position p -> (s*1000003 + m*7919 + p*31) % vocab.
Positions restart at 0 in every document; attention is causal and never crosses a document
boundary. Loss of a step = sum of next-token cross-entropy (fp32) over every token except the
last of each document, divided by the step's total target count; gradients accumulate over
the step's micro-batches, then one AdamW step (lr 1e-4, betas (0.9, 0.95), eps 1e-8, wd 0).

--impl hf:    transformers' LlamaForCausalLM (random init) with a custom attention function
              registered through AttentionInterface; it gets cu_seqlens/max length through the
              `cu_seq_lens_q/k`, `max_length_q/k` kwargs transformers forwards to attention
              functions, or from a module-level context where a version does not forward them.
--impl eager: a plain nn.Module LLaMA with the same shapes and the same attention call.
--impl ddp:   the eager model in torch.nn.parallel.DistributedDataParallel (default options:
              25 MiB buckets, the all-reduce overlapped with backward), started by torchrun
              (`torchrun --nproc-per-node 2 bench/peer_train.py --impl ddp ...`; Gloo on CPU,
              NCCL on CUDA). Each rank trains the micro-batches the batches file gives it
              (`rank_of`, written by a data-parallel gpu_train_bench run), under no_sync() but
              the last, with its loss scaled by world_size / the step's global target count
              so DDP's averaged gradient is the one-process gradient; the step's loss is
              all-reduced for the report. Rank 0 times and reports.
Attention: CUDA -> torch.nn.attention.varlen.varlen_attn (else aten._flash_attention_forward),
GQA passed natively (a start-up self-check against SDPA falls back to expanded K/V);
CPU -> per-document F.scaled_dot_product_attention(is_causal=True) (correctness path).

Precision (CUDA): the standard mixed-precision recipe: fp32 master parameters, AdamW state and
gradients (AdamW fused=True), forward under torch.autocast(bfloat16); the loss's log-softmax is
fp32. Pure bf16 parameters with AdamW would lose small updates, so they are not the baseline.
CPU: everything fp32. Input tensors of all steps are built on the device before timing.

FLOPs per step (documented model count, the same for both impls):
    6 * N_matmul * T + 6 * layers * hidden * sum_i s_i^2
  N_matmul = layers * (hidden*(heads*hd) + 2*hidden*(kv_heads*hd) + (heads*hd)*hidden
             + 3*hidden*ffn) + vocab*hidden   (output head; the embedding lookup is no matmul)
  T = tokens in the step, s_i = document lengths of the step, hd = hidden/heads.
  (Attention: QK^T and PV cost 2*2*s^2*hidden per layer forward, halved by causality, x3 for
  forward+backward.) MFU = achieved FLOP/s / (--peak-tflops * 1e12); null on CPU.

Batches file: {"format": "hydraulis-batches-v1", "vocab": V, "steps": [[[len, ...], ...], ...],
and optionally "dp": N and "rank_of": [[rank of each micro-batch] per step]} (absent: dp 1).

--check-parity: builds hf and eager from one seed on CPU fp32 (matrices rescaled to std
--parity-init-std so outputs are far from uniform; eager loads the HF state_dict), checks the
packed per-document loss sums against transformers' own `labels=` loss on unpacked documents
(its eager attention), trains 3 steps with each, and exits 1 unless every check agrees within
1e-5 relative.
--check-ddp-parity (with --impl ddp under torchrun, CPU): every rank trains 3 steps with DDP
and, beside it, a one-process eager copy from the same weights on all of each step's
micro-batches; exits 1 unless every step's loss and every final parameter agree within 1e-5
relative.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import json
import os
import sys
import time
from itertools import accumulate

import torch
import torch.nn as nn
import torch.nn.functional as F

ATTN_NAME = "hydraulis_varlen"
STATE = {"pack": None, "hf_cu_source": None, "gqa": "native", "varlen": None}


# ----------------------------------------------------------------------------- data
def load_batches(path):
    with open(path) as f:
        d = json.load(f)
    if d.get("format") != "hydraulis-batches-v1":
        sys.exit(f"{path}: format {d.get('format')!r}, expected 'hydraulis-batches-v1'")
    for step in d["steps"]:
        for mb in step:
            if not mb or any(int(n) < 1 for n in mb):
                sys.exit(f"{path}: empty micro-batch or non-positive document length")
    dp = int(d.get("dp", 1))
    rank_of = d.get("rank_of") or [[0] * len(st) for st in d["steps"]]
    if len(rank_of) != len(d["steps"]) or any(
            len(r) != len(st) or any(not 0 <= int(x) < dp for x in r)
            for r, st in zip(rank_of, d["steps"])):
        sys.exit(f"{path}: rank_of does not give every micro-batch a rank in [0, dp = {dp})")
    return int(d["vocab"]), d["steps"], dp, rank_of


class Pack:
    """One packed micro-batch: ids, positions, labels (-100 on each document's last token),
    cu_seqlens (int32, device), document boundaries (Python list) and the longest document."""

    def __init__(self, lengths, s, m, vocab, device):
        T = sum(lengths)
        p = torch.arange(T, dtype=torch.int64)
        self.ids = ((s * 1000003 + m * 7919 + p * 31) % vocab).to(device)
        self.pos = torch.cat([torch.arange(n, dtype=torch.int64) for n in lengths]).to(device)
        self.bounds = [0, *accumulate(lengths)]
        self.cu = torch.tensor(self.bounds, dtype=torch.int32, device=device)
        self.max_len = max(lengths)
        labels = torch.roll(self.ids, -1)
        labels[torch.tensor(self.bounds[1:], device=device) - 1] = -100
        self.labels = labels
        self.tokens, self.targets = T, T - len(lengths)


def step_flops(cfg, docs):
    h, hd = cfg["hidden"], cfg["hidden"] // cfg["heads"]
    qd, kvd = cfg["heads"] * hd, cfg["kv_heads"] * hd
    n_matmul = cfg["layers"] * (h * qd + 2 * h * kvd + qd * h + 3 * h * cfg["ffn"]) + cfg["vocab"] * h
    return 6 * n_matmul * sum(docs) + 6 * cfg["layers"] * h * sum(n * n for n in docs)


# ----------------------------------------------------------------------------- attention
def _resolve_varlen():
    try:
        from torch.nn.attention.varlen import varlen_attn
        params = inspect.signature(varlen_attn).parameters
        kw = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
        return "torch.nn.attention.varlen.varlen_attn", lambda q, k, v, cu, m, sc: varlen_attn(
            q, k, v, cu, cu, m, m, scale=sc, **kw)
    except ImportError:
        return "aten._flash_attention_forward", lambda q, k, v, cu, m, sc: \
            torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, m, m, 0.0, True, False, scale=sc)[0]


def _per_doc_sdpa(q, k, v, bounds, scale):
    g = q.shape[1] // k.shape[1]
    outs = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        qd, kd, vd = (t[a:b].transpose(0, 1) for t in (q, k, v))
        kd, vd = kd.repeat_interleave(g, 0), vd.repeat_interleave(g, 0)
        # [1, heads, len, dim]: 4-d inputs take PyTorch's CPU flash kernel (3-d ones the math
        # path, which materialises the scores), as transformers' own SDPA attention passes them.
        outs.append(F.scaled_dot_product_attention(qd[None], kd[None], vd[None], is_causal=True,
                                                   scale=scale)[0].transpose(0, 1))
    return torch.cat(outs, 0)


def packed_attention(q, k, v, cu, bounds, max_len, scale):
    """q [T, H, D], k/v [T, Hkv, D] -> [T, H, D]; causal within each document."""
    if not q.is_cuda:
        return _per_doc_sdpa(q, k, v, bounds if bounds is not None else cu.tolist(), scale)
    if STATE["varlen"] is None:
        STATE["varlen"] = _resolve_varlen()
    q, k, v = (t.to(torch.bfloat16).contiguous() for t in (q, k, v))
    if STATE["gqa"] == "expanded" and k.shape[1] != q.shape[1]:
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    return STATE["varlen"][1](q, k, v, cu, int(max_len), scale)


def selfcheck_varlen(cfg, device):
    """CUDA: compare varlen attention (bf16) with fp32 per-document SDPA, forward and backward;
    fall back to expanded K/V if native GQA disagrees or fails."""
    hd = cfg["hidden"] // cfg["heads"]
    lens = [37, 1, 90, 64]
    bounds = [0, *accumulate(lens)]
    cu = torch.tensor(bounds, dtype=torch.int32, device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    base = [torch.randn(bounds[-1], h, hd, device=device, generator=gen)
            for h in (cfg["heads"], cfg["kv_heads"], cfg["kv_heads"])]
    go = torch.randn(bounds[-1], cfg["heads"], hd, device=device, generator=gen)
    ref_in = [t.clone().requires_grad_() for t in base]
    ref = _per_doc_sdpa(*ref_in, bounds, hd ** -0.5)
    ref.backward(go)
    for mode in ("native", "expanded"):
        STATE["gqa"] = mode
        try:
            x = [t.clone().requires_grad_() for t in base]
            out = packed_attention(*x, cu, None, max(lens), hd ** -0.5)
            out.float().backward(go)
            errs = [(a.float() - b).abs().max().item() / b.abs().max().item()
                    for a, b in zip([out] + [t.grad for t in x], [ref] + [t.grad for t in ref_in])]
            if max(errs) < 3e-2:
                return
            print(f"varlen self-check ({mode} GQA): relative errors {errs}", file=sys.stderr)
        except RuntimeError as e:
            print(f"varlen self-check ({mode} GQA) failed: {e}", file=sys.stderr)
    sys.exit("varlen attention disagrees with SDPA; refusing to benchmark")


def hf_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
    """transformers attention function: query [1, H, T, D] -> ([1, T, H, D], None)."""
    if kw.get("cu_seq_lens_q") is not None:
        cu, max_len, bounds = kw["cu_seq_lens_q"], kw["max_length_q"], None
        STATE["hf_cu_source"] = "attention kwargs cu_seq_lens_q/max_length_q"
    else:
        pk = STATE["pack"]
        cu, max_len, bounds = pk.cu, pk.max_len, pk.bounds
        STATE["hf_cu_source"] = "module context (kwargs not forwarded)"
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))
    return packed_attention(q, k, v, cu, bounds, max_len, scaling).unsqueeze(0), None


# ----------------------------------------------------------------------------- models
def rope_cos_sin(pos, hd, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64, device=pos.device).float() / hd))
    f = pos.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((f, f), -1)
    return emb.cos(), emb.sin()


def rotate(x, cos, sin):  # x [T, H, D]; rotate-half convention
    x1, x2 = x.chunk(2, -1)
    return x * cos[:, None, :] + torch.cat((-x2, x1), -1) * sin[:, None, :]


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(n)), eps

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class Block(nn.Module):
    """Parameter names follow transformers' LlamaDecoderLayer so its state_dict loads as is."""

    def __init__(self, c):
        super().__init__()
        h, self.hd = c["hidden"], c["hidden"] // c["heads"]
        lin = lambda i, o: nn.Linear(i, o, bias=False)
        self.self_attn, self.mlp = nn.Module(), nn.Module()
        a, m = self.self_attn, self.mlp
        a.q_proj, a.k_proj = lin(h, c["heads"] * self.hd), lin(h, c["kv_heads"] * self.hd)
        a.v_proj, a.o_proj = lin(h, c["kv_heads"] * self.hd), lin(c["heads"] * self.hd, h)
        m.gate_proj, m.up_proj, m.down_proj = lin(h, c["ffn"]), lin(h, c["ffn"]), lin(c["ffn"], h)
        self.input_layernorm = RMSNorm(h, c["norm_eps"])
        self.post_attention_layernorm = RMSNorm(h, c["norm_eps"])

    def forward(self, x, cos, sin, pk):
        a, m, T = self.self_attn, self.mlp, x.shape[0]
        h = self.input_layernorm(x)
        q, k, v = (p(h).view(T, -1, self.hd) for p in (a.q_proj, a.k_proj, a.v_proj))
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        o = packed_attention(rotate(q, cos, sin), rotate(k, cos, sin), v, pk.cu, pk.bounds,
                             pk.max_len, self.hd ** -0.5)
        x = x + a.o_proj(o.reshape(T, -1))
        h = self.post_attention_layernorm(x)
        return x + m.down_proj(F.silu(m.gate_proj(h)) * m.up_proj(h))


class EagerLlama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c["vocab"], c["hidden"])
        self.model.layers = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.model.norm = RMSNorm(c["hidden"], c["norm_eps"])
        self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)
        if c["tie_embeddings"]:
            self.lm_head.weight = self.model.embed_tokens.weight
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, 0.0, 0.02)

    def forward(self, pk):
        x = self.model.embed_tokens(pk.ids)
        cos, sin = rope_cos_sin(pk.pos, self.c["hidden"] // self.c["heads"], self.c["rope_theta"])
        for layer in self.model.layers:
            x = layer(x, cos, sin, pk)
        return self.lm_head(self.model.norm(x))


def build_hf(c, attn=ATTN_NAME):
    import transformers
    from transformers import AutoModelForCausalLM, LlamaConfig
    if attn == ATTN_NAME:
        if hasattr(transformers, "AttentionInterface"):
            transformers.AttentionInterface.register(ATTN_NAME, hf_attention)
        else:  # 4.48-4.50: a plain dict
            from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
            ALL_ATTENTION_FUNCTIONS[ATTN_NAME] = hf_attention
    kw = dict(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["ffn"],
              num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
              num_key_value_heads=c["kv_heads"], rms_norm_eps=c["norm_eps"],
              tie_word_embeddings=c["tie_embeddings"], max_position_embeddings=131072,
              hidden_act="silu", initializer_range=0.02, use_cache=False,
              attention_bias=False, mlp_bias=False, pad_token_id=None)
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": float(c["rope_theta"])}
    else:
        kw["rope_theta"] = float(c["rope_theta"])
    cfg = LlamaConfig(**kw)
    try:
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    except (TypeError, ValueError):  # versions that validate names against a fixed list
        model = AutoModelForCausalLM.from_config(cfg)
    if model.config._attn_implementation != attn:  # read by every attention layer per call
        model.config._attn_implementation = attn
    if model.config._attn_implementation != attn:
        sys.exit(f"transformers kept attention {model.config._attn_implementation!r}, not {attn!r}")
    model = model.float()
    hd = c["hidden"] // c["heads"]
    want = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
    rot = getattr(model.model, "rotary_emb", None)
    if rot is not None and not torch.allclose(rot.inv_freq.float().cpu(), want, rtol=1e-5):
        sys.exit("transformers' rotary frequencies differ from rope_theta in the model config")
    if c["tie_embeddings"] != (model.lm_head.weight is model.model.embed_tokens.weight):
        sys.exit("transformers' output head tying differs from the model config")
    return model


def hf_forward_fn(model):
    import transformers
    fwd = inspect.signature(type(model).forward).parameters.values()
    pass_kw = any(p.kind == p.VAR_KEYWORD for p in fwd)

    def run(pk):
        kw = dict(cu_seq_lens_q=pk.cu, cu_seq_lens_k=pk.cu, max_length_q=pk.max_len,
                  max_length_k=pk.max_len) if pass_kw else {}
        STATE["pack"] = pk
        return model(input_ids=pk.ids[None], position_ids=pk.pos[None], use_cache=False, **kw).logits[0]
    run.version = transformers.__version__
    return run


# ----------------------------------------------------------------------------- training
def backward_step(forward, step, total, device, ddp=None):
    """Forward and backward of one step's micro-batches (this rank's, with `ddp`), gradients
    accumulated; returns the summed loss (this rank's part of the step's mean)."""
    cuda = device.type == "cuda"
    world = torch.distributed.get_world_size() if ddp is not None else 1
    acc = torch.zeros((), device=device)
    for i, pk in enumerate(step):
        # DDP all-reduces (averaging) only in the step's last backward.
        sync = ddp is None or i == len(step) - 1
        with contextlib.nullcontext() if sync else ddp.no_sync():
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
                logits = forward(pk)
            loss = F.cross_entropy(logits.float(), pk.labels, ignore_index=-100,
                                   reduction="sum") / total
            (loss * world if ddp is not None else loss).backward()
        acc += loss.detach()
        del logits, loss
    return acc


def train(forward, params, packs, device, warmup, log=False, totals=None, ddp=None):
    """Runs every step; returns (per-step losses, per-step seconds). With `ddp` (the
    DistributedDataParallel module `forward` is), `packs` are this rank's micro-batches and
    `totals` each step's target count over all ranks."""
    cuda = device.type == "cuda"
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0,
                            **({"fused": True} if cuda else {}))
    losses, secs = [], []
    for s, step in enumerate(packs):
        total = max(1, totals[s] if totals is not None else sum(pk.targets for pk in step))
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        acc = backward_step(forward, step, total, device, ddp)
        if ddp is not None:
            torch.distributed.all_reduce(acc)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        secs.append(time.perf_counter() - t0)
        losses.append(acc.item())
        if log:
            print(f"step {s}{' (warmup)' if s < warmup else ''}: loss {losses[-1]:.6f} "
                  f"{1e3 * secs[-1]:.1f} ms", file=sys.stderr)
    return losses, secs


def widen_init(model, init_std):
    """Rescales the model's matrices from the 0.02 init to std `init_std`: near-uniform
    outputs would hide errors from the parity checks."""
    with torch.no_grad():
        for w in model.parameters():
            if w.dim() == 2:
                w.mul_(init_std / 0.02)
    return model


def check_parity(c, vocab, steps, seed, init_std=0.1):
    dev = torch.device("cpu")
    torch.manual_seed(seed)
    hf = widen_init(build_hf(c), init_std)
    eager = EagerLlama(c)
    eager.load_state_dict(hf.state_dict(), strict=True)
    ref = build_hf(c, attn="eager")
    ref.load_state_dict(hf.state_dict(), strict=True)
    hf_fwd, ok = hf_forward_fn(hf), True
    # 1) packed per-document loss sums vs transformers' labels= loss on unpacked documents;
    #    a micro-batch holding only its first document is the one-document case.
    cases = [(l, 0, m) for m, l in enumerate(steps[0][:2])] + [(steps[0][0][:1], 0, 0)]
    for lengths, s, m in cases:
        pk = Pack(lengths, s, m, vocab, dev)
        with torch.no_grad():
            sums = [F.cross_entropy(f(pk).float(), pk.labels, reduction="sum").item() for f in (hf_fwd, eager)]
            want = 0.0
            for a, b in zip(pk.bounds[:-1], pk.bounds[1:]):
                if b - a > 1:
                    ids = pk.ids[a:b][None]  # unpacked: positions 0.. by default, mean over b-a-1 targets
                    want += ref(input_ids=ids, labels=ids, use_cache=False).loss.item() * (b - a - 1)
        rel = [abs(x - want) / abs(want) for x in sums]
        print(f"docs {lengths}: packed loss sum hf {sums[0]:.6f} eager {sums[1]:.6f} "
              f"transformers labels= {want:.6f} rel {rel[0]:.2e} {rel[1]:.2e}")
        ok &= max(rel) < 1e-5
    # 2) three training steps each from the same weights.
    packs = [[Pack(l, s, m, vocab, dev) for m, l in enumerate(st)] for s, st in enumerate(steps[:3])]
    lh, _ = train(hf_fwd, hf.parameters(), packs, dev, 0)
    le, _ = train(eager, eager.parameters(), packs, dev, 0)
    for s, (a, b) in enumerate(zip(lh, le)):
        rel = abs(a - b) / abs(a)
        ok &= rel < 1e-5
        print(f"step {s}: loss hf {a:.8f} eager {b:.8f} rel {rel:.2e}")
    print(f"transformers {hf_fwd.version}; hf attention got cu_seqlens from: {STATE['hf_cu_source']}")
    print("PARITY OK" if ok else "PARITY FAILED")
    return {"parity_ok": ok, "loss_hf": lh, "loss_eager": le, "transformers": hf_fwd.version}


def init_ddp(device):
    """Joins the torchrun job (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); returns (rank, world)."""
    if "WORLD_SIZE" not in os.environ:
        sys.exit("--impl ddp runs under torchrun: torchrun --nproc-per-node N bench/peer_train.py ...")
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def rank_packs(steps, rank_of, rank, vocab, device):
    """This rank's micro-batches of every step (ids keep their global micro-batch index) and
    each step's target count over all ranks."""
    packs = [[Pack(l, s, m, vocab, device) for m, l in enumerate(st) if rank_of[s][m] == rank]
             for s, st in enumerate(steps)]
    for s, p in enumerate(packs):
        if not p:
            sys.exit(f"step {s} gives rank {rank} no micro-batch; DDP needs one per rank")
    totals = [sum(sum(mb) - len(mb) for mb in st) for st in steps]
    return packs, totals


def check_ddp_parity(c, vocab, steps, dp, rank_of, seed, init_std=0.1):
    dev = torch.device("cpu")
    rank, world = init_ddp(dev)
    if dp != world:
        sys.exit(f"the batches were split for dp = {dp}; this job has {world} ranks")
    steps, rank_of = steps[:3], rank_of[:3]
    torch.manual_seed(seed)
    single = widen_init(EagerLlama(c), init_std)
    model = copy.deepcopy(single)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    packs, totals = rank_packs(steps, rank_of, rank, vocab, dev)
    all_packs = [[Pack(l, s, m, vocab, dev) for m, l in enumerate(st)] for s, st in enumerate(steps)]
    # The first step's gradient itself: AdamW's update hardly changes when every gradient is
    # scaled alike, so the losses alone would not show a wrong scale.
    backward_step(ddp, packs[0], totals[0], dev, ddp)
    backward_step(single, all_packs[0], totals[0], dev)
    grad_err = max(((p.grad - q.grad).abs().max() / q.grad.abs().max()).item()
                   for p, q in zip(model.parameters(), single.parameters()))
    ok = grad_err < 1e-5
    if rank == 0:
        print(f"step 0 gradient: largest relative difference {grad_err:.2e}")
    for m in (model, single):
        m.zero_grad(set_to_none=True)
    ld, _ = train(ddp, ddp.parameters(), packs, dev, 0, totals=totals, ddp=ddp)
    ls, _ = train(single, single.parameters(), all_packs, dev, 0)
    for s, (a, b) in enumerate(zip(ld, ls)):
        rel = abs(a - b) / abs(b)
        ok &= rel < 1e-5
        if rank == 0:
            print(f"step {s}: loss ddp ({world} ranks) {a:.8f} one process {b:.8f} rel {rel:.2e}")
    worst = max(((p - q).abs().max() / q.abs().max()).item()
                for p, q in zip(model.parameters(), single.parameters()))
    ok &= worst < 1e-5
    if rank == 0:
        print(f"parameters after {len(steps)} steps: largest relative difference {worst:.2e}")
    flag = torch.tensor([0 if ok else 1])
    torch.distributed.all_reduce(flag)
    ok = flag.item() == 0
    if rank == 0:
        print("DDP PARITY OK" if ok else "DDP PARITY FAILED")
    torch.distributed.destroy_process_group()
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--impl", choices=["hf", "eager", "ddp"], default="hf")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--init-seed", type=int, default=0)
    ap.add_argument("--check-parity", action="store_true", help="CPU fp32 hf vs eager check, then exit")
    ap.add_argument("--check-ddp-parity", action="store_true",
                    help="CPU fp32 DDP (under torchrun) vs one-process eager check, then exit")
    ap.add_argument("--parity-init-std", type=float, default=0.1,
                    help="weight std for --check-parity (0.02 leaves the tiny model near-uniform)")
    ap.add_argument("--json")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    with open(args.model) as f:
        c = json.load(f)
    vocab, steps, dp, rank_of = load_batches(args.batches)
    if vocab != c["vocab"]:
        sys.exit(f"batches vocab {vocab} != model vocab {c['vocab']}")
    if args.check_ddp_parity:
        ok = check_ddp_parity(c, vocab, steps, dp, rank_of, args.init_seed, args.parity_init_std)
        sys.exit(0 if ok else 1)
    if args.check_parity:
        res = check_parity(c, vocab, steps, args.init_seed, args.parity_init_std)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
        sys.exit(0 if res["parity_ok"] else 1)
    if not 0 <= args.warmup_steps < len(steps):
        sys.exit(f"--warmup-steps {args.warmup_steps} leaves no timed step of {len(steps)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda but torch.cuda.is_available() is False")
    dev = torch.device(args.device)
    if dev.type == "cuda":
        selfcheck_varlen(c, dev)
    rank, world, ddp, totals = 0, 1, None, None
    if args.impl == "ddp":
        rank, world = init_ddp(dev)
        if dp != world:
            sys.exit(f"{args.batches} was split for dp = {dp}; this job has {world} ranks")
    torch.manual_seed(args.init_seed)
    if args.impl == "hf":
        model = build_hf(c).to(dev)
        forward = hf_forward_fn(model)
        tf_version = forward.version
    else:
        model, tf_version = EagerLlama(c).to(dev), None
        forward = model
    model.train()
    if args.impl == "ddp":
        forward = ddp = torch.nn.parallel.DistributedDataParallel(model)
        packs, totals = rank_packs(steps, rank_of, rank, vocab, dev)
    else:
        packs = [[Pack(l, s, m, vocab, dev) for m, l in enumerate(st)] for s, st in enumerate(steps)]
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    losses, secs = train(forward, model.parameters(), packs, dev, args.warmup_steps,
                         args.verbose and rank == 0, totals, ddp)
    if ddp is not None:
        torch.distributed.destroy_process_group()
        if rank != 0:
            return
    w = args.warmup_steps
    flops = [step_flops(c, [n for mb in st for n in mb]) for st in steps[w:]]
    tokens = sum(n for st in steps[w:] for mb in st for n in mb)
    seconds = sum(secs[w:])
    cuda = dev.type == "cuda"
    res = {
        "impl": args.impl, "dp": world, "device": args.device, "model": c.get("name", args.model),
        "steps_timed": len(steps) - w, "warmup_steps": w, "tokens": tokens, "seconds": seconds,
        "tokens_per_s": tokens / seconds, "step_ms": [1e3 * t for t in secs[w:]],
        "loss": losses, "flops_per_step": flops,
        "tflops_per_s": sum(flops) / seconds / 1e12,
        "mfu": sum(flops) / seconds / (args.peak_tflops * 1e12) if cuda else None,
        "peak_tflops": args.peak_tflops if cuda else None,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(dev) if cuda else None,
        "precision": "fp32 master + autocast bf16" if cuda else "fp32",
        "attention": (f"{STATE['varlen'][0]} (GQA {STATE['gqa']})" if cuda
                      else "per-document F.scaled_dot_product_attention"),
        "hf_cu_seqlens_source": STATE["hf_cu_source"], "transformers": tf_version,
        "torch": torch.__version__,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    mfu = f"{100 * res['mfu']:.1f}%" if res["mfu"] is not None else "n/a"
    mem = f"{res['peak_memory_bytes'] / 2**30:.1f} GiB" if cuda else "n/a"
    print(f"peer_train impl={args.impl} device={args.device} model={res['model']} "
          f"steps={res['steps_timed']} tokens={tokens} tokens/s={res['tokens_per_s']:.0f} "
          f"mean step {sum(res['step_ms']) / len(res['step_ms']):.1f} ms "
          f"TFLOP/s {res['tflops_per_s']:.2f} MFU {mfu} peak mem {mem} "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
