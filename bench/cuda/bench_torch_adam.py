#!/usr/bin/env python3
"""torch.optim.AdamW(fused=True) on the mix of bench_cuda_adam (mixes.hpp's
adam_mix), fp32 and bf16 parameters; prints RESULT lines (ms per step)."""
import torch


def adam_mix():
    d = 640
    shapes = [(50304, d), (1024, d)]
    for _ in range(24):
        shapes += [(d,), (d,), (d, 3 * d), (3 * d,), (d, d), (d,), (d,), (d,), (d, 4 * d), (4 * d,), (4 * d, d), (d,)]
    return shapes + [(d,), (d,)]


def time_step(opt, iters=50):
    for _ in range(5):
        opt.step()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        opt.step()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / iters


for dtype, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
    ps = [torch.randn(s, device="cuda", dtype=dtype, requires_grad=True) for s in adam_mix()]
    for p in ps:
        p.grad = torch.randn_like(p) * 0.01
    opt = torch.optim.AdamW(ps, lr=1e-3, fused=True)
    print(f"RESULT torch_adam_{tag}_ms {time_step(opt):.6g}")
    del opt, ps
    torch.cuda.empty_cache()
