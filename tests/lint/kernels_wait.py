#!/usr/bin/env python3
"""Every kernel of the library waits first for the kernels it depends on.

The replayed graphs make an edge into any kernel of namespace dmuon
programmatic on sm_90 and later (src/backends/cuda/cuda_programmatic_edges.cpp),
so the kernel may start while its predecessor still writes its input. That is
safe only if its body starts with await_prerequisite_kernels() (cuda_pdl.cuh);
a new kernel without it would read too early, silently, on Hopper only.

Usage: kernels_wait.py SOURCE_ROOT. Prints each kernel that does not start so
and exits 1; exits 1 too when it finds no kernel at all.
"""
import pathlib
import re
import sys

WAIT = "await_prerequisite_kernels();"


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: " " * len(m.group(0)), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def body_start(text, at):
    """Index just after the opening brace of the function defined at `at`,
    or None for a declaration (a semicolon first)."""
    depth = 0
    for i in range(at, len(text)):
        c = text[i]
        if c in "(<":
            depth += 1
        elif c in ")>":
            depth -= 1
        elif depth == 0 and c == ";":
            return None
        elif depth == 0 and c == "{":
            return i + 1
    return None


def main(root):
    kernels, late = 0, []
    for path in sorted(pathlib.Path(root, "src").rglob("*")):
        if path.suffix not in (".cu", ".cuh"):
            continue
        text = strip_comments(path.read_text())
        for m in re.finditer(r"\b__global__\b", text):
            start = body_start(text, m.end())
            if start is None:
                continue
            kernels += 1
            if not text[start:].lstrip().startswith(WAIT):
                line = text.count("\n", 0, m.start()) + 1
                late.append(f"{path.relative_to(root)}:{line}: the kernel does not start with {WAIT}")
    for entry in late:
        print(entry)
    if kernels == 0:
        print("no kernel found under src/: is SOURCE_ROOT the top of the tree?")
        return 1
    print(f"{kernels} kernels, {len(late)} without the wait first")
    return 1 if late else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
