#!/usr/bin/env python3
"""Turns `ctest --show-only=json-v1 -L gpu` (stdin) into gpu_tests.tsv (stdout):
one line per gpu-labelled test, "name<TAB>skip regex<TAB>shell command", for
scripts/gpu_check.sh to run on a GPU machine where the build tree's absolute
paths do not exist.

    gpu_manifest.py BUILD_DIR REPO_ROOT

Paths under BUILD_DIR become "$DMUON_BIN/...", paths under REPO_ROOT become
"$DMUON_ROOT/...", and mpiexec is taken from PATH; each test keeps its CTest
environment and working directory. A test skips by exiting 77 (CTest's
SKIP_RETURN_CODE here) or, where it has one, by printing its
SKIP_REGULAR_EXPRESSION ("-" when it has none: bash's read would merge two
adjacent tabs)."""
import json
import shlex
import sys


def main():
    build, root = (p.rstrip("/") for p in sys.argv[1:3])

    def rewrite(word):
        if word.endswith("/mpiexec") or word.endswith("/mpirun"):
            return "mpiexec"
        if word.endswith("/cmake") and word.startswith("/"):
            return "cmake"
        # A double-quoted word in which the two trees become variables, also
        # inside options such as -DDIR=<build>/tests/x.
        quoted = "".join("\\" + c if c in '"\\$`' else c for c in word)
        quoted = quoted.replace(build, "${DMUON_BIN}").replace(root, "${DMUON_ROOT}")
        return '"' + quoted + '"'

    for test in json.load(sys.stdin)["tests"]:
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        env = " ".join(shlex.quote(v) for v in props.get("ENVIRONMENT", []))
        cmd = " ".join(rewrite(w) for w in test["command"])
        wd = rewrite(props.get("WORKING_DIRECTORY", build))
        skip = props.get("SKIP_REGULAR_EXPRESSION", [""])
        skip = (skip[0] if isinstance(skip, list) else skip) or "-"
        print(f"{test['name']}\t{skip}\tcd {wd} && env {env} {cmd}")


if __name__ == "__main__":
    main()
