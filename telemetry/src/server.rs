//! The HTTP endpoints, served by axum on a current-thread tokio runtime in the telemetry thread, never in the
//! data path: `/metrics`, `/metrics/aggregate` (local rank 0, when aggregating), `/api/v1/snapshot`,
//! `/api/v1/summary` (this process's ranks, summarised), `/api/v1/job` (every rank's summary, fetched from the
//! endpoints the ranks exchanged at bootstrap, and the job-level findings), `/api/v1/events` (server-sent
//! events) and `/healthz`. The same thread drains the runtime's event queue.

use crate::aggregate::merge_expositions;
use crate::state::State;
use axum::extract::State as Shared_;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use collscope_model::job::{MAX_JOB_FINDINGS, MAX_JOB_RANKS};
use collscope_model::observe::Feed;
use collscope_model::{Event, JobView, RankSummary};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{broadcast, watch, Semaphore};

/// Prometheus text exposition format 0.0.4.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How long `/metrics/aggregate` and `/api/v1/job` wait for each other rank.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub recorder: Option<&'static dyn Feed>,
    pub peers: Vec<SocketAddr>,
    pub http: reqwest::Client,
    pub stop: watch::Receiver<bool>,
    /// An empty queue with capacity, traded for the runtime's full one at each drain.
    pub spare: Mutex<VecDeque<Event>>,
    /// Set by a clean shutdown, so the event stream's last event says so.
    pub clean_end: AtomicBool,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in one handler leaves the state usable (every update is a whole record): keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes what the runtime queued, and what its communicators' records gained, into the state.
    pub fn drain(&self) {
        let Some(rec) = self.recorder else { return };
        let mut events = self.spare.lock().map(|mut s| std::mem::take(&mut *s)).unwrap_or_default();
        rec.drain_into(&mut events);
        let sources = rec.sources();
        let mut st = self.lock();
        for ev in events.drain(..) {
            st.apply(ev);
        }
        for r in &sources {
            st.absorb(r.as_ref());
        }
        st.retain_sources(&sources.iter().map(|r| r.id()).collect::<Vec<_>>());
        st.note_queue_drops(rec.dropped());
        drop(st);
        // Keep the emptied buffer's capacity for the next swap with the runtime's queue.
        if let Ok(mut s) = self.spare.lock() {
            *s = events;
        }
    }
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/metrics/aggregate", get(aggregate))
        .route("/api/v1/snapshot", get(snapshot))
        .route("/api/v1/summary", get(summary))
        .route("/api/v1/job", get(job))
        .route("/api/v1/events", get(events))
        .route("/healthz", get(|| async { "ok\n" }))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "not found; endpoints: /metrics, /metrics/aggregate, /api/v1/snapshot, /api/v1/summary, /api/v1/job, \
                 /api/v1/events, /healthz\n",
            )
        })
        .with_state(shared)
}

/// Serves `app` until `stop`: HTTP/1.1, each connection given `header_timeout` to send each request's head
/// (a client that connects and sends nothing, or stops halfway, is closed then), at most `max_connections` at
/// once (past them a new connection gets 503 and is closed). On stop, requests in flight get a second to finish.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    header_timeout: Duration,
    max_connections: usize,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(max_connections));
    let graceful = GracefulShutdown::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors or memory, or a connection reset before it was taken: wait a little rather
                    // than spin (what axum's own loop does).
                    collscope_debug::nccl_warn!("collscope telemetry server: accept failed: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
            _ = stop.wait_for(|s| *s) => break,
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            // Best effort and without waiting: the client learns why instead of hanging.
            let _ = stream.try_write(busy().as_bytes());
            continue;
        };
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), graceful.shutdown()).await;
}

/// The answer to a connection past the cap.
fn busy() -> String {
    let body = "collscope: too many connections, try again in a while\n";
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Drains the runtime's queue every `interval` and once more when asked to stop.
pub(crate) async fn drain_loop(shared: Arc<Shared>, interval: Duration) {
    let mut stop = shared.stop.clone();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                shared.drain();
                shared.lock().tick();
            }
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    shared.drain();
    shared.lock().tick();
}

fn own_metrics(shared: &Shared) -> Result<String, prometheus::Error> {
    shared.drain();
    shared.lock().metrics_text()
}

fn metrics_failed(e: prometheus::Error) -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode metrics: {e}\n")).into_response()
}

async fn metrics(Shared_(shared): Shared_<Arc<Shared>>) -> Response {
    match own_metrics(&shared) {
        Ok(text) => ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text).into_response(),
        Err(e) => metrics_failed(e),
    }
}

/// Fetches `urls` from the other ranks at once, each within [`PEER_TIMEOUT`].
async fn fetch_all(shared: &Shared, urls: Vec<String>) -> Vec<(String, Result<String, reqwest::Error>)> {
    let fetches = urls.into_iter().map(|url| {
        let req = shared.http.get(&url).timeout(PEER_TIMEOUT);
        async move {
            let text = async { req.send().await?.error_for_status()?.text().await }.await;
            (url, text)
        }
    });
    futures_util::future::join_all(fetches).await
}

async fn aggregate(Shared_(shared): Shared_<Arc<Shared>>) -> Response {
    let own = match own_metrics(&shared) {
        Ok(t) => t,
        Err(e) => return metrics_failed(e),
    };
    let urls = shared.peers.iter().map(|peer| format!("http://{peer}/metrics")).collect();
    let mut texts = vec![own];
    let mut up = String::from(
        "# HELP collscope_aggregate_peer_up Whether a local rank's /metrics answered this aggregation.\n\
         # TYPE collscope_aggregate_peer_up gauge\n",
    );
    for (peer, (_, text)) in shared.peers.iter().zip(fetch_all(&shared, urls).await) {
        let ok = text.is_ok();
        if let Ok(t) = text {
            texts.push(t);
        }
        up.push_str(&format!("collscope_aggregate_peer_up{{peer=\"{peer}\"}} {}\n", u8::from(ok)));
    }
    texts.push(up);
    ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], merge_expositions(&texts)).into_response()
}

/// A failed fetch with its causes ("connection refused", "operation timed out"), not only reqwest's summary.
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// This process's ranks, summarised.
async fn summary(Shared_(shared): Shared_<Arc<Shared>>) -> Response {
    shared.drain();
    let snap = shared.lock().snapshot();
    axum::Json(RankSummary::of(&snap, now_us())).into_response()
}

/// Every rank's summary: this process's own, the others' from their `/api/v1/summary` (a rank that does not
/// answer is listed as unreachable), then the job-level rules over them. At most [`MAX_JOB_RANKS`] ranks and
/// [`MAX_JOB_FINDINGS`] findings.
async fn job(Shared_(shared): Shared_<Arc<Shared>>) -> Response {
    shared.drain();
    let snap = shared.lock().snapshot();
    let mut ranks = RankSummary::of(&snap, now_us());
    let others: Vec<_> =
        snap.endpoints.into_iter().filter(|e| !ranks.iter().any(|r| r.rank == e.rank)).take(MAX_JOB_RANKS).collect();
    let urls = others.iter().map(|e| format!("{}/api/v1/summary", e.url)).collect();
    for (endpoint, (_, answer)) in others.iter().zip(fetch_all(&shared, urls).await) {
        let parsed = answer.map_err(|e| describe(&e)).and_then(|text| {
            serde_json::from_str::<Vec<RankSummary>>(&text).map_err(|e| format!("not a summary: {e}"))
        });
        match parsed {
            Ok(summaries) => ranks.extend(summaries.into_iter().filter(|s| s.rank == endpoint.rank)),
            Err(e) => ranks.push(RankSummary::unreachable(endpoint, e)),
        }
    }
    ranks.sort_by_key(|r| r.rank);
    ranks.dedup_by_key(|r| r.rank);
    ranks.truncate(MAX_JOB_RANKS);
    let mut view = JobView { ranks, findings: Vec::new() };
    view.findings = collscope_diagnose::diagnose_job(&view);
    view.findings.truncate(MAX_JOB_FINDINGS);
    axum::Json(view).into_response()
}

async fn snapshot(Shared_(shared): Shared_<Arc<Shared>>) -> Response {
    shared.drain();
    let snap = shared.lock().snapshot();
    axum::Json(snap).into_response()
}

fn sse_event(ev: &Event) -> SseEvent {
    match serde_json::to_string(ev) {
        Ok(json) => SseEvent::default().event(ev.kind()).data(json),
        Err(e) => SseEvent::default().event("error").data(e.to_string()),
    }
}

/// The stream's last event when the server stops: `{"clean": true}` after a clean shutdown (the job finished),
/// `false` when the process is going down otherwise (a failed rank).
const END_EVENT: &str = "end";

async fn events(Shared_(shared): Shared_<Arc<Shared>>) -> impl IntoResponse {
    let rx = shared.lock().subscribe();
    let state = (rx, shared, false);
    let stream = futures_util::stream::unfold(state, |(mut rx, shared, ended)| async move {
        if ended {
            return None;
        }
        let mut stop = shared.stop.clone();
        let item = tokio::select! {
            r = rx.recv() => match r {
                Ok(ev) => sse_event(&ev),
                // A slow reader missed some: say how many, then go on with the newest.
                Err(broadcast::error::RecvError::Lagged(n)) => SseEvent::default().event("lagged").data(n.to_string()),
                Err(broadcast::error::RecvError::Closed) => return None,
            },
            _ = stop.wait_for(|s| *s) => {
                let clean = shared.clean_end.load(Ordering::Acquire);
                let end = SseEvent::default().event(END_EVENT).data(format!("{{\"clean\":{clean}}}"));
                return Some((Ok::<_, Infallible>(end), (rx, shared, true)));
            }
        };
        Some((Ok::<_, Infallible>(item), (rx, shared, false)))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[cfg(test)]
mod tests {
    use crate::{Telemetry, TelemetryConfig};
    use collscope_model::Source;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    fn start(header_timeout: Duration, max_connections: usize) -> Telemetry {
        let mut cfg = TelemetryConfig::new("127.0.0.1:0".parse().unwrap());
        cfg.header_timeout = header_timeout;
        cfg.max_connections = max_connections;
        Telemetry::start(&cfg, Source::Runtime, None).unwrap()
    }

    fn connect(t: &Telemetry) -> TcpStream {
        let s = TcpStream::connect(t.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// Sends a whole request and reads the answer to the end (the request asks to close). A connection past the
    /// cap may be answered and closed before the request is written, so a failed write still reads the answer.
    fn ask(t: &Telemetry, path: &str) -> String {
        let mut s = connect(t);
        let _ = write!(s, "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// Reads until the server closes the connection; returns what it sent.
    fn until_closed(s: &mut TcpStream) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        out
    }

    #[test]
    fn a_client_that_sends_no_whole_head_in_time_is_closed() {
        let t = start(Duration::from_millis(500), 64);
        let started = Instant::now();
        let mut silent = connect(&t);
        let mut halfway = connect(&t);
        halfway.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n").unwrap();
        for s in [&mut silent, &mut halfway] {
            let sent = until_closed(s);
            assert!(!String::from_utf8_lossy(&sent).contains("200 OK"), "no answer to half a request");
        }
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(400) && took < Duration::from_secs(10), "closed after {took:?}");
        assert!(ask(&t, "/healthz").starts_with("HTTP/1.1 200 OK"), "a whole request is still served");
    }

    #[test]
    fn connections_past_the_cap_get_503_until_one_goes() {
        let t = start(Duration::from_secs(60), 4);
        let mut held: Vec<TcpStream> = (0..4).map(|_| connect(&t)).collect();
        // Accepted in order: wait until the server holds all four, then one more is refused at once.
        let until = Instant::now() + Duration::from_secs(20);
        let refused = loop {
            let answer = ask(&t, "/healthz");
            if answer.starts_with("HTTP/1.1 503") {
                break answer;
            }
            assert!(Instant::now() < until, "the fifth connection was never refused: {answer}");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(refused.contains("too many connections"), "{refused}");
        held.pop();
        let until = Instant::now() + Duration::from_secs(20);
        while !ask(&t, "/healthz").starts_with("HTTP/1.1 200 OK") {
            assert!(Instant::now() < until, "a freed place was never taken again");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
