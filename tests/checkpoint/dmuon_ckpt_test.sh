#!/bin/sh
# dmuon_ckpt_test.sh TOOL CKPT_TOOL MPIEXEC WORK
# The installed checkpoint tool on checkpoints written by ckpt_tool (2 ranks):
# list names the parameters, verify passes a sound file and fails (status 1)
# a damaged copy, diff tells identical from different files, and export
# writes an .npz whose arrays (read here with Python's zipfile, no NumPy)
# have the listed names, shapes and the parameter values' byte count.
set -u
tool=$1 saver=$2 mpiexec=$3 work=$4
fail() { echo "FAILED: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" || exit 1
"$mpiexec" -n 2 "$saver" save "$work/ck" 4 > "$work/save.log" 2>&1 || fail "ckpt_tool save"
a=$work/ck/ckpt_4.h5 b=$work/ck/ckpt_2.h5

"$tool" list "$a" > "$work/list.txt" || fail "list"
grep -q "^param w_in  *muon fp32 8x12  *96 elements" "$work/list.txt" || fail "list does not show w_in"
grep -q "^user_step 4 " "$work/list.txt" || fail "list does not show the step"

"$tool" verify "$a" || fail "verify refused a sound file"
cp "$a" "$work/damaged.h5"
size=$(wc -c < "$work/damaged.h5")
printf 'XXXXXXXX' | dd of="$work/damaged.h5" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
"$tool" verify "$work/damaged.h5"; rc=$?
[ $rc -eq 1 ] || fail "verify of a damaged file returned $rc, not 1"

"$tool" diff "$a" "$a" > /dev/null || fail "diff of a file with itself"
"$tool" diff "$a" "$b" > "$work/diff.txt"; rc=$?
[ $rc -eq 1 ] || fail "diff of two steps returned $rc, not 1"
grep -q "^param w_in param: max |a - b|" "$work/diff.txt" || fail "diff does not name w_in"

"$tool" export "$a" "$work/out.npz" || fail "export"
python3 - "$work/out.npz" "$work/list.txt" <<'PY' || fail "the .npz does not hold the listed arrays"
import ast, re, struct, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
assert z.testzip() is None
names = set(z.namelist())
for line in open(sys.argv[2]):
    m = re.match(r"param (\S+) +(muon|adam) +(fp32|bf16) +(\S+) +(\d+) elements", line)
    if not m:
        continue
    name, kind, shape, numel = m.group(1), m.group(2), tuple(int(x) for x in m.group(4).split("x")), int(m.group(5))
    buffers = ["", ".momentum"] if kind == "muon" else ["", ".exp_avg", ".exp_avg_sq"]
    for suffix in buffers:
        data = z.read(name + suffix + ".npy")
        assert data[:6] == b"\x93NUMPY", name
        hlen = struct.unpack("<H", data[8:10])[0]
        header = ast.literal_eval(data[10:10 + hlen].decode())
        assert header["descr"] == "<f4" and header["shape"] == shape, (name, header)
        assert len(data) - 10 - hlen == 4 * numel, name
    if kind == "adam":
        assert name + ".step.npy" in names, name
assert "dmuon.optimizer_step.npy" in names
PY
echo "dmuon-ckpt: list, verify, diff and export behave"
