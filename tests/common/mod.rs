//! What the CLI end-to-end tests share.

use std::process::Command;
use std::time::Duration;

/// How long one CLI run in a test may take before it is killed and the test fails.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Runs the collscope binary with `args` and extra `env` (NCCL_DEBUG cleared, a 60 s collective timeout),
/// killed at [`DEADLINE`]: (success, stdout, stderr).
pub fn run(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = collscope_testkit::output(
        Command::new(env!("CARGO_BIN_EXE_collscope"))
            .args(args)
            .envs(env.iter().copied())
            .env_remove("NCCL_DEBUG")
            .env("COLLSCOPE_TIMEOUT_S", "60"),
        DEADLINE,
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
