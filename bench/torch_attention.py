#!/usr/bin/env python3
"""PyTorch SDPA (flash) attention alone, on the shapes and with the timing
method of torch_reference.py (imported from beside this file), side by side
with kolm's attention lines from one or more `kolm-kernels-bench` outputs
(e.g. `kolm-kernels-bench --only attention`, once with the default kernels
and once with `--attention mma-sync`).

Usage: torch_attention.py LABEL=KOLM_JSONL [LABEL=KOLM_JSONL ...]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from torch_reference import HD, HKV, HQ, grad_of, rand, time_ms  # noqa: E402

runs = []
for arg in sys.argv[1:]:
    label, path = arg.split("=", 1)
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.startswith("{")]
    runs.append((label, {r["kernel"]: r["ms"] for r in rows}))

torch_ms = {}
for bb, tt in [(16, 1024), (8, 2048), (4, 4096)]:
    qa = rand(bb, HQ, tt, HD, grad=True)
    ka = rand(bb, HKV, tt, HD).repeat_interleave(HQ // HKV, 1).requires_grad_(True)
    va = rand(bb, HKV, tt, HD).repeat_interleave(HQ // HKV, 1).requires_grad_(True)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        f = lambda: F.scaled_dot_product_attention(qa, ka, va, is_causal=True)  # noqa: E731
        torch_ms[f"attention_fwd_T{tt}"] = time_ms(f, 20)
        o = f()
        torch_ms[f"attention_bwd_T{tt}"] = time_ms(grad_of(o, (qa, ka, va), torch.randn_like(o)), 20)
    del qa, ka, va, o

print(f"{'kernel':22s} {'torch ms':>9s}" + "".join(f" {label:>10s} {'speed':>6s}" for label, _ in runs))
for name, t in torch_ms.items():
    line = f"{name:22s} {t:9.4f}"
    for _, ms in runs:
        k = ms.get(name, float("nan"))
        line += f" {k:10.4f} {t / k:6.2f}"
    print(line)
print("speed = PyTorch ms / kolm ms (>= 1: kolm at least as fast)")
