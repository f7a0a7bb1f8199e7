#!/usr/bin/env python3
"""The workspace's crate dependency rules, checked against `cargo metadata --format-version 1 --no-deps`.

Dependencies point one way, from the binary down to the contract (ARCHITECTURE.md):

    collscope (binary) -> tui -> logreader -> debug -> model
                                         -> diagnose ---^
                       -> telemetry -> diagnose
                       -> runtime -> nccl -> debug
                                  -> kernels
                                  -> profiler-abi <- profiler

Each crate may depend only on the crates ALLOWED lists for it (dev-dependencies also on DEV_ALLOWED), and
some crates must not reach others even indirectly (NEVER). A crate not in ALLOWED is an error: a new crate
must be given its place. Prints each breach and exits 1 if any. Usage: crate-deps.py [REPO_ROOT]
"""
import json
import os
import subprocess
import sys

ALLOWED = {
    "collscope-model": set(),
    "collscope-kernels": set(),
    "collscope-testkit": set(),
    # NCCL's profiler ABI: both sides of it (the plugin, the runtime that loads one) share these types.
    "collscope-profiler-abi": set(),
    "collscope-debug": {"collscope-model"},
    "collscope-nccl": {"collscope-model", "collscope-debug"},
    "collscope-runtime": {
        "collscope-model",
        "collscope-debug",
        "collscope-nccl",
        "collscope-kernels",
        "collscope-profiler-abi",
    },
    # The diagnosis rules read the model and its evidence only: the same rules for a log, a live job, a model.
    "collscope-diagnose": {"collscope-model"},
    "collscope-logreader": {"collscope-model", "collscope-debug", "collscope-diagnose"},
    # The job-level rules run where `/api/v1/job` merges the ranks.
    "collscope-telemetry": {"collscope-model", "collscope-debug", "collscope-diagnose"},
    "collscope-tui": {"collscope-model", "collscope-debug", "collscope-logreader"},
    # The NCCL profiler plugin is loaded into other programs' processes (NCCL's): never the runtime. It reads NCCL's
    # debug file with the log reader (the rings, trees and connections).
    "collscope-profiler": {
        "collscope-model",
        "collscope-debug",
        "collscope-logreader",
        "collscope-telemetry",
        "collscope-profiler-abi",
    },
    "collscope": {
        "collscope-model",
        "collscope-debug",
        "collscope-nccl",
        "collscope-runtime",
        "collscope-kernels",
        "collscope-logreader",
        "collscope-diagnose",
        "collscope-telemetry",
        "collscope-tui",
    },
}

# Tests and benches may also use these: the shared test helpers, and telemetry's runtime tests.
DEV_ALLOWED = {name: {"collscope-testkit"} for name in ALLOWED}
DEV_ALLOWED["collscope-telemetry"] |= {"collscope-runtime"}
# The end-to-end tests and the overhead bench load the profiler plugin's cdylib into collscope's runtime.
DEV_ALLOWED["collscope"] |= {"collscope-profiler"}

# Never, not even through another crate (normal dependencies).
NEVER = {
    "collscope-model": {"collscope-debug", "collscope-nccl", "collscope-runtime"},
    "collscope-diagnose": {"collscope-debug", "collscope-nccl", "collscope-runtime", "collscope-logreader"},
    "collscope-logreader": {"collscope-runtime"},
    "collscope-tui": {"collscope-runtime", "collscope-nccl"},
    "collscope-telemetry": {"collscope-runtime"},
    "collscope-nccl": {"collscope-runtime"},
    "collscope-profiler": {"collscope-runtime", "collscope-nccl"},
}


def breaches(metadata):
    """Every rule the workspace in `metadata` (cargo metadata's JSON, as a dict) breaks, as sentences."""
    members = {p["name"]: p for p in metadata["packages"]}
    out = []
    normal = {}
    for name, pkg in sorted(members.items()):
        if name not in ALLOWED:
            out.append(f"{name} is a workspace crate with no place in the rules (scripts/crate-deps.py ALLOWED)")
            continue
        normal[name] = set()
        for dep in pkg["dependencies"]:
            if dep["name"] not in members:
                continue
            dev = dep.get("kind") == "dev"
            allowed = ALLOWED[name] | (DEV_ALLOWED[name] if dev else set())
            if dep["name"] not in allowed:
                what = "dev-dependency" if dev else "dependency"
                out.append(f"{name} has a {what} on {dep['name']}, which it may not use")
            if not dev:
                normal[name].add(dep["name"])
    for name, forbidden in sorted(NEVER.items()):
        reach, todo = set(), list(normal.get(name, ()))
        while todo:
            d = todo.pop()
            if d not in reach:
                reach.add(d)
                todo.extend(normal.get(d, ()))
        for bad in sorted(reach & forbidden):
            out.append(f"{name} depends on {bad} (directly or through another crate), which it must never do")
    return out


def main(argv):
    repo = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    text = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = breaches(json.loads(text))
    for b in found:
        print(b)
    print(f"{len(found)} crate dependency rule(s) broken")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
