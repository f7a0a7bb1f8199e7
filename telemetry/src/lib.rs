//! collscope's telemetry: turns the model (live events from the runtime, or snapshots of a followed NCCL log)
//! into Prometheus metrics, OpenTelemetry metrics and spans, a JSON snapshot and a server-sent event stream,
//! served over HTTP from a thread of its own.
//!
//! It reads a running process through the contract's `collscope_model::observe::Feed` (the process's event
//! queue and its communicators' records), which the binary hands to [`Telemetry::start`]: the runtime's recorder
//! implements it, so this crate depends on the model and never builds the runtime (its tests and benches do).
//! The runtime only calls its recorder's `record(|| Event::...)`; [`Telemetry::start`] turns that on and drains it.

pub mod aggregate;
pub mod catalogue;
pub mod config;
pub mod discovery;
pub mod dump;
mod job;
pub mod labels;
pub mod otel;
pub mod prom;
pub mod promjob;
mod server;
pub mod sink;
pub mod state;
pub mod store;
pub mod tail;

pub use config::{ConfigError, LocalRank, TelemetryConfig};
pub use otel::{Otel, OtelConfig, OtelError};
pub use state::State;

use collscope_model::observe::Feed;
use collscope_model::{DumpReason, Source};
use server::Shared;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot serve telemetry on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot start the telemetry thread: {0}")]
    Thread(std::io::Error),
    #[error(transparent)]
    Otel(#[from] OtelError),
    #[error(transparent)]
    Discovery(#[from] discovery::DiscoveryError),
}

/// A running telemetry server. Dropping it stops the server; [`Telemetry::shutdown`] also reports whether the
/// last OTLP push went through.
pub struct Telemetry {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
    /// Where Prometheus discovers this server, removed with it.
    _target: Option<discovery::TargetFile>,
}

impl Telemetry {
    /// Binds the server (base port plus local rank), starts its thread, and, given a recorder, turns it on and
    /// drains it every `drain_interval`.
    pub fn start(
        cfg: &TelemetryConfig,
        source: Source,
        recorder: Option<&'static dyn Feed>,
    ) -> Result<Telemetry, TelemetryError> {
        let otel = cfg.otel.as_ref().map(Otel::new).transpose()?;
        let state = State::new(source, cfg.limits, otel);
        let bind = cfg.bind_addr()?;
        let bind_err = |source| TelemetryError::Bind { addr: bind, source };
        let listener = std::net::TcpListener::bind(bind).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        let target = match &cfg.sd_dir {
            Some(dir) => Some(discovery::TargetFile::write(dir, &reachable_host(addr), addr.port(), &cfg.sd_labels)?),
            None => None,
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(TelemetryError::Thread)?;
        let listener = {
            let _in_runtime = rt.enter();
            tokio::net::TcpListener::from_std(listener).map_err(bind_err)?
        };
        let http = job::client().map_err(|e| TelemetryError::Thread(std::io::Error::other(e.to_string())))?;
        let (stop, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            recorder,
            addr,
            peers: cfg.aggregate_peers.clone(),
            http,
            job: tokio::sync::Mutex::default(),
            not_arrived_after: cfg.not_arrived_after,
            dump_dir: cfg.dump_dir.clone(),
            streams: Arc::new(tokio::sync::Semaphore::new(cfg.max_streams)),
            stop: stop_rx,
            spare: Mutex::default(),
            clean_end: Default::default(),
        });
        if let Some(r) = recorder {
            r.enable(cfg.queue_capacity);
        }
        let app = server::router(shared.clone());
        let drain = server::drain_loop(shared.clone(), cfg.drain_interval);
        let stopped = shared.stop.clone();
        let limits = server::Limits {
            header_timeout: cfg.header_timeout,
            write_timeout: cfg.write_timeout,
            max_connections: cfg.max_connections,
        };
        let thread = std::thread::Builder::new()
            .name("collscope-telemetry".into())
            .spawn(move || {
                rt.block_on(async move {
                    let drainer = tokio::spawn(drain);
                    server::serve(listener, app, limits, stopped).await;
                    let _ = drainer.await;
                })
            })
            .map_err(TelemetryError::Thread)?;
        Ok(Telemetry { shared, addr, stop, thread: Some(thread), _target: target })
    }

    /// Where the server listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, the base of every endpoint.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The URL other hosts reach this server at: [`Telemetry::url`], with this host's name for a wildcard address.
    pub fn reachable_url(&self) -> String {
        format!("http://{}:{}", reachable_host(self.addr), self.addr.port())
    }

    /// Runs `f` on the state (to add facts, ingest a snapshot, or read it).
    pub fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        self.shared.drain();
        f(&mut self.shared.lock())
    }

    /// What writes this server's ranks' dumps from another thread (the one that takes SIGTERM).
    pub fn dumper(&self) -> Dumper {
        Dumper(self.shared.clone())
    }

    /// Stops the server, takes the last queued events, and pushes the last OTLP data. The event stream ends
    /// with `end` `{"clean": true}` (dropping the server instead ends it with `false`).
    pub fn shutdown(mut self) -> Result<(), TelemetryError> {
        // The event stream's last event tells readers the process ended on purpose.
        self.shared.clean_end.store(true, std::sync::atomic::Ordering::Release);
        self.stop_server();
        let otel = self.shared.lock().take_otel();
        match otel {
            Some(o) => Ok(o.shutdown()?),
            None => Ok(()),
        }
    }

    fn stop_server(&mut self) {
        if let Some(r) = self.shared.recorder {
            r.disable();
        }
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes a telemetry server's ranks' dumps on demand ([`Telemetry::dumper`]).
#[derive(Clone)]
pub struct Dumper(Arc<Shared>);

impl Dumper {
    /// Writes each of the server's ranks' dump to `COLLSCOPE_DUMP_DIR` now, from what the runtime has queued so
    /// far, for `reason`, and says where (none without the variable).
    pub fn dump(&self, reason: DumpReason) -> Result<Vec<PathBuf>, dump::DumpWriteError> {
        self.0.drain();
        self.0.dump(reason)
    }
}

/// The host other machines reach `addr` at: this host's name for a wildcard address, else the address itself.
fn reachable_host(addr: SocketAddr) -> String {
    match addr.ip() {
        ip if ip.is_unspecified() => collscope_debug::sys::hostname(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop_server();
        if let Some(o) = self.shared.lock().take_otel() {
            let _ = o.shutdown();
        }
    }
}
