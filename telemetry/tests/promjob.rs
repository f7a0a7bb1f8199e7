//! The job view through Prometheus (issue 54): a real Prometheus scrapes many synthetic rank endpoints served by
//! this process, and `PromJob` reads every rank back with a few queries.

use collscope_telemetry::promjob::{FleetView, PromJob, QUERIES};
use collscope_testkit::fleet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The rank whose call is in flight, and the one whose endpoint stops answering.
const STUCK: u32 = 7;
const GONE: u32 = 5;

/// The view once `ready` accepts it, within two minutes (Prometheus starts, then scrapes every target).
fn view_when(job: &PromJob, ready: impl Fn(&FleetView) -> bool) -> FleetView {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let v = job.view();
        match v {
            Ok(v) if ready(&v) => return v,
            _ if Instant::now() > deadline => panic!("Prometheus never had the view wanted: {v:?}"),
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// 1,024 ranks (`COLLSCOPE_FLEET_RANKS` sets another count) scraped by a real Prometheus: the view lists every
/// rank once, with its host, state, communicator, in-flight age and bandwidth, the finding with the rank that
/// raised it, and a rank whose endpoint stops answering as down, still named by its earlier series.
#[test]
fn the_job_view_through_prometheus_shows_every_rank_of_a_simulated_job() {
    let n: u32 = std::env::var("COLLSCOPE_FLEET_RANKS").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    let gone = Arc::new(AtomicBool::new(false));
    let down = Arc::clone(&gone);
    let targets = fleet::serve_ranks(
        n,
        Arc::new(move |rank, _path: &str| {
            let age = if rank == STUCK { 12.5 } else { 0.0 };
            (rank != GONE || !down.load(Ordering::Relaxed))
                .then(|| (fleet::EXPOSITION, fleet::exposition(rank, n, age)))
        }),
    );
    let dir = tempfile::tempdir().unwrap();
    let config = fleet::static_config("fleet", 1, &targets);
    let (_prometheus, web) = fleet::prometheus(dir.path(), &config, Duration::from_secs(240));
    let url = format!("http://{web}");
    let job = PromJob::new(&url, Some("fleet")).unwrap();
    let all_up = |v: &FleetView| {
        v.ranks.len() == n as usize && v.ranks.iter().all(|r| r.up == Some(true) && r.busbw_gbps.is_some())
    };
    let v = view_when(&job, all_up);
    let started = Instant::now();
    let v2 = job.view().unwrap();
    eprintln!(
        "{n} ranks through Prometheus: {QUERIES} queries in {:?}, the view {} bytes as JSON",
        started.elapsed(),
        serde_json::to_string(&v2).unwrap().len()
    );
    let ranks: Vec<u32> = v.ranks.iter().map(|r| r.rank).collect();
    assert_eq!(ranks, (0..n).collect::<Vec<_>>(), "every rank once, in order");
    for r in &v.ranks {
        assert_eq!(r.host.as_deref(), Some(format!("node{}", r.rank / 8).as_str()));
        assert_eq!(r.busbw_gbps, Some(f64::from(r.rank % 8 + 1)), "rank {}", r.rank);
        let comms: Vec<_> = r.comms.iter().map(|c| (c.comm.as_str(), c.last_completion_s)).collect();
        assert_eq!(comms, [("tp0", Some(1.7e9))], "rank {}", r.rank);
        let want = if r.rank == STUCK { ("running", Some(("tp0", 12.5))) } else { ("idle", None) };
        assert_eq!((r.state(), r.oldest()), want, "rank {}", r.rank);
    }
    let findings: Vec<_> = v.findings.iter().map(|f| (f.code.as_str(), f.severity.as_str(), f.ranks.clone())).collect();
    assert_eq!(findings, [("rank_not_arrived", "error", vec![STUCK])]);

    gone.store(true, Ordering::Relaxed);
    let v = view_when(&job, |v| v.ranks.iter().any(|r| r.rank == GONE && r.up == Some(false)));
    assert_eq!(v.ranks.len(), n as usize, "the rank that went is still listed");
    let down: Vec<_> = v.ranks.iter().filter(|r| r.state() == "down").map(|r| r.rank).collect();
    assert_eq!(down, [GONE]);
}
