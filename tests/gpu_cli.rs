//! `collscope perf --memory gpu` end to end: on a machine without a CUDA driver it says so and fails cleanly;
//! with one, two ranks on GPU 0 produce a checked result line.

use collscope_testkit::{output, DEADLINE};
use std::process::Command;

#[test]
fn perf_on_device_buffers() {
    let out = output(
        Command::new(env!("CARGO_BIN_EXE_collscope"))
            .args(["perf", "all_reduce", "--memory", "gpu", "-b", "1M", "-e", "1M", "-n", "2", "-w", "1"])
            .env("NCCL_DEBUG", "INFO")
            .env("COLLSCOPE_GPUS", "0,0")
            .env("COLLSCOPE_ALLOW_SHARED_GPU", "1"),
        DEADLINE,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        let row = stdout.lines().find(|l| l.trim_start().starts_with("1048576")).expect("a row for 1M");
        assert_eq!(row.split_whitespace().nth(8), Some("0"), "no wrong results: {row}");
    } else {
        assert!(stderr.contains("CUDA") || stderr.contains("GPU"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let bad =
        output(Command::new(env!("CARGO_BIN_EXE_collscope")).args(["perf", "all_gather", "--memory", "gpu"]), DEADLINE);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("all_reduce only"));
}
