#!/usr/bin/env python3
"""PyTorch side of the training-step benchmark: a Llama-architecture model of
SmolLM2-135M shape, full training steps on random tokens.

Usage: torch_step.py [--batch 16] [--seq 1024] [--layers 30] [--vocab 49152]
                     [--steps 10] [--warmup 3] [--seed 0]
                     [--modes eager,deterministic,compile]
                     [--recipes autocast,bf16-params]

Recipes: "autocast" = f32 master parameters, forward/backward under bf16
autocast (the Rust side's recipe); "bf16-params" = whole model in bf16, AdamW
on bf16 parameters. Modes: "eager", "deterministic" (use_deterministic_algorithms
plus a bitwise repeat check), "compile" (torch.compile, default mode).
One step = forward, mean cross-entropy over B*T tokens, backward,
clip_grad_norm_(1.0), AdamW(3e-4, (0.9, 0.95), 1e-8, wd 0.1 on every
parameter, fused on CUDA), zero_grad(set_to_none=True).

stdout: one JSON line per (recipe, mode); stderr: a summary table at the end.
On CPU (smoke tests only) autocast means bf16 CPU autocast and compile is
skipped unless named in --modes.
"""
import os

# cuBLAS reads this when its handle is created, so it must be set before any
# CUDA work; it only restricts workspace choice, harmless for the other modes.
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"

import argparse
import contextlib
import ctypes
import gc
import hashlib
import json
import sys
import time
import traceback
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

try:  # torch >= 2.3
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # older 2.x: run with the default dispatch, unprobed
    SDPBackend = sdpa_kernel = None


def _gqa_supported():
    q = torch.zeros(1, 4, 2, 8)
    kv = torch.zeros(1, 2, 2, 8)
    try:
        F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
        return True
    except TypeError:
        return False


GQA_OK = _gqa_supported()


def attend(q, k, v, gqa):
    """Causal attention; q (B,Hq,T,hd), k/v (B,Hkv,T,hd)."""
    if gqa:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        # Normalise in f32 whatever the activation dtype, then scale.
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Block(nn.Module):
    def __init__(self, d, hq, hkv, hd, ff):
        super().__init__()
        self.hq, self.hkv, self.hd = hq, hkv, hd
        self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
        self.q = nn.Linear(d, hq * hd, bias=False)
        self.k = nn.Linear(d, hkv * hd, bias=False)
        self.v = nn.Linear(d, hkv * hd, bias=False)
        self.o = nn.Linear(hq * hd, d, bias=False)
        self.gate = nn.Linear(d, ff, bias=False)
        self.up = nn.Linear(d, ff, bias=False)
        self.down = nn.Linear(ff, d, bias=False)

    def forward(self, x, cos, sin, gqa):
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(B, T, self.hq, self.hd).transpose(1, 2)
        k = self.k(h).view(B, T, self.hkv, self.hd).transpose(1, 2)
        v = self.v(h).view(B, T, self.hkv, self.hd).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = attend(q, k, v, gqa).transpose(1, 2).reshape(B, T, self.hq * self.hd)
        x = x + self.o(a)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, vocab, layers, d=576, hq=9, hkv=3, hd=64, ff=1536,
                 max_seq=1024, theta=100000.0, gqa=False):
        super().__init__()
        self.gqa = gqa
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, hq, hkv, hd, ff) for _ in range(layers))
        self.norm = RMSNorm(d)
        inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        ang = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), dim=-1)  # rotate-half layout: (T, hd)
        # f32 tables (cast by .to(bfloat16) in the bf16-params recipe); each
        # block casts them to q's dtype before rotating, as HF Llama does.
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.embed(ids)
        cos, sin = self.cos[:T], self.sin[:T]
        for blk in self.blocks:
            x = blk(x, cos, sin, self.gqa)
        # Tied lm-head: logits against the embedding matrix.
        return F.linear(self.norm(x), self.embed.weight)


def build(args, dev, recipe, seed, gqa):
    with torch.device(dev):
        model = Llama(args.vocab, args.layers, max_seq=args.seq, gqa=gqa)
    g = torch.Generator(device=dev).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:  # every Linear and the (tied) embedding
                p.normal_(0.0, 0.02, generator=g)
    if recipe == "bf16-params":
        model = model.to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, **({"fused": True} if dev == "cuda" else {}))
    return model, opt


def batches(args, dev, seed, n=4):
    g = torch.Generator(device=dev).manual_seed(seed + 1)
    toks = [torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=dev, generator=g)
            for _ in range(n)]
    return [(t[:, :-1].contiguous(), t[:, 1:].contiguous()) for t in toks]


def make_step(model, fwd, opt, dev, recipe):
    params = [p for p in model.parameters()]
    if recipe == "autocast":
        ac = lambda: torch.autocast(dev, dtype=torch.bfloat16)
    else:
        ac = contextlib.nullcontext

    def step(x, y):
        with ac():
            logits = fwd(x)
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def pick_sdpa(dev, dtype, deterministic):
    """First (backend, gqa) pair whose forward+backward runs under the current
    determinism setting, tried flash, efficient, math. Returns (backend, gqa, note)."""
    if sdpa_kernel is None:
        return None, False, "torch.nn.attention missing: default SDPA dispatch, repeated kv"
    rejected = []
    for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        for gqa in ((True, False) if GQA_OK else (False,)):
            q = torch.randn(2, 9, 128, 64, device=dev, dtype=dtype, requires_grad=True)
            k = torch.randn(2, 3, 128, 64, device=dev, dtype=dtype, requires_grad=True)
            v = torch.randn(2, 3, 128, 64, device=dev, dtype=dtype, requires_grad=True)
            tag = be.name + ("+gqa" if gqa else "+repeat_kv")
            try:
                with warnings.catch_warnings(record=True) as w, sdpa_kernel(be):
                    warnings.simplefilter("always")
                    attend(q, k, v, gqa).float().sum().backward()
                    sync(dev)
                # A backend that only *warns* it is nondeterministic is refused too.
                if deterministic and any("determinis" in str(x.message) for x in w):
                    raise RuntimeError("warned nondeterministic")
                return be, gqa, "; ".join(rejected)
            except RuntimeError as e:
                rejected.append(f"{tag} refused ({str(e).splitlines()[0][:100]})")
    raise RuntimeError("no SDPA backend usable: " + "; ".join(rejected))


def param_sha(model):
    # Raw bytes read through ctypes so that numpy is not required.
    h = hashlib.sha256()
    for p in model.parameters():
        t = p.detach().contiguous().cpu()
        h.update((ctypes.c_char * (t.numel() * t.element_size())).from_address(t.data_ptr()))
    return h.hexdigest()


def repeat_check(args, dev, recipe, gqa, kctx):
    """Two fresh runs of 3 steps from the same seed: equal losses and weights?"""
    out = []
    for _ in range(2):
        model, opt = build(args, dev, recipe, args.seed, gqa)
        step = make_step(model, model, opt, dev, recipe)
        data = batches(args, dev, args.seed)
        with kctx():
            for i in range(3):
                loss = step(*data[i % len(data)])
        out.append((loss.item(), param_sha(model)))
        del model, opt, step
    return out[0] == out[1], [o[0] for o in out]


def run_mode(args, dev, recipe, mode):
    res = {"bench": "torch_step", "recipe": recipe, "mode": mode, "device": DEVICE_NAME,
           "torch": torch.__version__, "batch": args.batch, "seq": args.seq,
           "layers": args.layers, "vocab": args.vocab, "steps": args.steps}
    notes = []
    det = mode == "deterministic"
    if det:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
    try:
        # Both recipes feed SDPA bf16 q/k/v (CPU autocast is bf16 too).
        be, gqa, why = pick_sdpa(dev, torch.bfloat16, det)
        if why:
            notes.append("sdpa: " + why)
        res["sdpa_backend"] = be.name if be is not None else "default"
        res["kv_heads"] = "enable_gqa" if gqa else "repeat_interleave"
        kctx = (lambda: sdpa_kernel(be)) if be is not None else contextlib.nullcontext

        if dev == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        model, opt = build(args, dev, recipe, args.seed, gqa)
        res["params"] = sum(p.numel() for p in model.parameters())
        fwd = model
        if mode == "compile":
            torch._dynamo.reset()
            fwd = torch.compile(model)
        step = make_step(model, fwd, opt, dev, recipe)
        data = batches(args, dev, args.seed)
        with kctx():
            if mode == "compile":  # first step pays for tracing and codegen
                t0 = time.perf_counter()
                step(*data[0])
                sync(dev)
                res["compile_s"] = round(time.perf_counter() - t0, 2)
            for i in range(args.warmup):
                step(*data[i % len(data)])
            sync(dev)
            if dev == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            t0 = time.perf_counter()
            for i in range(args.steps):
                loss = step(*data[i % len(data)])
            if dev == "cuda":
                end.record()
            sync(dev)
            ms = start.elapsed_time(end) if dev == "cuda" else (time.perf_counter() - t0) * 1e3
        ms /= args.steps
        res["ms_per_step"] = round(ms, 3)
        res["tokens_per_s"] = round(args.batch * args.seq / (ms / 1e3), 1)
        res["peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1) if dev == "cuda" else None
        res["last_loss"] = round(loss.item(), 6)
        del model, opt, step, fwd
        gc.collect()
        if mode in ("eager", "deterministic"):
            same, losses = repeat_check(args, dev, recipe, gqa, kctx)
            res["bitwise_repeat"] = same
            res["repeat_losses"] = losses
    finally:
        if det:
            torch.use_deterministic_algorithms(False)
            torch.backends.cudnn.deterministic = False
    res["note"] = "; ".join(notes)
    return res


def main():
    global DEVICE_NAME
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default=None, help="default eager,deterministic,compile")
    ap.add_argument("--recipes", default="autocast,bf16-params")
    args = ap.parse_args()

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    DEVICE_NAME = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    modes = (args.modes or "eager,deterministic,compile").split(",")
    if dev == "cpu" and args.modes is None:
        modes.remove("compile")
    rows = []
    for recipe in args.recipes.split(","):
        for mode in modes:
            try:
                if recipe not in ("autocast", "bf16-params"):
                    raise ValueError(f"unknown recipe {recipe}")
                if mode not in ("eager", "deterministic", "compile"):
                    raise ValueError(f"unknown mode {mode}")
                res = run_mode(args, dev, recipe, mode)
            except Exception as e:  # report and go on with the other modes
                traceback.print_exc(file=sys.stderr)
                res = {"bench": "torch_step", "recipe": recipe, "mode": mode,
                       "device": DEVICE_NAME, "error": f"{type(e).__name__}: {str(e)[:500]}"}
            print(json.dumps(res), flush=True)
            rows.append(res)
            gc.collect()
            if dev == "cuda":
                torch.cuda.empty_cache()

    hdr = f"{'recipe':<12} {'mode':<14} {'ms/step':>9} {'tok/s':>11} {'peak MiB':>9} " \
          f"{'loss':>8} {'sdpa':<20} {'repeat':<6} extra"
    print(f"\ntorch_step on {DEVICE_NAME}, torch {torch.__version__}, B={args.batch} "
          f"T={args.seq} layers={args.layers} vocab={args.vocab}\n{hdr}", file=sys.stderr)
    for r in rows:
        if "error" in r:
            print(f"{r['recipe']:<12} {r['mode']:<14} ERROR {r['error'][:100]}", file=sys.stderr)
            continue
        sd = f"{r['sdpa_backend']}/{'gqa' if r['kv_heads'] == 'enable_gqa' else 'rep'}"
        extra = f"compile {r['compile_s']} s" if "compile_s" in r else ""
        print(f"{r['recipe']:<12} {r['mode']:<14} {r['ms_per_step']:>9.2f} "
              f"{r['tokens_per_s']:>11.0f} {str(r['peak_mib']):>9} {r['last_loss']:>8.4f} "
              f"{sd:<20} {str(r.get('bitwise_repeat', '-')):<6} {extra}", file=sys.stderr)


if __name__ == "__main__":
    main()
