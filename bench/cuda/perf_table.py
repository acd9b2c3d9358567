#!/usr/bin/env python3
"""The table of bench/cuda/run_perf_benches.sh: Gram Newton-Schulz against
the plain iteration and torch (from bench_cuda_ns / bench_torch_ns results,
as scripts/gpu_check.sh gathers them), the small models' step (device and
host time per step, against the floor and torch), Adam over 1000 tiny
tensors against torch's fused AdamW, and the device cost of one dependent
graph node (bench_cuda_graph_chain); each row with its goal and whether it was
met. Arguments: one or more results files of RESULT lines."""
import sys

r = {}
for path in sys.argv[1:]:
    for line in open(path):
        f = line.split()
        if len(f) >= 3 and f[0] == "RESULT":
            r[f[1]] = float(f[2])
rows = []


def row(what, ours, theirs, ratio, goal, ok):
    rows.append((what, ours, theirs, ratio, goal, "" if ok is None else ("yes" if ok else "NO")))


def best(*keys):
    v = [r[k] for k in keys if k in r]
    return min(v) if v else None


for n in (1, 12):
    for shape in ("768x768", "768x3072", "2048x2048", "4096x4096", "4096x16384"):
        t = f"ns_{shape}_n{n}"
        g, p = r.get(f"{t}_gram_ms"), r.get(f"{t}_plain_ms")
        torch_best = best(f"torch_{t}_eager_ms", f"torch_{t}_graph_ms")
        if g and p:
            fr = r.get(f"{t}_gram_flop_ratio")
            row(f"NS {shape} x{n} Gram vs plain, quintic (graph; Gram flops {fr:.2f} of plain)", f"{g:.3f} ms",
                f"{p:.3f} ms", f"{p / g:.2f}x", "faster where chosen", p / g > 1)
            gp, pp = r.get(f"{t}_gram_pe_ms"), r.get(f"{t}_plain_pe_ms")
            if gp and pp:
                row(f"NS {shape} x{n} Gram vs plain, Polar Express", f"{gp:.3f} ms", f"{pp:.3f} ms", f"{pp / gp:.2f}x",
                    "faster where chosen", pp / gp > 1)
            if torch_best:
                row(f"NS {shape} x{n} Gram vs torch (best of eager, graph)", f"{g:.3f} ms", f"{torch_best:.3f} ms",
                    f"{torch_best / g:.2f}x", ">= 1.3x", torch_best / g >= 1.3)
        gb, go = r.get(f"{t}_gram_beside_ms"), r.get(f"{t}_gram_one_order_ms")
        if gb and go:
            row(f"NS {shape} x{n} Gram, Q beside R vs one order (graph)", f"{gb:.4f} ms", f"{go:.4f} ms",
                f"{go / gb:.3f}x", "information", None)
        gd, gn = r.get(f"{t}_gram_defer_ms"), r.get(f"{t}_gram_pass_ms")
        if gd and gn:
            row(f"NS {shape} x{n} Gram, norm and update in the products vs passes (graph)", f"{gd:.4f} ms",
                f"{gn:.4f} ms", f"{gn / gd:.3f}x", "information", None)
        gf, gu = r.get(f"{t}_gram_fused_update_ms"), r.get(f"{t}_gram_update_pass_ms")
        if gf and gu:
            row(f"NS {shape} x{n} Gram, update in the last product vs its pass (graph)", f"{gf:.4f} ms",
                f"{gu:.4f} ms", f"{gu / gf:.3f}x", "information", None)
        c = r.get(f"{t}_choice_blocks")
        if c is not None and g:
            row(f"NS {shape} x{n} tuned choice", {0: "plain", 1: "gram"}.get(int(c), f"sym{int(c)}"), "", "", "", None)

for m in ("demo", "mlp256"):
    fl = r.get(f"small_{m}_floor_us")
    for mode in ("eager", "graph"):
        t = f"small_{m}_{mode}"
        d, h, ms = r.get(f"{t}_device_us"), r.get(f"{t}_host_us"), r.get(f"{t}_ms")
        if d is None:
            continue
        goal = mode == "graph"
        row(f"{m} step, {mode}: device time per step (floor: copy of its bytes)", f"{d:.1f} us",
            f"{fl:.1f} us" if fl else "", f"{d / fl:.1f}x floor" if fl else "", "<= 30 us" if goal else "",
            d <= 30 if goal else None)
        if h is not None:
            row(f"{m} step, {mode}: host time per dmuon_step", f"{h:.1f} us", "", "", "<= 30 us" if goal else "",
                h <= 30 if goal else None)
        gemm = r.get(f"small_{m}_gemm_graph_device_us")
        if goal and gemm:
            row(f"{m} step, graph: device time, fused small-matrix Newton-Schulz vs the cuBLAS GEMMs",
                f"{d:.1f} us", f"{gemm:.1f} us", f"{gemm / d:.2f}x", "", None)
        tb = best(f"torch_small_{m}_eager_ms", f"torch_small_{m}_graph_ms")
        if ms and tb:
            row(f"{m} step, {mode}, back to back vs torch Muon + fused AdamW (best of eager, graph)",
                f"{ms * 1e3:.1f} us", f"{tb * 1e3:.1f} us", f"{tb / ms:.2f}x", "", None)

# bench_cuda_graph_chain: the device cost of one more dependent node in a graph
# (a step of many small kernels in a row cannot be faster than its nodes' sum).
for v, what in (("empty_one", "empty kernel, one block"), ("empty_grid", "empty kernel, 2 blocks per SM"),
                ("empty_grid_pdl", "empty kernel, 2 blocks per SM, programmatic dependent launch"),
                ("gemm256", "cuBLAS bf16 256 x 256 x 256 x3 product"),
                ("gemm256_pdl", "the same products, programmatic edges")):
    n = r.get(f"chain_{v}_node_us")
    if n is not None:
        row(f"graph chain: device time per dependent node, {what}", f"{n:.2f} us",
            f"replay of {int(r.get(f'chain_{v}_nodes', 0))}: {r.get(f'chain_{v}_replay_us', 0):.1f} us", "", "", None)
# Programmatic edges: the default (into dmuon's kernels) beside off and into
# cuBLAS's products too (scripts/gpu_check.sh's pdl0_ and pdl2_ runs).
for key, what, unit in (("small_mlp256_graph_device_us", "4x256 MLP step graph, device", "us"),
                        ("small_demo_graph_device_us", "demo MLP step graph, device", "us"),
                        ("ns_768x3072_n1_graph_ms", "NS 768x3072 x1 graph", "ms")):
    on, off, more = r.get(key), r.get(f"pdl0_{key}"), r.get(f"pdl2_{key}")
    if on and off:
        fmt = "{:.1f} " + unit if unit == "us" else "{:.4f} " + unit
        row(f"programmatic edges: {what}, default vs off" + (f" (into cuBLAS too: {fmt.format(more)}, "
            f"{off / more:.3f}x)" if more else ""), fmt.format(on), fmt.format(off), f"{off / on:.3f}x", "", None)
same = r.get("chain_gemm256_pdl_same")
if same is not None:
    row("graph chain: products with programmatic edges give the same bits as without", "yes" if same else "NO",
        "", "", "", None)

for d in ("fp32", "bf16"):
    ours = best(f"tiny_adam_{d}_eager_ms", f"tiny_adam_{d}_graph_ms")
    theirs = best(f"torch_tiny_adam_{d}_eager_ms", f"torch_tiny_adam_{d}_graph_ms")
    if ours and theirs:
        row(f"Adam, 1000 tensors of 64..4096 {d} vs torch fused AdamW (best of eager, graph each)",
            f"{ours * 1e3:.1f} us", f"{theirs * 1e3:.1f} us", f"{theirs / ours:.1f}x", ">= 10x", theirs / ours >= 10)
    dev = r.get(f"tiny_adam_{d}_graph_device_us")
    if dev is not None:
        row(f"Adam, 1000 tiny tensors {d}: device / host per step (step graph)", f"{dev:.1f} us",
            f"host {r.get(f'tiny_adam_{d}_graph_host_us', 0):.1f} us", "", "", None)

hdr = ("what", "dmuon", "reference", "ratio", "goal", "met")
w = [max(len(str(x[i])) for x in rows + [hdr]) for i in range(6)]
print("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
for x in rows:
    print("  ".join(str(v).ljust(w[i]) for i, v in enumerate(x)))
