#!/usr/bin/env python3
"""Import circles between the .rs files of each crate of the workspace.

A file depends on another when it names a module of that file by path: `use crate::a::b`, `use super::x`,
`use self::x`, a child module's name (`use child::X`, `child::f()`), or such a path written out in code
(`crate::a::b::f()`). A path stands for the file of its longest prefix that is a module, so `crate::a::X` (an item
of `a`, or one `a` re-exports) is a dependency on `a`'s file. `mod x;` only declares x, and a module's references
down into its own submodules (`pub use x::X`, `x::f()` in x's parent) are not counted: a parent is made of its
children. x's `use super::Y` is a dependency of x on its parent.

Folders are checked the same way: the folders of a crate's src are the nodes, and a folder depends on another
when a file in it (or in a folder under it) depends on a file in the other (or under it); a folder and the folders
under it are one part, so references between them do not count (a folder's circles are the file check's). The
files directly in src belong to no folder.

Prints each circle (strongly connected component of more than one file, or of more than one folder) with the
references that close it, and exits 1 if there is any. Usage: import-cycles.py [REPO_ROOT]
"""
import os
import re
import sys

SKIP_DIRS = {"target", ".git", "node_modules", "fuzz"}

_STRIP = re.compile(
    r"""
    (?P<line>//[^\n]*)
  | (?P<block>/\*)
  | (?P<raw>\br?b?r(?P<hashes>\#*)")
  | (?P<str>b?"(?:\\.|[^"\\])*")
  | (?P<chr>b?'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])')
    """,
    re.VERBOSE | re.DOTALL,
)


def strip(src):
    """The source with comments, strings and character literals blanked (newlines kept)."""
    out = []
    i = 0
    blank = lambda s: re.sub(r"[^\n]", " ", s)  # noqa: E731
    while True:
        m = _STRIP.search(src, i)
        if not m:
            out.append(src[i:])
            return "".join(out)
        out.append(src[i : m.start()])
        if m.group("block"):
            depth, j = 1, m.end()
            while depth and j < len(src):
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(src[m.start() : j]))
            i = j
        elif m.group("raw"):
            end = src.find('"' + m.group("hashes"), m.end())
            j = len(src) if end < 0 else end + 1 + len(m.group("hashes"))
            out.append(blank(src[m.start() : j]))
            i = j
        else:
            out.append(blank(m.group(0)))
            i = m.end()


def use_paths(tree):
    """The paths a use tree names: `a::{b, c::d, self}` -> [a::b, a::c::d, a]."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))

    def expand(prefix, t):
        paths, depth, start, parts = [], 0, 0, []
        for k, ch in enumerate(t):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(t[start:k])
                start = k + 1
        parts.append(t[start:])
        for p in filter(None, parts):
            if "{" in p:
                head, rest = p.split("{", 1)
                head = [s for s in head.split("::") if s]
                paths += expand(prefix + head, rest[: rest.rindex("}")])
            else:
                segs = [s for s in p.split("::") if s]
                paths.append(prefix if segs == ["self"] else prefix + segs)
        return paths

    return expand([], tree)


_TOKEN = re.compile(
    r"""
    (?P<open>\{) | (?P<close>\})
  | \bmod\s+(?P<mod>\w+)\s*(?P<modend>[;{])
  | (?<![\w$])\buse\s+(?P<use>[^;]+);
  | (?<![\w$:])(?P<path>(?:crate|super|self|[a-z_][a-z0-9_]*)(?:\s*::\s*(?:[A-Za-z_]\w*|\*))+)
    """,
    re.VERBOSE,
)


class Crate:
    """The module tree of one crate root, read by following `mod x;` from the root file."""

    def __init__(self, root_file):
        self.root = root_file
        self.files = {}  # module path (tuple) -> file
        self.refs = []  # (file, line, module path it is in, path as written)
        self._read(root_file, (), os.path.dirname(root_file))

    def _read(self, path, modpath, child_dir):
        self.files[modpath] = path
        with open(path, encoding="utf-8") as f:
            text = strip(f.read())
        stack = [(modpath, child_dir, None)]  # (module, directory of its `mod x;` files, depth it closes at)
        depth = 0
        for m in _TOKEN.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            cur, cdir, _ = stack[-1]
            if m.group("open"):
                depth += 1
            elif m.group("close"):
                depth -= 1
                if stack[-1][2] == depth:
                    stack.pop()
            elif m.group("mod"):
                name = m.group("mod")
                if m.group("modend") == "{":
                    depth += 1
                    stack.append((cur + (name,), os.path.join(cdir, name), depth - 1))
                else:
                    for cand in (os.path.join(cdir, name + ".rs"), os.path.join(cdir, name, "mod.rs")):
                        if os.path.exists(cand):
                            sub = os.path.join(cdir, name) if cand.endswith(name + ".rs") else os.path.dirname(cand)
                            self._read(cand, cur + (name,), sub)
                            break
            elif m.group("use"):
                for p in use_paths(m.group("use")):
                    self.refs.append((path, line, cur, p))
            elif m.group("path"):
                segs = [s.strip() for s in m.group("path").split("::")]
                self.refs.append((path, line, cur, segs))

    def resolve(self, cur, segs):
        """The file a path names from module `cur`, or None if it leaves the crate or names no module."""
        if not segs:
            return None
        if segs[0] == "crate":
            base, rest = (), segs[1:]
        elif segs[0] in ("super", "self"):
            base, rest = cur, segs
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    if not base:
                        return None
                    base = base[:-1]
                rest = rest[1:]
        elif cur + (segs[0],) in self.files or any(k[: len(cur) + 1] == cur + (segs[0],) for k in self.files):
            base, rest = cur, segs
        else:
            return None
        full = base + tuple(s for s in rest if s != "*")
        for n in range(len(full), -1, -1):
            if full[:n] in self.files:
                return self.files[full[:n]]
        return None

    def edges(self):
        """{file: {file it depends on: [(line, path as written)]}}, leaving out a module's references down into
        its own submodules: a parent is made of its children (it re-exports them, dispatches to them) and they
        may use what it defines."""
        module = {f: m for m, f in self.files.items()}
        out = {f: {} for f in self.files.values()}
        for f, line, cur, segs in self.refs:
            to = self.resolve(cur, segs)
            if to and to != f and module[to][: len(module[f])] != module[f]:
                out[f].setdefault(to, []).append((line, "::".join(segs)))
        return out


def cycles(edges):
    """Strongly connected components of more than one node (Tarjan), each sorted, in sorted order."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        work = [(v, iter(sorted(edges.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(comps)


def crate_roots(repo):
    for dirpath, dirnames, filenames in os.walk(repo):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        if os.path.basename(dirpath) == "src" and os.path.exists(os.path.join(os.path.dirname(dirpath), "Cargo.toml")):
            for root in ("lib.rs", "main.rs"):
                if root in filenames:
                    yield os.path.join(dirpath, root)


def folder_of(path, src):
    """The folder (relative to src, as a tuple) a module file is part of: a module's own folder when it has one
    (`m/mod.rs`, or `m.rs` beside `m/`), else the folder the file lies in; () for a file of src itself."""
    d, name = os.path.split(path)
    own = os.path.join(d, os.path.splitext(name)[0])
    if name not in ("mod.rs", "lib.rs", "main.rs") and os.path.isdir(own):
        d = own
    rel = os.path.relpath(d, src)
    return () if rel == "." else tuple(rel.split(os.sep))


def folder_edges(edges, src):
    """{folder: {folder it depends on: [(file, line, path as written)]}} from the file edges: each file edge
    counts for every folder that holds its source and every folder that holds its target, but not between a
    folder and one inside it (a folder is made of its subfolders)."""
    out = {}
    for f, targets in edges.items():
        a = folder_of(f, src)
        for to, refs in targets.items():
            b = folder_of(to, src)
            for i in range(1, len(a) + 1):
                for j in range(1, len(b) + 1):
                    x, y = a[:i], b[:j]
                    if x[: len(y)] == y or y[: len(x)] == x:
                        continue
                    out.setdefault(x, {}).setdefault(y, []).extend((f, line, path) for line, path in refs)
    return out


def find_folder_cycles(repo):
    """[(crate root, [folders in one circle], folder edges)] for every folder circle in every crate under `repo`."""
    found = []
    for root in crate_roots(repo):
        src = os.path.dirname(root)
        edges = folder_edges(Crate(root).edges(), src)
        for comp in cycles({f: set(t) for f, t in edges.items()}):
            found.append((root, comp, edges))
    return found


def find_cycles(repo):
    """[(crate root, [files in one circle], edges)] for every circle in every crate under `repo`."""
    found = []
    for root in crate_roots(repo):
        crate = Crate(root)
        edges = crate.edges()
        for comp in cycles({f: set(t) for f, t in edges.items()}):
            found.append((root, comp, edges))
    return found


def main(argv):
    repo = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    rel = lambda p: os.path.relpath(p, repo)  # noqa: E731
    found = find_cycles(repo)
    for root, comp, edges in found:
        print(f"circle in {rel(root)}: " + " <-> ".join(rel(f) for f in comp))
        for f in comp:
            for to in comp:
                for line, path in edges[f].get(to, [])[:3]:
                    print(f"  {rel(f)}:{line} -> {rel(to)} ({path})")
    folders = find_folder_cycles(repo)
    for root, comp, edges in folders:
        src = os.path.dirname(root)
        name = lambda d: rel(os.path.join(src, *d)) + "/"  # noqa: E731
        print(f"folder circle in {rel(root)}: " + " <-> ".join(name(d) for d in comp))
        for d in comp:
            for to in comp:
                for f, line, path in edges[d].get(to, [])[:3]:
                    print(f"  {name(d)} -> {name(to)}: {rel(f)}:{line} ({path})")
    print(f"{len(found)} import circle(s), {len(folders)} folder circle(s)")
    return 1 if found or folders else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
