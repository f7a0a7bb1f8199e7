"""Tests of scripts/import-cycles.py on small crates written to a temporary directory."""
import contextlib
import importlib.util
import io
import os
import tempfile
import unittest

_spec = importlib.util.spec_from_file_location(
    "import_cycles", os.path.join(os.path.dirname(__file__), "import-cycles.py")
)
ic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ic)


class ImportCycles(unittest.TestCase):
    def crate(self, files):
        """A crate `c` under a fresh directory with `files` ({path under c/src: text}); returns the repo root."""
        repo = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(repo))
        os.makedirs(os.path.join(repo, "c", "src"))
        with open(os.path.join(repo, "c", "Cargo.toml"), "w") as f:
            f.write('[package]\nname = "c"\n')
        for path, text in files.items():
            full = os.path.join(repo, "c", "src", path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)
        return repo

    def circles(self, files):
        repo = self.crate(files)
        return [[os.path.relpath(f, os.path.join(repo, "c", "src")) for f in comp] for _, comp, _ in ic.find_cycles(repo)]

    def test_siblings_that_use_each_other_are_a_circle(self):
        files = {
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use super::b::B;\npub struct A;\n",
            "b.rs": "use crate::a::A;\npub struct B;\n",
        }
        self.assertEqual(self.circles(files), [["a.rs", "b.rs"]])

    def test_a_path_written_in_code_counts_and_one_in_a_comment_or_string_does_not(self):
        code = {
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "pub fn f() { crate::b::g() }\n",
            "b.rs": "pub fn g() { super::a::f(); }\n",
        }
        self.assertEqual(self.circles(code), [["a.rs", "b.rs"]])
        quoted = dict(code, **{"b.rs": '// super::a::f()\npub fn g() { let _ = "crate::a::f"; /* a::f */ }\n'})
        self.assertEqual(self.circles(quoted), [])

    def test_a_parent_using_its_children_is_no_circle(self):
        files = {
            "lib.rs": "mod m;\n",
            "m/mod.rs": "mod x;\npub use x::X;\npub enum Error {}\npub fn run() { x::go() }\n",
            "m/x.rs": "use super::Error;\npub struct X;\npub fn go() {}\n",
        }
        self.assertEqual(self.circles(files), [])

    def test_a_circle_through_a_parent_and_a_sibling_of_it_is_found(self):
        files = {
            "lib.rs": "mod m;\nmod n;\n",
            "m/mod.rs": "pub mod x;\npub use crate::n::N;\npub struct M;\n",
            "m/x.rs": "use super::M;\npub struct X;\n",
            "n.rs": "use crate::m::x::X;\npub struct N;\n",
        }
        self.assertEqual(self.circles(files), [["m/mod.rs", "m/x.rs", "n.rs"]])

    def test_use_trees_and_inline_test_modules(self):
        files = {
            "lib.rs": "mod a;\nmod b;\nmod c;\n",
            "a.rs": "use crate::{b::{self, B}, c::C as Sea};\n",
            "b.rs": "pub struct B;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::a;\n}\n",
            "c.rs": "pub struct C;\nfn f() { let c = '{'; }\n",
        }
        self.assertEqual(self.circles(files), [["a.rs", "b.rs"]])

    def folder_circles(self, files):
        repo = self.crate(files)
        return [["/".join(d) for d in comp] for _, comp, _ in ic.find_folder_cycles(repo)]

    def test_folders_that_use_each_other_through_different_files_are_a_circle(self):
        # No file circle: p/a.rs -> d/x.rs -> t/y.rs -> p/b.rs, but the folders p -> d -> t -> p close one.
        files = {
            "lib.rs": "mod p;\nmod d;\nmod t;\n",
            "p/mod.rs": "mod a;\nmod b;\n",
            "p/a.rs": "use crate::d::x::X;\n",
            "p/b.rs": "pub struct B;\n",
            "d/mod.rs": "pub mod x;\n",
            "d/x.rs": "use crate::t::y::Y;\npub struct X;\n",
            "t/mod.rs": "pub mod y;\n",
            "t/y.rs": "use crate::p::b::B;\npub struct Y;\n",
        }
        self.assertEqual(self.circles(files), [])
        self.assertEqual(self.folder_circles(files), [["d", "p", "t"]])
        # One of them through the other: the circle is gone.
        files["t/y.rs"] = "pub struct Y;\n"
        self.assertEqual(self.folder_circles(files), [])

    def test_a_folder_circle_is_printed_with_its_references(self):
        files = {
            "lib.rs": "mod p;\nmod q;\n",
            "p/mod.rs": "mod a;\n",
            "p/a.rs": "use crate::q::Q;\n",
            "q.rs": "mod z;\n",
            "q/z.rs": "use crate::p::a::A;\n",
        }
        repo = self.crate(files)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(ic.main(["import-cycles.py", repo]), 1)
        self.assertIn("folder circle in c/src/lib.rs: c/src/p/ <-> c/src/q/", out.getvalue())
        self.assertIn("c/src/p/ -> c/src/q/: c/src/p/a.rs:1 (crate::q::Q)", out.getvalue())
        self.assertIn("1 folder circle(s)", out.getvalue())

    def test_a_folder_using_its_subfolders_is_no_circle(self):
        files = {
            "lib.rs": "mod t;\n",
            "t/mod.rs": "mod c;\nmod net;\npub enum E {}\n",
            "t/c.rs": "use super::net::p::P;\npub struct C;\n",
            "t/net/mod.rs": "pub mod p;\n",
            "t/net/p.rs": "use crate::t::E;\npub struct P;\n",
        }
        self.assertEqual(self.folder_circles(files), [])

    def test_main_prints_each_circle_and_exits_1_or_0(self):
        repo = self.crate({"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::B;\n", "b.rs": "use crate::a::A;\n"})
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(ic.main(["import-cycles.py", repo]), 1)
        self.assertIn("circle in c/src/lib.rs: c/src/a.rs <-> c/src/b.rs", out.getvalue())
        self.assertIn("c/src/a.rs:1 -> c/src/b.rs (crate::b::B)", out.getvalue())
        with open(os.path.join(repo, "c", "src", "b.rs"), "w") as f:
            f.write("pub struct B;\n")
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(ic.main(["import-cycles.py", repo]), 0)

    def test_this_repository_has_no_circle(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = ic.main(["import-cycles.py", os.path.join(os.path.dirname(__file__), "..")])
        self.assertEqual(rc, 0, out.getvalue())


if __name__ == "__main__":
    unittest.main()
