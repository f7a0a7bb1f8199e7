//! The process-wide side: the communicators NCCL initialised, the thread that drains them into the sinks (the
//! dump file, collscope's telemetry server), the rendezvous that lets a rank's server find the others, the guard
//! that keeps a panic from reaching NCCL, and the counters collscope's query symbol reports.

use crate::abi::{
    DebugLogger, NcclResult, NCCL_INIT, NCCL_INTERNAL_ERROR, NCCL_INVALID_USAGE, NCCL_LOG_INFO, NCCL_LOG_WARN,
    NCCL_PROFILE, NCCL_SUCCESS, NCCL_SYSTEM_ERROR,
};
use crate::debuglog::{DebugLog, Known};
use crate::event::{Start, Update};
use crate::feed::FEED;
use crate::machine::{self, CommInfo, Context, Shared, DETACHED, SIZES};
use crate::output::{drain_context, drain_detached, Sink};
use crate::record::Outbox;
use crate::rendezvous::{Rendezvous, READ_EVERY};
use crate::settings::Settings;
use crate::sink::JsonlSink;
use collscope_debug::env::Env;
use collscope_model::{routes, Event, ProfilerCounters, RankEndpoint, Source};
use collscope_telemetry::{ConfigError, LocalRank, Telemetry, TelemetryConfig};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering::*};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the drain thread empties the rings: 8192 records a communicator every 10 ms is far above what
/// NCCL can issue (a few records per call, calls of 10 us and more).
const DRAIN_EVERY: Duration = Duration::from_millis(10);
/// How often the plugin's counters are handed on (when they changed): they are totals, read for rates.
const COUNTERS_EVERY: Duration = Duration::from_secs(1);

/// What `init` is told about a communicator, from any ABI version.
pub(crate) struct CommInit {
    pub comm_id: u64,
    pub comm_name: *const c_char,
    pub n_nodes: c_int,
    pub nranks: c_int,
    pub rank: c_int,
    pub logfn: DebugLogger,
}

/// collscope's counters, summed over the communicators of the process (`collscope_profiler_counters`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Communicators initialised and not finalised.
    pub communicators: u64,
    pub calls_started: u64,
    pub calls_completed: u64,
    /// Calls started and not complete (of communicators not yet released).
    pub calls_in_flight: u64,
    /// Proxy operations stopped, this process's.
    pub proxy_ops: u64,
    /// Proxy operations this process's proxy ran for another process (PXN).
    pub pxn_proxy_ops: u64,
    /// Events NCCL got a NULL handle for: no free event object.
    pub dropped_events: u64,
    /// Records lost because a ring was full.
    pub dropped_records: u64,
    /// Child events whose call had no handle or had already completed.
    pub orphan_events: u64,
    /// Calls the model cannot name (Gather, Scatter, PutSignal, ...).
    pub unsupported_calls: u64,
    /// Handles stopped twice or used after their event ended.
    pub misused_handles: u64,
    /// Time receive steps waited for the GPU to consume their data (also each proxy operation's RecvGpuWait).
    pub recv_gpu_wait_ns: u64,
    pub proxy_sleep_ns: u64,
    pub proxy_idle_ns: u64,
    pub proxy_active_ns: u64,
    pub proxy_append_ns: u64,
    pub proxy_appended_ops: u64,
    /// 1 once a panic disabled the plugin.
    pub disabled: u64,
}

impl Counters {
    fn add_outbox(&mut self, o: &Outbox) {
        let s = &o.stats;
        self.proxy_ops += s.proxy_ops.load(Relaxed);
        self.dropped_events += s.dropped_events.load(Relaxed);
        self.dropped_records += s.dropped_records.load(Relaxed);
        self.orphan_events += s.orphans.load(Relaxed);
        self.unsupported_calls += s.unsupported.load(Relaxed);
        self.misused_handles += s.misuse.load(Relaxed);
        self.recv_gpu_wait_ns += s.recv_gpu_wait_ns.load(Relaxed);
    }

    fn add_context(&mut self, c: &Context) {
        self.add_outbox(&c.out);
        let (started, in_flight) = (c.started(), c.in_flight());
        self.calls_started += started;
        self.calls_completed += started.saturating_sub(in_flight);
        self.calls_in_flight += in_flight;
        let t = &c.ctrl;
        self.proxy_sleep_ns += t.sleep_ns.load(Relaxed);
        self.proxy_idle_ns += t.idle_ns.load(Relaxed);
        self.proxy_active_ns += t.active_ns.load(Relaxed);
        self.proxy_append_ns += t.append_ns.load(Relaxed);
        self.proxy_appended_ops += t.appended.load(Relaxed);
    }
}

impl From<&Counters> for ProfilerCounters {
    fn from(c: &Counters) -> Self {
        let secs = |ns: u64| ns as f64 / 1e9;
        ProfilerCounters {
            dropped_events: c.dropped_events,
            dropped_records: c.dropped_records,
            orphan_events: c.orphan_events,
            unsupported_calls: c.unsupported_calls,
            misused_handles: c.misused_handles,
            disabled: c.disabled != 0,
            proxy_sleep_seconds: secs(c.proxy_sleep_ns),
            proxy_idle_seconds: secs(c.proxy_idle_ns),
            proxy_active_seconds: secs(c.proxy_active_ns),
            proxy_append_seconds: secs(c.proxy_append_ns),
            proxy_appended_ops: c.proxy_appended_ops,
        }
    }
}

struct Plugin {
    shared: Arc<Shared>,
    disabled: AtomicBool,
    /// NCCL's activation mask (one `int` for all communicators), switched to 0 after a panic.
    mask: AtomicPtr<c_int>,
    logger: Mutex<DebugLogger>,
    state: Mutex<State>,
    /// Locked by whoever drains, after `state` and `reported`: the dump file (once opened) and the telemetry feed.
    sinks: Mutex<Vec<Box<dyn Sink>>>,
    /// What the drain thread last handed on besides the rings (locked after `state`).
    reported: Mutex<Reported>,
    /// NCCL's debug file, where the rings, trees and connections are (set at the first `init`; None when NCCL
    /// writes none). Locked alone, by whoever drains.
    debug_log: OnceLock<Option<Mutex<DebugLog>>>,
}

#[derive(Default)]
struct Reported {
    counters: Option<(Instant, Counters)>,
}

/// collscope's telemetry served from this process, and the URL the other ranks reach it at.
struct Server {
    telemetry: Telemetry,
    endpoint: String,
    /// How long the last `finalize` keeps serving (`COLLSCOPE_PROFILER_LINGER_S`).
    linger: Duration,
}

#[derive(Default)]
struct State {
    /// Every context not yet released: NCCL may use a finalised one's objects until every communicator is
    /// finalised (communicators that share a proxy thread report its control events to the first one's).
    contexts: Vec<Arc<Context>>,
    live: usize,
    /// Counters of released contexts.
    past: Counters,
    drainer: Option<Drainer>,
    server: Option<Server>,
    /// A server failed to start: it is not tried again, so the warning comes once.
    serve_failed: bool,
    /// Each context's place in the rendezvous folder, kept until the last `finalize` has served its linger.
    rendezvous: Vec<Rendezvous>,
    dump_open: bool,
}

struct Drainer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

static PLUGIN: LazyLock<Plugin> = LazyLock::new(Plugin::new);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `init`: a context for one communicator, and the activation mask.
///
/// # Safety
/// `context` and `mask` are NULL or valid for writes (`mask` is NCCL's `int`, alive as long as NCCL is loaded);
/// `c.comm_name` is NULL or NUL-terminated.
pub(crate) unsafe fn init(context: *mut *mut c_void, mask: *mut c_int, c: CommInit) -> NcclResult {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    unsafe {
        if context.is_null() || mask.is_null() {
            return NCCL_INVALID_USAGE;
        }
        *context = null_mut();
        let p = &*PLUGIN;
        if p.disabled.load(Relaxed) {
            return NCCL_INTERNAL_ERROR;
        }
        *lock(&p.logger) = c.logfn;
        catch_unwind(AssertUnwindSafe(|| p.init(context, mask, c))).unwrap_or_else(|_| {
            p.disable();
            NCCL_INTERNAL_ERROR
        })
    }
}

/// `startEvent`. `descr` reads NCCL's descriptor (inside the guard).
///
/// # Safety
/// `handle` is NULL or valid for writes; see [`machine::start`] for `context` and the descriptor.
pub(crate) unsafe fn start(
    context: *mut c_void,
    handle: *mut *mut c_void,
    descr: impl FnOnce() -> Start,
) -> NcclResult {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    unsafe {
        if handle.is_null() {
            return NCCL_SUCCESS;
        }
        *handle = null_mut();
        PLUGIN.guard(|| *handle = machine::start(&PLUGIN.shared, context as *const Context, descr()))
    }
}

/// `stopEvent`.
///
/// # Safety
/// See [`machine::stop`].
pub(crate) unsafe fn stop(handle: *mut c_void) -> NcclResult {
    // SAFETY: this function's contract is `machine::stop`'s.
    unsafe { PLUGIN.guard(|| machine::stop(handle)) }
}

/// `recordEventState`. `update` reads NCCL's state arguments (inside the guard).
///
/// # Safety
/// See [`machine::record`].
pub(crate) unsafe fn record(handle: *mut c_void, state: c_int, update: impl FnOnce() -> Update) -> NcclResult {
    // SAFETY: this function's contract is `machine::record`'s.
    unsafe { PLUGIN.guard(|| machine::record(handle, state, update())) }
}

/// `finalize`.
pub(crate) fn finalize(context: *mut c_void) -> NcclResult {
    PLUGIN.guard(|| PLUGIN.finalize(context as *const Context))
}

/// The process's counters.
pub fn counters() -> Counters {
    let p = &*PLUGIN;
    let st = lock(&p.state);
    let mut c = st.past;
    for ctx in &st.contexts {
        c.add_context(ctx);
    }
    c.communicators = st.live as u64;
    c.pxn_proxy_ops = p.shared.out.stats.proxy_ops.load(Relaxed);
    c.dropped_events += p.shared.out.stats.dropped_events.load(Relaxed);
    c.dropped_records += p.shared.out.stats.dropped_records.load(Relaxed);
    c.recv_gpu_wait_ns += p.shared.out.stats.recv_gpu_wait_ns.load(Relaxed);
    c.disabled = u64::from(p.disabled.load(Relaxed));
    c
}

impl Plugin {
    fn new() -> Self {
        Plugin {
            shared: Shared::new(&DETACHED),
            disabled: AtomicBool::new(false),
            mask: AtomicPtr::new(null_mut()),
            logger: Mutex::new(None),
            state: Mutex::new(State::default()),
            sinks: Mutex::new(vec![Box::new(&FEED)]),
            reported: Mutex::default(),
            debug_log: OnceLock::new(),
        }
    }

    /// Runs an event call; a panic disables the plugin and NCCL sees success (only `init` may fail).
    fn guard(&self, f: impl FnOnce()) -> NcclResult {
        if !self.disabled.load(Relaxed) && catch_unwind(AssertUnwindSafe(f)).is_err() {
            self.disable();
        }
        NCCL_SUCCESS
    }

    /// # Safety
    /// As for [`init`].
    unsafe fn init(&self, context: *mut *mut c_void, mask: *mut c_int, c: CommInit) -> NcclResult {
        // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
        unsafe {
            crate::clock::calibrate();
            let settings = match Settings::from_env() {
                Ok(s) => s,
                Err(e) => {
                    self.log(NCCL_LOG_WARN, &format!("collscope profiler: {e}; NCCL continues without it"));
                    return NCCL_INVALID_USAGE;
                }
            };
            if let Some(path) = &settings.dump {
                let mut st = lock(&self.state);
                if !st.dump_open {
                    match JsonlSink::open(path) {
                        Ok(s) => lock(&self.sinks).push(Box::new(s)),
                        Err(e) => {
                            self.log(NCCL_LOG_WARN, &format!("collscope profiler: {e}; NCCL continues without it"));
                            return NCCL_SYSTEM_ERROR;
                        }
                    }
                    st.dump_open = true;
                }
            }
            let given = c.comm_name.as_ref().map(|n| CStr::from_ptr(n).to_string_lossy()).filter(|n| !n.is_empty());
            let comm = CommInfo {
                named: given.is_some(),
                name: given.map_or_else(|| Arc::from(format!("{:#x}", c.comm_id)), Arc::from),
                comm_id: c.comm_id,
                rank: c.rank.max(0) as u32,
                nranks: c.nranks.max(0) as u32,
                nnodes: c.n_nodes.max(0) as u32,
                host: hostname(),
                version: nccl_version(),
            };
            self.debug_log.get_or_init(|| {
                DebugLog::from_env(
                    collscope_debug::params::process_var,
                    &collscope_debug::sys::hostname(),
                    std::process::id(),
                )
                .map(Mutex::new)
            });
            let summary = format!(
                "PROFILER/Plugin: collscope: comm {} rank {} nranks {} event mask {:#x}",
                comm.name, comm.rank, comm.nranks, settings.mask
            );
            let (rank, nranks, host) = (comm.rank, comm.nranks, comm.host.clone());
            let ctx = Context::new(comm, settings.mask, &SIZES);
            let mut st = lock(&self.state);
            if settings.metrics && st.server.is_none() && !st.serve_failed {
                match self.serve(settings.linger) {
                    Ok(server) => {
                        st.serve_failed = server.is_none();
                        st.server = server;
                    }
                    Err(e) => {
                        self.log(NCCL_LOG_WARN, &format!("collscope profiler: {e}; NCCL continues without it"));
                        return NCCL_INVALID_USAGE;
                    }
                }
            }
            if let Some(server) = &st.server {
                let me = RankEndpoint {
                    rank,
                    host: host.unwrap_or_default(),
                    url: server.endpoint.clone(),
                    pid: Some(std::process::id()),
                    started: collscope_debug::sys::process_started(std::process::id()),
                };
                match Rendezvous::join(&settings.rendezvous, c.comm_id, nranks, &me) {
                    Ok(r) => st.rendezvous.push(r),
                    Err(e) => {
                        self.log(NCCL_LOG_WARN, &format!("collscope profiler: {e}; the job view shows this rank only"))
                    }
                }
            }
            if st.drainer.is_none() && (st.dump_open || st.server.is_some()) {
                match Drainer::start() {
                    Ok(d) => st.drainer = Some(d),
                    Err(e) => {
                        self.log(NCCL_LOG_WARN, &format!("collscope profiler: cannot start its drain thread: {e}"));
                        return NCCL_SYSTEM_ERROR;
                    }
                }
            }
            // SAFETY: NCCL's mask is an aligned `int` that outlives the plugin; NCCL reads it atomically.
            AtomicI32::from_ptr(mask).store(settings.mask as c_int, Relaxed);
            self.mask.store(mask, Relaxed);
            *context = Arc::as_ptr(&ctx) as *mut c_void;
            st.contexts.push(ctx);
            st.live += 1;
            drop(st);
            self.log(NCCL_LOG_INFO, &summary);
            NCCL_SUCCESS
        }
    }

    fn finalize(&self, ctx: *const Context) {
        let (last, drainer) = {
            let mut st = lock(&self.state);
            let Some(c) = st.contexts.iter().find(|c| Arc::as_ptr(c) == ctx) else { return };
            if c.is_finalized() {
                return;
            }
            c.finalize();
            st.live -= 1;
            let last = st.live == 0;
            (last, if last { st.drainer.take() } else { None })
        };
        if let Some(d) = drainer {
            d.stop();
        }
        self.drain(last);
        if last {
            // Every communicator is finalised: NCCL has stopped its proxy threads, no handle is used again.
            let mut st = lock(&self.state);
            if st.live == 0 {
                let mut past = st.past;
                for c in std::mem::take(&mut st.contexts) {
                    past.add_context(&c);
                }
                st.past = Counters { calls_in_flight: 0, ..past };
            }
            // NCCL may unload the library now: the server's thread ends first, with the last events taken. A
            // later server (a new communicator) starts from the counters as they are then.
            let server = st.server.take();
            drop(st);
            *lock(&self.reported) = Reported::default();
            if let Some(s) = server.as_ref().filter(|s| !s.linger.is_zero()) {
                let secs = s.linger.as_secs();
                self.log(NCCL_LOG_INFO, &format!("collscope profiler: serving the final figures for {secs} s"));
                // Ranks that joined the folder after this one last read it are found meanwhile.
                let end = Instant::now() + s.linger;
                while let Some(left) = end.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) {
                    std::thread::sleep(left.min(READ_EVERY));
                    self.drain(false);
                }
            }
            // The endpoint files stay while this process serves, the linger included: a rank that reads the
            // folder later (it started later, or its last read came before this rank joined) still finds this one.
            for r in std::mem::take(&mut lock(&self.state).rendezvous) {
                r.leave();
            }
            if let Some(Err(e)) = server.map(|s| s.telemetry.shutdown()) {
                self.log(NCCL_LOG_WARN, &format!("collscope profiler: telemetry's last export: {e}"));
            }
        }
    }

    /// Starts collscope's telemetry on its own thread, fed by the plugin (`COLLSCOPE_METRICS_ADDR` plus the local
    /// rank, loopback by default). A bad setting fails `init`; a server that cannot start is a warning and NCCL
    /// carries on.
    fn serve(&self, linger: Duration) -> Result<Option<Server>, ConfigError> {
        let get = collscope_debug::params::process_var;
        let cfg = TelemetryConfig::from_env(&Env::from_process(), LocalRank::from_env(get)?, get)?;
        match Telemetry::start(&cfg, Source::Profiler, Some(&FEED)) {
            Ok(telemetry) => {
                let url = telemetry.url();
                let (metrics, snapshot, events, job) = (routes::METRICS, routes::SNAPSHOT, routes::EVENTS, routes::JOB);
                self.log(
                    NCCL_LOG_INFO,
                    &format!(
                        "collscope profiler: telemetry at {url}{metrics}, {url}{snapshot}, {url}{events}, {url}{job}"
                    ),
                );
                Ok(Some(Server { endpoint: telemetry.reachable_url(), telemetry, linger }))
            }
            Err(e) => {
                self.log(NCCL_LOG_WARN, &format!("collscope profiler: {e}; NCCL continues without its telemetry"));
                Ok(None)
            }
        }
    }

    /// Hands every ring's records to the sinks (departed contexts are kept until all are finalised), then the
    /// counters when due (`last`: now) and the job's endpoints when they changed.
    fn drain(&self, last: bool) {
        let now = Instant::now();
        let (contexts, endpoints) = {
            let mut st = lock(&self.state);
            // The job view reaches the ranks of the largest communicator (the world, in a training job).
            let largest = st.rendezvous.iter_mut().max_by_key(|r| r.nranks());
            let endpoints = largest.and_then(|r| r.poll(now)).map(<[RankEndpoint]>::to_vec);
            (st.contexts.clone(), endpoints)
        };
        let mut reported = lock(&self.reported);
        let mut changed = None;
        if last || reported.counters.is_none_or(|(at, _)| now >= at + COUNTERS_EVERY) {
            let c = counters();
            if reported.counters.is_none_or(|(_, before)| before != c) {
                changed = Some(ProfilerCounters::from(&c));
            }
            reported.counters = Some((now, c));
        }
        drop(reported);
        let structure = self.follow_debug_log(&contexts, last);
        let mut sinks = lock(&self.sinks);
        let sinks: &mut Vec<Box<dyn Sink>> = &mut sinks;
        // The connections go before the traffic on them, so telemetry names each edge's transport at once.
        for ev in structure {
            sinks.deliver(ev);
        }
        drain_detached(&self.shared.out, sinks);
        for c in contexts.iter().filter(|c| !c.departed()) {
            drain_context(c, sinks);
        }
        if let Some(c) = changed {
            sinks.deliver(Event::Profiler(c));
        }
        if let Some(all) = endpoints {
            sinks.deliver(Event::Endpoints(all));
        }
        sinks.flush();
    }

    /// The rings, trees and connections NCCL's debug file gained since the last drain (all of them when `last`),
    /// as model events; a problem with the file is one warning through NCCL's logger.
    fn follow_debug_log(&self, contexts: &[Arc<Context>], last: bool) -> Vec<Event> {
        let (Some(Some(log)), Some(first)) = (self.debug_log.get(), contexts.first()) else { return Vec::new() };
        let known: Vec<Known> =
            contexts.iter().map(|c| Known { comm_id: c.comm.comm_id, name: &c.comm.name }).collect();
        let found = lock(log).poll(first.comm.rank, &known, last);
        if let Some(w) = &found.warning {
            self.log(NCCL_LOG_WARN, w);
        }
        found.events
    }

    fn disable(&self) {
        self.disabled.store(true, Relaxed);
        let mask = self.mask.load(Relaxed);
        if !mask.is_null() {
            // SAFETY: as in `init`. NCCL then starts no new events.
            unsafe { AtomicI32::from_ptr(mask) }.store(0, Relaxed);
        }
        self.log(NCCL_LOG_WARN, "collscope profiler: internal error; disabled, NCCL continues without it");
    }

    fn log(&self, level: c_int, msg: &str) {
        let Some(f) = *lock(&self.logger) else { return };
        let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: NCCL's logger takes a printf format; "%s" with one C string.
        unsafe { f(level, NCCL_INIT | NCCL_PROFILE, c"collscope-profiler".as_ptr(), 0, c"%s".as_ptr(), msg.as_ptr()) };
    }
}

impl Drainer {
    fn start() -> std::io::Result<Drainer> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new().name("collscope-prof".into()).spawn(move || {
            while !flag.load(Acquire) {
                std::thread::park_timeout(DRAIN_EVERY);
                if catch_unwind(AssertUnwindSafe(|| PLUGIN.drain(false))).is_err() {
                    PLUGIN.disable();
                    return;
                }
            }
        })?;
        Ok(Drainer { stop, thread })
    }

    /// Stops and joins the thread, so NCCL may unload the library after the last `finalize`.
    fn stop(self) {
        self.stop.store(true, Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

/// The NCCL release of the library that loaded the plugin, from its exported `ncclGetVersion` (the init call
/// does not pass it); None where no such symbol is in the process's global scope (collscope's own runtime).
fn nccl_version() -> Option<String> {
    static VERSION: OnceLock<Option<String>> = OnceLock::new();
    VERSION
        .get_or_init(|| {
            // SAFETY: a lookup in the global scope; the symbol, when found, is NCCL's `ncclResult_t
            // ncclGetVersion(int*)` (nccl.h), called once with a valid pointer.
            let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"ncclGetVersion".as_ptr()) };
            if f.is_null() {
                return None;
            }
            // SAFETY: `f` is non-NULL and is `ncclGetVersion`, whose C type this is.
            let get: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute(f) };
            let mut code: c_int = 0;
            // SAFETY: `get` is NCCL's `ncclGetVersion`, which writes one `int`.
            (unsafe { get(&mut code) } == NCCL_SUCCESS && code > 0).then(|| version_of(code as u32))
        })
        .clone()
}

/// `NCCL_VERSION_CODE` as `major.minor.patch`: `X*1000 + Y*100 + Z` up to 2.8, `X*10000 + Y*100 + Z` since 2.9
/// (nccl.h's `NCCL_VERSION` macro).
fn version_of(code: u32) -> String {
    let (major, rest) = if code < 10_000 { (code / 1000, code % 1000) } else { (code / 10_000, code % 10_000) };
    format!("{major}.{}.{}", rest / 100, rest % 100)
}

fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer and its length.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return None;
    }
    CStr::from_bytes_until_nul(&buf).ok().map(|h| h.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes_read_as_nccl_writes_them() {
        assert_eq!(version_of(22809), "2.28.9");
        assert_eq!(version_of(21903), "2.19.3");
        assert_eq!(version_of(2804), "2.8.4");
    }

    #[test]
    fn a_panic_disables_the_plugin_and_switches_nccls_events_off() {
        let p = Plugin::new();
        let mut nccl_mask: c_int = 95;
        p.mask.store(&mut nccl_mask, Relaxed);
        let mut ran = 0;
        assert_eq!(p.guard(|| ran += 1), NCCL_SUCCESS);
        assert_eq!(p.guard(|| panic!("a bug in the plugin")), NCCL_SUCCESS, "NCCL sees success");
        assert!(p.disabled.load(Relaxed));
        assert_eq!(nccl_mask, 0, "NCCL starts no more events");
        assert_eq!(p.guard(|| ran += 1), NCCL_SUCCESS);
        assert_eq!(ran, 1, "a disabled plugin runs nothing");
    }
}
