#!/usr/bin/env python3
"""Repeat torch_compare_dump's run with torch.optim.AdamW and torch.optim.Muon
on the same initial parameters and gradients, and compare with dmuon's final
parameters. Exit 0 when every parameter is within tolerance, 1 otherwise."""
import sys

import numpy as np
import torch

d = sys.argv[1]
meta = [line.split() for line in open(f"{d}/meta.txt")]
steps = int(meta[0][1])
lr_a, b1, b2, eps_a, wd_a = map(float, meta[1][1:])
lr_m, mom, nesterov, ns_steps, eps_m, wd_m = map(float, meta[2][1:])
params = [(m[1], m[2], m[3], [int(x) for x in m[4:]]) for m in meta[3:]]


def load(path, dtype, shape):
    raw = np.fromfile(path, dtype=np.float32 if dtype == "fp32" else np.int16)
    t = torch.from_numpy(raw)
    if dtype == "bf16":
        t = t.view(torch.bfloat16)
    return t.reshape(shape).cuda()


ps = [load(f"{d}/init_{k}.bin", dt, sh).clone().requires_grad_(True) for k, (_, _, dt, sh) in enumerate(params)]
adam = [p for p, (_, kind, _, _) in zip(ps, params) if kind == "adam"]
muon = [p for p, (_, kind, _, _) in zip(ps, params) if kind == "muon"]
opts = [torch.optim.AdamW(adam, lr=lr_a, betas=(b1, b2), eps=eps_a, weight_decay=wd_a),
        torch.optim.Muon(muon, lr=lr_m, momentum=mom, nesterov=bool(nesterov), ns_steps=int(ns_steps), eps=eps_m,
                         weight_decay=wd_m)]
for s in range(steps):
    for k, (p, (_, _, dt, sh)) in enumerate(zip(ps, params)):
        p.grad = load(f"{d}/grad_{s}_{k}.bin", dt, sh)
    for o in opts:
        o.step()

ok = True
print(f"{'parameter':<10} {'kind':<5} {'dtype':<5} {'max |diff|':>11} {'tolerance':>11} {'rel rms':>9}")
for k, (name, kind, dt, sh) in enumerate(params):
    init = load(f"{d}/init_{k}.bin", dt, sh).double()
    ours = load(f"{d}/final_{k}.bin", dt, sh).double()
    theirs = ps[k].detach().double()
    diff = (ours - theirs).abs()
    delta_t = theirs - init
    rel_rms = float(((ours - init) - delta_t).norm() / delta_t.norm().clamp(min=1e-30))
    if kind == "muon":  # both run Newton-Schulz in bf16, in different orders
        tol = 0.15 * float(delta_t.abs().max())
        good = float(diff.max()) <= tol and rel_rms < 0.05
    elif dt == "fp32":
        tol = 1e-5 * float(theirs.abs().max()) + 1e-6
        good = float(diff.max()) <= tol
    else:  # torch keeps bf16 moments for bf16 parameters, dmuon fp32 ones
        tol = float(theirs.abs().max()) / 128 + 0.05 * lr_a * steps
        good = float(diff.max()) <= tol
    ok &= good
    print(f"{name:<10} {kind:<5} {dt:<5} {float(diff.max()):11.3e} {tol:11.3e} {rel_rms:9.2e} {'ok' if good else 'FAIL'}")
print("torch comparison:", "PASSED" if ok else "FAILED")
sys.exit(0 if ok else 1)
