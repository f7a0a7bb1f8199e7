"""Tests of scripts/crate-deps.py: synthetic `cargo metadata` for each rule, and this workspace itself."""
import contextlib
import importlib.util
import io
import os
import shutil
import unittest

_spec = importlib.util.spec_from_file_location("crate_deps", os.path.join(os.path.dirname(__file__), "crate-deps.py"))
cd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cd)

# The workspace as the rules want it: normal dependencies, plus telemetry's dev-dependency on the runtime.
LAYOUT = {
    "collscope-model": [],
    "collscope-kernels": [],
    "collscope-testkit": [],
    "collscope-debug": ["collscope-model"],
    "collscope-nccl": ["collscope-model", "collscope-debug"],
    "collscope-runtime": ["collscope-model", "collscope-debug", "collscope-nccl", "collscope-kernels"],
    "collscope-logreader": ["collscope-model", "collscope-debug"],
    "collscope-telemetry": ["collscope-model", "collscope-debug", ("collscope-runtime", "dev")],
    "collscope-tui": ["collscope-model", "collscope-debug", "collscope-logreader"],
    "collscope": ["collscope-runtime", "collscope-tui", "collscope-telemetry", ("collscope-testkit", "dev")],
}


def metadata(layout):
    def dep(d):
        name, kind = d if isinstance(d, tuple) else (d, None)
        return {"name": name, "kind": kind}

    deps = lambda ds: [dep(d) for d in ds] + [{"name": "serde", "kind": None}]  # noqa: E731
    return {"packages": [{"name": n, "dependencies": deps(ds)} for n, ds in layout.items()]}


def with_deps(**changes):
    layout = dict(LAYOUT)
    for crate, deps in changes.items():
        layout[crate.replace("_", "-")] = deps
    return metadata(layout)


class CrateDeps(unittest.TestCase):
    def test_the_layout_of_the_architecture_passes(self):
        self.assertEqual(cd.breaches(metadata(LAYOUT)), [])

    def test_the_model_may_depend_on_no_collscope_crate(self):
        found = cd.breaches(with_deps(collscope_model=["collscope-debug"]))
        self.assertIn("collscope-model has a dependency on collscope-debug, which it may not use", found)
        self.assertIn(
            "collscope-model depends on collscope-debug (directly or through another crate), which it must never do",
            found,
        )

    def test_the_runtime_reached_through_another_crate_is_named_for_each_crate_that_must_not(self):
        found = cd.breaches(with_deps(collscope_logreader=["collscope-model", "collscope-runtime"]))
        self.assertIn("collscope-logreader has a dependency on collscope-runtime, which it may not use", found)
        self.assertIn(
            "collscope-tui depends on collscope-runtime (directly or through another crate), which it must never do",
            found,
        )

    def test_dev_dependencies_have_their_own_allowance(self):
        self.assertEqual(cd.breaches(with_deps(collscope_nccl=["collscope-model", ("collscope-testkit", "dev")])), [])
        found = cd.breaches(with_deps(collscope_logreader=["collscope-model", ("collscope-runtime", "dev")]))
        self.assertEqual(found, ["collscope-logreader has a dev-dependency on collscope-runtime, which it may not use"])

    def test_a_crate_without_a_place_in_the_rules_is_an_error(self):
        found = cd.breaches(with_deps(collscope_extra=["collscope-model"]))
        self.assertEqual(found, ["collscope-extra is a workspace crate with no place in the rules (scripts/crate-deps.py ALLOWED)"])

    @unittest.skipIf(shutil.which("cargo") is None, "no cargo to read this workspace's metadata")
    def test_this_workspace_follows_the_rules(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = cd.main(["crate-deps.py", os.path.join(os.path.dirname(__file__), "..")])
        self.assertEqual(rc, 0, out.getvalue())


if __name__ == "__main__":
    unittest.main()
