//! The job view through Prometheus against the fan-out `/api/v1/job` (issue 54), at 256, 1,024 and 2,048 ranks:
//! how long one view takes and the peak memory (VmHWM) of the process that builds it. Both viewers are this
//! program run again as a child process of its own, so neither's memory holds the other's or the endpoints':
//! - Prometheus: `PromJob::view` (its few PromQL queries) against a real Prometheus (Debian package `prometheus`)
//!   that scrapes every rank's endpoint;
//! - fan-out: a telemetry server whose snapshot lists every rank's endpoint, asked for `/api/v1/job` once, which
//!   fetches each rank's `/api/v1/summary` (16 at a time, within 8 s, at most `MAX_JOB_RANKS` ranks).
//!
//! Every rank's endpoint is served by this process (a thread per rank on a loopback port), answering both
//! `/metrics` and `/api/v1/summary`. Prints one table; without `prometheus` on the PATH it measures the fan-out
//! alone and says so. Run: `cargo bench --bench job_view` (`-- 256` for one size).

use collscope_model::job::MAX_JOB_RANKS;
use collscope_model::{routes, CommProgress, Event, JobView, RankEndpoint, RankState, RankSummary, Source};
use collscope_runtime::observe::recorder::Recorder;
use collscope_telemetry::promjob::{PromJob, QUERIES};
use collscope_telemetry::{Telemetry, TelemetryConfig};
use collscope_testkit::fleet;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZES: [u32; 3] = [256, 1024, 2048];
const JOB: &str = "bench";
/// How long one size's Prometheus may run: the wait for every scrape and one view.
const PROMETHEUS_LIFE: Duration = Duration::from_secs(600);

/// What one viewer measured: milliseconds for the view, its peak RSS (KiB), ranks listed, ranks unreachable.
struct Measured {
    ms: f64,
    hwm_kib: u64,
    ranks: usize,
    unreachable: usize,
}

impl Measured {
    fn print(&self) {
        println!("{} {} {} {}", self.ms, self.hwm_kib, self.ranks, self.unreachable);
    }

    fn parse(out: &str) -> Option<Measured> {
        let v: Vec<&str> = out.split_whitespace().collect();
        Some(Measured {
            ms: v.first()?.parse().ok()?,
            hwm_kib: v.get(1)?.parse().ok()?,
            ranks: v.get(2)?.parse().ok()?,
            unreachable: v.get(3)?.parse().ok()?,
        })
    }
}

/// This process's peak resident set (VmHWM) in KiB.
fn hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap_or_default();
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Child: one view through Prometheus.
fn view_prometheus(url: &str) {
    let prom = PromJob::new(url, Some(JOB)).expect("Prometheus URL");
    let t0 = Instant::now();
    let view = prom.view().expect("the view through Prometheus");
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let unreachable = view.ranks.iter().filter(|r| r.up != Some(true)).count();
    Measured { ms, hwm_kib: hwm_kib(), ranks: view.ranks.len(), unreachable }.print();
}

/// Child: one `/api/v1/job` of a telemetry server whose snapshot lists the endpoints in `file` (JSON).
fn view_fanout(file: &str) {
    let endpoints: Vec<RankEndpoint> =
        serde_json::from_slice(&std::fs::read(file).expect("endpoints file")).expect("endpoints");
    let rec: &'static Recorder = Box::leak(Box::new(Recorder::new()));
    let cfg = TelemetryConfig::new("127.0.0.1:0".parse().expect("address"));
    let t = Telemetry::start(&cfg, Source::Runtime, Some(rec)).expect("telemetry");
    rec.push(Event::Endpoints(endpoints));
    let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().expect("client");
    // The server folds the endpoints in on its own thread: a view that lists none is asked again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let t0 = Instant::now();
        let text = http.get(format!("{}{}", t.url(), routes::JOB)).send().and_then(|r| r.text()).expect("job view");
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let view: JobView = serde_json::from_str(&text).expect("job view JSON");
        if !view.ranks.is_empty() || Instant::now() > deadline {
            let unreachable = view.ranks.iter().filter(|r| r.state == RankState::Unreachable).count();
            Measured { ms, hwm_kib: hwm_kib(), ranks: view.ranks.len(), unreachable }.print();
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A rank's `/api/v1/summary`: what the fan-out reads.
fn summary(rank: u32) -> String {
    let s = RankSummary {
        rank,
        host: Some(format!("node{}", rank / 8)),
        url: None,
        state: RankState::Idle,
        comms: vec![CommProgress {
            comm: Some("tp0".into()),
            name: None,
            last_completed: Some(100),
            last_completed_us: Some(1_700_000_000_000_000),
            in_flight: None,
            recent_starts: (90..100).map(|s| (s, s * 1000)).collect(),
            recent_calls: Vec::new(),
        }],
        busbw_gbps: Some(f64::from(rank % 8 + 1)),
        p50_us: Some(900.0),
        p99_us: Some(4000.0),
        error: None,
        edges: Default::default(),
        pid: None,
        process: None,
        stalls: Vec::new(),
    };
    serde_json::to_string(&vec![s]).expect("summary JSON")
}

/// `n` rank endpoints on loopback ports, served by this process until it ends: `/api/v1/summary` for the
/// fan-out, `/metrics` for Prometheus.
fn endpoints(n: u32) -> Vec<RankEndpoint> {
    let answer = move |rank, path: &str| {
        Some(if path.starts_with(routes::SUMMARY) {
            ("application/json", summary(rank))
        } else {
            (fleet::EXPOSITION, fleet::exposition(rank, n, 0.0))
        })
    };
    let addrs = fleet::serve_ranks(n, Arc::new(answer));
    (0..n)
        .zip(addrs)
        .map(|(rank, a)| RankEndpoint {
            rank,
            host: format!("node{}", rank / 8),
            url: format!("http://{a}"),
            pid: None,
            started: None,
        })
        .collect()
}

/// Runs this program as a viewer child with `args` and reads what it measured.
fn child(args: &[&str]) -> Measured {
    let exe = std::env::current_exe().expect("this program");
    let mut c = Command::new(exe).args(args).stdout(Stdio::piped()).spawn().expect("viewer");
    let mut out = String::new();
    c.stdout.take().expect("stdout").read_to_string(&mut out).expect("viewer's output");
    let status = c.wait().expect("viewer");
    assert!(status.success(), "viewer {args:?}: {status}");
    Measured::parse(&out).unwrap_or_else(|| panic!("viewer {args:?} printed {out:?}"))
}

fn row(n: u32, how: &str, m: &Measured) {
    println!(
        "{n:>6}  {how:<34} {:>10.1} {:>12.1} {:>7} {:>12}",
        m.ms,
        m.hwm_kib as f64 / 1024.0,
        m.ranks,
        m.unreachable
    );
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    match args.next().as_deref() {
        Some("view-prometheus") => return view_prometheus(&args.next().expect("URL")),
        Some("view-fanout") => return view_fanout(&args.next().expect("endpoints file")),
        _ => {}
    }
    let sizes: Vec<u32> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { SIZES.to_vec() } else { sizes };
    let has_prometheus = Command::new("prometheus").arg("--version").output().is_ok_and(|o| o.status.success());
    if !has_prometheus {
        println!("# prometheus is not on the PATH (Debian package prometheus): the fan-out alone is measured");
    }
    println!(
        "# one view each, by a process of its own; fan-out capped at MAX_JOB_RANKS = {MAX_JOB_RANKS} ranks; \
         Prometheus: {QUERIES} queries"
    );
    println!(
        "{:>6}  {:<34} {:>10} {:>12} {:>7} {:>12}",
        "ranks", "job view", "ms", "peak RSS MiB", "listed", "unreachable"
    );
    let dir = std::env::temp_dir().join(format!("collscope-job-view-{}", std::process::id()));
    for n in sizes {
        let eps = endpoints(n);
        let file = dir.join(format!("endpoints-{n}.json"));
        std::fs::create_dir_all(&dir).expect("bench folder");
        std::fs::write(&file, serde_json::to_vec(&eps).expect("endpoints JSON")).expect("endpoints file");
        let fan = child(&["view-fanout", file.to_str().expect("path")]);
        row(n, "fan-out /api/v1/job", &fan);
        if !has_prometheus {
            continue;
        }
        let pdir = dir.join(format!("prometheus-{n}"));
        std::fs::create_dir_all(&pdir).expect("Prometheus folder");
        let targets: Vec<String> = eps.iter().map(|e| e.url.trim_start_matches("http://").to_string()).collect();
        // Scraped every 2 s; the bench ends it (a deadline well past the longest wait below).
        let (_prom, web) = fleet::prometheus(&pdir, &fleet::static_config(JOB, 2, &targets), PROMETHEUS_LIFE);
        let url = format!("http://{web}");
        // Until Prometheus has scraped every rank (it starts, then scrapes each target within an interval).
        let job = PromJob::new(&url, Some(JOB)).expect("Prometheus URL");
        let deadline = Instant::now() + Duration::from_secs(180);
        let ready = loop {
            let all =
                job.view().is_ok_and(|v| v.ranks.len() == n as usize && v.ranks.iter().all(|r| r.up == Some(true)));
            if all || Instant::now() > deadline {
                break all;
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        if ready {
            let via = child(&["view-prometheus", &url]);
            row(n, "Prometheus (PromQL)", &via);
        } else {
            println!("# Prometheus had not scraped all {n} ranks within 180 s");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
