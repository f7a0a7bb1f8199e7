//! The whole job beside a `--connect` source: every second `/api/v1/job` of the connected process (every
//! rank's summary and the job-level findings), and the snapshot of the rank shown when it is another one
//! (from the endpoint the ranks exchanged at bootstrap). A server without `/api/v1/job` (a followed log)
//! sends nothing. A recording holds each job view as it came ([`FETCHED_JOB`]). Or the whole job alone, as the
//! caller reads it ([`JobFetch`]: the binary reads Prometheus).

use super::recording::Shared;
use super::stream::FETCHED_JOB;
use crate::live::{LinkState, Update};
use collscope_model::routes;
use collscope_model::{JobView, RankEndpoint, Snapshot};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the job view is fetched.
const EVERY: Duration = Duration::from_secs(1);
/// How long one fetch may take (`/api/v1/job` waits up to 2 s for a rank that does not answer).
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a [`JobFetch`] is called: Prometheus holds what it scraped, a scrape interval or so old.
const FETCH_EVERY: Duration = Duration::from_secs(2);

/// A job view read by the caller, called on the source's thread every [`FETCH_EVERY`]; its error is why it could
/// not be read.
#[derive(Clone)]
pub struct JobFetch(pub Arc<dyn Fn() -> Result<JobView, String> + Send + Sync>);

impl std::fmt::Debug for JobFetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobFetch")
    }
}

impl PartialEq for JobFetch {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Sends `fetch`'s job view every [`FETCH_EVERY`], and the link's state: live while it reads, disconnected (the
/// last view stays on screen) while it does not.
pub(super) fn follow_fetch(fetch: &JobFetch, tx: &Sender<Update>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let sent = match (fetch.0)() {
            Ok(job) => {
                tx.send(Update::Job(Box::new(job))).is_ok()
                    && tx.send(Update::Link(LinkState::Live { following: true })).is_ok()
            }
            Err(reason) => {
                let retry_in_s = FETCH_EVERY.as_secs();
                tx.send(Update::Link(LinkState::Disconnected { reason, retry_in_s })).is_ok()
            }
        };
        if !sent {
            return;
        }
        wait_out(started, FETCH_EVERY, stop);
    }
}

/// Sleeps until `every` has passed since `started`, waking early when `stop` is set.
fn wait_out(started: Instant, every: Duration, stop: &AtomicBool) {
    while started.elapsed() < every && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The rank the views show, when it is not the connected one: the terminal sets it, the poller reads it.
pub type Shown = Arc<Mutex<Option<RankEndpoint>>>;

fn get<T: serde::de::DeserializeOwned>(agent: &ureq::Agent, url: &str) -> Option<T> {
    let body = agent.get(url).call().ok()?.into_body().into_reader();
    serde_json::from_reader(body).ok()
}

/// Asks each of `urls` (the job's ranks) to write its dump (`POST /api/v1/dump`), on a thread of its own, and
/// sends what came of it as a notice: the files written, and each rank that did not.
pub fn request_dumps(urls: Vec<(u32, String)>, tx: Sender<Update>) {
    std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(FETCH_TIMEOUT)).build().into();
        let (mut files, mut failed) = (0, Vec::new());
        for (rank, url) in urls {
            let written =
                agent.post(&format!("{url}{}", routes::DUMP)).send_empty().map_err(|e| e.to_string()).and_then(|r| {
                    serde_json::from_reader::<_, Vec<String>>(r.into_body().into_reader()).map_err(|e| e.to_string())
                });
            match written {
                Ok(f) => files += f.len(),
                Err(e) => failed.push(format!("rank {rank}: {e}")),
            }
        }
        let mut notice = format!("dump: {files} files written");
        if !failed.is_empty() {
            notice.push_str(&format!(", not by {}", failed.join("; ")));
        }
        let _ = tx.send(Update::Notice(notice));
    });
}

/// Follows the job until `stop` or the UI hangs up, then closes the recording, so its file is whole.
pub(super) fn run(base: &str, shown: &Shown, recorder: Option<&Shared>, tx: &Sender<Update>, stop: &AtomicBool) {
    follow(base, shown, recorder, tx, stop);
    if let Some(r) = recorder {
        super::recording::close(r);
    }
}

fn follow(base: &str, shown: &Shown, recorder: Option<&Shared>, tx: &Sender<Update>, stop: &AtomicBool) {
    let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(FETCH_TIMEOUT)).build().into();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        if let Some(job) = get::<JobView>(&agent, &format!("{base}{}", routes::JOB)) {
            if let (Some(r), Ok(data)) = (recorder, serde_json::to_value(&job)) {
                if super::connect::record(r, FETCHED_JOB, data, tx).is_err() {
                    return;
                }
            }
            if tx.send(Update::Job(Box::new(job))).is_err() {
                return;
            }
        }
        if let Some(r) = recorder {
            if let Err(e) = super::recording::flush_due(r) {
                if tx.send(Update::Notice(e.to_string())).is_err() {
                    return;
                }
            }
        }
        let other = shown.lock().map(|s| s.clone()).unwrap_or_default();
        if let Some(rank) = other {
            if let Some(snapshot) = get::<Snapshot>(&agent, &format!("{}{}", rank.url, routes::SNAPSHOT)) {
                let update = Update::RankSnapshot { rank: rank.rank, snapshot: Box::new(snapshot) };
                if tx.send(update).is_err() {
                    return;
                }
            }
        }
        wait_out(started, EVERY, stop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// A real HTTP server on a loopback port that answers one `POST /api/v1/dump` with the file it wrote, and a
    /// port nothing listens on: the notice counts the file and names the rank that did not answer.
    #[test]
    fn asking_the_ranks_for_dumps_says_what_was_written_and_who_did_not() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).unwrap();
            let request = String::from_utf8_lossy(&buf[..n]).to_string();
            let body = r#"["/d/rank-00000.json"]"#;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            conn.write_all(head.as_bytes()).unwrap();
            conn.write_all(body.as_bytes()).unwrap();
            request
        });
        let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let (tx, rx) = mpsc::channel();
        request_dumps(vec![(0, format!("http://{addr}")), (1, format!("http://{closed}"))], tx);
        let got = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert!(server.join().unwrap().starts_with(&format!("POST {} ", routes::DUMP)));
        let Update::Notice(text) = got else { panic!("{got:?}") };
        assert!(text.starts_with("dump: 1 files written, not by rank 1: "), "{text}");
    }
}
