//! The job view through Prometheus (issue 54): a real Prometheus scrapes many synthetic rank endpoints served by
//! this process, and `PromJob` reads every rank back with a few queries.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use collscope_telemetry::promjob::{FleetView, PromJob, QUERIES};
use collscope_testkit::Proc;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The rank whose call is in flight, and the one whose endpoint stops answering.
const STUCK: u32 = 7;
const GONE: u32 = 5;

struct Rank {
    rank: u32,
    nranks: u32,
    down: Arc<AtomicBool>,
}

/// What a rank's `/metrics` says: its communicator, its call in flight (only [`STUCK`]'s), its last completion,
/// its bus bandwidth, and (on [`STUCK`]) a finding.
async fn exposition(State(r): State<Arc<Rank>>) -> Result<String, StatusCode> {
    if r.down.load(Ordering::Relaxed) {
        return Err(StatusCode::SERVICE_UNAVAILABLE);
    }
    let (rank, nranks) = (r.rank, r.nranks);
    let host = format!("node{}", rank / 8);
    let age = if rank == STUCK { 12.5 } else { 0.0 };
    let busbw = f64::from(rank % 8 + 1) * 1e9;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "collscope_communicator_info{{comm=\"tp0\",rank=\"{rank}\",nranks=\"{nranks}\",nnodes=\"1\",version=\"2.28.9\",host=\"{host}\"}} 1"
    );
    let _ = writeln!(t, "collscope_collective_in_flight_oldest_age_seconds{{rank=\"{rank}\",comm=\"tp0\"}} {age}");
    let _ = writeln!(t, "collscope_collective_last_completion_timestamp_seconds{{rank=\"{rank}\",comm=\"tp0\"}} 1.7e9");
    let _ = writeln!(
        t,
        "collscope_collective_bus_bandwidth_bytes_per_second{{collective=\"AllReduce\",size_bucket=\"1MiB-4MiB\",rank=\"{rank}\",comm_name=\"tp0\"}} {busbw}"
    );
    let _ =
        writeln!(t, "collscope_findings{{code=\"rank_not_arrived\",severity=\"error\"}} {}", u8::from(rank == STUCK));
    Ok(t)
}

/// `n` rank endpoints on loopback ports, served until the test process ends; the switch of [`GONE`].
fn endpoints(n: u32) -> (Vec<SocketAddr>, Arc<AtomicBool>) {
    let down = Arc::new(AtomicBool::new(false));
    let listeners: Vec<std::net::TcpListener> =
        (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let addrs = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let gone = down.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            for (rank, l) in (0..n).zip(listeners) {
                l.set_nonblocking(true).unwrap();
                let down = if rank == GONE { gone.clone() } else { Arc::new(AtomicBool::new(false)) };
                let app = axum::Router::new().route("/metrics", get(exposition)).with_state(Arc::new(Rank {
                    rank,
                    nranks: n,
                    down,
                }));
                let l = tokio::net::TcpListener::from_std(l).unwrap();
                tokio::spawn(async move { axum::serve(l, app).await });
            }
            std::future::pending::<()>().await;
        });
    });
    (addrs, down)
}

/// A real Prometheus (Debian package `prometheus`) scraping `targets` every second as job `fleet`.
fn prometheus(dir: &std::path::Path, targets: &[SocketAddr]) -> (Proc, String) {
    let list: Vec<String> = targets.iter().map(|a| format!("\"{a}\"")).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: fleet\n    \
         static_configs:\n      - targets: [{}]\n",
        list.join(", ")
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let web = format!("127.0.0.1:{port}");
    let proc = Proc::spawn(
        Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        Duration::from_secs(240),
    );
    (proc, format!("http://{web}"))
}

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
    let (addrs, gone) = endpoints(n);
    let dir = tempfile::tempdir().unwrap();
    let (_prometheus, url) = prometheus(dir.path(), &addrs);
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
