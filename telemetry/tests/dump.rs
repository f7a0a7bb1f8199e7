//! Rank dumps (issue 53, item 4): `POST /api/v1/dump` writes this process's ranks' dumps to `COLLSCOPE_DUMP_DIR`
//! and lists them; a timeout's finding writes them by itself; without the folder the endpoint says so. A real
//! server on a loopback port the OS picks.

use collscope_model::{Collective, Communicator, DataType, DumpReason, Event, Finding, OpRecord, RankDump, Source};
use collscope_runtime::observe::recorder::Recorder;
use collscope_telemetry::{Telemetry, TelemetryConfig};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn server(dump_dir: Option<PathBuf>) -> Telemetry {
    let rec: &'static Recorder = Box::leak(Box::new(Recorder::new()));
    let mut cfg = TelemetryConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.dump_dir = dump_dir;
    let t = Telemetry::start(&cfg, Source::Runtime, Some(rec)).unwrap();
    t.with_state(|s| {
        let comm = Communicator { rank: Some(1), nranks: Some(2), pid: Some(7), ..Default::default() };
        s.apply(Event::Communicator(comm));
        s.apply(Event::OpEnqueued(OpRecord::started(1, 5, Collective::AllReduce, DataType::F32, 64, 1_000)));
    });
    t
}

fn post(t: &Telemetry) -> (u16, String) {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let r = client.post(format!("{}/api/v1/dump", t.url())).send().unwrap();
    (r.status().as_u16(), r.text().unwrap())
}

fn read(path: &Path) -> RankDump {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_post_writes_each_ranks_dump_and_lists_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dumps");
    let t = server(Some(dir.clone()));
    let (status, body) = post(&t);
    assert_eq!(status, 200, "{body}");
    let files: Vec<PathBuf> = serde_json::from_str(&body).unwrap();
    assert_eq!(files, vec![dir.join("rank-00001.json")]);
    let d = read(&files[0]);
    assert_eq!((d.rank, d.nranks, d.pid, d.reason), (1, Some(2), Some(7), DumpReason::Request));
    assert_eq!(d.ops.iter().map(|o| (o.seq, o.coll)).collect::<Vec<_>>(), vec![(5, Collective::AllReduce)]);
}

#[test]
fn without_a_dump_folder_the_endpoint_says_so() {
    let t = server(None);
    let (status, body) = post(&t);
    assert_eq!(status, 409);
    assert!(body.contains("COLLSCOPE_DUMP_DIR"), "{body}");
}

#[test]
fn a_timeout_finding_writes_the_dumps_by_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let t = server(Some(tmp.path().to_path_buf()));
    let file = tmp.path().join("rank-00001.json");
    let other = |code: &str| -> Finding {
        serde_json::from_value(serde_json::json!({"code": code, "severity": "error", "rank": 1, "title": "t",
            "detail": "d", "evidence": [], "fix": "f"}))
        .unwrap()
    };
    t.with_state(|s| s.apply(Event::Finding(other("rank_not_arrived"))));
    t.with_state(|_| ());
    assert!(!file.exists(), "a finding that is no failure writes nothing");
    t.with_state(|s| s.apply(Event::Finding(other("call_timeout"))));
    t.with_state(|_| ());
    assert_eq!(read(&file).reason, DumpReason::Timeout);
}
