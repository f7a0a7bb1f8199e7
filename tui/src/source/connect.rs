//! `--connect URL`: a running collscope. Takes `/api/v1/snapshot`, then follows `/api/v1/events`; when the
//! process goes away it reports "disconnected" and retries with a growing pause. While recording it takes the
//! snapshot again every [`KEYFRAME_EVERY`], so a replay seeks from the nearest one rather than from the start.

use super::recording::{self, Shared};
use super::sse::read_events;
use super::stream::{Decoded, FETCHED_SNAPSHOT, KEYFRAME};
use super::SourceError;
use crate::live::{LinkState, Update};
use collscope_model::routes::{self, StreamEnd, END_EVENT};
use std::io::BufReader;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

/// Longest pause between retries.
const MAX_RETRY_S: u64 = 5;
/// A stream silent for this long (no event, no keep-alive) is taken as lost.
const STREAM_IDLE: Duration = Duration::from_secs(30);
/// How often a recording takes a whole snapshot (a keyframe) while events arrive.
pub(super) const KEYFRAME_EVERY: Duration = Duration::from_secs(10);

/// `http://host:port` without a trailing slash; `host:port` alone means HTTP, as the server prints its address.
pub(super) fn base_url(url: &str) -> Result<String, SourceError> {
    let trimmed = url.trim().trim_end_matches('/');
    let rest = match trimmed.split_once("://") {
        Some(("http", rest)) => rest,
        Some(_) => return Err(SourceError::Url { url: url.to_string() }),
        None => trimmed,
    };
    if rest.is_empty() || rest.contains(char::is_whitespace) {
        return Err(SourceError::Url { url: url.to_string() });
    }
    Ok(format!("http://{rest}"))
}

pub(super) fn run(base: &str, recorder: Option<&Shared>, tx: &Sender<Update>, stop: &AtomicBool) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(2)))
        .timeout_per_read(Some(STREAM_IDLE))
        .build()
        .into();
    let mut retry_s = 1;
    while !stop.load(Ordering::Relaxed) {
        let reason = match session(&agent, base, recorder, tx, stop, &mut retry_s) {
            Ok(Some(clean)) => {
                // The process said it was ending: nothing to reconnect to.
                let _ = tx.send(Update::Link(LinkState::Finished { clean }));
                return;
            }
            Ok(None) => "the event stream ended".to_string(),
            Err(e) => e,
        };
        if stop.load(Ordering::Relaxed) {
            return;
        }
        if tx.send(Update::Link(LinkState::Disconnected { reason, retry_in_s: retry_s })).is_err() {
            return;
        }
        for _ in 0..retry_s * 10 {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        retry_s = (retry_s * 2).min(MAX_RETRY_S);
    }
}

/// One connection: the snapshot, then events until the stream ends; `Some(clean)` when the server said it
/// was stopping. Errors are reasons for the status bar.
fn session(
    agent: &ureq::Agent,
    base: &str,
    recorder: Option<&Shared>,
    tx: &Sender<Update>,
    stop: &AtomicBool,
    retry_s: &mut u64,
) -> Result<Option<bool>, String> {
    fetch_snapshot(agent, base, recorder, tx)?;
    let mut keyframe = Instant::now();
    *retry_s = 1;
    tx.send(Update::Link(LinkState::Live { following: true })).map_err(|e| e.to_string())?;
    let events = agent.get(format!("{base}{}", routes::EVENTS)).call().map_err(|e| e.to_string())?;
    let mut failure = None;
    let mut ended = None;
    read_events(BufReader::new(events.into_body().into_reader()), |e| {
        if e.event == END_EVENT {
            ended = Some(serde_json::from_str::<StreamEnd>(&e.data).is_ok_and(|end| end.clean));
            return false;
        }
        let step = serde_json::from_str(&e.data)
            .map_err(|err| format!("event '{}' is not JSON: {err}", e.event))
            .and_then(|data| deliver(&e.event, data, recorder, tx))
            .and_then(|refetch| if refetch { fetch_snapshot(agent, base, recorder, tx) } else { Ok(()) })
            .and_then(|()| match recorder.filter(|_| keyframe.elapsed() >= KEYFRAME_EVERY) {
                Some(r) => {
                    keyframe = Instant::now();
                    take_keyframe(agent, base, r, tx)
                }
                None => Ok(()),
            });
        if let Err(err) = step {
            failure = Some(err);
            return false;
        }
        !stop.load(Ordering::Relaxed)
    })
    .map_err(|e| e.to_string())?;
    failure.map_or(Ok(ended), Err)
}

fn get_snapshot(agent: &ureq::Agent, base: &str) -> Result<serde_json::Value, String> {
    agent
        .get(format!("{base}{}", routes::SNAPSHOT))
        .call()
        .map_err(|e| e.to_string())
        .and_then(|r| serde_json::from_reader(r.into_body().into_reader()).map_err(|e| e.to_string()))
}

fn fetch_snapshot(
    agent: &ureq::Agent,
    base: &str,
    recorder: Option<&Shared>,
    tx: &Sender<Update>,
) -> Result<(), String> {
    deliver(FETCHED_SNAPSHOT, get_snapshot(agent, base)?, recorder, tx).map(|_| ())
}

/// Records the whole snapshot as a keyframe, which a replay seeks from but never plays (the session goes on
/// from its events: a snapshot taken while events are in flight would count their traffic twice).
fn take_keyframe(agent: &ureq::Agent, base: &str, recorder: &Shared, tx: &Sender<Update>) -> Result<(), String> {
    record(recorder, KEYFRAME, get_snapshot(agent, base)?, tx)
}

/// Records and forwards one event; returns whether the snapshot must be fetched again.
fn deliver(
    event: &str,
    data: serde_json::Value,
    recorder: Option<&Shared>,
    tx: &Sender<Update>,
) -> Result<bool, String> {
    let decoded = super::decode(event, &data).map_err(|e| e.to_string())?;
    match decoded {
        Decoded::Update(u) => {
            if let Some(r) = recorder {
                record(r, event, data, tx)?;
            }
            tx.send(u).map_err(|e| e.to_string())?;
            Ok(false)
        }
        Decoded::Refetch => Ok(true),
        Decoded::Skip => Ok(false),
    }
}

/// Records one event; a recording that cannot go on (full, or the disk refused it) is said on screen and the
/// session goes on without it.
pub(super) fn record(
    recorder: &Shared,
    event: &str,
    data: serde_json::Value,
    tx: &Sender<Update>,
) -> Result<(), String> {
    match recording::record(recorder, event, data) {
        Ok(()) => Ok(()),
        Err(e) => tx.send(Update::Notice(e.to_string())).map_err(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::stream::FETCHED_JOB;
    use super::*;
    use crate::fixture;
    use collscope_model::Event;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;

    #[test]
    fn urls_are_http_host_port_with_or_without_the_scheme() {
        assert_eq!(base_url("http://127.0.0.1:9470/").unwrap(), "http://127.0.0.1:9470");
        assert_eq!(base_url("127.0.0.1:9470").unwrap(), "http://127.0.0.1:9470");
        assert_eq!(base_url("localhost:9470/").unwrap(), "http://localhost:9470");
        for bad in ["https://localhost:9470", "ftp://host:1", "", "local host:9470"] {
            let err = base_url(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("'{bad}'")) && err.contains("HOST:PORT"), "{err}");
        }
    }

    const TRAFFIC: &str = r#"{"kind":"traffic","data":{"rank":3,"channel":0,"peer":4,"direction":"send","transport":"NET","bytes":4096,"seconds":0.01}}"#;

    /// A real HTTP server on a loopback port: the snapshot, an events stream with a traffic event and a "fetch
    /// the snapshot again" event, the snapshot again, then nothing (the port closes), so the source must say
    /// "disconnected"; beside them the job view, which the recording holds too.
    #[test]
    fn takes_the_snapshot_follows_events_then_reports_the_loss() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let snapshot = serde_json::to_string(&fixture::snapshot()).unwrap();
        let job = collscope_model::JobView { not_arrived_after_s: Some(7.0), ..Default::default() };
        let job = serde_json::to_string(&job).unwrap();
        let server = std::thread::spawn(move || {
            let mut answered = 0;
            while answered < 3 {
                let (mut conn, _) = listener.accept().unwrap();
                let mut buf = [0u8; 4096];
                let n = conn.read(&mut buf).unwrap();
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                let (ctype, body) = if request.starts_with(&format!("GET {} ", routes::JOB)) {
                    ("application/json", job.clone())
                } else if request.starts_with(&format!("GET {} ", routes::SNAPSHOT)) {
                    answered += 1;
                    ("application/json", snapshot.clone())
                } else {
                    answered += 1;
                    ("text/event-stream", format!(": hi\n\nevent: traffic\ndata: {TRAFFIC}\n\nevent: snapshot\ndata: {{\"kind\":\"snapshot\"}}\n\n"))
                };
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                conn.write_all(head.as_bytes()).unwrap();
                conn.write_all(body.as_bytes()).unwrap();
            }
        });
        let dir = std::env::temp_dir().join(format!("collscope-tui-connect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rec = dir.join("rec.jsonl.gz");
        let (tx, rx) = mpsc::channel();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let spec = super::super::SourceSpec::Connect { url: format!("http://{addr}"), record: Some(rec.clone()) };
        let worker = super::super::spawn(spec, tx, mpsc::channel().1, stop.clone(), Default::default()).unwrap();
        let (mut got, mut jobs) = (Vec::new(), 0);
        while !matches!(got.last(), Some(Update::Link(LinkState::Disconnected { .. }))) {
            match rx.recv_timeout(Duration::from_secs(10)).expect("an update within 10 s") {
                Update::Job(j) if j.not_arrived_after_s == Some(7.0) => jobs += 1,
                u => got.push(u),
            }
        }
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
        worker.join().unwrap();
        assert!(jobs > 0, "the job view came beside the stream");
        assert!(matches!(&got[0], Update::Snapshot(s) if s.nranks == Some(8)));
        assert_eq!(got[1], Update::Link(LinkState::Live { following: true }));
        assert!(matches!(&got[2], Update::Event(e) if matches!(**e, Event::Traffic(ref t) if t.bytes == 4096)));
        assert!(matches!(&got[3], Update::Snapshot(_)), "the snapshot event makes the source fetch it again");
        assert!(matches!(&got[4], Update::Link(LinkState::Disconnected { retry_in_s: 1, .. })), "{:?}", got[4]);
        // The recording is whole once its last writer, the job's thread, has seen `stop` and ended.
        let names = || -> Vec<String> {
            let recorded = super::super::recording::read(&rec).unwrap();
            recorded.into_iter().map(|e| e.event).collect()
        };
        let recorded = collscope_testkit::poll("the whole recording", Duration::from_secs(10), || {
            let names = names();
            if names.iter().any(|n| n == FETCHED_JOB) && names.len() >= 3 + jobs {
                Ok(names)
            } else {
                Err(names)
            }
        });
        let stream: Vec<&String> = recorded.iter().filter(|n| *n != FETCHED_JOB).collect();
        assert_eq!(stream, [FETCHED_SNAPSHOT, "traffic", FETCHED_SNAPSHOT]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
