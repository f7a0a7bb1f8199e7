//! Any bytes, as one or two log files, must read into a snapshot that serializes, without a panic.
#![no_main]

use collscope_logreader::{Options, Reader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut reader = Reader::new(Options { strict: true });
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    reader.read_bytes("a.log", &data[..split]);
    if split < data.len() {
        reader.read_bytes("b.log", &data[split + 1..]);
    }
    let snap = reader.finish();
    serde_json::to_string(&snap).expect("a snapshot always serializes");
});
