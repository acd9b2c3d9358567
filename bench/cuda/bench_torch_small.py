#!/usr/bin/env python3
"""torch on bench_cuda_small's sets (mixes.hpp's small_mlp and tiny_adam; keep
them in step): torch.optim.Muon on the hidden matrices + torch.optim.AdamW
(fused) on the rest, and fused AdamW over 1000 tiny tensors; eager, and
replayed from a CUDA graph where torch allows the capture. Prints RESULT lines
in ms per step (steps back to back, so the slower of host and device)."""
import torch


def small_mlp(n_in, width, hidden_layers, n_out):
    dims = [n_in] + [width] * hidden_layers + [n_out]
    muon, adam = [], []
    for l in range(len(dims) - 1):
        hidden = 0 < l < len(dims) - 2
        (muon if hidden else adam).append((dims[l + 1], dims[l]))
        adam.append((dims[l + 1],))
    return muon, adam


def tiny_adam():
    return [(64 << (i % 7),) for i in range(1000)]


def params(shapes, dtype=torch.float32):
    ps = [torch.randn(s, device="cuda", dtype=dtype, requires_grad=True) for s in shapes]
    for p in ps:
        p.grad = torch.randn_like(p) * 0.01
    return ps


def timed(fn, iters=200):
    for _ in range(5):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / iters


def report(tag, make_step):
    """Eager, then a CUDA graph of the step if torch can capture it."""
    step = make_step(False)
    print(f"RESULT {tag}_eager_ms {timed(step):.6g}", flush=True)
    try:
        step = make_step(True)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        print(f"RESULT {tag}_graph_ms {timed(g.replay):.6g}", flush=True)
    except Exception as e:  # noqa: BLE001 - any refusal to capture is reported, not fatal
        print(f"NOTE {tag}: no graph capture ({type(e).__name__}: {str(e).splitlines()[0][:120]})", flush=True)


for name, (n_in, width, layers, n_out) in (("demo", (9, 64, 3, 1)), ("mlp256", (9, 256, 4, 1))):
    muon_shapes, adam_shapes = small_mlp(n_in, width, layers, n_out)

    def make(capturable, muon_shapes=muon_shapes, adam_shapes=adam_shapes):
        mp, ap = params(muon_shapes), params(adam_shapes)
        muon = torch.optim.Muon(mp, lr=0.02, weight_decay=0.0)
        adam = torch.optim.AdamW(ap, lr=1e-3, fused=True, capturable=capturable)

        def step():
            muon.step()
            adam.step()
        return step
    report(f"torch_small_{name}", make)

for dtype, d in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
    def make(capturable, dtype=dtype):
        opt = torch.optim.AdamW(params(tiny_adam(), dtype), lr=1e-3, fused=True, capturable=capturable)
        return opt.step
    report(f"torch_tiny_adam_{d}", make)
