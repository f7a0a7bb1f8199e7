//! NCCL's profiler plugin API spoken by collscope's runtime (NCCL 2.28.9 `src/plugin/profiler.cc`,
//! `src/plugin/plugin_open.cc`): `NCCL_PROFILER_PLUGIN` names a plugin, loaded once per process; each
//! communicator (but one whose environment says `none`) `init`s it and gets its activation mask, and
//! `finalize`s it when it is destroyed. Events follow NCCL's hierarchy: Group -> Coll or P2p -> ProxyOp ->
//! ProxyStep on the NET proxy ([`net`]), and KernelCh for each channel worker (CPU threads here: their `pTimer`
//! stamps are CLOCK_MONOTONIC ns, not a GPU's globaltimer).
//!
//! Before them, for v5 and v6 plugins, the application's side: GroupApi -> CollApi or P2pApi, and KernelLaunch
//! ([`ApiGroup`]).
//!
//! Under a step, NET/Socket reports each transfer as a NetPlugin event, as NCCL's socket plugin does
//! ([`net::NetParent`]; NET/IB's queue-pair events are not emitted). Without a plugin a communicator holds `None`,
//! and each hook is one `Option` test. The proxy thread reports itself with ProxyCtrl events ([`Ctrl`]).

mod logger;
pub(crate) mod net;

use collscope_debug::env::Env;
use collscope_debug::{nccl_info, Subsys};
use collscope_model::{Algorithm, Collective, DataType, Protocol};
use collscope_profiler_abi::{self as abi, kind, state, v4, v5, v6, StateArgs, StateKernelCh};
use rustc_hash::FxHashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The NCCL plugin struct a library exports, newest version first.
enum Api {
    V6(&'static v5::Profiler<v6::Descr>),
    V5(&'static v5::Profiler<v5::Descr>),
    V4(&'static v4::Profiler),
}

/// A loaded plugin: kept for the life of the process (NCCL closes it with its last communicator and opens it
/// again with the next; once is enough here, and no plugin's threads outlive its code).
struct Plugin {
    api: Api,
    stop: unsafe extern "C" fn(*mut c_void) -> abi::NcclResult,
    record: unsafe extern "C" fn(*mut c_void, c_int, *mut StateArgs) -> abi::NcclResult,
    _lib: libloading::Library,
}

static PLUGIN: OnceLock<Option<Plugin>> = OnceLock::new();

/// NCCL's `pluginPrefix` for profiler plugins (`plugin_open.cc`).
const PREFIX: &str = "libnccl-profiler";

/// `dlopen(name, RTLD_NOW | RTLD_LOCAL)`; Err(true) when the file does not exist (NCCL's ENOENT test: the
/// message names the file and says "No such file or directory"), else Err(false) after logging dlerror.
fn try_open(name: &str) -> Result<libloading::Library, bool> {
    // SAFETY: loading a library runs its initialisers: the user named it as NCCL's profiler plugin.
    let r = unsafe { libloading::os::unix::Library::open(Some(name), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    match r {
        Ok(l) => Ok(l.into()),
        Err(e) => {
            let msg = std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
            if msg.contains(name) && msg.contains("No such file or directory") {
                Err(true)
            } else {
                nccl_info!(Subsys::INIT, "PROFILER/Plugin: {name}: {msg}");
                Err(false)
            }
        }
    }
}

/// NCCL's `openPluginLib`: the name as given (default `libnccl-profiler.so`), then, for a bare name that is
/// neither a path nor `lib*.so`, `libnccl-profiler-NAME.so`; files that do not exist are listed once.
fn open(name: Option<&str>) -> Option<(libloading::Library, String)> {
    let mut missing = String::new();
    let first = name.map_or_else(|| format!("{PREFIX}.so"), str::to_string);
    match try_open(&first) {
        Ok(l) => return Some((l, first)),
        Err(true) => missing.push_str(&format!(" {first}")),
        Err(false) => {}
    }
    if let Some(n) = name.filter(|n| !(n.contains('/') || n.starts_with("lib") && n.ends_with(".so"))) {
        let second = format!("{PREFIX}-{n}.so");
        match try_open(&second) {
            Ok(l) => return Some((l, second)),
            Err(true) => missing.push_str(&format!(" {second}")),
            Err(false) => {}
        }
    }
    if !missing.is_empty() {
        nccl_info!(Subsys::INIT, "PROFILER/Plugin: Could not find:{missing}");
    }
    None
}

/// # Safety
/// `sym` is the symbol of a `T` in `lib`, if it exists.
unsafe fn symbol<T>(lib: &libloading::Library, sym: &str) -> Option<&'static T> {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    unsafe {
        let p = lib.get::<*const T>(sym.as_bytes()).ok()?;
        // SAFETY: the library stays loaded for the life of the process ([`Plugin`]).
        (*p).as_ref()
    }
}

/// The plugin struct's name, as NCCL prints it.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn name_of(p: *const c_char) -> String {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    unsafe {
        if p.is_null() {
            "(null)".into()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// NCCL's `ncclProfilerPluginLoad`, with the newest symbol first (v6 from NCCL 2.29.2's loader).
fn load(env: &Env) -> Option<Plugin> {
    let name = env.str("NCCL_PROFILER_PLUGIN");
    let (lib, opened) = open(name)?;
    // SAFETY: NCCL's symbols are the structs of their version (the plugin's side of the ABI).
    let found = unsafe {
        if let Some(p) = symbol::<v5::Profiler<v6::Descr>>(&lib, abi::SYMBOLS[0]) {
            Some((Api::V6(p), p.name, 6, p.stop_event, p.record_event_state))
        } else if let Some(p) = symbol::<v5::Profiler<v5::Descr>>(&lib, abi::SYMBOLS[1]) {
            Some((Api::V5(p), p.name, 5, p.stop_event, p.record_event_state))
        } else {
            symbol::<v4::Profiler>(&lib, abi::SYMBOLS[2])
                .map(|p| (Api::V4(p), p.name, 4, p.stop_event, p.record_event_state))
        }
    };
    // NCCL names the library by the path the dynamic linker reports for it; dlopen keeps a name with a '/'.
    let shown = name.map(|_| opened);
    let Some((api, pname, v, stop, record)) = found else {
        if let Some(n) = &shown {
            nccl_info!(Subsys::INIT, "External profiler plugin {n} is unsupported");
        }
        return None;
    };
    // SAFETY: the struct's name is a C string (NCCL prints it with %s).
    let pname = unsafe { name_of(pname) };
    nccl_info!(Subsys::INIT, "PROFILER/Plugin: Loaded {pname} (v{v})");
    if let Some(n) = &shown {
        nccl_info!(Subsys::INIT, "Successfully loaded external profiler plugin {n}");
    }
    Some(Plugin { api, stop, record, _lib: lib })
}

/// An event handle the plugin returned (NULL when it keeps none), passed back as NCCL passes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handle(*mut c_void);

impl Handle {
    pub(crate) const NULL: Handle = Handle(null_mut());
}
// SAFETY: a handle is an opaque value the plugin hands out for use from any of NCCL's threads.
unsafe impl Send for Handle {}
// SAFETY: as for `Send`: the plugin's handles are for use from any thread.
unsafe impl Sync for Handle {}

/// One communicator's plugin context (`init` .. `finalize`).
pub(crate) struct CommProfiler {
    plugin: &'static Plugin,
    context: Handle,
    mask: u64,
    rank: c_int,
    pid: libc::pid_t,
    /// NCCL's `comm->seqNumber[func]`: a per-collective count of calls.
    seq: [AtomicU64; Collective::ALL.len()],
    /// The NET connections the proxy drives, by the address of their memory: where a call posts proxy ops.
    net: Mutex<FxHashMap<usize, Arc<net::Posted>>>,
}

/// What NCCL's descriptors say about a collective (`eDescr.coll`).
pub(crate) struct CollStart {
    pub coll: Collective,
    /// The call's buffers (NCCL passes the user's pointers).
    pub send_buff: *const u8,
    pub recv_buff: *mut u8,
    pub count: usize,
    pub root: u32,
    pub dt: DataType,
    pub n_channels: u32,
    pub algo: Algorithm,
    pub proto: Protocol,
}

/// A collective's events: its API group, its group and itself.
pub(crate) struct Call {
    prof: Arc<CommProfiler>,
    api: ApiGroup,
    group: Handle,
    coll: Handle,
}

/// The application's group as NCCL's v5 API events show it (NCCL 2.28.9 `src/enqueue.cc` `collTaskAppend` /
/// `p2pTaskAppend`, `src/group.cc` `ncclGroupEndInternal`): GroupApi starts with the group's first call and
/// records GroupStartApiStop; each call is a CollApi or P2pApi under it, started and stopped as the call is
/// taken; GroupEndApiStart when the group ends, a KernelLaunch under it as its work is launched, and the
/// GroupApi stops once it is (here also when dropped, so a failed group never leaves it open).
pub(crate) struct ApiGroup {
    prof: Arc<CommProfiler>,
    /// The GroupApi handle until it is stopped (NULL without one).
    h: AtomicPtr<c_void>,
}

impl ApiGroup {
    fn handle(&self) -> Handle {
        Handle(self.h.load(Ordering::Relaxed))
    }

    /// Stops the GroupApi event, once.
    fn stop(&self) {
        self.prof.stop(Handle(self.h.swap(null_mut(), Ordering::Relaxed)));
    }

    /// A call of the group: its CollApi event (or P2pApi, `coll` Send or Recv), started and stopped, which
    /// stays the parent of the call's task event.
    pub(crate) fn call(&self, coll: Collective, count: usize, dt: DataType, root: u32) -> Handle {
        let (func, datatype) = (func_name(coll), datatype_name(dt));
        let (ev, bits) = match coll {
            Collective::Send | Collective::Recv => (Ev::P2pApi { func, count, datatype }, P2P_API_MASK),
            _ => (Ev::CollApi { func, count, datatype, root: root as c_int }, COLL_API_MASK),
        };
        if !self.prof.on(bits) {
            return Handle::NULL;
        }
        let h = self.prof.start(&ev, self.handle());
        self.prof.stop(h);
        h
    }

    /// The group ends (`ncclGroupEnd`) and its work is launched: GroupEndApiStart, then a KernelLaunch event.
    fn launch(&self) {
        self.prof.record_bare(self.handle(), state::GROUP_END_API_START);
        if self.prof.on(kind::KERNEL_LAUNCH) {
            self.prof.stop(self.prof.start(&Ev::KernelLaunch, self.handle()));
        }
    }
}

impl Drop for ApiGroup {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What NCCL's descriptors say about one send or receive of a group (`eDescr.p2p`), and its P2pApi event.
pub(crate) struct P2pStart {
    pub send: bool,
    pub peer: u32,
    /// The user's buffer.
    pub buff: *mut u8,
    pub count: usize,
    pub dt: DataType,
    pub api: Handle,
}

/// A group of point-to-point calls' KernelCh events, open while the group's channel work runs (the group and
/// its P2p events stop at launch).
pub(crate) struct P2pGroup {
    prof: Arc<CommProfiler>,
    kernels: Vec<Handle>,
}

/// A channel worker's KernelCh event.
pub(crate) struct KernelCh {
    prof: Arc<CommProfiler>,
    h: Handle,
}

/// NCCL's strings for the descriptors (NCCL 2.28.9 `src/collectives.cc`: `ncclFuncToString`,
/// `ncclDatatypeToString`, `ncclAlgoToString`, `ncclProtoToString`).
fn func_name(c: Collective) -> &'static CStr {
    match c {
        Collective::Broadcast => c"Broadcast",
        Collective::Reduce => c"Reduce",
        Collective::AllGather => c"AllGather",
        Collective::ReduceScatter => c"ReduceScatter",
        Collective::AllReduce => c"AllReduce",
        Collective::SendRecv => c"SendRecv",
        Collective::Send => c"Send",
        Collective::Recv => c"Recv",
        Collective::AllToAll => c"AlltoAll",
    }
}

fn datatype_name(d: DataType) -> &'static CStr {
    match d {
        DataType::I8 => c"ncclInt8",
        DataType::I32 => c"ncclInt32",
        DataType::U32 => c"ncclUint32",
        DataType::I64 => c"ncclInt64",
        DataType::U64 => c"ncclUint64",
        DataType::F16 => c"ncclFloat16",
        DataType::F32 => c"ncclFloat32",
        DataType::F64 => c"ncclFloat64",
        DataType::Bf16 => c"ncclBfloat16",
        // NCCL's switch has no ncclUint8 case.
        _ => c"Unknown",
    }
}

fn algo_name(a: Algorithm) -> &'static CStr {
    match a {
        Algorithm::Tree => c"TREE",
        Algorithm::Ring => c"RING",
        Algorithm::CollNetDirect => c"COLLNET_DIRECT",
        Algorithm::CollNetChain => c"COLLNET_CHAIN",
        Algorithm::Nvls => c"NVLS",
        Algorithm::NvlsTree => c"NVLS_TREE",
        Algorithm::Pat => c"PAT",
        // collscope's extension, named as the runtime's decision lines name it.
        Algorithm::OneShot => c"ONESHOT",
    }
}

fn proto_name(p: Protocol) -> &'static CStr {
    match p {
        Protocol::Ll => c"LL",
        Protocol::Ll128 => c"LL128",
        Protocol::Simple => c"SIMPLE",
    }
}

/// A version-free event description, written into the loaded version's descriptor.
enum Ev {
    /// v5+: the application's outermost group (an implicit one around a lone call), `depth` deep.
    GroupApi {
        depth: c_int,
    },
    /// v5+: the application's call of a collective, or of a send or receive.
    CollApi {
        func: &'static CStr,
        count: usize,
        datatype: &'static CStr,
        root: c_int,
    },
    P2pApi {
        func: &'static CStr,
        count: usize,
        datatype: &'static CStr,
    },
    /// v5+: launching the group's work.
    KernelLaunch,
    Group,
    Coll {
        group: Handle,
        seq: u64,
        c: CollFields,
    },
    P2p {
        group: Handle,
        func: &'static CStr,
        buff: *mut u8,
        datatype: &'static CStr,
        count: usize,
        peer: c_int,
    },
    ProxyOp(abi::ProxyOp),
    ProxyStep(c_int),
    KernelCh {
        channel: u8,
        p_timer: u64,
    },
    ProxyCtrl,
    /// A network's own event: `id` says which network and the layout of `data` (valid during the start call).
    NetPlugin {
        id: i64,
        data: *mut c_void,
    },
}

struct CollFields {
    func: &'static CStr,
    send_buff: *const u8,
    recv_buff: *mut u8,
    count: usize,
    root: c_int,
    datatype: &'static CStr,
    n_channels: u8,
    algo: &'static CStr,
    proto: &'static CStr,
}

/// The v5 API events.
const API: u64 = kind::GROUP_API | kind::COLL_API | kind::P2P_API | kind::KERNEL_LAUNCH;
/// The events under a task, which start its API events too (NCCL 2.28.9 `src/plugin/profiler.cc`: the masks
/// of `ncclProfilerStartGroupApiEvent`, `...CollApiEvent`, `...P2pApiEvent`).
const BELOW_TASK: u64 = kind::PROXY_OP | kind::PROXY_STEP | kind::KERNEL_CH | kind::NET_PLUGIN;
const GROUP_API_MASK: u64 = API | kind::GROUP | kind::COLL | kind::P2P | BELOW_TASK;
const COLL_API_MASK: u64 = kind::COLL_API | kind::COLL | BELOW_TASK;
const P2P_API_MASK: u64 = kind::P2P_API | kind::P2P | BELOW_TASK;
/// What starts the Group event (`ncclProfilerStartGroupEvent`) and the task events (`...StartTaskEvents`).
const GROUP_MASK: u64 = kind::GROUP | kind::COLL | kind::P2P | BELOW_TASK;
const COLL_MASK: u64 = kind::COLL | BELOW_TASK;
const P2P_MASK: u64 = kind::P2P | BELOW_TASK;
/// What starts a proxy operation, and a step (`ncclProfilerStartSendProxyOpEvent`, `...ProxyStepEvent`): the
/// events under them too.
const PROXY_OP_MASK: u64 = kind::PROXY_OP | kind::PROXY_STEP | kind::NET_PLUGIN;
const PROXY_STEP_MASK: u64 = kind::PROXY_STEP | kind::NET_PLUGIN;

/// Warps per channel NCCL reports; a collscope channel is one CPU thread.
const N_WARPS: u8 = 1;
/// Channels of a point-to-point call: collscope's p2p connections are one channel's.
const P2P_CHANNELS: u8 = 1;

impl Ev {
    fn kind(&self) -> u64 {
        match self {
            Ev::GroupApi { .. } => kind::GROUP_API,
            Ev::CollApi { .. } => kind::COLL_API,
            Ev::P2pApi { .. } => kind::P2P_API,
            Ev::KernelLaunch => kind::KERNEL_LAUNCH,
            Ev::Group => kind::GROUP,
            Ev::Coll { .. } => kind::COLL,
            Ev::P2p { .. } => kind::P2P,
            Ev::ProxyOp(_) => kind::PROXY_OP,
            Ev::ProxyStep(_) => kind::PROXY_STEP,
            Ev::KernelCh { .. } => kind::KERNEL_CH,
            Ev::ProxyCtrl => kind::PROXY_CTRL,
            Ev::NetPlugin { .. } => kind::NET_PLUGIN,
        }
    }

    /// The v5 union (v6 embeds it); fields NCCL leaves zero stay zero.
    fn v5(&self) -> v5::Union {
        // SAFETY: every member is plain data or a pointer, for which zero is valid (NCCL's `= { 0 }`).
        let mut u: v5::Union = unsafe { std::mem::zeroed() };
        match self {
            // No stream: collscope's calls complete on the host; nothing is graph-captured.
            Ev::GroupApi { depth } => u.group_api = v5::GroupApi { graph_captured: 0, group_depth: *depth },
            Ev::CollApi { func, count, datatype, root } => {
                u.coll_api = v5::CollApi {
                    func: func.as_ptr(),
                    count: *count,
                    datatype: datatype.as_ptr(),
                    root: *root,
                    stream: null_mut(),
                    graph_captured: 0,
                }
            }
            Ev::P2pApi { func, count, datatype } => {
                u.p2p_api = v5::P2pApi {
                    func: func.as_ptr(),
                    count: *count,
                    datatype: datatype.as_ptr(),
                    stream: null_mut(),
                    graph_captured: 0,
                }
            }
            Ev::Group | Ev::ProxyCtrl | Ev::KernelLaunch => {}
            Ev::Coll { group, seq, c } => {
                u.coll = v5::Coll {
                    seq_number: *seq,
                    func: c.func.as_ptr(),
                    send_buff: c.send_buff.cast(),
                    recv_buff: c.recv_buff.cast(),
                    count: c.count,
                    root: c.root,
                    datatype: c.datatype.as_ptr(),
                    n_channels: c.n_channels,
                    n_warps: N_WARPS,
                    algo: c.algo.as_ptr(),
                    proto: c.proto.as_ptr(),
                    parent_group: group.0,
                }
            }
            Ev::P2p { group, func, buff, datatype, count, peer } => {
                u.p2p = v5::P2p {
                    func: func.as_ptr(),
                    buff: buff.cast(),
                    datatype: datatype.as_ptr(),
                    count: *count,
                    peer: *peer,
                    n_channels: P2P_CHANNELS,
                    parent_group: group.0,
                }
            }
            Ev::ProxyOp(o) => u.proxy_op = *o,
            Ev::ProxyStep(step) => u.proxy_step = abi::ProxyStep { step: *step },
            Ev::KernelCh { channel, p_timer } => {
                u.kernel_ch = abi::KernelCh { channel_id: *channel, p_timer: *p_timer }
            }
            Ev::NetPlugin { id, data } => u.net_plugin = abi::NetPlugin { id: *id, data: *data },
        }
        u
    }

    /// The v4 union: each member written here is, in v4, a layout prefix of v5's (v5 appended `parentGroup` to
    /// `coll` and `p2p`; the proxy and kernel members are the same types), so v4's bytes are v5's first ones.
    fn v4(&self) -> v4::Union {
        const _: () = assert!(std::mem::size_of::<v4::Union>() <= std::mem::size_of::<v5::Union>());
        // SAFETY: the size is checked above, and a union may hold any bytes (its members are read by their kind).
        unsafe { std::mem::transmute_copy(&self.v5()) }
    }
}

/// CLOCK_MONOTONIC in ns, one clock for every process of the host: the KernelCh `pTimer` stamps of CPU channel
/// workers (and bench/shm_ring.rs's rank processes' round times).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What NCCL's proxy progress thread reports of itself (NCCL 2.28.9 `src/proxy.cc`, `progressService` and
/// `ncclProxyGetPostedOps`): each report is a short ProxyCtrl event, started, given its states, stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ctrl {
    /// A progress round found nothing to do after one that did.
    Idle,
    /// A progress round moved something after one that did not.
    Active,
    /// The thread goes to sleep until something is posted (its event stays open through the sleep).
    Sleep,
    Wakeup,
    /// Taking posted operations (the event stays open until `AppendEnd` with how many were taken).
    Append,
    AppendEnd(u32),
}

impl Ctrl {
    fn state(self) -> (c_int, StateArgs) {
        let appended = |n: u32| StateArgs { proxy_ctrl: abi::StateProxyCtrl { appended_proxy_ops: n as c_int } };
        match self {
            Ctrl::Idle => (state::PROXY_CTRL_IDLE, appended(0)),
            Ctrl::Active => (state::PROXY_CTRL_ACTIVE, appended(0)),
            Ctrl::Sleep => (state::PROXY_CTRL_SLEEP, appended(0)),
            Ctrl::Wakeup => (state::PROXY_CTRL_WAKEUP, appended(0)),
            Ctrl::Append => (state::PROXY_CTRL_APPEND, appended(0)),
            Ctrl::AppendEnd(n) => (state::PROXY_CTRL_APPEND_END, appended(n)),
        }
    }
}

/// An open ProxyCtrl event; stopped when dropped.
pub(crate) struct CtrlEvent<'a> {
    prof: &'a CommProfiler,
    h: Handle,
}

impl CtrlEvent<'_> {
    /// Records the event's next state.
    pub(crate) fn then(&self, st: Ctrl) {
        let (st, args) = st.state();
        self.prof.record(self.h, st, args);
    }
}

impl Drop for CtrlEvent<'_> {
    fn drop(&mut self) {
        self.prof.stop(self.h);
    }
}

impl CommProfiler {
    /// NCCL's `ncclProfilerPluginInit`: loads the plugin at the first communicator and `init`s it for this one.
    /// `None` without a plugin, or when `init` fails (NCCL carries on without it).
    pub(crate) fn init(
        env: &Env,
        comm_id: u64,
        name: Option<&str>,
        nnodes: u32,
        nranks: u32,
        rank: u32,
    ) -> Option<Arc<CommProfiler>> {
        // NCCL reads `none` once per process; collscope's communicators each have their own environment, so one
        // whose environment says `none` runs without the plugin another communicator of the process loaded.
        if env.str("NCCL_PROFILER_PLUGIN").is_some_and(|n| n.eq_ignore_ascii_case("none")) {
            return None;
        }
        let plugin = PLUGIN.get_or_init(|| load(env)).as_ref()?;
        let cname = name.and_then(|n| CString::new(n).ok());
        let cname_ptr = cname.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        let (mut context, mut mask): (*mut c_void, c_int) = (null_mut(), 0);
        let (nn, nr, r) = (nnodes as c_int, nranks as c_int, rank as c_int);
        let log = logger::for_plugins();
        // SAFETY: the plugin's `init` with NCCL's arguments; the name outlives the call.
        let err = unsafe {
            match plugin.api {
                Api::V6(p) => (p.init)(&mut context, comm_id, &mut mask, cname_ptr, nn, nr, r, log),
                Api::V5(p) => (p.init)(&mut context, comm_id, &mut mask, cname_ptr, nn, nr, r, log),
                Api::V4(p) => (p.init)(&mut context, &mut mask, cname_ptr, comm_id, nn, nr, r, log),
            }
        };
        if err != abi::NCCL_SUCCESS {
            let why = strerror(std::io::Error::last_os_error());
            nccl_info!(Subsys::INIT, "Profiler init failed with error '{err}': {why}. Continue without profiler.");
            return None;
        }
        Some(Arc::new(CommProfiler {
            plugin,
            context: Handle(context),
            mask: mask as u32 as u64,
            rank: r,
            // SAFETY: getpid cannot fail.
            pid: unsafe { libc::getpid() },
            seq: std::array::from_fn(|_| AtomicU64::new(0)),
            net: Mutex::default(),
        }))
    }

    fn on(&self, bits: u64) -> bool {
        self.mask & bits != 0
    }

    /// `startEvent` with the loaded version's descriptor; `parent` is `parentObj` (v4: a collective's is its
    /// group).
    fn start(&self, ev: &Ev, parent: Handle) -> Handle {
        let mut h = null_mut();
        let (ctx, rank, k) = (self.context.0, self.rank, ev.kind());
        if k & API != 0 && matches!(self.plugin.api, Api::V4(_)) {
            // v4 has no API events: NCCL 2.28.9 translates none to a v4 plugin.
            return Handle(h);
        }
        // SAFETY: descriptors as NCCL builds them, valid for the call; the plugin fills `h`.
        unsafe {
            match self.plugin.api {
                Api::V6(p) => {
                    let mut d = v6::Descr { type_: k, parent_obj: parent.0, rank, u: v6::Union { v5: ev.v5() } };
                    (p.start_event)(ctx, &mut h, &mut d);
                }
                Api::V5(p) => {
                    let mut d = v5::Descr { type_: k, parent_obj: parent.0, rank, u: ev.v5() };
                    (p.start_event)(ctx, &mut h, &mut d);
                }
                Api::V4(p) => {
                    let parent = match ev {
                        Ev::Coll { group, .. } | Ev::P2p { group, .. } => group.0,
                        _ => parent.0,
                    };
                    let mut d = v4::Descr { type_: k as u8, parent_obj: parent, rank, u: ev.v4() };
                    (p.start_event)(ctx, &mut h, &mut d);
                }
            }
        }
        Handle(h)
    }

    fn stop(&self, h: Handle) {
        if !h.0.is_null() {
            // SAFETY: a handle this plugin returned, stopped once.
            unsafe { (self.plugin.stop)(h.0) };
        }
    }

    fn record(&self, h: Handle, st: c_int, mut args: StateArgs) {
        self.record_args(h, st, &mut args);
    }

    /// A state NCCL records without arguments (NULL: the GroupApi states).
    fn record_bare(&self, h: Handle, st: c_int) {
        self.record_args(h, st, null_mut());
    }

    fn record_args(&self, h: Handle, st: c_int, args: *mut StateArgs) {
        if !h.0.is_null() {
            // SAFETY: a live handle of this plugin; the arguments, if any, live through the call.
            unsafe { (self.plugin.record)(h.0, st, args) };
        }
    }

    /// NCCL's GroupApi event for a group whose first call is being taken, `depth` groups deep (1 for a call
    /// outside any group: NCCL opens one around it; 2 in the application's group), with GroupStartApiStop.
    pub(crate) fn api_group(self: &Arc<Self>, depth: c_int) -> ApiGroup {
        let h = if self.on(GROUP_API_MASK) { self.start(&Ev::GroupApi { depth }, Handle::NULL) } else { Handle::NULL };
        self.record_bare(h, state::GROUP_START_API_STOP);
        ApiGroup { prof: self.clone(), h: AtomicPtr::new(h.0) }
    }

    /// A ProxyCtrl event in state `st` (NCCL's `ncclProfilerStartProxyCtrlEvent` and its first state), when the
    /// plugin asked for them.
    pub(crate) fn ctrl(&self, st: Ctrl) -> Option<CtrlEvent<'_>> {
        if !self.on(kind::PROXY_CTRL) {
            return None;
        }
        let e = CtrlEvent { prof: self, h: self.start(&Ev::ProxyCtrl, Handle::NULL) };
        e.then(st);
        Some(e)
    }

    /// NCCL's `ncclProfilerStartGroupEvent` and `ncclProfilerStartTaskEvents` for one collective (NCCL starts the
    /// group whenever any call or proxy event is on).
    pub(crate) fn coll_start(self: &Arc<Self>, c: &CollStart) -> Call {
        // The call's API events come first: NCCL takes the call, ends its implicit group and launches its kernel
        // before the launch's host task starts the group and task events (2.28.9 `src/enqueue.cc`).
        let api = self.api_group(1);
        let coll_api = api.call(c.coll, c.count, c.dt, c.root);
        api.launch();
        let group = if self.on(GROUP_MASK) { self.start(&Ev::Group, Handle::NULL) } else { Handle::NULL };
        let seq = self.seq[c.coll.id()].fetch_add(1, Ordering::Relaxed);
        let coll = if self.on(COLL_MASK) {
            // NCCL moves AllGather and Broadcast as bytes: their task says int8 and counts bytes (2.28.9
            // `src/enqueue.cc` `collTaskAppend`); the API event keeps the application's type and count.
            let bytes = matches!(c.coll, Collective::AllGather | Collective::Broadcast);
            let fields = CollFields {
                func: func_name(c.coll),
                send_buff: c.send_buff,
                recv_buff: c.recv_buff,
                count: if bytes { c.count * c.dt.size() } else { c.count },
                root: c.root as c_int,
                datatype: datatype_name(if bytes { DataType::I8 } else { c.dt }),
                n_channels: c.n_channels as u8,
                algo: algo_name(c.algo),
                proto: proto_name(c.proto),
            };
            // v5+: parentObj is the CollApi event (NULL when the mask starts none).
            self.start(&Ev::Coll { group, seq, c: fields }, coll_api)
        } else {
            Handle::NULL
        };
        Call { prof: self.clone(), api, group, coll }
    }

    /// NCCL's group and task events for a group of sends and receives, with a proxy operation for each one over a
    /// NET connection (`mem_of`: its memory's address; `piece`: bytes per step, one step for each) and a KernelCh
    /// on the p2p channel; the group's API events (`api`) launch first and stop last.
    pub(crate) fn p2p_start(
        self: &Arc<Self>,
        api: ApiGroup,
        tasks: &[P2pStart],
        piece: usize,
        mem_of: impl Fn(u32, bool) -> Option<usize>,
    ) -> P2pGroup {
        api.launch();
        let null = Handle::NULL;
        let group = if self.on(GROUP_MASK) { self.start(&Ev::Group, null) } else { null };
        let mut out = P2pGroup { prof: self.clone(), kernels: Vec::new() };
        let mut launched = Vec::new();
        if !self.on(P2P_MASK) {
            self.stop(group);
            return out;
        }
        let net = self.net.lock().unwrap_or_else(|e| e.into_inner());
        for t in tasks {
            let func = if t.send { c"Send" } else { c"Recv" };
            let (datatype, peer) = (datatype_name(t.dt), t.peer as c_int);
            let ev = Ev::P2p { group, func, buff: t.buff, datatype, count: t.count, peer };
            let h = self.start(&ev, t.api);
            let steps = (t.count * t.dt.size()).div_ceil(piece) as u64;
            let posted = mem_of(t.peer, t.send).and_then(|m| net.get(&m)).filter(|_| steps > 0);
            if let Some(posted) = posted.filter(|_| self.on(PROXY_OP_MASK)) {
                let op = abi::ProxyOp {
                    pid: self.pid,
                    channel_id: 0,
                    peer: t.peer as c_int,
                    n_steps: steps as c_int,
                    chunk_size: piece as c_int,
                    is_send: t.send as c_int,
                };
                posted.post(self.start(&Ev::ProxyOp(op), h), steps);
            }
            let k = if self.on(kind::KERNEL_CH) {
                self.start(&Ev::KernelCh { channel: 0, p_timer: now_ns() }, h)
            } else {
                null
            };
            launched.push(h);
            out.kernels.push(k);
        }
        drop(net);
        // Launched: NCCL stops the task events and the group before the channels run (see `Call::launched`).
        for task in launched {
            self.stop(task);
        }
        self.stop(group);
        api.stop();
        out
    }

    /// Registers a NET connection the proxy drives, by its memory (`ConnMem`'s address).
    fn register_net(&self, mem: usize, posted: Arc<net::Posted>) {
        self.net.lock().unwrap_or_else(|p| p.into_inner()).insert(mem, posted);
    }
}

/// C's `strerror(errno)`: the OS error's message without Rust's " (os error N)".
fn strerror(e: std::io::Error) -> String {
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or_default().to_string()
}

impl Call {
    /// A channel worker begins: its proxy operations are posted, one per NET connection with steps in this
    /// call (`steps`: (peer, sent, steps), counted before the channel runs; `chunk`: bytes per step; `mem_of`:
    /// the address of a connection's memory, which the proxy registered), and its KernelCh event starts.
    pub(crate) fn channel_start(
        &self,
        channel: u32,
        steps: impl IntoIterator<Item = (u32, bool, u64)>,
        chunk: usize,
        mem_of: impl Fn(u32, bool) -> Option<usize>,
    ) -> KernelCh {
        let p = &self.prof;
        if p.on(PROXY_OP_MASK) {
            let net = p.net.lock().unwrap_or_else(|e| e.into_inner());
            for (peer, send, n) in steps.into_iter().filter(|&(_, _, n)| n > 0) {
                let Some(posted) = mem_of(peer, send).and_then(|m| net.get(&m)) else { continue };
                let op = abi::ProxyOp {
                    pid: p.pid,
                    channel_id: channel as u8,
                    peer: peer as c_int,
                    n_steps: n as c_int,
                    chunk_size: chunk as c_int,
                    is_send: send as c_int,
                };
                posted.post(p.start(&Ev::ProxyOp(op), self.coll), n);
            }
        }
        let h = if p.on(kind::KERNEL_CH) {
            p.start(&Ev::KernelCh { channel: channel as u8, p_timer: now_ns() }, self.coll)
        } else {
            Handle::NULL
        };
        KernelCh { prof: p.clone(), h }
    }
}

impl KernelCh {
    /// NCCL's `ncclProfilerStopKernelChEvent`: the stop stamp, then the stop.
    pub(crate) fn stop(self) {
        self.prof.record(self.h, state::KERNEL_CH_STOP, StateArgs { kernel_ch: StateKernelCh { p_timer: now_ns() } });
        self.prof.stop(self.h);
    }
}

impl Call {
    /// NCCL's `ncclProfilerStopTaskEvents` then `ncclProfilerStopGroupEvent`, as NCCL calls them once the call is
    /// launched and before its channels run: the call is enqueued. The handles stay the parents of the channels'
    /// events (NCCL's plugin API keeps a stopped event's object until its children stop), and the plugin completes
    /// the call when its proxy operations and kernel channels have stopped.
    pub(crate) fn launched(&self) {
        self.prof.stop(self.coll);
        self.prof.stop(self.group);
        self.api.stop();
    }
}

impl Drop for P2pGroup {
    /// The group's channel work is done: each KernelCh stops (its task and the group stopped at launch).
    fn drop(&mut self) {
        let stamp = StateArgs { kernel_ch: StateKernelCh { p_timer: now_ns() } };
        for &kernel in &self.kernels {
            self.prof.record(kernel, state::KERNEL_CH_STOP, stamp);
            self.prof.stop(kernel);
        }
    }
}

impl Drop for CommProfiler {
    /// `finalize` once nothing holds the context: the communicator and its proxy's connections are gone.
    fn drop(&mut self) {
        // SAFETY: the context `init` returned, finalized once.
        unsafe {
            let f = match self.plugin.api {
                Api::V6(p) => p.finalize,
                Api::V5(p) => p.finalize,
                Api::V4(p) => p.finalize,
            };
            f(self.context.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v4_descriptor_carries_what_the_v5_one_does() {
        let group = Handle(8 as *mut c_void);
        let (send, recv) = (16 as *const u8, 32 as *mut u8);
        let c = CollFields {
            func: c"AllReduce",
            send_buff: send,
            recv_buff: recv,
            count: 3,
            root: 1,
            datatype: c"ncclFloat32",
            n_channels: 2,
            algo: c"RING",
            proto: c"LL",
        };
        // SAFETY: the members these events wrote.
        unsafe {
            let u = Ev::Coll { group, seq: 7, c }.v4();
            let k = u.coll;
            assert_eq!((k.seq_number, k.count, k.root, k.n_channels, k.n_warps), (7, 3, 1, 2, N_WARPS));
            assert_eq!((CStr::from_ptr(k.func), CStr::from_ptr(k.proto)), (c"AllReduce", c"LL"));
            assert_eq!((k.send_buff, k.recv_buff), (send.cast(), recv.cast()));
            let ev = Ev::P2p { group, func: c"Send", buff: recv, datatype: c"ncclInt8", count: 5, peer: 3 };
            let p = ev.v4().p2p;
            assert_eq!((p.count, p.peer, p.n_channels, CStr::from_ptr(p.datatype)), (5, 3, 1, c"ncclInt8"));
            assert_eq!(p.buff, recv.cast());
            let o = abi::ProxyOp { pid: 1, channel_id: 4, peer: 2, n_steps: 6, chunk_size: 9, is_send: 1 };
            let got = Ev::ProxyOp(o).v4().proxy_op;
            assert_eq!((got.channel_id, got.n_steps, got.chunk_size, got.is_send), (4, 6, 9, 1));
            assert_eq!(Ev::KernelCh { channel: 5, p_timer: 11 }.v4().kernel_ch.p_timer, 11);
        }
    }
}
