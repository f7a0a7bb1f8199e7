//! The communicator: created per rank over a bootstrap, it holds the channels and their connections,
//! connects lazily per algorithm (NCCL's `NCCL_RUNTIME_CONNECT=1` behaviour), runs each call's channels in
//! parallel (channel 0 on the caller's thread, the others on scoped threads) and records every operation.
//!
//! Around it: [`group`] (grouped point-to-point calls), [`job`] (a rank of a job across processes and hosts),
//! [`launch`] (which rank this process is), [`liveness`] (naming a dead peer), [`workers`] (channel threads),
//! [`mod@select`] (the per-call algorithm, protocol and channels) and [`affinity`] (pinning ranks to cores).

pub mod affinity;
mod facts;
pub(crate) mod group;
pub mod job;
pub mod launch;
pub(crate) mod liveness;
pub(crate) mod select;
mod stream;
mod window;
pub(crate) mod workers;

#[cfg(test)]
mod matrix;
#[cfg(test)]
mod proc_test;

use crate::bootstrap::{Bootstrap, ThreadBootstrap};
use crate::comm::select::{ring_link, select, Choice, SelectConfig};
use crate::comm::stream::{StreamStores, STREAM_VAR};
use crate::comm::workers::Workers;
use crate::device::algos::{self, Part};
use crate::device::prims::{Channel, Moved, Prims, Ptr};
use crate::device::tree::dtree;
use crate::error::{Result, RuntimeError};
use crate::observe::records::{OpEntry, Records};
use crate::observe::stats::CallStats;
use crate::profiler::{CollStart, CommProfiler};
use crate::sync::wait::{self, timeout_from_env, AbortHandle, Waiter};
use crate::transport::conn::Direct;
use crate::transport::conn::{crowded_buffsize, BufSizes, RecvEnd, SendEnd};
use crate::transport::{self, ConnSpec, PeerInfo, Transport};
use collscope_debug::env::{Env, EnvError};
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use collscope_kernels::{Dtype, Element, Op};
use collscope_model::lines;
use collscope_model::{self as model, Algorithm, Collective, DataType, OpState, Protocol, RedOp};
use rustc_hash::FxHashMap;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
pub use window::Registration;

/// NCCL's channel limit (`MAXCHANNELS`).
pub const MAX_CHANNELS: u32 = 32;
/// Channels a CPU communicator uses unless `NCCL_MIN_NCHANNELS`/`NCCL_MAX_NCHANNELS` say otherwise.
pub const DEFAULT_CHANNELS: u32 = 2;

/// How a communicator is built: its environment and the transports beyond P2P/SHM.
#[derive(Clone)]
pub struct CommOptions {
    pub env: Env,
    /// The NET transport (TCP/proxy), tried after P2P and SHM.
    pub net: Option<Arc<dyn Transport>>,
    /// A name for the communicator in records (`comm` fields).
    pub name: Option<String>,
}

impl Default for CommOptions {
    fn default() -> Self {
        CommOptions { env: Env::from_process(), net: None, name: None }
    }
}

/// FNV-1a, stable across processes and hosts (std's hashers are not guaranteed to be).
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for p in parts {
        for b in *p {
            h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

/// This process's identity for transport selection, with a new communicator nonce.
pub fn local_peer_info(rank: u32) -> PeerInfo {
    static PROC_NONCE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let nonce = *PROC_NONCE.get_or_init(crate::socket::nonce_u64);
    let host = collscope_debug::sys::hostname();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let host_hash = fnv(&[host.as_bytes(), boot_id.trim().as_bytes()]);
    let pid = std::process::id();
    let pid_hash = fnv(&[&host_hash.to_le_bytes(), &pid.to_le_bytes(), &nonce.to_le_bytes()]);
    let cpus = crate::comm::affinity::allowed_cpus().into_iter().map(|c| c as u32).collect();
    PeerInfo { rank, host, host_hash, pid_hash, comm_nonce: crate::socket::nonce_u64(), pid, dev: 0, cpus }
}

pub fn kernel_dtype(d: DataType) -> Dtype {
    match d {
        DataType::I8 => Dtype::I8,
        DataType::U8 => Dtype::U8,
        DataType::I32 => Dtype::I32,
        DataType::U32 => Dtype::U32,
        DataType::I64 => Dtype::I64,
        DataType::U64 => Dtype::U64,
        DataType::F16 => Dtype::F16,
        DataType::F32 => Dtype::F32,
        DataType::F64 => Dtype::F64,
        DataType::Bf16 => Dtype::Bf16,
    }
}

pub(crate) fn model_dtype(d: Dtype) -> DataType {
    DataType::ALL.iter().copied().find(|m| kernel_dtype(*m) == d).unwrap_or(DataType::U8)
}

pub fn kernel_op(op: RedOp) -> Op {
    match op {
        RedOp::Sum => Op::Sum,
        RedOp::Prod => Op::Prod,
        RedOp::Max => Op::Max,
        RedOp::Min => Op::Min,
        RedOp::Avg => Op::Avg,
    }
}

/// Wall-clock microseconds (since the UNIX epoch) of counter stamps, anchored once per communicator: a call's
/// record then costs one counter read at each end, not a monotonic and a wall-clock one. The counter is the TSC
/// where it is invariant (scaled by `quanta`), else CLOCK_MONOTONIC: on a VM's vDSO a monotonic read costs about
/// twice a TSC read (23 against 10 ns here), and a 2-rank 8 B AllReduce spent 7 % of its time in them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WallClock {
    base: Stamp,
    wall_us: u64,
}

/// A reading of [`WallClock`]'s counter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp(u64);

/// The counter, calibrated once per process (under a millisecond here) by the first communicator.
static COUNTER: std::sync::LazyLock<quanta::Clock> = std::sync::LazyLock::new(quanta::Clock::new);

impl WallClock {
    fn new() -> WallClock {
        let base = WallClock::now();
        let wall_us =
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0);
        WallClock { base, wall_us }
    }

    pub(crate) fn now() -> Stamp {
        Stamp(COUNTER.raw())
    }

    /// Time from `from` to now.
    pub(crate) fn since(from: Stamp) -> Duration {
        Duration::from_nanos(COUNTER.delta_as_nanos(from.0, COUNTER.raw()))
    }

    pub(crate) fn us(&self, t: Stamp) -> u64 {
        self.wall_us + COUNTER.delta_as_nanos(self.base.0, t.0) / 1000
    }
}

/// One connection a rank wants: `send` to or receive from `peer` on `channel` (`conn_index` 1 = p2p).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Want {
    pub channel: u32,
    pub peer: u32,
    pub send: bool,
    pub conn_index: u32,
}

fn conn_tag(w: &Want, sender_side: bool) -> u64 {
    ((w.channel as u64) << 8) | ((w.conn_index as u64) << 1) | sender_side as u64
}

/// Distinct call sizes whose choice a communicator remembers.
const PLAN_CACHE: usize = 256;

/// A communicator rank.
pub struct Comm {
    pub(crate) rank: u32,
    pub(crate) nranks: u32,
    boot: Arc<dyn Bootstrap>,
    pub(crate) peers: Vec<PeerInfo>,
    chain: Vec<Arc<dyn Transport>>,
    pub(crate) sizes: BufSizes,
    pub(crate) waiter: Waiter,
    /// When calls write their destination with streaming stores.
    stream: StreamStores,
    select: SelectConfig,
    /// Choices already made, by (collective, bytes per rank).
    plans: FxHashMap<(Collective, u64), Choice>,
    channels: Vec<Channel>,
    /// The algorithms whose peers every channel is connected to (Ring's serve every collective but AllReduce's
    /// other algorithms).
    connected: Vec<Algorithm>,
    /// Point-to-point connections (channel 0, connIndex 1).
    pub(crate) p2p: Channel,
    pub(crate) seq: u64,
    pub(crate) clock: WallClock,
    records: Arc<Records>,
    /// Threads for channels 1.. (channel 0 runs on the caller's).
    workers: Workers,
    guards: Vec<Box<dyn Send + Sync>>,
    name: Option<String>,
    /// The NCCL profiler plugin's context for this communicator, when one is loaded.
    profiler: Option<Arc<CommProfiler>>,
    /// Buffers the ranks registered ([`Comm::register`]).
    windows: window::Windows,
}

impl Comm {
    /// Creates this rank's communicator; every rank of the bootstrap must call it.
    pub fn init_rank(boot: Arc<dyn Bootstrap>, opts: CommOptions) -> Result<Comm> {
        let env = &opts.env;
        let started = Instant::now();
        let (rank, nranks) = (boot.rank(), boot.nranks());
        let sizes = BufSizes::from_env(env)?;
        let timeout = timeout_from_env(env)?;
        let eager = env.int("NCCL_RUNTIME_CONNECT", 1)? == 0;
        let chans = |name: &str, default: i64| -> Result<u32, EnvError> {
            let v = env.int(name, default)?;
            if !(1..=MAX_CHANNELS as i64).contains(&v) {
                return Err(EnvError {
                    name: name.into(),
                    value: v.to_string(),
                    expected: format!("1 to {MAX_CHANNELS}"),
                });
            }
            Ok(v as u32)
        };
        let max_ch = chans("NCCL_MAX_NCHANNELS", DEFAULT_CHANNELS as i64)?;
        let min_ch = chans("NCCL_MIN_NCHANNELS", 1)?;
        let nch = DEFAULT_CHANNELS.clamp(min_ch.min(max_ch), max_ch);
        let select = SelectConfig::from_env(env, nch)?;
        let chain = transport::default_chain(env, opts.net.clone())?;
        if rank == 0 {
            show_version_once();
        }
        let t_env = started.elapsed();
        let me = local_peer_info(rank);
        let blob = serde_json::to_vec(&me)
            .map_err(|source| RuntimeError::PeerInfo { what: "this rank's peer info".into(), source })?;
        let peers = boot
            .all_gather(&blob)?
            .iter()
            .enumerate()
            .map(|(r, b)| {
                serde_json::from_slice::<PeerInfo>(b).map_err(|source| RuntimeError::PeerInfo {
                    what: format!("peer info of rank {r} is malformed"),
                    source,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let t_allgather = started.elapsed();
        let topology = facts::host_topology(env)?;
        let t_topo = started.elapsed();
        let select = select.on_link(ring_link(&chain, &peers));
        let cache = collscope_debug::sys::last_level_cache(me.cpus.first().copied().unwrap_or(0));
        let stream = StreamStores::from_env(env, cache, &peers, &me)?;
        if let StreamStores::Auto { llc, sharing } = stream {
            nccl_info!(
                Subsys::INIT,
                "collscope: calls whose buffers on this host fill the {} KiB last-level cache ({sharing} local ranks \
                 share it) write their destination with streaming stores; {STREAM_VAR}=never turns this off",
                llc >> 10
            );
        }

        let n = nranks as i32;
        let trees = dtree(n, rank as i32);
        let channels: Vec<Channel> = (0..nch)
            .map(|c| Channel {
                id: c,
                ring_prev: (rank + nranks - 1) % nranks,
                ring_next: (rank + 1) % nranks,
                // The first half of the channels run on the first tree, the rest on the second.
                tree: trees[if 2 * c < nch { 0 } else { 1 }],
                send: Default::default(),
                recv: Default::default(),
                scratch: Default::default(),
            })
            .collect();
        let init = facts::init_facts(facts::InitInput {
            rank,
            peers: &peers,
            channels: &channels,
            select: &select,
            chain: &chain,
            topology,
            name: opts.name.clone(),
        });
        let comm_id = comm_id(&peers);
        let mut record = communicator(&opts.name, &peers, rank, comm_id);
        let handle = facts::comm_handle(&opts.name, &me);
        facts::log_facts(&init, &record, &handle);
        let t_graphs = started.elapsed();
        let p2p = Channel {
            id: 0,
            ring_prev: 0,
            ring_next: 0,
            tree: trees[0],
            send: Default::default(),
            recv: Default::default(),
            scratch: Default::default(),
        };
        let patience = wait::patience_for(&host_cpus(&peers, me.host_hash));
        let per_core = ranks_per_core(&peers);
        let crowded = crowded_buffsize(per_core).filter(|_| in_host_memory(&chain, &peers));
        let sizes = match crowded {
            Some(simple) if env.str("NCCL_BUFFSIZE").is_none() => {
                nccl_info!(
                    Subsys::INIT,
                    "NCCL_BUFFSIZE {simple}: a host runs {per_core} ranks a core, over host memory (collscope's default there)"
                );
                BufSizes { simple, ..sizes }
            }
            _ => sizes,
        };
        let mut comm = Comm {
            rank,
            nranks,
            boot,
            peers,
            chain,
            sizes,
            waiter: Waiter { rank, timeout, abort: AbortHandle::default(), patience },
            stream,
            select,
            plans: FxHashMap::default(),
            channels,
            connected: Vec::new(),
            p2p,
            seq: 0,
            clock: WallClock::new(),
            // Unnamed, its calls carry its id in hex, as the profiler plugin names a communicator NCCL gave no name.
            records: Arc::new(Records::new(rank, nranks, nch as usize, Some(record_name(&opts.name, comm_id)))),
            workers: Workers::default(),
            guards: Vec::new(),
            name: opts.name,
            profiler: None,
            windows: Default::default(),
        };
        crate::observe::recorder::global().register(comm.records.clone());
        comm.profiler =
            CommProfiler::init(env, comm_id, comm.name.as_deref(), record.nnodes.unwrap_or(1), nranks, rank);
        if let Some(p) = &comm.profiler {
            let _ = comm.records.profiler.set(Arc::downgrade(p));
        }
        // NCCL_RUNTIME_CONNECT=0: connect every algorithm's peers now instead of at first use.
        if eager && nranks > 1 {
            comm.ensure_connected(Algorithm::Ring)?;
            comm.ensure_connected(Algorithm::Tree)?;
            if comm.select.one_shot() {
                comm.ensure_connected(Algorithm::OneShot)?;
            }
        }
        let secs = |d: Duration| d.as_secs_f64();
        let total = started.elapsed();
        // NCCL's phase names (`Init timings`); parameters, buffers and channels fall in its `rest`.
        record.init = model::InitTimings {
            total: Some(secs(total)),
            phases: vec![
                ("allgathers".into(), secs(t_allgather - t_env)),
                ("topo".into(), secs(t_topo - t_allgather)),
                ("graphs".into(), secs(t_graphs - t_topo)),
                ("connections".into(), secs(total - t_graphs)),
            ],
        };
        facts::log_complete(&record, &handle, comm_id);
        crate::observe::recorder::record(|| model::Event::InitFacts(Box::new(init)));
        crate::observe::recorder::record(|| model::Event::Communicator(record));
        Ok(comm)
    }

    /// `n` ranks as threads of this process: one communicator per rank, in rank order.
    pub fn init_threads(n: u32, opts: CommOptions) -> Result<Vec<Comm>> {
        let timeout = timeout_from_env(&opts.env)?;
        let boots = ThreadBootstrap::group(n, timeout);
        std::thread::scope(|s| {
            let handles: Vec<_> = boots
                .into_iter()
                .map(|b| {
                    let opts = opts.clone();
                    s.spawn(move || Comm::init_rank(Arc::new(b), opts))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(RuntimeError::Bootstrap("an init thread panicked".into()))))
                .collect()
        })
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    pub fn nchannels(&self) -> u32 {
        self.channels.len() as u32
    }

    /// Lets another thread abort this communicator's waits (a dead peer noticed by a keep-alive).
    pub fn abort_handle(&self) -> AbortHandle {
        self.waiter.abort.clone()
    }

    /// The connections and recent operations, for telemetry.
    pub fn records(&self) -> Arc<Records> {
        self.records.clone()
    }

    pub fn bootstrap(&self) -> &Arc<dyn Bootstrap> {
        &self.boot
    }

    /// What `select` would choose for a call of `coll` on `bytes`.
    pub fn plan(&self, coll: Collective, bytes: u64) -> Choice {
        select(&self.select, coll, bytes, self.nranks)
    }

    /// `plan`, remembered per (collective, size): pricing every candidate costs more than a small call's data
    /// movement, and jobs repeat their sizes. The memory is bounded and forgotten when the choice rules change.
    fn plan_cached(&mut self, coll: Collective, bytes: u64) -> Choice {
        if let Some(c) = self.plans.get(&(coll, bytes)) {
            return *c;
        }
        if self.plans.len() >= PLAN_CACHE {
            self.plans.clear();
        }
        let c = self.plan(coll, bytes);
        self.plans.insert((coll, bytes), c);
        // Each size's choice once (per plan memory), for the model's decisions.
        crate::observe::recorder::record(|| {
            model::Event::Decision(model::Decision {
                coll,
                bytes,
                algo: c.algo,
                proto: c.proto,
                n_channels: c.nchannels.min(self.channels.len() as u32).max(1),
                time_us: self.select.predict(coll, bytes, self.nranks, c),
                runner_up: None,
                reason: None,
                datatype: None,
                rank: Some(self.rank),
            })
        });
        c
    }

    /// Replaces the algorithm/protocol restrictions `select` applies (what `NCCL_ALGO`/`NCCL_PROTO` gave at
    /// init), e.g. for a benchmark that forces a protocol per run.
    pub fn set_select_config(&mut self, cfg: SelectConfig) {
        self.plans.clear();
        self.select = cfg.on_link(self.select.link());
    }

    pub fn select_config(&self) -> &SelectConfig {
        &self.select
    }

    /// Sets up `wants`; every peer named must call this with the mirror-image wants.
    pub(crate) fn connect(&mut self, wants: &[Want]) -> Result<()> {
        let mut pending = Vec::with_capacity(wants.len());
        for w in wants {
            let (me, peer) = (&self.peers[self.rank as usize], &self.peers[w.peer as usize]);
            let t = transport::select(&self.chain, me, peer).ok_or(RuntimeError::NoTransport {
                from: if w.send { self.rank } else { w.peer },
                to: if w.send { w.peer } else { self.rank },
            })?;
            let spec = ConnSpec {
                channel: w.channel,
                conn_index: w.conn_index,
                me,
                peer,
                sizes: self.sizes,
                comm: self.name.clone(),
            };
            let (p, handle) = if w.send { t.send_setup(&spec)? } else { t.recv_setup(&spec)? };
            self.boot.send(w.peer, conn_tag(w, w.send), &handle)?;
            pending.push((w, t.kind(), p));
        }
        for (w, kind, p) in pending {
            let handle = self.recv_handle(w.peer, conn_tag(w, !w.send))?;
            let est = p.connect(&handle)?;
            if let Some(line) = &est.line {
                let sub = match kind {
                    model::Transport::P2p => Subsys::P2P,
                    model::Transport::Shm => Subsys::SHM,
                    _ => Subsys::NET,
                };
                nccl_info!(Subsys::INIT | sub, "{line}");
            }
            // Both ends keep theirs, the receiver's too where only the sender prints a line (P2P, SHM).
            self.records.push_connection(est.record.clone());
            self.guards.extend(est.guard);
            if kind == model::Transport::Shm {
                est.mem.attach_windows(self.windows.conn(w.peer));
                if self.windows.in_use() {
                    est.mem.allow_direct(Direct::ShmWindows);
                }
            }
            let ch = if w.conn_index == 1 { &mut self.p2p } else { &mut self.channels[w.channel as usize] };
            if w.send {
                ch.send.insert(w.peer, SendEnd::new(est.mem, w.peer));
            } else {
                ch.recv.insert(w.peer, RecvEnd { mem: est.mem, peer: w.peer, step: 0 });
            }
        }
        Ok(())
    }

    /// A connection handle from `peer`, waiting at most the communicator's timeout and ending early on abort.
    fn recv_handle(&self, peer: u32, tag: u64) -> Result<Vec<u8>> {
        let start = Instant::now();
        let what = || format!("connection handle from rank {peer} (tag {tag:#x})");
        loop {
            if let Some(h) = self.boot.recv_timeout(peer, tag, Duration::from_millis(100))? {
                return Ok(h);
            }
            let w = &self.waiter;
            if w.abort.is_aborted() {
                let reason = w.abort.reason().unwrap_or_default();
                return Err(RuntimeError::Aborted { rank: self.rank, what: what(), reason });
            }
            if start.elapsed() >= w.timeout {
                return Err(RuntimeError::Timeout { rank: self.rank, secs: w.timeout.as_secs(), what: what() });
            }
        }
    }

    fn ensure_connected(&mut self, algo: Algorithm) -> Result<()> {
        if self.connected.contains(&algo) {
            return Ok(());
        }
        let mut wants = Vec::new();
        let mut seen = HashSet::new();
        let others = (0..self.nranks).filter(|&q| q != self.rank);
        for ch in &self.channels {
            let mut want = |peer: u32, send: bool| {
                let have = if send { ch.send.contains_key(&peer) } else { ch.recv.contains_key(&peer) };
                let w = Want { channel: ch.id, peer, send, conn_index: 0 };
                if !have && seen.insert(w) {
                    wants.push(w);
                }
            };
            match algo {
                Algorithm::Tree => {
                    for p in ch.tree.children().chain((ch.tree.up >= 0).then_some(ch.tree.up as u32)) {
                        want(p, true);
                        want(p, false);
                    }
                }
                Algorithm::OneShot => {
                    for p in others.clone() {
                        want(p, true);
                        want(p, false);
                    }
                }
                _ => {
                    want(ch.ring_next, true);
                    want(ch.ring_prev, false);
                }
            }
        }
        self.connect(&wants)?;
        self.connected.push(algo);
        // NCCL 2.28.9 `src/transport/generic.cc`; no PXN or GDR on host memory.
        match algo {
            Algorithm::Tree => nccl_info!(Subsys::INIT, "Connected all trees"),
            Algorithm::OneShot => {
                let sends = wants.iter().filter(|w| w.send).count();
                let recvs = wants.len() - sends;
                nccl_info!(
                    Subsys::INIT,
                    "collscope extension: connected every pair of ranks for OneShot ({sends} sends and {recvs} receives added)"
                )
            }
            _ => nccl_info!(Subsys::INIT, "{}", lines::connected_rings_line(false, false)),
        }
        Ok(())
    }

    /// The record of a call that starts at `started`.
    pub(crate) fn new_record(
        &mut self,
        coll: Collective,
        dt: DataType,
        count: usize,
        op: Option<RedOp>,
        started: Stamp,
    ) -> OpEntry {
        self.seq += 1;
        // A blocking call is enqueued as it starts; a group sets its operations' enqueue time to when it opened.
        let at = self.clock.us(started);
        let rec = OpEntry { op, ..OpEntry::started(self.seq, coll, dt, count as u64, at) };
        self.records.begin_op(&rec);
        if crate::observe::recorder::enabled() {
            self.records.stats.begin();
        }
        rec
    }

    /// Closes `rec` with the outcome of the call and keeps it; errors come back naming the operation.
    pub(crate) fn finish_record(&self, mut rec: OpEntry, elapsed: Duration, res: Result<()>) -> Result<()> {
        // One wall-clock read per call: the end follows from the start and the monotonic duration.
        rec.elapsed_ns = elapsed.as_nanos() as u64;
        rec.state = if res.is_ok() { OpState::Completed } else { OpState::Failed };
        if crate::observe::recorder::enabled() {
            let full = self.records.record(&rec);
            self.records.stats.finish(&full, rec.elapsed_ns);
            if let Some(f) = res.as_ref().err().and_then(|e| e.finding(&full)) {
                crate::observe::recorder::record(|| model::Event::Finding(f));
            }
        }
        let (coll, seq) = (rec.coll, rec.seq);
        self.records.push_op(rec);
        res.map_err(|e| RuntimeError::OpFailed { coll, seq, source: Box::new(e) })
    }

    /// Runs a collective on raw buffers. `count` is per rank: the whole vector for AllReduce, Broadcast and
    /// Reduce, one rank's block for AllGather (input) and ReduceScatter (output).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn collective(
        &mut self,
        coll: Collective,
        dt: DataType,
        op: RedOp,
        root: u32,
        src: *const u8,
        dst: *mut u8,
        count: usize,
    ) -> Result<()> {
        let started = WallClock::now();
        let mut rec = self.new_record(
            coll,
            dt,
            count,
            Some(op).filter(|_| matches!(coll, Collective::AllReduce | Collective::Reduce | Collective::ReduceScatter)),
            started,
        );
        if matches!(coll, Collective::Broadcast | Collective::Reduce) {
            rec.root = Some(root as i32);
        }
        let res = self.run_collective(coll, dt, op, root, src, dst, count, &mut rec);
        let elapsed = WallClock::since(started);
        if rec.n_channels.is_some() {
            // Channel 0 runs on this thread for the whole call: its busy time is the call's, already measured.
            record_traffic(&self.records.stats, 0, self.channels[0].moved(), elapsed);
        }
        self.finish_record(rec, elapsed, res)
    }

    #[allow(clippy::too_many_arguments)]
    fn run_collective(
        &mut self,
        coll: Collective,
        dt: DataType,
        op: RedOp,
        root: u32,
        src: *const u8,
        dst: *mut u8,
        count: usize,
        rec: &mut OpEntry,
    ) -> Result<()> {
        if root >= self.nranks {
            return Err(RuntimeError::BadRank { what: "root", got: root as usize, nranks: self.nranks });
        }
        let es = dt.size();
        if count == 0 {
            return Ok(());
        }
        let (kdt, kop) = (kernel_dtype(dt), kernel_op(op));
        if self.nranks == 1 {
            // SAFETY: `src` and `dst` hold `count` elements, the caller's contract (`collective`); they are equal or
            // apart, as a slice and a `&mut` slice are.
            unsafe { collscope_kernels::bytes::copy(dst, src, count * es) };
            return Ok(());
        }
        let choice = self.plan_cached(coll, rec.bytes);
        let algo = if coll == Collective::AllReduce { choice.algo } else { Algorithm::Ring };
        let nch = (choice.nchannels as usize).min(self.channels.len()).max(1);
        rec.algo = Some(algo);
        rec.proto = Some(choice.proto);
        // NCCL 2.28.9 `src/enqueue.cc` prints each call's choice on rank 0 (INFO, TUNING).
        if self.rank == 0 {
            // Inside the macro: formatted only when the line is logged.
            nccl_info!(
                Subsys::TUNING,
                "{}",
                lines::decision_line(coll, rec.bytes, algo, choice.proto, (0, nch as u32 - 1))
            );
        }
        self.ensure_connected(algo)?;
        // Set once the channels are sure to run: it also tells the caller their traffic is this call's.
        rec.n_channels = Some(nch as u32);

        let payload = self.sizes.step_payload(choice.proto);
        let chunk_steps = match (choice.proto, coll) {
            (Protocol::Simple, Collective::AllReduce | Collective::AllGather | Collective::ReduceScatter) => 4,
            _ => 1,
        };
        let chunk = (payload / es * chunk_steps).max(1);
        let align = (16 / es).max(1);
        let per_ch = count.div_ceil(nch).div_ceil(align) * align;
        let (rank, nranks, proto) = (self.rank, self.nranks, choice.proto);
        let (src_len, dst_len) = match coll {
            Collective::AllGather => (count * es, count * es * nranks as usize),
            Collective::ReduceScatter => (count * es * nranks as usize, count * es),
            _ => (count * es, count * es),
        };
        let stream_dst = self.stream.streams(stream::touched(src, src_len, dst, dst_len));
        let (src, dst) = (Ptr(src as *mut u8), Ptr(dst));
        let waiter = &self.waiter;
        let stats = &self.records.stats;
        let call = self.profiler.as_ref().map(|p| {
            let (send_buff, recv_buff, n_channels) = (src.0.cast_const(), dst.0, nch as u32);
            p.coll_start(&CollStart {
                coll,
                send_buff,
                recv_buff,
                count,
                root,
                dt,
                n_channels,
                algo,
                proto: choice.proto,
            })
        });
        let algo_run = |p: &mut Prims, part: Part| match (coll, algo) {
            (Collective::AllReduce, Algorithm::Tree) => algos::tree_all_reduce(p, src, dst, part),
            (Collective::AllReduce, Algorithm::OneShot) => algos::one_shot_all_reduce(p, rank, src, dst, part),
            (Collective::AllReduce, _) => algos::ring_all_reduce(p, rank, src, dst, part),
            (Collective::Broadcast, _) => algos::ring_broadcast(p, rank, root, src, dst, part),
            (Collective::Reduce, _) => algos::ring_reduce(p, rank, root, src, dst, part),
            (Collective::AllGather, _) => algos::ring_all_gather(p, rank, src, dst, part),
            _ => algos::ring_reduce_scatter(p, rank, src, dst, part),
        };
        let run = |ch: &mut Channel| -> Result<()> {
            let off = ch.id as usize * per_ch;
            if off >= count {
                return Ok(());
            }
            let part = Part { off, len: per_ch.min(count - off), chunk, esize: es, count };
            let channel = ch.id;
            // The profiler's proxy operations carry their step counts: the channel counts them first.
            let kernel = call.as_ref().map(|c| {
                let mut dry = Prims::new(ch, proto, kdt, kop, nranks, waiter, payload);
                dry.count_only = true;
                let _ = algo_run(&mut dry, part);
                let steps = ch.moved().iter().map(|m| (m.peer, m.sent, m.bytes));
                c.channel_start(channel, steps, payload, |peer, send| ch.conn_mem(peer, send))
            });
            let t0 = (channel != 0 && crate::observe::recorder::enabled()).then(Instant::now);
            let mut p = Prims::new(ch, proto, kdt, kop, nranks, waiter, payload);
            p.stream_dst = stream_dst;
            let r = algo_run(&mut p, part);
            let r = p.finish(r);
            if let Some(t0) = t0 {
                record_traffic(stats, channel, p.moved(), t0.elapsed());
            }
            if let Some(k) = kernel {
                k.stop();
            }
            r
        };
        if let Some(c) = &call {
            c.launched();
        }
        self.workers.run(&mut self.channels[..nch], &run)
    }

    fn check_len(coll: Collective, buffer: &'static str, got: usize, expected: usize) -> Result<()> {
        if got != expected {
            return Err(RuntimeError::SizeMismatch { coll: coll.to_string(), buffer, got, expected });
        }
        Ok(())
    }

    fn check_count<T: Element>(coll: Collective, count: usize, times: usize) -> Result<usize> {
        count
            .checked_mul(times)
            .filter(|n| n.checked_mul(std::mem::size_of::<T>()).is_some_and(|b| b <= isize::MAX as usize))
            .ok_or_else(|| RuntimeError::CountOverflow {
                coll: coll.to_string(),
                count,
                dtype: model_dtype(T::DTYPE).to_string(),
            })
    }

    /// `recv = op over ranks of send`.
    pub fn all_reduce<T: Element>(&mut self, send: &[T], recv: &mut [T], op: RedOp) -> Result<()> {
        Self::check_len(Collective::AllReduce, "receive", recv.len(), send.len())?;
        let dt = model_dtype(T::DTYPE);
        self.collective(
            Collective::AllReduce,
            dt,
            op,
            0,
            send.as_ptr() as *const u8,
            recv.as_mut_ptr() as *mut u8,
            send.len(),
        )
    }

    pub fn all_reduce_in_place<T: Element>(&mut self, buf: &mut [T], op: RedOp) -> Result<()> {
        let p = buf.as_mut_ptr() as *mut u8;
        self.collective(Collective::AllReduce, model_dtype(T::DTYPE), op, 0, p, p, buf.len())
    }

    /// `recv[r * n .. (r + 1) * n] = send of rank r`.
    pub fn all_gather<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Result<()> {
        let total = Self::check_count::<T>(Collective::AllGather, send.len(), self.nranks as usize)?;
        Self::check_len(Collective::AllGather, "receive", recv.len(), total)?;
        let dt = model_dtype(T::DTYPE);
        self.collective(
            Collective::AllGather,
            dt,
            RedOp::Sum,
            0,
            send.as_ptr() as *const u8,
            recv.as_mut_ptr() as *mut u8,
            send.len(),
        )
    }

    /// AllGather where this rank's block already sits at `buf[rank * n ..]`.
    pub fn all_gather_in_place<T: Element>(&mut self, buf: &mut [T]) -> Result<()> {
        let n = buf.len() / self.nranks as usize;
        Self::check_len(Collective::AllGather, "in-place", buf.len(), n * self.nranks as usize)?;
        let p = buf.as_mut_ptr();
        // SAFETY: `check_len` made `buf` `nranks * n` long, so this rank's block starts inside it.
        let src = unsafe { p.add(self.rank as usize * n) } as *const u8;
        self.collective(Collective::AllGather, model_dtype(T::DTYPE), RedOp::Sum, 0, src, p as *mut u8, n)
    }

    /// `recv = op over ranks of send[rank * n .. (rank + 1) * n]`.
    pub fn reduce_scatter<T: Element>(&mut self, send: &[T], recv: &mut [T], op: RedOp) -> Result<()> {
        let total = Self::check_count::<T>(Collective::ReduceScatter, recv.len(), self.nranks as usize)?;
        Self::check_len(Collective::ReduceScatter, "send", send.len(), total)?;
        let dt = model_dtype(T::DTYPE);
        self.collective(
            Collective::ReduceScatter,
            dt,
            op,
            0,
            send.as_ptr() as *const u8,
            recv.as_mut_ptr() as *mut u8,
            recv.len(),
        )
    }

    /// ReduceScatter whose result lands in `buf[rank * n ..]`.
    pub fn reduce_scatter_in_place<T: Element>(&mut self, buf: &mut [T], op: RedOp) -> Result<()> {
        let n = buf.len() / self.nranks as usize;
        Self::check_len(Collective::ReduceScatter, "in-place", buf.len(), n * self.nranks as usize)?;
        let p = buf.as_mut_ptr();
        // SAFETY: `check_len` made `buf` `nranks * n` long, so this rank's block starts inside it.
        let dst = unsafe { p.add(self.rank as usize * n) } as *mut u8;
        self.collective(Collective::ReduceScatter, model_dtype(T::DTYPE), op, 0, p as *const u8, dst, n)
    }

    /// `recv = send of root` (`send` is read on the root only).
    pub fn broadcast<T: Element>(&mut self, send: &[T], recv: &mut [T], root: u32) -> Result<()> {
        Self::check_len(Collective::Broadcast, "receive", recv.len(), send.len())?;
        let dt = model_dtype(T::DTYPE);
        self.collective(
            Collective::Broadcast,
            dt,
            RedOp::Sum,
            root,
            send.as_ptr() as *const u8,
            recv.as_mut_ptr() as *mut u8,
            send.len(),
        )
    }

    pub fn broadcast_in_place<T: Element>(&mut self, buf: &mut [T], root: u32) -> Result<()> {
        let p = buf.as_mut_ptr() as *mut u8;
        self.collective(Collective::Broadcast, model_dtype(T::DTYPE), RedOp::Sum, root, p, p, buf.len())
    }

    /// `recv = op over ranks of send` on `root` (`recv` is written on the root only).
    pub fn reduce<T: Element>(&mut self, send: &[T], recv: &mut [T], op: RedOp, root: u32) -> Result<()> {
        Self::check_len(Collective::Reduce, "receive", recv.len(), send.len())?;
        let dt = model_dtype(T::DTYPE);
        self.collective(
            Collective::Reduce,
            dt,
            op,
            root,
            send.as_ptr() as *const u8,
            recv.as_mut_ptr() as *mut u8,
            send.len(),
        )
    }

    pub fn reduce_in_place<T: Element>(&mut self, buf: &mut [T], op: RedOp, root: u32) -> Result<()> {
        let p = buf.as_mut_ptr() as *mut u8;
        self.collective(Collective::Reduce, model_dtype(T::DTYPE), op, root, p, p, buf.len())
    }
}

/// Adds what one channel moved in one call to the rank's traffic totals (only while telemetry is on).
fn record_traffic(stats: &CallStats, channel: u32, moved: &[Moved], busy: Duration) {
    if !crate::observe::recorder::enabled() {
        return;
    }
    let nanos = busy.as_nanos() as u64;
    for m in moved {
        stats.traffic(channel, m.peer, m.sent, m.bytes, m.in_place, nanos);
    }
}

/// Prints NCCL's version line once per process, as rank 0's init does (NCCL 2.28.9 `src/init.cc`,
/// `showVersion`).
fn show_version_once() {
    static SHOWN: std::sync::Once = std::sync::Once::new();
    SHOWN.call_once(collscope_debug::show_version);
}

/// The cores each rank of host `host` may run on, one list a rank.
fn host_cpus(peers: &[PeerInfo], host: u64) -> Vec<&[u32]> {
    peers.iter().filter(|p| p.host_hash == host).map(|p| &p.cpus[..]).collect()
}

/// The most ranks a core of any host of the job runs ([`wait::ranks_per_core`]). Every rank decides from the
/// whole peer list, so all take the same buffer sizes (a step's bytes must fit its peer's slot).
fn ranks_per_core(peers: &[PeerInfo]) -> usize {
    let hosts: HashSet<u64> = peers.iter().map(|p| p.host_hash).collect();
    hosts.into_iter().map(|h| wait::ranks_per_core(&host_cpus(peers, h))).max().unwrap_or(0)
}

/// Whether every rank reaches every other through host memory: one host, and the transport `chain` picks for
/// them is not NET (P2P between threads, SHM between processes). The crowded default was measured there; over
/// sockets each step costs system calls and NCCL's 4 MiB did better (4 rank processes on 2 cores, NET/Socket
/// AllReduce busbw, medians of 5 interleaved runs: 2 MiB 0.82-0.86x at 2, 32 and 64 MiB, alike elsewhere).
/// Every rank decides from the whole peer list and the same environment, so all take the same sizes.
fn in_host_memory(chain: &[Arc<dyn Transport>], peers: &[PeerInfo]) -> bool {
    let Some((first, rest)) = peers.split_first() else { return false };
    rest.iter().all(|p| transport::select(chain, first, p).is_some_and(|t| t.kind() != model::Transport::Net))
}

/// The communicator's id as NCCL's `commId` hash: the same on every rank (from rank 0's process identity and
/// communicator nonce), and another for each communicator.
fn comm_id(peers: &[PeerInfo]) -> u64 {
    let (pid_hash, nonce) = peers.first().map_or((0, 0), |p| (p.pid_hash, p.comm_nonce));
    fnv(&[&pid_hash.to_le_bytes(), &nonce.to_le_bytes()])
}

/// The name a communicator's calls carry: its own, else its id in hex (the same on every rank).
fn record_name(name: &Option<String>, comm_id: u64) -> String {
    name.clone().unwrap_or_else(|| format!("{comm_id:#x}"))
}

/// This rank's communicator as telemetry reports it: ready, with its place in the job (init timings are added
/// when init ends).
fn communicator(name: &Option<String>, peers: &[PeerInfo], rank: u32, comm_id: u64) -> model::Communicator {
    let me = peers.get(rank as usize);
    let hosts: HashSet<u64> = peers.iter().map(|p| p.host_hash).collect();
    let local: Vec<u32> =
        peers.iter().filter(|p| Some(p.host_hash) == me.map(|m| m.host_hash)).map(|p| p.rank).collect();
    model::Communicator {
        comm: name.clone(),
        comm_id: Some(format!("{comm_id:#x}")),
        name: name.clone(),
        rank: Some(rank),
        nranks: Some(peers.len() as u32),
        nnodes: Some(hosts.len() as u32),
        local_ranks: Some(local.len() as u32),
        local_rank: local.iter().position(|r| *r == rank).map(|i| i as u32),
        host: me.map(|p| p.host.clone()),
        pid: me.map(|p| p.pid),
        cuda_dev: me.map(|p| p.dev),
        // What its version line says, so the live model and its log read back agree.
        version: Some(collscope_debug::version()),
        state: model::CommState::Ready,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threads(n: u32, pairs: &[(&str, &str)]) -> Vec<Comm> {
        Comm::init_threads(
            n,
            CommOptions { env: Env::from_pairs(pairs.iter().copied()), net: None, name: Some("t".into()) },
        )
        .unwrap()
    }

    #[test]
    fn the_most_crowded_host_sets_every_ranks_slot_size() {
        let peer = |rank: u32, host_hash: u64, cpus: &[u32]| PeerInfo {
            host_hash,
            cpus: cpus.to_vec(),
            ..local_peer_info(rank)
        };
        let shared = |n: u32, host: u64| (0..n).map(|r| peer(r, host, &[0, 1])).collect::<Vec<_>>();
        let slots = |peers: &[PeerInfo]| crowded_buffsize(ranks_per_core(peers));
        assert_eq!(slots(&shared(8, 1)), Some(1 << 20), "8 ranks on 2 cores");
        assert_eq!(slots(&shared(7, 1)), Some(1 << 20), "7 ranks on 2 cores: three a core");
        assert_eq!(slots(&shared(4, 1)), Some(1 << 20), "4 ranks on 2 cores");
        assert_eq!(slots(&shared(3, 1)), None, "fewer than two a core keep NCCL's buffers");
        let pinned: Vec<_> = (0..8).map(|r| peer(r, 1, &[r])).collect();
        assert_eq!(slots(&pinned), None, "one a core");
        // The most crowded host decides, for the ranks of the other host too.
        let mut two = shared(4, 1);
        two.extend((4..12).map(|r| peer(r, 2, &[0, 1])));
        assert_eq!(slots(&two), Some(1 << 20));
    }

    #[test]
    fn only_ranks_that_reach_each_other_through_host_memory_take_the_crowded_default() {
        // Rank processes: a process of its own each, on `host_hash`.
        let on = |host_hash: u64, rank: u32| PeerInfo {
            host_hash,
            pid_hash: 100 + u64::from(rank),
            ..local_peer_info(rank)
        };
        let chain = |pairs: &[(&str, &str)]| transport::default_chain(&Env::from_pairs(pairs.iter().copied()), None);
        let one_host: Vec<_> = (0..4).map(|r| on(1, r)).collect();
        assert!(in_host_memory(&chain(&[]).unwrap(), &one_host), "SHM between the processes of a host");
        let forced = chain(&[("NCCL_SHM_DISABLE", "1"), ("NCCL_P2P_DISABLE", "1")]).unwrap();
        assert!(!in_host_memory(&forced, &one_host), "NET forced on one host");
        // As in NCCL 2.28.9, only the value 1 disables P2P or SHM (`transport::default_chain`).
        let two = chain(&[("NCCL_SHM_DISABLE", "2"), ("NCCL_P2P_DISABLE", "2")]).unwrap();
        assert!(in_host_memory(&two, &one_host), "2 disables neither");
        let no_shm = chain(&[("NCCL_SHM_DISABLE", "1")]).unwrap();
        assert!(!in_host_memory(&no_shm, &one_host), "processes without SHM use NET");
        let threads: Vec<_> = (0..4).map(local_peer_info).collect();
        assert!(in_host_memory(&no_shm, &threads), "P2P between the threads of a process");
        let two_hosts: Vec<_> = (0..4).map(|r| on(1 + u64::from(r / 2), r)).collect();
        assert!(!in_host_memory(&chain(&[]).unwrap(), &two_hosts), "NET between hosts");
    }

    #[test]
    fn one_shot_connects_every_pair_of_ranks_and_reduces_every_ranks_vector() {
        let comms = threads(4, &[]);
        std::thread::scope(|s| {
            for mut c in comms {
                s.spawn(move || {
                    let one_shot = Choice { algo: Algorithm::OneShot, proto: Protocol::Ll, nchannels: 1 };
                    let cfg = SelectConfig::from_env(&Env::from_pairs::<&str, &str>([]), c.nchannels())
                        .unwrap()
                        .forced(one_shot);
                    c.set_select_config(cfg);
                    let r = c.rank();
                    let mut v: Vec<f32> = (0..10).map(|i| (i * 10) as f32 + r as f32).collect();
                    c.all_reduce_in_place(&mut v, RedOp::Sum).unwrap();
                    assert!(v.iter().enumerate().all(|(i, &x)| x == (i * 40 + 6) as f32), "rank {r}: {v:?}");
                    // A rank lists the connections it sends on (NCCL's lines), so every rank lists all three.
                    let conns = c.records().connections();
                    for q in (0..4).filter(|&q| q != r) {
                        let sends = conns.iter().any(|k| (k.channel, k.src, k.dst) == (0, r, q));
                        assert!(sends, "rank {r} to {q}: {conns:?}");
                    }
                });
            }
        });
    }

    #[test]
    fn each_communicator_of_a_process_gets_its_own_id_and_handle() {
        let (a, b) = ([local_peer_info(0), local_peer_info(1)], [local_peer_info(0), local_peer_info(1)]);
        assert_eq!(a[0].pid_hash, b[0].pid_hash, "one process");
        assert_ne!(comm_id(&a), comm_id(&b));
        assert_eq!(comm_id(&a), comm_id(&a.clone()), "the same peers give every rank the same id");
        assert_ne!(facts::comm_handle(&None, &a[0]), facts::comm_handle(&None, &b[0]));
    }

    #[test]
    fn bad_arguments_and_env_are_named() {
        let mut c = threads(1, &[]).pop().unwrap();
        let e = c.all_reduce(&[1u32, 2], &mut [0u32; 3], RedOp::Sum).unwrap_err().to_string();
        assert!(e.contains("AllReduce") && e.contains("receive buffer has 3 elements, expected 2"), "{e}");
        let e = c.broadcast_in_place(&mut [1u8], 4).unwrap_err().to_string();
        assert!(e.contains("root: rank 4 is out of range for 1 ranks"), "{e}");
        let e = c.send(&[1u8], 2).unwrap_err().to_string();
        assert!(e.contains("peer: rank 2"), "{e}");
        let huge = usize::MAX / 2;
        let e = Comm::check_count::<f32>(Collective::AllGather, huge, 4).unwrap_err().to_string();
        assert!(e.contains("AllGather: count") && e.contains("float"), "{e}");
        for (k, v) in [("NCCL_MAX_NCHANNELS", "0"), ("COLLSCOPE_TIMEOUT_S", "-3"), ("NCCL_P2P_DISABLE", "yes")] {
            let e = Comm::init_threads(1, CommOptions { env: Env::from_pairs([(k, v)]), net: None, name: None });
            let msg = e.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(msg.contains(&format!("{k}='{v}'")), "{msg}");
        }
    }

    #[test]
    fn ops_and_connections_are_recorded_with_nccl_lines() {
        let comms = threads(2, &[("NCCL_ALGO", "ring"), ("NCCL_PROTO", "LL128")]);
        let recs: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = comms
                .into_iter()
                .map(|mut c| {
                    s.spawn(move || {
                        let mut buf = vec![1.5f64; 1000];
                        c.all_reduce_in_place(&mut buf, RedOp::Avg).unwrap();
                        assert!(buf.iter().all(|v| *v == 1.5));
                        c.records()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let ops = recs[0].ops();
        assert_eq!(ops.len(), 1);
        let op = &ops[0];
        assert_eq!((op.seq, op.coll, op.state), (1, Collective::AllReduce, OpState::Completed));
        assert_eq!(
            (op.algo, op.proto, op.n_channels, op.bytes),
            (Some(Algorithm::Ring), Some(Protocol::Ll128), Some(1), 8000)
        );
        assert!(op.busbw_gbps.is_some_and(|b| b > 0.0));
        assert_eq!(op.enqueued_us, op.started_us, "a blocking call is enqueued as it starts");
        let (start, end, us) = (op.started_us.unwrap(), op.completed_us.unwrap(), op.duration_us.unwrap());
        assert!((end - start).abs_diff(us as u64) <= 1, "the end is the start plus the measured duration");
        let (recvs, sends): (Vec<_>, Vec<_>) =
            recs[0].connections().into_iter().partition(|c| c.direction == model::Direction::Recv);
        // Rank 0 sends to rank 1 on each of the two channels (the lines it prints) and keeps the ends it
        // receives from rank 1 on, with their transport.
        assert_eq!(sends.len(), 2);
        assert!(sends.iter().all(|c| c.src == 0 && c.dst == 1 && c.mode.as_deref() == Some("direct pointer")));
        assert_eq!(recvs.len(), 2, "{recvs:?}");
        assert!(recvs.iter().all(|c| (c.src, c.dst, c.transport) == (1, 0, model::Transport::P2p)), "{recvs:?}");
    }

    #[test]
    fn threads_read_a_peers_buffer_in_place_and_a_call_ends_only_once_it_was_read() {
        // Simple steps of 4 KiB: each rank's 64 KiB block is 16 steps the peer reads in the sender's buffer.
        let env = [("NCCL_PROTO", "Simple"), ("NCCL_BUFFSIZE", "32768"), ("NCCL_MAX_NCHANNELS", "1")];
        std::thread::scope(|s| {
            for mut c in threads(2, &env) {
                s.spawn(move || {
                    let (r, n) = (c.rank, 16384);
                    let (mut send, mut recv) = (vec![0u32; n], vec![0u32; 2 * n]);
                    for it in 0..200u32 {
                        send.fill(2 * it + r);
                        c.all_gather(&send, &mut recv).unwrap();
                        // The buffer changes as soon as the call returns: the peer must have read it by then.
                        send.fill(u32::MAX);
                        for (peer, block) in recv.chunks(n).enumerate() {
                            assert!(block.iter().all(|v| *v == 2 * it + peer as u32), "call {it}, block {peer}");
                        }
                    }
                    assert!(
                        c.channels[0].send.values().all(|e| e.mem.direct() == Direct::P2pRead),
                        "P2P steps are read in place"
                    );
                });
            }
        });
    }

    #[test]
    fn a_ring_allreduce_between_threads_writes_each_final_chunk_into_the_successors_buffer() {
        // Simple steps of 4 KiB, several per chunk and several chunks per call, in place and out of place.
        let env =
            [("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "Simple"), ("NCCL_BUFFSIZE", "32768"), ("NCCL_MAX_NCHANNELS", "1")];
        for nranks in [2, 3] {
            std::thread::scope(|s| {
                for mut c in threads(nranks, &env) {
                    s.spawn(move || {
                        let (r, n) = (c.rank, 24_000);
                        let sum = |it: u32| (0..nranks).map(|q| it * 7 + q).sum::<u32>();
                        let (mut send, mut buf) = (vec![0u32; n], vec![0u32; n]);
                        for it in 0..60u32 {
                            let in_place = it % 2 == 1;
                            if in_place {
                                buf.fill(it * 7 + r);
                                c.all_reduce_in_place(&mut buf, RedOp::Sum).unwrap();
                            } else {
                                send.fill(it * 7 + r);
                                c.all_reduce(&send, &mut buf, RedOp::Sum).unwrap();
                            }
                            assert!(buf.iter().all(|v| *v == sum(it)), "{nranks} ranks, call {it}, rank {r}");
                            // The peers are done with this rank's buffers once the call returns.
                            send.fill(u32::MAX);
                            buf.fill(u32::MAX);
                        }
                        // The last call's first all-gather steps (the last NCCL_STEPS steps include them) came
                        // from the predecessor, which wrote them into this rank's buffer.
                        let prev = c.channels[0].ring_prev;
                        let end = &c.channels[0].recv[&prev];
                        let range = buf.as_ptr() as usize..buf.as_ptr() as usize + 4 * n;
                        let landed = (end.step - crate::transport::conn::NCCL_STEPS..end.step)
                            .filter(|&step| range.contains(&(end.mem.posted(step).unwrap().1.as_ptr() as usize)))
                            .count();
                        assert!(landed > 0, "{nranks} ranks: no recent step was written into this rank's buffer");
                    });
                }
            });
        }
    }

    /// Runs `f` on every rank of an `nranks`-thread job with `env`, each rank on its own thread. Every
    /// communicator lives until all ranks are done: one closing its connections early aborts a peer still
    /// finishing its last call.
    fn on_every_rank(nranks: u32, env: &[(&str, &str)], f: impl Fn(&mut Comm) + Sync) {
        let opts = CommOptions { env: Env::from_pairs(env.iter().copied()), net: None, name: None };
        let comms = job::init_threads(nranks, opts).unwrap();
        let comms = std::thread::scope(|s| {
            let f = &f;
            let hs: Vec<_> = comms
                .into_iter()
                .map(|mut c| {
                    s.spawn(move || {
                        f(&mut c);
                        c
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        });
        drop(comms);
    }

    /// AllReduce call `it` of `n` elements, in place when `it` is odd, values checked. The source is overwritten
    /// after the call: a peer still reading it where it lies would then fail its own check.
    fn summed_alternately_in_place(c: &mut Comm, it: u32, n: usize) {
        let (r, nranks) = (c.rank, c.nranks());
        let sum = (0..nranks).map(|q| it * 7 + q).sum::<u32>();
        let (mut send, mut buf) = (vec![it * 7 + r; n], vec![it * 7 + r; n]);
        if it % 2 == 1 {
            c.all_reduce_in_place(&mut buf, RedOp::Sum).unwrap();
        } else {
            c.all_reduce(&send, &mut buf, RedOp::Sum).unwrap();
        }
        assert!(buf.iter().all(|v| *v == sum), "{nranks} ranks, call {it}, rank {r}");
        send.fill(u32::MAX);
    }

    #[test]
    fn ring_collectives_over_net_socket_receive_into_the_users_buffer_as_planned() {
        // Steps of 8 KiB, chunks of four, several chunks a call. An AllReduce's AllGather half's receives are
        // asked for before each round's first send, so none lands in a slot, even while a peer runs ahead. Sizes
        // whose chunks are all alike split the received bytes evenly between the halves; the others end in short
        // and empty chunks, which must still be counted step for step.
        let env = [
            ("NCCL_P2P_DISABLE", "1"),
            ("NCCL_SHM_DISABLE", "1"),
            ("NCCL_ALGO", "Ring"),
            ("NCCL_PROTO", "Simple"),
            ("NCCL_BUFFSIZE", "65536"),
            ("NCCL_MAX_NCHANNELS", "1"),
        ];
        for nranks in [2u32, 3, 4] {
            let even = nranks as usize * 8192 * 3;
            on_every_rank(nranks, &env, |c| {
                let r = c.rank;
                for (it, n) in [even, even, 3 * even + 5, 1001, even].into_iter().enumerate() {
                    let it = it as u32;
                    summed_alternately_in_place(c, it, n);
                    let got = c.channels[0].moved().iter().find(|m| !m.sent).copied().unwrap();
                    assert_eq!(got.peer, c.channels[0].ring_prev);
                    if n == even {
                        assert_eq!(2 * got.in_place, got.bytes, "{nranks} ranks, call {it}, rank {r}");
                    }
                }
                // AllGather plans every receive of the call at once, across its chunks: values only, as a
                // predecessor that started first may have sent the first steps into the slots.
                for (it, n) in [even, 1001].into_iter().enumerate() {
                    let it = it as u32;
                    let block = |q: u32| vec![it * 7 + q; n];
                    let want: Vec<u32> = (0..nranks).flat_map(block).collect();
                    let mut buf = vec![u32::MAX; n * nranks as usize];
                    if it == 1 {
                        buf[r as usize * n..][..n].copy_from_slice(&block(r));
                        c.all_gather_in_place(&mut buf).unwrap();
                    } else {
                        c.all_gather(&block(r), &mut buf).unwrap();
                    }
                    assert!(buf == want, "AllGather, {nranks} ranks, call {it}, rank {r}");
                }
                // Broadcast plans its receives the same way, from a root other than rank 0.
                for (it, n) in [even, 1001].into_iter().enumerate() {
                    let root = nranks - 1;
                    let mut buf = vec![if r == root { it as u32 + 5 } else { u32::MAX }; n];
                    if it == 1 {
                        c.broadcast_in_place(&mut buf, root).unwrap();
                    } else {
                        c.broadcast(&buf.clone(), &mut buf, root).unwrap();
                    }
                    assert!(buf.iter().all(|v| *v == it as u32 + 5), "Broadcast, {nranks} ranks, call {it}, rank {r}");
                }
                let net = c.records().connections().iter().all(|k| k.net.as_deref() == Some("Socket"));
                assert!(net, "every connection over NET/Socket");
            });
        }
    }

    #[test]
    fn a_tree_allreduce_over_net_socket_receives_its_broadcast_down_in_the_users_buffer() {
        // The down phase's receives from the parent are asked for before the first send up, and every one of
        // its steps depends on that send: all land in place, in and out of place, across several chunks.
        let env = [
            ("NCCL_P2P_DISABLE", "1"),
            ("NCCL_SHM_DISABLE", "1"),
            ("NCCL_ALGO", "Tree"),
            ("NCCL_PROTO", "Simple"),
            ("NCCL_BUFFSIZE", "65536"),
            ("NCCL_MAX_NCHANNELS", "1"),
        ];
        for nranks in [2u32, 4] {
            on_every_rank(nranks, &env, |c| {
                let r = c.rank;
                for (it, n) in [3 * 8192 * 4, 8192 * 5 + 3, 1001].into_iter().enumerate() {
                    let it = it as u32;
                    summed_alternately_in_place(c, it, n);
                    let ch = &c.channels[0];
                    if ch.tree.up >= 0 {
                        let up = ch.tree.up as u32;
                        let got = ch.moved().iter().find(|m| !m.sent && m.peer == up).copied().unwrap();
                        assert_eq!(got.bytes, 4 * n as u64, "{nranks} ranks, call {it}, rank {r}");
                        assert_eq!(got.in_place, got.bytes, "{nranks} ranks, call {it}, rank {r}");
                    }
                }
                let algo = c.records().ops().iter().all(|o| o.algo == Some(Algorithm::Tree));
                assert!(algo, "every call ran Tree");
            });
        }
    }

    #[test]
    fn every_call_of_a_two_rank_ring_allreduce_between_threads_lands_its_final_chunk_in_place() {
        // One 4 KiB step per chunk and one chunk per rank: a call is the peer's chunk read in its buffer, then
        // the final chunk the peer wrote into this rank's buffer. It may only do so once this rank exposed the
        // buffer for the call, which it does before its first step; looked for before the step it waits on, the
        // exposure was missed whenever the peer entered the call later, and the chunk was copied instead.
        let env =
            [("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "Simple"), ("NCCL_BUFFSIZE", "32768"), ("NCCL_MAX_NCHANNELS", "1")];
        std::thread::scope(|s| {
            for mut c in threads(2, &env) {
                s.spawn(move || {
                    let (r, n) = (c.rank, 2048);
                    let (mut send, mut buf) = (vec![0u32; n], vec![0u32; n]);
                    for it in 0..200u32 {
                        if it % 2 == 1 {
                            buf.fill(it + r);
                            c.all_reduce_in_place(&mut buf, RedOp::Sum).unwrap();
                        } else {
                            send.fill(it + r);
                            c.all_reduce(&send, &mut buf, RedOp::Sum).unwrap();
                        }
                        assert!(buf.iter().all(|v| *v == 2 * it + 1), "call {it}, rank {r}");
                        let end = &c.channels[0].recv[&c.channels[0].ring_prev];
                        let (_, last) = end.mem.posted(end.step - 1).unwrap();
                        let range = buf.as_ptr_range();
                        assert!(
                            range.contains(&last.as_ptr().cast()),
                            "call {it}, rank {r}: the final chunk was not written into this rank's buffer"
                        );
                    }
                });
            }
        });
    }

    #[test]
    fn an_abort_ends_a_stuck_collective_naming_op_seq_and_reason() {
        let mut comms = threads(2, &[]);
        let _idle = comms.pop().unwrap();
        let mut c = comms.pop().unwrap();
        let h = c.abort_handle();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            h.abort("rank 1 is dead (connection closed)");
        });
        let e = c.all_reduce_in_place(&mut [1i32; 64], RedOp::Sum).unwrap_err().to_string();
        t.join().unwrap();
        assert!(e.contains("AllReduce #1 failed") && e.contains("rank 1 is dead"), "{e}");
        assert_eq!(c.records().ops()[0].state, OpState::Failed);
    }

    #[test]
    fn mismatched_sizes_across_ranks_are_reported() {
        let comms = threads(2, &[]);
        let errs: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = comms
                .into_iter()
                .map(|mut c| {
                    s.spawn(move || {
                        if c.rank() == 0 {
                            c.send(&[7u32; 25], 1).err().map(|e| e.to_string()).unwrap_or_default()
                        } else {
                            c.recv(&mut [0u32; 50], 0).err().map(|e| e.to_string()).unwrap_or_default()
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(errs[0], "");
        assert!(errs[1].contains("Recv #1") && errs[1].contains("rank 0 sent 100 bytes"), "{}", errs[1]);
    }

    #[test]
    fn eager_connection_connects_rings_trees_and_one_shots_pairs_at_init() {
        let sends = |comms: &[Comm]| {
            let conns = comms.iter().flat_map(|c| c.records().connections());
            conns.filter(|k| k.direction != model::Direction::Recv).count()
        };
        let comms = threads(4, &[("NCCL_RUNTIME_CONNECT", "0"), ("COLLSCOPE_ONESHOT_MAX", "0")]);
        // Ring alone: one send per rank and channel (8); the trees add sends to neighbours off the ring.
        let total = sends(&comms);
        assert!(total > 8 && total < 24, "{total}");
        // OneShot adds every other pair: three sends per rank and channel.
        let comms = threads(4, &[("NCCL_RUNTIME_CONNECT", "0")]);
        assert_eq!(sends(&comms), 4 * 3 * comms[0].nchannels() as usize);
        let lazy = threads(4, &[]);
        assert!(lazy.iter().all(|c| c.records().connections().is_empty()));
    }

    #[test]
    fn a_missing_peer_times_out() {
        let mut comms = threads(2, &[("COLLSCOPE_TIMEOUT_S", "1")]);
        let _idle = comms.pop().unwrap();
        let mut c = comms.pop().unwrap();
        let e = c.broadcast_in_place(&mut [1u8; 8], 1).unwrap_err().to_string();
        assert!(e.contains("Broadcast #1") && e.contains("timed out after 1 s") && e.contains("rank 1"), "{e}");
    }
}
