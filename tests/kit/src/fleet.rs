//! A job at fleet scale without a fleet (issue 54): many synthetic rank endpoints served by the calling process,
//! and a real Prometheus (Debian package `prometheus`) that scrapes them, for the tests and the bench that read the
//! job view through Prometheus.

use crate::Proc;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// The content type of a Prometheus text exposition.
pub const EXPOSITION: &str = "text/plain; version=0.0.4";

/// What a rank's endpoint answers for a path: a content type and a body, or `None` for 503 (a rank that stopped
/// answering).
pub type Answer = dyn Fn(u32, &str) -> Option<(&'static str, String)> + Send + Sync;

/// Rank `rank`'s `/metrics` as collscope exposes them, the series the job view through Prometheus reads: its
/// communicator `tp0` on host `node{rank / 8}`, its oldest call in flight `in_flight_age_s` old (0: none; a call
/// in flight also raises `rank_not_arrived` on it), its last completion, and a bus bandwidth of
/// `(rank % 8 + 1)` GB/s.
pub fn exposition(rank: u32, nranks: u32, in_flight_age_s: f64) -> String {
    let host = format!("node{}", rank / 8);
    let busbw = f64::from(rank % 8 + 1) * 1e9;
    let stuck = u8::from(in_flight_age_s > 0.0);
    format!(
        "collscope_communicator_info{{comm=\"tp0\",rank=\"{rank}\",nranks=\"{nranks}\",nnodes=\"1\",version=\"2.28.9\",host=\"{host}\"}} 1\n\
         collscope_collective_in_flight_oldest_age_seconds{{rank=\"{rank}\",comm=\"tp0\"}} {in_flight_age_s}\n\
         collscope_collective_last_completion_timestamp_seconds{{rank=\"{rank}\",comm=\"tp0\"}} 1.7e9\n\
         collscope_collective_bus_bandwidth_bytes_per_second{{collective=\"AllReduce\",size_bucket=\"1MiB-4MiB\",rank=\"{rank}\",comm_name=\"tp0\"}} {busbw}\n\
         collscope_findings{{code=\"rank_not_arrived\",severity=\"error\"}} {stuck}\n"
    )
}

/// Serves `n` ranks' endpoints on loopback ports until the process ends (a small thread per rank, one
/// connection at a time), each answering as `answer` says; returns their `HOST:PORT`s in rank order.
pub fn serve_ranks(n: u32, answer: Arc<Answer>) -> Vec<String> {
    (0..n)
        .map(|rank| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("a port for rank {rank}: {e}"));
            let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_else(|e| panic!("rank {rank}'s port: {e}"));
            let answer = Arc::clone(&answer);
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || serve(&l, rank, &*answer))
                .unwrap_or_else(|e| panic!("a thread for rank {rank}: {e}"));
            addr
        })
        .collect()
}

fn serve(listener: &TcpListener, rank: u32, answer: &Answer) {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
        let mut reader = BufReader::new(&mut conn);
        let mut request = String::new();
        let _ = reader.read_line(&mut request);
        // The rest of the head, unread.
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
            line.clear();
        }
        let path = request.split_whitespace().nth(1).unwrap_or_default();
        let reply = match answer(rank, path) {
            Some((kind, body)) => format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
            None => "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
        };
        let _ = conn.write_all(reply.as_bytes());
    }
}

/// A Prometheus configuration that scrapes `targets` (`HOST:PORT`) every `interval_s` seconds as job `job`.
pub fn static_config(job: &str, interval_s: u32, targets: &[String]) -> String {
    let list: Vec<String> = targets.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "global:\n  scrape_interval: {interval_s}s\n  scrape_timeout: {interval_s}s\nscrape_configs:\n  - job_name: \
         {job}\n    static_configs:\n      - targets: [{}]\n",
        list.join(", ")
    )
}

/// A real Prometheus on `config` (written to `dir/prometheus.yml`), its data in `dir/data`, serving its API on a
/// free loopback port until `limit`; the process and its `HOST:PORT`. Panics, naming the package, when
/// `prometheus` cannot be started.
pub fn prometheus(dir: &Path, config: &str, limit: Duration) -> (Proc, String) {
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, config).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let web = format!("127.0.0.1:{}", crate::free_ports(1));
    let proc = Proc::spawn(
        Command::new("prometheus")
            .arg(format!("--config.file={}", file.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        limit,
    );
    (proc, web)
}
