//! What the CLI end-to-end tests share.

use collscope_testkit::DEADLINE;
use std::process::Command;

/// Runs the collscope binary with `args` and extra `env` (NCCL_DEBUG cleared, a 60 s collective timeout),
/// killed at [`DEADLINE`]: (success, stdout, stderr).
pub(crate) fn run(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
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
