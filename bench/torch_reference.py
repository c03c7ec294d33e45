#!/usr/bin/env python3
"""PyTorch eager timings on the shapes of kolm's kernel benchmark, and the
side-by-side table.

Usage: torch_reference.py KOLM_JSONL [OUT_JSONL]

Times the same operations as `kolm-kernels-bench` (same shapes, bf16, the
same timing method, median of CUDA-event timings), measures the two ceilings (device-to-device copy, 8192^3 bf16
matmul), then prints one table: kolm ms, PyTorch ms, the floor
max(bytes / copy bandwidth, FLOPs / matmul rate) and each time over it,
plus a SmolLM2-135M training-step estimate composed from the kernel times.

The method, as in kernels/src/bin/bench.rs, outside the timed region: a
256 MiB clearing write, then a 256 MiB read of another buffer (the L2 then
holds clean lines, so no write-back of the clearing write runs during the
timed call); then a GPU spin of 100k cycles (torch.cuda._sleep) before the
start event, so the timed call is queued when the event fires and launch
latency is not timed.
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

B, T, D, FF, HQ, HKV, HD, V = 16, 1024, 576, 1536, 9, 3, 64, 49152
N = B * T
PARAMS = 134_515_008
LAYERS = 30
dev = "cuda"
bf = torch.bfloat16
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
clean = torch.zeros(64 << 20, dtype=torch.float32, device=dev)
SPIN_CYCLES = 100_000  # the same as bench.rs
gen = torch.Generator(device=dev).manual_seed(1)


def rand(*shape, a=1.0, dtype=bf, grad=False):
    t = ((torch.rand(*shape, device=dev, generator=gen) * 2 - 1) * a).to(dtype)
    return t.requires_grad_(grad)


def time_ms(f, reps=50):
    f()
    f()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(reps):
        flush.zero_()
        clean.sum()
        torch.cuda._sleep(SPIN_CYCLES)
        start.record()
        f()
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end))
    ms.sort()
    return ms[len(ms) // 2]


def grad_of(y, inputs, dy):
    return lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True)


def main():
    kolm = {}
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                kolm[r["kernel"]] = r
    torch_ms = {}

    # Ceilings, measured here.
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy_ms = time_ms(lambda: dst.copy_(src), 20)
    copy_bw = 2 * src.numel() / (copy_ms * 1e-3)
    del src, dst
    a = rand(8192, 8192)
    bm = rand(8192, 8192)
    mm_ms = time_ms(lambda: a @ bm, 20)
    mm_rate = 2 * 8192**3 / (mm_ms * 1e-3)
    del a, bm

    x = rand(N, D, a=2.0, grad=True)
    w = rand(D, grad=True)
    dy = rand(N, D)
    torch_ms["rmsnorm_fwd"] = time_ms(lambda: F.rms_norm(x, (D,), w, 1e-5))
    y = F.rms_norm(x, (D,), w, 1e-5)
    torch_ms["rmsnorm_bwd"] = time_ms(grad_of(y, (x, w), dy))
    del y

    gate = rand(N, FF, a=4.0, grad=True)
    up = rand(N, FF, a=2.0, grad=True)
    dyf = rand(N, FF)
    torch_ms["swiglu_fwd"] = time_ms(lambda: F.silu(gate) * up)
    y = F.silu(gate) * up
    torch_ms["swiglu_bwd"] = time_ms(grad_of(y, (gate, up), dyf))
    del y, gate, up, dyf

    q = rand(B, T, HQ, HD, grad=True)
    inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, device=dev, dtype=torch.float64) / HD))
    ang = torch.arange(T, device=dev, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(bf)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(bf)[:, None, :]

    def rope(t):
        t1, t2 = t[..., : HD // 2], t[..., HD // 2 :]
        return t * cos + torch.cat([-t2, t1], -1) * sin

    torch_ms["rope_fwd"] = time_ms(lambda: rope(q))
    y = rope(q)
    torch_ms["rope_bwd"] = time_ms(grad_of(y, (q,), torch.randn_like(y)))
    del y, q

    ids = torch.randint(0, V, (N,), device=dev, generator=gen)
    table = rand(V, D, grad=True)
    torch_ms["embedding_fwd"] = time_ms(lambda: F.embedding(ids, table))
    y = F.embedding(ids, table)
    torch_ms["embedding_bwd"] = time_ms(grad_of(y, (table,), dy))
    del y, table

    logits = rand(N, V, a=6.0, grad=True)
    targets = torch.randint(0, V, (N,), device=dev, generator=gen)

    def xent_fwd_bwd():
        loss = F.cross_entropy(logits, targets)
        return torch.autograd.grad(loss, (logits,))

    torch_ms["xent_fwd_bwd"] = time_ms(xent_fwd_bwd, 20)
    with torch.no_grad():
        torch_ms["xent_fwd"] = time_ms(lambda: F.cross_entropy(logits, targets), 20)
    del logits

    with torch.no_grad():
        for name, n_out, k_in in [
            ("q_o_proj", D, D),
            ("kv_proj", HKV * HD, D),
            ("gate_up_proj", FF, D),
            ("down_proj", D, FF),
            ("lm_head", V, D),
        ]:
            xin = rand(N, k_in)
            wt = rand(n_out, k_in, a=0.05)
            dyo = rand(N, n_out)
            torch_ms[f"matmul_{name}_fwd"] = time_ms(lambda: xin @ wt.t(), 20)
            torch_ms[f"matmul_{name}_dx"] = time_ms(lambda: dyo @ wt, 20)
            torch_ms[f"matmul_{name}_dw"] = time_ms(lambda: dyo.t() @ xin, 20)
            del xin, wt, dyo

    from torch.nn.attention import SDPBackend, sdpa_kernel

    for bb, tt in [(16, 1024), (8, 2048), (4, 4096)]:
        # Flash takes [b, h, t, d] with as many kv heads as q heads: expand
        # the 3 kv heads outside the timed region.
        qa = rand(bb, HQ, tt, HD, grad=True)
        ka = rand(bb, HKV, tt, HD).repeat_interleave(HQ // HKV, 1).requires_grad_(True)
        va = rand(bb, HKV, tt, HD).repeat_interleave(HQ // HKV, 1).requires_grad_(True)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            f = lambda: F.scaled_dot_product_attention(qa, ka, va, is_causal=True)
            torch_ms[f"attention_fwd_T{tt}"] = time_ms(f, 10)
            o = f()
            torch_ms[f"attention_bwd_T{tt}"] = time_ms(grad_of(o, (qa, ka, va), torch.randn_like(o)), 10)
        del qa, ka, va, o

    p = torch.nn.Parameter(rand(PARAMS, dtype=torch.float32))
    p.grad = rand(PARAMS, a=0.01, dtype=torch.float32)
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    torch_ms["adamw"] = time_ms(opt.step, 20)
    torch_ms["clip_grad_norm"] = time_ms(lambda: torch.nn.utils.clip_grad_norm_([p], 1.0), 20)
    del p, opt

    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            for k, v in torch_ms.items():
                f.write(json.dumps({"kernel": k, "torch_ms": v}) + "\n")

    print(f"\ntiming method: clean cold L2, GPU spin {SPIN_CYCLES} cycles before the start event")
    print(f"ceilings measured here: copy {copy_bw / 1e12:.2f} TB/s (read+write), "
          f"bf16 matmul {mm_rate / 1e12:.0f} TFLOP/s (8192^3)")
    print(f"{'kernel':28s} {'kolm ms':>9s} {'torch ms':>9s} {'floor ms':>9s} {'kolm/floor':>10s} {'torch/kolm':>10s}")
    for name, r in kolm.items():
        floor = max(r["bytes"] / copy_bw, r["flops"] / mm_rate) * 1e3
        t = torch_ms.get(name, float("nan"))
        print(f"{name:28s} {r['ms']:9.4f} {t:9.4f} {floor:9.4f} {r['ms'] / floor:10.2f} {t / r['ms']:10.2f}")

    def step(ms):
        """One training step composed from isolated kernel times."""
        g = lambda k: ms[k]
        mm = lambda n: g(f"matmul_{n}_fwd") + g(f"matmul_{n}_dx") + g(f"matmul_{n}_dw")
        layer = (
            2 * (g("rmsnorm_fwd") + g("rmsnorm_bwd"))
            + 2 * mm("q_o_proj") + 2 * mm("kv_proj") + 2 * mm("gate_up_proj") + mm("down_proj")
            + (1 + HKV / HQ) * (g("rope_fwd") + g("rope_bwd"))
            + g("attention_fwd_T1024") + g("attention_bwd_T1024")
            + g("swiglu_fwd") + g("swiglu_bwd")
        )
        glob = (
            g("embedding_fwd") + g("embedding_bwd") + g("rmsnorm_fwd") + g("rmsnorm_bwd")
            + mm("lm_head") + g("xent_fwd_bwd") + g("clip_grad_norm") + g("adamw")
        )
        return LAYERS * layer + glob

    kolm_ms = {k: r["ms"] for k, r in kolm.items()}
    try:
        ks, ts = step(kolm_ms), step(torch_ms)
        print(f"\nSmolLM2-135M step composed from isolated kernel times (B=16, T=1024): "
              f"kolm {ks:.1f} ms = {N / ks * 1e3:,.0f} tokens/s; "
              f"torch kernels {ts:.1f} ms = {N / ts * 1e3:,.0f} tokens/s "
              f"(no launch gaps, residual adds or casts counted)")
    except KeyError as e:
        print(f"\nstep estimate skipped: missing {e}")


if __name__ == "__main__":
    main()
