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
        while started.elapsed() < FETCH_EVERY && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The rank the views show, when it is not the connected one: the terminal sets it, the poller reads it.
pub type Shown = Arc<Mutex<Option<RankEndpoint>>>;

fn get<T: serde::de::DeserializeOwned>(agent: &ureq::Agent, url: &str) -> Option<T> {
    let body = agent.get(url).call().ok()?.into_body().into_reader();
    serde_json::from_reader(body).ok()
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
        while started.elapsed() < EVERY && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
