// The C side of the logger handed to NCCL profiler plugins (src/profiler/logger.c): a variadic function, which
// stable Rust cannot define.
fn main() {
    println!("cargo::rerun-if-changed=src/profiler/logger.c");
    cc::Build::new().file("src/profiler/logger.c").warnings_into_errors(true).compile("collscope_plugin_logger");
}
