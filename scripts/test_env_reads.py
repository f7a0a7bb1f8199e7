"""Tests of scripts/env-reads.py: a planted read in a copy of a small tree, and this workspace itself."""
import importlib.util
import os
import tempfile
import unittest

_spec = importlib.util.spec_from_file_location("env_reads", os.path.join(os.path.dirname(__file__), "env-reads.py"))
er = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(er)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
REGISTRY = 'pub const PARAMS: &[Param] = &[\n    nccl("NCCL_ALGO", Text, "", "", "algorithms"),\n    system("HOME", Path, "home"),\n];\n' \
    'pub fn process_var(name: &str) -> Option<String> { std::env::var(name).ok() }\n'


def tree(files):
    d = tempfile.TemporaryDirectory()
    for rel, text in {er.REGISTRY: REGISTRY, **files}.items():
        path = os.path.join(d.name, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return d


class EnvReads(unittest.TestCase):
    def test_this_workspace_reads_only_through_the_registry(self):
        self.assertEqual(er.breaches(ROOT), [])

    def test_reads_through_the_registry_pass(self):
        with tree({"tui/src/a.rs": 'fn f(env: &Env) { env.str("NCCL_ALGO"); process_var("HOME"); }\n'}) as d:
            self.assertEqual(er.breaches(d), [])

    def test_a_planted_read_fails(self):
        with tree({"tui/src/a.rs": 'fn f() {\n    let _ = std::env::var_os("HOME");\n}\n'}) as d:
            self.assertEqual(er.breaches(d), [f"tui/src/a.rs:2: reads the environment outside {er.REGISTRY}: env::var_os("])

    def test_an_undeclared_name_fails_and_tests_may_do_as_they_like(self):
        files = {
            "core/runtime/src/a.rs": 'fn f(env: &Env) { env.int("NCCL_NEW_THING", 0); get("MY_LAUNCHER_RANK"); }\n'
            '#[cfg(test)]\nmod tests { fn t() { std::env::var("NCCL_X"); } }\n',
            "core/runtime/tests/b.rs": 'fn t() { std::env::var("NCCL_Y"); }\n',
            "src/cli/c_test.rs": 'fn t() { std::env::vars(); }\n',
        }
        with tree(files) as d:
            self.assertEqual(
                er.breaches(d),
                [
                    f"core/runtime/src/a.rs:1: MY_LAUNCHER_RANK is not declared in {er.REGISTRY}",
                    f"core/runtime/src/a.rs:1: NCCL_NEW_THING is not declared in {er.REGISTRY}",
                ],
            )


if __name__ == "__main__":
    unittest.main()
