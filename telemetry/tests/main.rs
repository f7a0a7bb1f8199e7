//! collscope-telemetry's integration tests, in one binary (one link instead of one per file): each file here is a module.
//! Tests that need a process of their own say so with `collscope_testkit::own_process!`.

mod dump;
mod job;
mod job_proxy;
mod otlp;
mod promjob;
mod runtime;
mod runtime_hang;
mod runtime_totals;
mod server;

#[test]
fn every_test_file_is_declared_here() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    collscope_testkit::own::assert_every_test_file_declared(&dir, include_str!("main.rs"));
}
