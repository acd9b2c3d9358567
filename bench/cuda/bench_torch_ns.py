#!/usr/bin/env python3
"""PyTorch's bf16 Newton-Schulz (torch.optim.Muon's 5-step quintic iteration)
per shape, eager and replayed from a CUDA graph; prints RESULT lines in ms per
matrix."""
import sys

import torch

A, B, C = 3.4445, -4.7750, 2.0315


def ns(g, steps=5):
    x = g.bfloat16()
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=1e-7)
    for _ in range(steps):
        a = x @ x.T
        b = torch.addmm(a, a, a, beta=B, alpha=C)
        x = torch.addmm(x, b, x, beta=A)
    return x.T if tall else x


def timed(fn, iters):
    for _ in range(3):
        fn()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(iters):
        fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / iters


count = int(sys.argv[1]) if len(sys.argv) > 1 else 1
for r, c in ((768, 768), (768, 3072), (2048, 2048), (4096, 4096), (4096, 16384)):
    gs = [torch.randn(r, c, device="cuda") * 0.01 for _ in range(count)]
    iters = 6 if r * c > (1 << 24) else 20
    tag = f"torch_ns_{r}x{c}_n{count}"
    print(f"RESULT {tag}_eager_ms {timed(lambda: [ns(g) for g in gs], iters) / count:.6g}", flush=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            [ns(g) for g in gs]
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [ns(g) for g in gs]
    print(f"RESULT {tag}_graph_ms {timed(graph.replay, iters) / count:.6g}", flush=True)
    del graph, outs, gs
    torch.cuda.empty_cache()
