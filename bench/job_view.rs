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
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SIZES: [u32; 3] = [256, 1024, 2048];
const JOB: &str = "bench";

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

/// A rank's `/metrics`: the series the Prometheus view reads.
fn exposition(rank: u32, nranks: u32) -> String {
    let host = format!("node{}", rank / 8);
    format!(
        "collscope_communicator_info{{comm=\"tp0\",rank=\"{rank}\",nranks=\"{nranks}\",nnodes=\"1\",version=\"2.28.9\",host=\"{host}\"}} 1\n\
         collscope_collective_in_flight_oldest_age_seconds{{rank=\"{rank}\",comm=\"tp0\"}} 0\n\
         collscope_collective_last_completion_timestamp_seconds{{rank=\"{rank}\",comm=\"tp0\"}} 1.7e9\n\
         collscope_collective_bus_bandwidth_bytes_per_second{{collective=\"AllReduce\",size_bucket=\"1MiB-4MiB\",rank=\"{rank}\",comm_name=\"tp0\"}} {}\n\
         collscope_findings{{code=\"none\",severity=\"info\"}} 0\n",
        f64::from(rank % 8 + 1) * 1e9
    )
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

/// Serves rank `rank`'s endpoint on `listener` until the process ends, one connection at a time.
fn serve(listener: TcpListener, rank: u32, nranks: u32) {
    let (metrics, summary) = (exposition(rank, nranks), summary(rank));
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
        let mut head = Vec::new();
        let mut reader = BufReader::new(&mut conn);
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
            head.extend_from_slice(line.as_bytes());
            line.clear();
        }
        let path = String::from_utf8_lossy(&head).split_whitespace().nth(1).unwrap_or_default().to_string();
        let (kind, body) = if path.starts_with(routes::SUMMARY) {
            ("application/json", summary.as_str())
        } else {
            ("text/plain; version=0.0.4", metrics.as_str())
        };
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = conn.write_all(answer.as_bytes());
    }
}

/// `n` rank endpoints on loopback ports, served by this process until it ends.
fn endpoints(n: u32) -> Vec<RankEndpoint> {
    (0..n)
        .map(|rank| {
            let l = TcpListener::bind("127.0.0.1:0").expect("listener");
            let url = format!("http://{}", l.local_addr().expect("address"));
            std::thread::Builder::new().stack_size(64 << 10).spawn(move || serve(l, rank, n)).expect("thread");
            RankEndpoint { rank, host: format!("node{}", rank / 8), url, pid: None, started: None }
        })
        .collect()
}

/// A real Prometheus scraping `targets` every 2 s as job [`JOB`], and its URL.
fn prometheus(dir: &std::path::Path, targets: &[RankEndpoint]) -> Option<(Child, String)> {
    let list: Vec<String> = targets.iter().map(|e| format!("\"{}\"", e.url.trim_start_matches("http://"))).collect();
    let config = format!(
        "global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\nscrape_configs:\n  - job_name: {JOB}\n    \
         static_configs:\n      - targets: [{}]\n",
        list.join(", ")
    );
    std::fs::write(dir.join("prometheus.yml"), config).ok()?;
    let port = TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
    let web = format!("127.0.0.1:{port}");
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    Some((child, format!("http://{web}")))
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
        let Some((mut prom, url)) = prometheus(&pdir, &eps) else {
            println!("# Prometheus did not start for {n} ranks");
            continue;
        };
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
        let _ = prom.kill();
        let _ = prom.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
