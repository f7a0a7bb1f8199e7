//! The HTTP endpoints, served by axum on a current-thread tokio runtime in the telemetry thread, never in the
//! data path: `/metrics`, `/metrics/aggregate` (local rank 0, when aggregating), `/api/v1/snapshot`,
//! `/api/v1/summary` (this process's ranks, summarised), `/api/v1/job` (every rank's summary, fetched from the
//! endpoints the ranks exchanged at bootstrap, and the job-level findings: [`crate::job`]), `/api/v1/events`
//! (server-sent events, on a cap of their own) and `/healthz`. The same thread drains the runtime's event queue.

use crate::aggregate::merge_expositions;
use crate::dump::DumpWriteError;
use crate::job::{self, MAX_METRICS_BYTES, PEER_TIMEOUT};
use crate::state::{now_us, State};
use axum::extract::State as Shared_;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use collscope_model::observe::Feed;
use collscope_model::routes::{self, StreamEnd};
use collscope_model::{DumpReason, Event, JobView, RankSummary, Source};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{broadcast, watch, Semaphore};

/// Prometheus text exposition format 0.0.4.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub recorder: Option<&'static dyn Feed>,
    /// Where this server listens: an endpoint naming it is not fetched by the job view.
    pub addr: SocketAddr,
    pub peers: Vec<SocketAddr>,
    pub http: reqwest::Client,
    /// The last job view and when it was built: one is built at a time, and requests meanwhile share it.
    pub job: tokio::sync::Mutex<Option<(Instant, JobView)>>,
    /// `COLLSCOPE_NOT_ARRIVED_S`, for the job view's rules.
    pub not_arrived_after: std::time::Duration,
    /// Event streams' places ([`crate::config::MAX_STREAMS`]).
    pub streams: Arc<Semaphore>,
    pub stop: watch::Receiver<bool>,
    /// An empty queue with capacity, traded for the runtime's full one at each drain.
    pub spare: Mutex<VecDeque<Event>>,
    /// Set by a clean shutdown, so the event stream's last event says so.
    pub clean_end: AtomicBool,
    /// `COLLSCOPE_DUMP_DIR`.
    pub dump_dir: Option<PathBuf>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in one handler leaves the state usable (every update is a whole record): keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes what the runtime queued, and what its communicators' records gained, into the state.
    pub(crate) fn drain(&self) {
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
        let due = st.take_dump_due();
        drop(st);
        if let Some(reason) = due {
            // Best effort: the job is failing, and what could not be written is said.
            if let Err(e) = self.dump(reason) {
                collscope_debug::nccl_warn!("collscope telemetry: {e}");
            }
        }
        // Keep the emptied buffer's capacity for the next swap with the runtime's queue.
        if let Ok(mut s) = self.spare.lock() {
            *s = events;
        }
    }
}

impl Shared {
    /// Writes each of this process's ranks' dump, from the snapshot as it is now, to `COLLSCOPE_DUMP_DIR` (none
    /// without it).
    pub(crate) fn dump(&self, reason: DumpReason) -> Result<Vec<PathBuf>, DumpWriteError> {
        let Some(dir) = &self.dump_dir else { return Ok(Vec::new()) };
        let dumps = self.lock().dumps(reason);
        dumps.iter().map(|d| crate::dump::write(dir, d)).collect()
    }
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(routes::METRICS, get(metrics))
        .route(routes::METRICS_AGGREGATE, get(aggregate))
        .route(routes::SNAPSHOT, get(snapshot))
        .route(routes::SUMMARY, get(summary))
        .route(routes::JOB, get(job))
        .route(routes::EVENTS, get(events))
        .route(routes::HEALTHZ, get(|| async { "ok\n" }))
        .route(routes::DUMP, post(dump))
        .fallback(|| async { (StatusCode::NOT_FOUND, format!("not found; endpoints: {}\n", routes::ALL.join(", "))) })
        .with_state(shared)
}

/// What one server allows its clients.
pub(crate) struct Limits {
    pub header_timeout: Duration,
    pub write_timeout: Duration,
    pub max_connections: usize,
}

/// Serves `app` until `stop`: HTTP/1.1, each connection given `header_timeout` to send each request's head
/// (a client that connects and sends nothing, or stops halfway, is closed then) and `write_timeout` to take each
/// write (a client that stops reading is closed then), at most `max_connections` at once (past them a new
/// connection gets 503 and is closed). On stop, requests in flight get a second to finish.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
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
            .header_read_timeout(limits.header_timeout)
            .serve_connection(
                TokioIo::new(WriteTimeout::new(stream, limits.write_timeout)),
                TowerToHyperService::new(app.clone()),
            );
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), graceful.shutdown()).await;
}

/// A connection whose writes wait at most `limit` for the client to read: a write still pending then fails, and
/// hyper closes the connection (and with it an event stream nobody drains, and its place).
struct WriteTimeout<T> {
    io: T,
    limit: Duration,
    /// Started when a write first waits; reset by any write that goes through.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteTimeout<T> {
    fn new(io: T, limit: Duration) -> Self {
        WriteTimeout { io, limit, stalled: None }
    }

    /// `r`, or a timeout once writes have waited `limit`.
    fn watch<R>(&mut self, cx: &mut Context<'_>, r: Poll<std::io::Result<R>>) -> Poll<std::io::Result<R>> {
        if r.is_ready() {
            self.stalled = None;
            return r;
        }
        let limit = self.limit;
        let stalled = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the client read nothing for {} s", limit.as_secs_f32()),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteTimeout<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.watch(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_shutdown(cx);
        self.watch(cx, r)
    }
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

/// `POST /api/v1/dump`: this process's ranks write their dumps now; the answer is the files written (JSON), or
/// why none (409 without `COLLSCOPE_DUMP_DIR`, 500 when writing failed).
async fn dump(Shared_(shared): Shared_<Arc<Shared>>) -> Response {
    if shared.dump_dir.is_none() {
        return (StatusCode::CONFLICT, "no dump folder: set COLLSCOPE_DUMP_DIR for the ranks\n").into_response();
    }
    shared.drain();
    match shared.dump(DumpReason::Request) {
        Ok(files) => axum::Json(files).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

async fn metrics(Shared_(shared): Shared_<Arc<Shared>>) -> Response {
    match own_metrics(&shared) {
        Ok(text) => ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text).into_response(),
        Err(e) => metrics_failed(e),
    }
}

async fn aggregate(Shared_(shared): Shared_<Arc<Shared>>) -> Response {
    let own = match own_metrics(&shared) {
        Ok(t) => t,
        Err(e) => return metrics_failed(e),
    };
    let mut texts = vec![own];
    let mut up = String::from(
        "# HELP collscope_aggregate_peer_up Whether a local rank's /metrics answered this aggregation.\n\
         # TYPE collscope_aggregate_peer_up gauge\n",
    );
    // The local ranks' servers (a few), each within the peer timeout and the metrics cap.
    let fetches = shared.peers.iter().map(|peer| {
        let url = format!("http://{peer}{}", routes::METRICS);
        let http = &shared.http;
        async move { job::fetch(http, &url, PEER_TIMEOUT, MAX_METRICS_BYTES).await }
    });
    for (peer, text) in shared.peers.iter().zip(futures_util::future::join_all(fetches).await) {
        let text = text.and_then(|t| String::from_utf8(t).map_err(|e| e.to_string()));
        let ok = text.is_ok();
        if let Ok(t) = text {
            texts.push(t);
        }
        up.push_str(&format!("collscope_aggregate_peer_up{{peer=\"{peer}\"}} {}\n", u8::from(ok)));
    }
    texts.push(up);
    ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], merge_expositions(&texts)).into_response()
}

/// This process's ranks, summarised.
async fn summary(Shared_(shared): Shared_<Arc<Shared>>) -> Response {
    shared.drain();
    let snap = shared.lock().snapshot();
    axum::Json(RankSummary::of(&snap, now_us())).into_response()
}

/// Every rank's summary ([`job::view`]). One view is built at a time: a request that arrives meanwhile waits for
/// it and, like any within [`job::JOB_REUSE`] of it, gets the same view, so a burst of requests costs one round of
/// fetches.
async fn job(Shared_(shared): Shared_<Arc<Shared>>) -> Response {
    let mut last = shared.job.lock().await;
    if let Some((_, view)) = last.as_ref().filter(|(at, _)| at.elapsed() < job::JOB_REUSE) {
        return axum::Json(view).into_response();
    }
    shared.drain();
    let snap = shared.lock().snapshot();
    let ranks = RankSummary::of(&snap, now_us());
    let view = match snap.source {
        // A log is no live job: its findings are the log's diagnosis (what `log analyze` prints and `/metrics`
        // counts); the job-level rules judge live progress against the clock, which a log does not run on.
        Source::Log { .. } => job::of_log(ranks, snap.findings),
        _ => job::view(&shared.http, shared.addr, ranks, snap.endpoints, shared.not_arrived_after).await,
    };
    let response = axum::Json(&view).into_response();
    *last = Some((Instant::now(), view));
    response
}

async fn snapshot(Shared_(shared): Shared_<Arc<Shared>>) -> Response {
    shared.drain();
    let snap = shared.lock().snapshot();
    axum::Json(snap).into_response()
}

fn sse_event(ev: &Event) -> SseEvent {
    match serde_json::to_string(ev) {
        Ok(json) => SseEvent::default().event(ev.kind()).data(json),
        Err(e) => SseEvent::default().event(routes::ERROR_EVENT).data(e.to_string()),
    }
}

async fn events(Shared_(shared): Shared_<Arc<Shared>>) -> Response {
    let Ok(place) = Arc::clone(&shared.streams).try_acquire_owned() else {
        let body = "collscope: too many event streams, try again in a while\n";
        return (StatusCode::SERVICE_UNAVAILABLE, [(header::CONNECTION, "close")], body).into_response();
    };
    let rx = shared.lock().subscribe();
    // The place goes with the stream: freed when the client goes or the stream ends.
    let state = (rx, shared, false, place);
    let stream = futures_util::stream::unfold(state, |(mut rx, shared, ended, place)| async move {
        if ended {
            return None;
        }
        let mut stop = shared.stop.clone();
        let item = tokio::select! {
            r = rx.recv() => match r {
                Ok(ev) => sse_event(&ev),
                // A slow reader missed some: say how many, then go on with the newest.
                Err(broadcast::error::RecvError::Lagged(n)) => SseEvent::default().event(routes::LAGGED_EVENT).data(n.to_string()),
                Err(broadcast::error::RecvError::Closed) => return None,
            },
            _ = stop.wait_for(|s| *s) => {
                // Clean after a shutdown (the job finished); not when the process goes down otherwise (a failed rank).
                let end = StreamEnd { clean: shared.clean_end.load(Ordering::Acquire) };
                let end = SseEvent::default()
                    .event(routes::END_EVENT)
                    .json_data(end)
                    .unwrap_or_else(|e| SseEvent::default().event(routes::ERROR_EVENT).data(e.to_string()));
                return Some((Ok::<_, Infallible>(end), (rx, shared, true, place)));
            }
        };
        Some((Ok::<_, Infallible>(item), (rx, shared, false, place)))
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
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
    fn a_write_the_client_does_not_take_fails_after_the_write_timeout() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            // A pipe that holds 64 bytes, whose reader never reads: the client of an event stream that stopped.
            let (server_end, _client) = tokio::io::duplex(64);
            let mut conn = super::WriteTimeout::new(server_end, Duration::from_millis(300));
            let started = Instant::now();
            let e = tokio::io::AsyncWriteExt::write_all(&mut conn, &[b'x'; 1024]).await.unwrap_err();
            let took = started.elapsed();
            assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
            assert!(e.to_string().contains("read nothing for 0.3 s"), "{e}");
            assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(10), "failed after {took:?}");
        });
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
