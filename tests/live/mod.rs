//! What the tests of the live views (telemetry, TUI) share: collscope's own `NCCL_DEBUG=INFO` logs, made by the
//! tests that read them so the log paths run on a fresh clone without the real logs in `../shared`, and
//! collscope servers started with the URL they print.

use collscope_testkit::{Proc, DEADLINE};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a server a test starts may run; it is killed when the test ends, however it ends.
pub(crate) const LIFE: Duration = Duration::from_secs(600);

/// What `collscope perf all_reduce` of one 8 B call on the ranks `RANKS` (`--nranks 4 --launch processes`) prints
/// with `NCCL_DEBUG=INFO`: NCCL's INFO lines with nccl-tests' table between them. Every connection is made at init
/// (`NCCL_RUNTIME_CONNECT=0`), so each ring edge has its line.
pub(crate) fn own_log(ranks: &[&str]) -> String {
    let out = collscope_testkit::output(
        Command::new(env!("CARGO_BIN_EXE_collscope"))
            .args(["perf", "all_reduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0"])
            .args(ranks)
            .env("NCCL_DEBUG", "INFO")
            .env("NCCL_RUNTIME_CONNECT", "0")
            .env("COLLSCOPE_TIMEOUT_S", "60")
            .env_remove("NCCL_DEBUG_SUBSYS")
            .env_remove("NCCL_DEBUG_FILE"),
        DEADLINE,
    );
    assert!(out.status.success(), "collscope perf {ranks:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("the log is UTF-8")
}

/// Starts `collscope ARGS` and returns it with the base URL it printed first (`http://127.0.0.1:PORT`).
pub(crate) fn start(args: &[&str]) -> (Proc, String) {
    start_with(args, &[])
}

/// [`start`] with `env` added to the environment.
pub(crate) fn start_with(args: &[&str], env: &[(&str, &str)]) -> (Proc, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(args).envs(env.iter().copied()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = Proc::spawn(&mut cmd, LIFE);
    let stdout = child.take_stdout();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(at) = line.find("http://") {
                let url: String = line[at..].chars().take_while(|c| !c.is_whitespace() && *c != ',').collect();
                let _ = tx.send(url.trim_end_matches("/metrics").to_string());
            }
        }
    });
    let url = rx.recv_timeout(Duration::from_secs(90)).unwrap_or_else(|_| panic!("collscope {args:?} printed no URL"));
    (child, url)
}
