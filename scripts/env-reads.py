#!/usr/bin/env python3
"""Environment reads go through the one parameter registry, `core/debug/src/params.rs` (ARCHITECTURE.md).

Checks the Rust sources of the workspace's crates (tests excluded: they may set and read variables freely):
1. no `std::env::var*` / `getenv` outside the registry;
2. every `NCCL_*` / `COLLSCOPE_*` name written in the code, and every name handed to a lookup (`get("...")`,
   `lookup("...")`, `process_var("...")`), is declared in the registry, unless NOT_READ lists it.
Prints each breach as FILE:LINE and exits 1 if any. Usage: env-reads.py [REPO_ROOT]
"""
import os
import re
import sys

REGISTRY = "core/debug/src/params.rs"
ROOTS = ["core", "kernels", "logreader", "telemetry", "tui", "plugins", "src"]

# Names that appear in the code but are never read from collscope's own environment: NCCL's compile-time limits
# quoted in errors, and variables the diagnosis rules look up in a log's printed environment.
NOT_READ = {
    "NCCL_TOPO_MAX_NODES",
    "NCCL_TOPO_MAX_LINKS",
    "NCCL_GDR_DISABLE",
    "NCCL_NCHANNELS_PER_NET_PEER",
}

RAW_READ = re.compile(r"\benv::(?:var|var_os|vars|vars_os)\s*\(|\bgetenv\s*\(")
PREFIXED = re.compile(r'"((?:NCCL|COLLSCOPE)_[A-Z0-9_]+)"')
LOOKUP = re.compile(r'\b(?:get|lookup|process_var|process_path)\(\s*"([A-Z][A-Z0-9_]*)"')
DECLARED = re.compile(r'\b(?:nccl|own|launcher|system|p)\(\s*(?:Owner::\w+,\s*)?"([A-Z][A-Z0-9_]*)"')


def declared(root):
    with open(os.path.join(root, REGISTRY), encoding="utf-8") as f:
        return set(DECLARED.findall(f.read()))


def is_test_file(rel):
    parts = rel.split(os.sep)
    name = parts[-1]
    return "tests" in parts[:-1] or name in ("tests.rs", "test.rs") or name.endswith("_test.rs") or name.endswith("_tests.rs")


def non_test_text(text):
    """The file up to its `#[cfg(test)]` module (the project keeps a file's unit tests at its end)."""
    m = re.search(r"^\s*#\[cfg\(test\)\]", text, re.M)
    return text[: m.start()] if m else text


def breaches(root):
    names = declared(root)
    out = []
    for top in ROOTS:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [x for x in dirs if x not in ("target", ".git")]
            for fn in sorted(files):
                if not fn.endswith(".rs"):
                    continue
                path = os.path.join(d, fn)
                rel = os.path.relpath(path, root)
                if is_test_file(rel):
                    continue
                with open(path, encoding="utf-8") as f:
                    text = non_test_text(f.read())
                line = lambda pos: text.count("\n", 0, pos) + 1
                if rel != REGISTRY:
                    for m in RAW_READ.finditer(text):
                        out.append(f"{rel}:{line(m.start())}: reads the environment outside {REGISTRY}: {m.group(0)}")
                for rx in (PREFIXED, LOOKUP):
                    for m in rx.finditer(text):
                        name = m.group(1)
                        if name not in names and name not in NOT_READ:
                            out.append(f"{rel}:{line(m.start())}: {name} is not declared in {REGISTRY}")
    return sorted(set(out))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    found = breaches(root)
    for b in found:
        print(b)
    if found:
        print(f"{len(found)} environment read(s) outside the registry: declare the variable in {REGISTRY} and read it "
              "through collscope_debug::env::Env or collscope_debug::params", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
