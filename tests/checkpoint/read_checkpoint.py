#!/usr/bin/env python3
"""An independent reader of a dmuon checkpoint, written from docs/checkpoint-format.md:
it verifies the seal (and that its extents are the data chunks), rebuilds every parameter by name from /index and verifies
dmuon's CRC-32C of several datasets (fletcher32 is verified by HDF5 itself on every read). Exit 0 when all checks pass."""
import sys

import struct

import h5py
import numpy as np

HYPER = ["adam_lr", "adam_beta1", "adam_beta2", "adam_eps", "adam_weight_decay", "muon_lr", "muon_momentum",
         "muon_nesterov", "muon_ns_steps", "muon_ns_schedule", "muon_scale", "muon_ns_eps", "muon_weight_decay",
         "max_grad_norm", "skip_nonfinite", "cuda_graphs", "collective_timeout_ms", "cuda_step_graph"]


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def value(v):
    if isinstance(v, (float, np.floating)):
        return str(struct.unpack("<Q", struct.pack("<d", float(v)))[0])
    return text(v)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def crc32c_fast(data):
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    crc = 0xFFFFFFFF
    for b in data:
        crc = (crc >> 8) ^ table[(crc ^ b) & 0xFF]
    return crc ^ 0xFFFFFFFF


# The seal in the user block ("Seal" in the format page), checked before h5py opens the file:
# every byte but the data-chunk extents it lists is covered by its CRC-32C (version 2).
with open(sys.argv[1], "rb") as raw:
    blob = raw.read()
assert blob[:16] == b"dmuon-ckpt-seal\n", blob[:16]
assert struct.unpack_from("<I", blob, 60)[0] == crc32c_fast(blob[:60]), "seal header crc"
version, block, length, body_crc, count, list_crc = struct.unpack_from("<IIQIII", blob, 16)
assert version == 2 and block >= 512 and block & (block - 1) == 0, (version, block)
assert length == len(blob) and 64 + 16 * count <= block, (length, len(blob), count, block)
assert blob[44:60] == bytes(16)
assert list_crc == crc32c_fast(blob[64:block]), "seal extent list crc"
assert blob[64 + 16 * count : block] == bytes(block - 64 - 16 * count)
extents, covered, at = [], [], block
for i in range(count):
    off, ln = struct.unpack_from("<QQ", blob, 64 + 16 * i)
    assert ln > 0 and off >= at and off + ln <= length, ("extent", i, off, ln)
    extents.append((off, off + ln))
    covered.append(blob[at:off])
    at = off + ln
covered.append(blob[at:])
assert body_crc == crc32c_fast(b"".join(covered)), "seal body crc"
assert blob[block : block + 8] == b"\x89HDF\r\n\x1a\n"
assert crc32c_fast(b"123456789") == crc32c(b"123456789") == 0xE3069283

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
    lines = [f"{k}={text(f.attrs[k])}" for k in ["format", "format_version", "library_version", "user_step",
                                                  "optimizer_step", "world_size", "model_hash", "num_params",
                                                  "kernel_choices"]]
    lines += [f"hyperparameters/{k}={value(f['hyperparameters'].attrs[k])}" for k in HYPER]
    user = f["user_attributes"].attrs
    lines += [f"user_attributes/{k}={text(user[k])}" for k in sorted(user.keys(), key=lambda k: k.encode())]
    meta = "".join(line + "\n" for line in lines).encode()
    assert crc32c(meta) == f.attrs["metadata_crc32c"], "metadata_crc32c"
    # The extents are the data chunks of the buffer datasets, each chunk whole (data + fletcher32).
    chunks = []
    for kind, bufs in [("muon", ["param", "momentum", "master"]), ("adam", ["param", "exp_avg", "exp_avg_sq", "master"])]:
        for dtype in ["fp32", "bf16"]:
            for b in bufs:
                name = f"{kind}/{dtype}/{b}"
                if name in f and hasattr(f[name].id, "get_num_chunks"):
                    d = f[name].id
                    for i in range(d.get_num_chunks()):
                        info = d.get_chunk_info(i)
                        chunks.append((block + info.byte_offset, block + info.byte_offset + info.size))
    if chunks:  # h5py >= 3 with HDF5 >= 1.10.5
        merged = []
        for lo, hi in sorted(chunks):
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        assert merged == extents, (merged[:4], extents[:4])
    for name in ["index", "adam/step", "adam/fp32/exp_avg", "muon/fp32/momentum", "muon/bf16/param"]:
        if name in f:
            d = f[name]
            assert crc32c(d[()].tobytes()) == d.attrs["crc32c"], name
print(f"read {len(rows)} parameters from {sys.argv[1]}")
