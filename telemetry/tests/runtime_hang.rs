//! A call that never ends shows as in flight, in the snapshot and the gauge, until it ends (in a process
//! of its own: it turns on the process's recorder).

use collscope_debug::env::Env;
use collscope_model::{OpState, RedOp, Source};
use collscope_runtime::comm::{Comm, CommOptions};
use collscope_runtime::observe::recorder;
use collscope_telemetry::{Telemetry, TelemetryConfig};
use std::time::{Duration, Instant};

fn get(url: &str) -> String {
    reqwest::blocking::get(url).unwrap().text().unwrap()
}

fn in_flight(t: &Telemetry) -> Vec<serde_json::Value> {
    let snap: serde_json::Value = serde_json::from_str(&get(&format!("{}/api/v1/snapshot", t.url()))).unwrap();
    let ops = snap["ops"].as_array().unwrap();
    ops.iter().filter(|o| o["state"] == serde_json::json!(OpState::Started)).cloned().collect()
}

#[test]
fn a_hung_call_is_in_flight_until_it_ends() {
    collscope_testkit::own_process!(a_hung_call_is_in_flight_until_it_ends);
    let t = Telemetry::start(
        &TelemetryConfig::new("127.0.0.1:0".parse().unwrap()),
        Source::Runtime,
        Some(recorder::global()),
    )
    .unwrap();
    let opts = CommOptions { env: Env::from_pairs(Vec::<(String, String)>::new()), net: None, name: Some("h".into()) };
    let mut comms = Comm::init_threads(2, opts).unwrap();
    let abort = comms[0].abort_handle();
    std::thread::scope(|s| {
        let c0 = &mut comms[0];
        // Rank 1 never joins, so rank 0's AllReduce waits until aborted.
        let hung = s.spawn(move || c0.all_reduce(&[1.0f32; 8], &mut [0.0f32; 8], RedOp::Sum));
        let deadline = Instant::now() + Duration::from_secs(20);
        let ops = loop {
            let ops = in_flight(&t);
            if !ops.is_empty() || Instant::now() > deadline {
                break ops;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(ops.len(), 1, "{ops:?}");
        assert_eq!((ops[0]["rank"].as_u64(), ops[0]["seq"].as_u64()), (Some(0), Some(1)));
        assert_eq!((ops[0]["coll"].as_str(), ops[0]["bytes"].as_u64()), (Some("AllReduce"), Some(32)));
        assert_eq!(ops[0]["comm"].as_str(), Some("h"));
        let metrics = get(&format!("{}/metrics", t.url()));
        assert!(metrics.lines().any(|l| l == "collscope_collectives_in_flight{rank=\"0\"} 1"), "{metrics}");
        abort.abort("test over");
        assert!(hung.join().unwrap().is_err());
    });
    assert!(in_flight(&t).is_empty(), "an ended call leaves the calls in flight");
    let metrics = get(&format!("{}/metrics", t.url()));
    assert!(metrics.lines().any(|l| l == "collscope_collectives_in_flight{rank=\"0\"} 0"), "{metrics}");
    t.shutdown().unwrap();
}
