//! The binary's end-to-end tests, in one binary (one link instead of one per file): each file here is a module.
//! Tests that need a process of their own say so with `collscope_testkit::own_process!`.

mod common;
mod live;
mod procs;
mod tmux;

mod bench_examples;
mod dump;
mod env_cli;
mod failures;
mod gpu_cli;
mod habits;
mod inputs;
mod launcher;
mod live_log;
mod log_analyze;
mod log_explain;
mod log_explain_replay;
mod log_explain_robust;
mod netns;
mod perf_cli;
mod profiler_plugin;
mod readme;
mod telemetry;
mod topo_cli;
mod topo_explain;
mod topo_releases;
mod tui;
mod tune_cli;

#[test]
fn every_test_file_is_declared_here() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    collscope_testkit::own::assert_every_test_file_declared(&dir, include_str!("main.rs"));
}
