#!/usr/bin/env python3
"""An independent reader of a dmuon checkpoint, written from docs/checkpoint-format.md:
it rebuilds every parameter by name from /index and verifies dmuon's CRC-32C of several
datasets (fletcher32 is verified by HDF5 itself on every read). Exit 0 when all checks pass."""
import sys

import h5py
import numpy as np


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["format"] == b"dmuon-checkpoint", f.attrs["format"]
    assert f.attrs["format_version"] == 1
    rows = f["index"][()]
    assert len(rows) == f.attrs["num_params"]
    total = {}
    for row in rows:
        name = row["name"].rstrip(b"\0").decode()
        kind = "muon" if row["kind"] == 0 else "adam"
        dtype = "fp32" if row["dtype"] == 0 else "bf16"
        shape = tuple(int(x) for x in row["shape"][: row["ndim"]])
        assert int(np.prod(shape)) == row["numel"], name
        assert row["offset"] == total.get((kind, dtype), 0), name  # canonical: end to end
        total[(kind, dtype)] = row["offset"] + row["numel"]
        values = f[f"{kind}/{dtype}/param"][row["offset"] : row["offset"] + row["numel"]]
        if dtype == "bf16":
            values = (values.astype(np.uint32) << 16).view(np.float32)
        assert np.all(np.isfinite(values.reshape(shape))), name
    for (kind, dtype), n in total.items():
        assert f[f"{kind}/{dtype}/param"].shape == (n,)
    for name in ["index", "adam/step", "adam/fp32/exp_avg", "muon/fp32/momentum", "muon/bf16/param"]:
        if name in f:
            d = f[name]
            assert crc32c(d[()].tobytes()) == d.attrs["crc32c"], name
print(f"read {len(rows)} parameters from {sys.argv[1]}")
