//! `/api/v1/job` against hostile endpoints (issue 48): planted URLs that name this server or carry a path, a peer
//! that redirects, and peers that answer far more than a summary, asked by many clients at once. Real servers on
//! loopback ports the OS picks.

use collscope_model::{Event, JobView, RankEndpoint, RankState, Source};
use collscope_runtime::observe::recorder::Recorder;
use collscope_telemetry::{Telemetry, TelemetryConfig};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn victim() -> (Telemetry, &'static Recorder) {
    let rec: &'static Recorder = Box::leak(Box::new(Recorder::new()));
    let t =
        Telemetry::start(&TelemetryConfig::new("127.0.0.1:0".parse().unwrap()), Source::Runtime, Some(rec)).unwrap();
    (t, rec)
}

fn endpoint(rank: u32, url: String) -> RankEndpoint {
    RankEndpoint { rank, host: "h".into(), url, pid: None, started: None }
}

fn job(t: &Telemetry) -> JobView {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let r = client.get(format!("{}/api/v1/job", t.url())).send().unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    serde_json::from_str(&r.text().unwrap()).unwrap()
}

/// The error the job view gives `rank`, which must be listed as unreachable.
fn why(view: &JobView, rank: u32) -> String {
    let r = view.ranks.iter().find(|r| r.rank == rank).unwrap_or_else(|| panic!("rank {rank} missing: {view:?}"));
    assert_eq!(r.state, RankState::Unreachable, "{r:?}");
    r.error.clone().unwrap_or_default()
}

/// A peer on loopback that answers every request with `answer` (the head and what follows it), then `body`
/// bytes of spaces until the client stops reading; counts the body bytes it got out.
fn peer(answer: String, body: u64) -> (String, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let sent = Arc::new(AtomicU64::new(0));
    let count = sent.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let (answer, count) = (answer.clone(), count.clone());
            std::thread::spawn(move || {
                let _ = conn.set_write_timeout(Some(Duration::from_secs(10)));
                let mut head = [0u8; 4096];
                let _ = conn.read(&mut head);
                if conn.write_all(answer.as_bytes()).is_err() {
                    return;
                }
                let chunk = [b' '; 64 << 10];
                let mut left = body;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if conn.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    count.fetch_add(n as u64, Ordering::Relaxed);
                    left -= n as u64;
                }
            });
        }
    });
    (url, sent)
}

/// This process's peak resident memory (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn planted_endpoints_naming_this_server_or_a_path_are_refused_with_why() {
    let (t, rec) = victim();
    rec.push(Event::Endpoints(vec![
        endpoint(1, t.url()),
        endpoint(2, format!("{}/api/v1/job?", t.url())),
        endpoint(3, format!("http://localhost:{}", t.addr().port())),
        endpoint(4, "http://attacker@127.0.0.1:1".into()),
    ]));
    let view = job(&t);
    for rank in [1, 3] {
        let e = why(&view, rank);
        assert!(e.contains("refused endpoint") && e.contains("this process's own server"), "rank {rank}: {e}");
    }
    for rank in [2, 4] {
        let e = why(&view, rank);
        assert!(e.contains("refused endpoint") && e.contains("without a path, query or user"), "rank {rank}: {e}");
    }
}

#[test]
fn a_redirect_is_not_followed() {
    let (t, rec) = victim();
    let location = format!("{}/api/v1/job", t.url());
    let answer =
        format!("HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let (url, _) = peer(answer, 0);
    rec.push(Event::Endpoints(vec![endpoint(1, url)]));
    let e = why(&job(&t), 1);
    assert!(e.contains("302") && e.contains("redirects are not followed"), "{e}");
}

/// 16 clients ask for the job view at once; four planted ranks each answer 8 MiB (no length given, so only
/// reading tells). Unbounded, that is up to 16 x 4 x 8 MiB read into memory; bounded, one view is built at a
/// time and each answer stops at the summary cap.
#[test]
fn huge_answers_to_many_parallel_job_requests_stay_bounded() {
    const BODY: u64 = 8 << 20;
    /// What the victim's peak memory may grow by: the capped answers (4 x 1 MiB), the socket buffers and the
    /// allocator's slack, far below the 512 MiB of the unbounded reads.
    const MAX_GROWTH_KIB: u64 = 64 << 10;
    let (t, rec) = victim();
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n".to_string();
    let (url, sent) = peer(head, BODY);
    rec.push(Event::Endpoints((1..=4).map(|r| endpoint(r, url.clone())).collect()));
    let before = peak_rss_kib();
    let views: Vec<JobView> = std::thread::scope(|s| {
        let asks: Vec<_> = (0..16).map(|_| s.spawn(|| job(&t))).collect();
        asks.into_iter().map(|a| a.join().unwrap()).collect()
    });
    let growth = peak_rss_kib().saturating_sub(before);
    let sent_mib = sent.load(Ordering::Relaxed) >> 20;
    eprintln!("peak RSS grew by {growth} KiB; the peer got {sent_mib} MiB out");
    for view in &views {
        for rank in 1..=4 {
            let e = why(view, rank);
            assert!(e.contains(&format!("rank {rank}")) && e.contains("more than 1048576 bytes"), "{e}");
        }
    }
    assert!(growth < MAX_GROWTH_KIB, "peak RSS grew by {growth} KiB (the peer got {sent_mib} MiB out)");
}
