//! Real communicators (ranks as threads) reporting to the process's recorder (in a process of its own): every call reaches the counters
//! and the histogram exactly, however many calls happen between two reads, while the histories keep what
//! the runtime's ring still held and count the rest as dropped; each channel's bytes say how many moved in place.

use collscope_debug::env::Env;
use collscope_model::{RedOp, Source};
use collscope_runtime::comm::{Comm, CommOptions};
use collscope_runtime::observe::recorder;
use collscope_runtime::observe::records::OP_RING;
use collscope_telemetry::{Telemetry, TelemetryConfig};
use std::time::Duration;

/// The sum of every series starting with `prefix`.
fn value(text: &str, prefix: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

#[test]
fn runtime_totals_reach_the_metrics_exactly_and_the_ring_overrun_counts_as_dropped() {
    collscope_testkit::own_process!(runtime_totals_reach_the_metrics_exactly_and_the_ring_overrun_counts_as_dropped);
    let mut cfg = TelemetryConfig::new("127.0.0.1:0".parse().unwrap());
    // Read only when scraped, so the calls below all happen between two reads.
    cfg.drain_interval = Duration::from_secs(3600);
    let t = Telemetry::start(&cfg, Source::Runtime, Some(recorder::global())).unwrap();
    // Ring/LL pinned: the labels below name it, whatever the host tuning model would pick.
    let env = Env::from_pairs([("NCCL_ALGO", "ring"), ("NCCL_PROTO", "LL")]);
    let opts = CommOptions { env, net: None, name: Some("t".into()) };
    let mut comms = Comm::init_threads(2, opts).unwrap();
    let calls = OP_RING + 100;
    std::thread::scope(|s| {
        for c in comms.iter_mut() {
            s.spawn(move || {
                let send = [1.0f32; 4];
                let mut recv = [0.0f32; 4];
                for _ in 0..calls {
                    c.all_reduce(&send, &mut recv, RedOp::Sum).unwrap();
                }
                assert_eq!(recv, [2.0; 4]);
            });
        }
    });
    let text = reqwest::blocking::get(format!("{}/metrics", t.url())).unwrap().text().unwrap();
    for rank in 0..2 {
        let l = format!(
            "algorithm=\"Ring\",collective=\"AllReduce\",comm_name=\"t\",protocol=\"LL\",rank=\"{rank}\",size_bucket=\"0-1KiB\""
        );
        assert_eq!(value(&text, &format!("collscope_collective_operations_total{{{l}}}")), calls as f64);
        assert_eq!(value(&text, &format!("collscope_collective_bytes_total{{{l}}}")), (calls * 16) as f64);
        assert_eq!(value(&text, &format!("collscope_collective_duration_seconds_count{{{l}}}")), calls as f64);
        assert!(value(&text, &format!("collscope_collective_duration_seconds_sum{{{l}}}")) > 0.0);
        let d = format!(
            "collscope_tuning_decisions_total{{algorithm=\"Ring\",collective=\"AllReduce\",protocol=\"LL\",rank=\"{rank}\"}}"
        );
        assert_eq!(value(&text, &d), calls as f64);
        let sent = format!(
            "collscope_channel_bytes_total{{channel=\"0\",direction=\"send\",peer=\"{}\",rank=\"{rank}\"",
            1 - rank
        );
        // LL moves 16 B of payload in 16 B of flags and data per 8 B: at least the payload went out.
        assert!(value(&text, &sent) >= (calls * 16) as f64, "rank {rank} sent too little on channel 0:\n{text}");
    }
    // Each rank's ring kept its last OP_RING calls; the 100 before them were never read.
    assert_eq!(value(&text, "collscope_dropped_records_total{stage=\"queue\"}"), 200.0);
    let snap: serde_json::Value =
        serde_json::from_str(&reqwest::blocking::get(format!("{}/api/v1/snapshot", t.url())).unwrap().text().unwrap())
            .unwrap();
    let ops = snap["ops"].as_array().unwrap();
    assert_eq!(ops.len(), 2 * OP_RING);
    assert!(ops.iter().all(|o| o["seq"].as_u64().unwrap() > 100));
    // LL lines always go through the slots; Simple steps between threads never do: each is read in the
    // sender's buffer or written into the receiver's.
    let channel = |text: &str, metric: &str, rank: u32, dir: &str| {
        value(text, &format!("{metric}{{channel=\"0\",direction=\"{dir}\",peer=\"{}\",rank=\"{rank}\"", 1 - rank))
    };
    let (bytes, in_place) = ("collscope_channel_bytes_total", "collscope_channel_in_place_bytes_total");
    let before: Vec<f64> = (0..2).flat_map(|r| ["send", "recv"].map(|d| channel(&text, bytes, r, d))).collect();
    for rank in 0..2 {
        for dir in ["send", "recv"] {
            assert_eq!(channel(&text, in_place, rank, dir), 0.0, "rank {rank} {dir}: LL moved in place");
        }
    }
    let env = Env::from_pairs([("NCCL_ALGO", "ring"), ("NCCL_PROTO", "Simple")]);
    let opts = CommOptions { env, net: None, name: Some("s".into()) };
    let mut simple = Comm::init_threads(2, opts).unwrap();
    std::thread::scope(|s| {
        for c in simple.iter_mut() {
            s.spawn(move || {
                let send = vec![1.0f32; 1 << 16];
                let mut recv = vec![0.0f32; 1 << 16];
                for _ in 0..10 {
                    c.all_reduce(&send, &mut recv, RedOp::Sum).unwrap();
                }
            });
        }
    });
    let after = reqwest::blocking::get(format!("{}/metrics", t.url())).unwrap().text().unwrap();
    for rank in 0..2 {
        for (i, dir) in ["send", "recv"].iter().enumerate() {
            let moved = channel(&after, bytes, rank, dir) - before[rank as usize * 2 + i];
            assert!(moved >= (10 << 18) as f64, "rank {rank} {dir}: {moved} bytes");
            assert_eq!(channel(&after, in_place, rank, dir), moved, "rank {rank} {dir}: not all in place");
        }
    }
    t.shutdown().unwrap();
}
