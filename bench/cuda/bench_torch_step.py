#!/usr/bin/env python3
"""torch.optim.Muon + torch.optim.AdamW(fused=True) on bench_cuda_step's set
(mixes.hpp's gpt2_small_step), with gradient clipping as dmuon's benchmark
does; prints RESULT lines in ms per step."""
import torch

muon_shapes, adam_shapes = [], []
for _ in range(12):
    muon_shapes += [(768, 2304), (768, 768), (3072, 768), (768, 3072)]
    adam_shapes += [(2304,), (768,), (3072,), (768,), (768,), (768,), (768,), (768,)]
adam_shapes += [(768,), (768,)]
mp = [torch.randn(s, device="cuda", requires_grad=True) for s in muon_shapes]
ap = [torch.randn(s, device="cuda", requires_grad=True) for s in adam_shapes]
for p in mp + ap:
    p.grad = torch.randn_like(p) * 0.01
muon = torch.optim.Muon(mp, lr=0.02, weight_decay=0.0)
adam = torch.optim.AdamW(ap, lr=1e-3, fused=True)


def step(clip):
    if clip:
        torch.nn.utils.clip_grad_norm_(mp + ap, 1.0, foreach=True)
    muon.step()
    adam.step()


for clip, tag in ((False, "noclip"), (True, "clip")):
    for _ in range(3):
        step(clip)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(20):
        step(clip)
    e1.record()
    e1.synchronize()
    print(f"RESULT torch_step_{tag}_ms {e0.elapsed_time(e1) / 20:.6g}", flush=True)
