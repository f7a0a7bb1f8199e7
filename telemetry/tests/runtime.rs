//! The runtime reports to telemetry: real collectives on ranks as threads, seen through `/metrics`.
//! (In a process of its own: it turns on the process's recorder.)

use collscope_debug::env::Env;
use collscope_model::{RedOp, Source};
use collscope_runtime::comm::{Comm, CommOptions};
use collscope_runtime::observe::recorder;
use collscope_telemetry::{Telemetry, TelemetryConfig};

fn value(text: &str, prefix: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

#[test]
fn collectives_connections_and_channel_traffic_reach_the_metrics() {
    collscope_testkit::own_process!(collectives_connections_and_channel_traffic_reach_the_metrics);
    let t = Telemetry::start(
        &TelemetryConfig::new("127.0.0.1:0".parse().unwrap()),
        Source::Runtime,
        Some(recorder::global()),
    )
    .unwrap();
    let opts = CommOptions { env: Env::from_pairs([("NCCL_BUFFSIZE", "65536")]), net: None, name: Some("t".into()) };
    let comms = Comm::init_threads(2, opts).unwrap();
    std::thread::scope(|s| {
        for mut c in comms {
            s.spawn(move || {
                let send = vec![1.0f32; 4096];
                let mut recv = vec![0.0f32; 4096];
                for _ in 0..3 {
                    c.all_reduce(&send, &mut recv, RedOp::Sum).unwrap();
                }
                assert_eq!(recv[0], 2.0);
            });
        }
    });
    let text = reqwest::blocking::get(format!("{}/metrics", t.url())).unwrap().text().unwrap();
    assert_eq!(value(&text, "collscope_collective_operations_total{"), 6.0, "{text}");
    assert_eq!(value(&text, "collscope_collective_bytes_total{"), 6.0 * 16384.0, "{text}");
    assert!(value(&text, "collscope_connection_channels{") > 0.0, "{text}");
    for rank in [0, 1] {
        let sent = text
            .lines()
            .filter(|l| l.starts_with("collscope_channel_bytes_total{") && l.contains(&format!("rank=\"{rank}\"")))
            .filter(|l| l.contains("direction=\"send\""))
            .collect::<Vec<_>>();
        assert!(!sent.is_empty(), "rank {rank} sent on some channel: {text}");
        assert!(
            sent.iter().all(|l| !l.contains("transport=\"unknown\"")),
            "transports come from the connections: {sent:?}"
        );
    }
    assert_eq!(value(&text, "collscope_collective_duration_seconds_count{"), 6.0, "{text}");
    t.shutdown().unwrap();
}
