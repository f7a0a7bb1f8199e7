//! Tests that need a process of their own inside a test binary that holds many.
//!
//! Each crate's integration tests are one binary (one link, not one per file). A few tests still need the whole
//! process: they turn on process-wide state (the runtime's recorder), read the process's memory or descriptors,
//! or set environment variables. Such a test starts with [`own_process!`]: in the binary's usual run it runs
//! itself again, alone, in a new process of the same binary, and passes or fails with it.

use crate::output;
use std::process::Command;
use std::time::Duration;

/// Set (to the test's path) in the process that runs one test alone.
const OWN: &str = "COLLSCOPE_TEST_OWN_PROCESS";

/// A test's path as libtest filters it: `module_path!()` less the crate's name, then the test's name.
pub fn test_path(module_path: &str, test: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    }
}

/// This test binary run again for the one test at `path` (exactly), its output not captured.
pub fn rerun(path: &str) -> Command {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("cannot find this test binary: {e}"));
    let mut cmd = Command::new(exe);
    cmd.args([path, "--exact", "--nocapture", "--test-threads", "1"]);
    cmd
}

/// `true` where the test at `path` is to run its body: in the process [`rerun`] started for it. Elsewhere, runs
/// it there under `limit`, panics with its output unless it passed, and returns `false`.
pub fn in_own_process(path: &str, limit: Duration) -> bool {
    if std::env::var(OWN).is_ok_and(|p| p == path) {
        return true;
    }
    let out = output(rerun(path).env(OWN, path), limit);
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // libtest prints "running 0 tests" when the filter matches nothing: a renamed test must not pass unseen.
    assert!(out.status.success() && text.contains("1 passed"), "{path} in its own process failed:\n{text}");
    false
}

/// Runs the enclosing test (named here) in a process of its own: the rest of the test body runs only there.
#[macro_export]
macro_rules! own_process {
    ($test:ident) => {
        $crate::own_process!($test, $crate::DEADLINE)
    };
    ($test:ident, $limit:expr) => {
        if !$crate::own::in_own_process(&$crate::own::test_path(module_path!(), stringify!($test)), $limit) {
            return;
        }
    };
}

/// With `autotests = false` cargo builds only the modules `tests/main.rs` declares: every `.rs` file and module
/// folder in `tests_dir` must be one of them (`mod NAME;` in `main_rs`), or its tests would never run.
pub fn assert_every_test_file_declared(tests_dir: &std::path::Path, main_rs: &str) {
    let entries = std::fs::read_dir(tests_dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", tests_dir.display()));
    let mut missing = Vec::new();
    for entry in entries.map_while(Result::ok) {
        let path = entry.path();
        let name = match path.file_stem().and_then(|s| s.to_str()) {
            Some(n) if path.extension().is_some_and(|e| e == "rs") && n != "main" => n.to_string(),
            Some(n) if path.join("mod.rs").is_file() => n.to_string(),
            _ => continue,
        };
        if !main_rs.lines().any(|l| l.trim() == format!("mod {name};")) {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "declare these in {}/main.rs: {missing:?}", tests_dir.display());
}
