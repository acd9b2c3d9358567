#!/usr/bin/env python3
"""Turns `ctest --show-only=json-v1 -L gpu` (stdin) into gpu_tests.tsv (stdout):
one line per gpu-labelled test, "name<TAB>shell command", for scripts/gpu_check.sh
to run on a GPU machine where the build tree's absolute paths do not exist.

    gpu_manifest.py BUILD_DIR REPO_ROOT

Paths under BUILD_DIR become "$DMUON_BIN/...", paths under REPO_ROOT become
"$DMUON_ROOT/...", and mpiexec is taken from PATH; each test keeps its CTest
environment and working directory. The skip code is CTest's 77 for all."""
import json
import shlex
import sys


def main():
    build, root = (p.rstrip("/") for p in sys.argv[1:3])

    def rewrite(word):
        if word.startswith(build + "/") or word == build:
            return '"$DMUON_BIN"' + shlex.quote(word[len(build):]) if word != build else '"$DMUON_BIN"'
        if word.startswith(root + "/"):
            return '"$DMUON_ROOT"/' + shlex.quote(word[len(root) + 1:])
        if word.endswith("/mpiexec") or word.endswith("/mpirun"):
            return "mpiexec"
        return shlex.quote(word)

    for test in json.load(sys.stdin)["tests"]:
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        env = " ".join(shlex.quote(v) for v in props.get("ENVIRONMENT", []))
        cmd = " ".join(rewrite(w) for w in test["command"])
        wd = rewrite(props.get("WORKING_DIRECTORY", build))
        print(f"{test['name']}\tcd {wd} && env {env} {cmd}")


if __name__ == "__main__":
    main()
