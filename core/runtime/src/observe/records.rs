//! What the runtime keeps for telemetry: the connections it made, a bounded ring of recent operations and
//! running totals of calls and traffic. Telemetry reads it whenever it likes (the process's recorder lists
//! every communicator's records); the data path never waits for telemetry.

use super::recorder;
use super::stats::CallStats;
use crate::profiler::CommProfiler;
use collscope_model::observe::{CallTotals, CommRecords, NewOps, TrafficTotals};
use collscope_model::{
    Algorithm, Collective, Connection, DataType, Event, OpRecord, OpState, Protocol, ProxyOp, RedOp,
};
use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, SystemTime};

/// Operations kept per communicator.
pub const OP_RING: usize = 1024;

/// How often sub-operations in progress are handed to telemetry, at most (microseconds).
const PROXY_REPORT_US: u64 = 100_000;

fn wall_us() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// An empty ring that holds [`OP_RING`] entries without growing, its memory written once here. Grown on the
/// data path instead, by doubling over the first thousand calls, each new page was faulted in by a call: on a
/// virtual machine that cost 2-rank 8-byte calls 0.8 us each instead of 0.44 until the ring of operations was
/// full. The proxy's ring of sub-operations is made the same way, when a communicator's first NET connection
/// is added ([`Records::ready_proxy_ring`]): a communicator without one has no use for its memory.
fn ring<T: Clone>(blank: T) -> VecDeque<T> {
    let mut ring = VecDeque::with_capacity(OP_RING);
    ring.extend(std::iter::repeat_n(blank, OP_RING));
    ring.clear();
    ring
}

/// A call as the data path carries and the ring keeps it: its [`OpRecord`] less what follows from the rest or
/// is the same for every call of the communicator (its name and rank, the end, the bandwidths), made into an
/// `OpRecord` only when read ([`Records::record`]). `Copy`, 80 bytes against the record's 176: storing it over
/// the oldest drops nothing and copies half as much, and no call computes bandwidths nobody may read. A 2-rank
/// 8-byte AllReduce took about 270 fewer instructions a call (of 2,450) than with whole records.
#[derive(Debug, Clone, Copy)]
pub struct OpEntry {
    /// Per-communicator sequence number (NCCL's opCount).
    pub seq: u64,
    pub coll: Collective,
    pub count: u64,
    pub datatype: DataType,
    pub op: Option<RedOp>,
    pub root: Option<i32>,
    pub peer: Option<i32>,
    pub bytes: u64,
    pub algo: Option<Algorithm>,
    pub proto: Option<Protocol>,
    pub n_channels: Option<u32>,
    pub state: OpState,
    /// Microseconds since the UNIX epoch.
    pub enqueued_us: u64,
    pub started_us: u64,
    /// How long the call took, once it ended.
    pub elapsed_ns: u64,
}

impl OpEntry {
    /// A call of `count` elements that began at `started_us` (enqueued then too) and has no outcome yet.
    pub fn started(seq: u64, coll: Collective, datatype: DataType, count: u64, started_us: u64) -> Self {
        OpEntry {
            seq,
            coll,
            count,
            datatype,
            op: None,
            root: None,
            peer: None,
            bytes: count * datatype.size() as u64,
            algo: None,
            proto: None,
            n_channels: None,
            state: OpState::Started,
            enqueued_us: started_us,
            started_us,
            elapsed_ns: 0,
        }
    }
}

pub struct Records {
    /// Unique in the process, so a reader can tell these records from those of an earlier communicator.
    id: u64,
    rank: u32,
    /// Ranks of the communicator, for the bus bandwidth of the calls handed out.
    nranks: u32,
    /// The communicator's name, given to the operations as they are handed out.
    name: Option<Arc<str>>,
    pub stats: CallStats,
    ops: Mutex<VecDeque<OpEntry>>,
    connections: Mutex<Vec<Connection>>,
    /// Proxy sub-operations of NET connections, most recent last.
    proxy: Mutex<VecDeque<ProxyOp>>,
    /// Sequence number of the operation the rank is running (0 before the first).
    current_seq: AtomicU64,
    /// When the proxy's sub-operations were last handed to telemetry (wall-clock microseconds).
    proxy_reported_us: AtomicU64,
    /// The call the rank is running, for telemetry to show one that never ends.
    running: Running,
    /// The communicator's profiler plugin context, for its proxy's connections (weak: the communicator owns it).
    pub(crate) profiler: OnceLock<Weak<CommProfiler>>,
}

/// A seqlock over the running call's facts: the rank's thread is the only writer (`version` is odd while it
/// writes), and a reader that sees the version move retries later instead of showing a mix of two calls.
#[derive(Default)]
struct Running {
    version: AtomicU64,
    seq: AtomicU64,
    /// Collective id in the high 32 bits, data type id in the low.
    kind: AtomicU64,
    count: AtomicU64,
    started_us: AtomicU64,
}

impl Running {
    fn write(&self, op: &OpEntry) {
        let v = self.version.load(Ordering::Relaxed);
        self.version.store(v + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.seq.store(op.seq, Ordering::Relaxed);
        self.kind.store(((op.coll.id() as u64) << 32) | op.datatype.id() as u64, Ordering::Relaxed);
        self.count.store(op.count, Ordering::Relaxed);
        self.started_us.store(op.started_us, Ordering::Relaxed);
        self.version.store(v + 2, Ordering::Release);
    }

    /// (seq, collective, data type, count, started_us), unless a write is under way.
    fn read(&self) -> Option<(u64, Collective, DataType, u64, u64)> {
        let v = self.version.load(Ordering::Acquire);
        if v % 2 == 1 || v == 0 {
            return None;
        }
        let (seq, kind, count, started) = (
            self.seq.load(Ordering::Relaxed),
            self.kind.load(Ordering::Relaxed),
            self.count.load(Ordering::Relaxed),
            self.started_us.load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        if self.version.load(Ordering::Relaxed) != v {
            return None;
        }
        let coll = Collective::from_id((kind >> 32) as usize)?;
        let dt = DataType::from_id((kind & 0xffff_ffff) as usize)?;
        Some((seq, coll, dt, count, started))
    }
}

impl Records {
    pub fn new(rank: u32, nranks: u32, nchannels: usize, name: Option<String>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Records {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            rank,
            nranks,
            name: name.map(Arc::from),
            stats: CallStats::new(nchannels),
            ops: Mutex::new(ring(OpEntry::started(0, Collective::AllReduce, DataType::F32, 0, 0))),
            connections: Mutex::default(),
            proxy: Mutex::default(),
            current_seq: AtomicU64::new(0),
            proxy_reported_us: AtomicU64::new(0),
            running: Running::default(),
            profiler: OnceLock::new(),
        }
    }

    /// The communicator's profiler plugin context, while the communicator lives.
    pub(crate) fn profiler(&self) -> Option<Arc<CommProfiler>> {
        self.profiler.get()?.upgrade()
    }

    pub fn push_op(&self, op: OpEntry) {
        let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        if ops.len() == OP_RING {
            ops.pop_front();
        }
        ops.push_back(op);
    }

    pub fn push_connection(&self, c: Connection) {
        recorder::record(|| Event::Connection(c.clone()));
        self.connections.lock().unwrap_or_else(|p| p.into_inner()).push(c);
    }

    /// The most recent operations, oldest first.
    pub fn ops(&self) -> Vec<OpRecord> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|o| self.record(o)).collect()
    }

    /// `op` as the model's record: with the communicator's name and rank and, once it ended, its end and
    /// bandwidths (nccl-tests' algbw and busbw).
    pub fn record(&self, op: &OpEntry) -> OpRecord {
        let mut r = OpRecord {
            comm: self.name.clone(),
            op: op.op,
            root: op.root,
            peer: op.peer,
            bytes: op.bytes,
            algo: op.algo,
            proto: op.proto,
            n_channels: op.n_channels,
            state: op.state,
            enqueued_us: Some(op.enqueued_us),
            ..OpRecord::started(self.rank, op.seq, op.coll, op.datatype, op.count, op.started_us)
        };
        if op.state != OpState::Started {
            let elapsed = Duration::from_nanos(op.elapsed_ns);
            r.set_end(op.started_us + elapsed.as_micros() as u64, elapsed.as_secs_f64(), Some(self.nranks));
        }
        r
    }

    /// Marks `op` as the operation in progress, so proxy threads can attribute their steps to it and
    /// telemetry can show it while it runs.
    pub fn begin_op(&self, op: &OpEntry) {
        // The rank's thread is the only writer: a plain load and store, not a locked exchange.
        let prev = self.current_seq.load(Ordering::Relaxed);
        self.current_seq.store(op.seq, Ordering::Release);
        if recorder::enabled() {
            self.running.write(op);
            if prev != 0 && prev != op.seq {
                self.report_proxy(prev);
            }
        }
    }

    /// Hands telemetry the proxy sub-operations of `seq`, once the next operation has begun (the proxy
    /// thread has no moment of its own at which a sub-operation is final).
    fn report_proxy(&self, seq: u64) {
        let ops = self.proxy.lock().unwrap_or_else(|p| p.into_inner());
        for o in ops.iter().rev().take_while(|o| o.seq >= seq).filter(|o| o.seq == seq) {
            recorder::record(|| Event::Proxy(o.clone()));
        }
    }

    pub fn current_seq(&self) -> u64 {
        self.current_seq.load(Ordering::Acquire)
    }

    /// Updates the proxy record of (seq, channel, peer, direction) in place, or starts it, and hands telemetry
    /// what it needs to show sub-operations while they run: a new one at once, one that finished after its
    /// call (or with no call running) at once, and every sub-operation of the last two calls at most every
    /// `PROXY_REPORT_US`.
    pub fn update_proxy(&self, key: &ProxyOp, f: impl FnOnce(&mut ProxyOp)) {
        let now = wall_us();
        let mut ops = self.proxy.lock().unwrap_or_else(|p| p.into_inner());
        let same =
            |o: &ProxyOp| o.seq == key.seq && o.channel == key.channel && o.peer == key.peer && o.send == key.send;
        let current = self.current_seq();
        let report = match ops.iter_mut().rev().find(|o| same(o)) {
            Some(o) => {
                f(o);
                o.updated_us = Some(now);
                o.done == o.n_steps && (o.seq < current || self.stats.in_flight() == 0)
            }
            None => {
                if ops.len() == OP_RING {
                    ops.pop_front();
                }
                let mut o = key.clone();
                f(&mut o);
                (o.started_us, o.updated_us) = (Some(now), Some(now));
                ops.push_back(o);
                true
            }
        };
        if !recorder::enabled() {
            return;
        }
        let last = self.proxy_reported_us.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= PROXY_REPORT_US {
            self.proxy_reported_us.store(now, Ordering::Relaxed);
            let recent = ops.iter().rev().take_while(|o| o.seq + 1 >= current).count();
            for o in ops.range(ops.len() - recent..) {
                recorder::record(|| Event::Proxy(o.clone()));
            }
        } else if report {
            if let Some(o) = ops.iter().rev().find(|o| same(o)) {
                recorder::record(|| Event::Proxy(o.clone()));
            }
        }
    }

    /// Makes the ring of proxy sub-operations, once: the proxy calls it as it takes a connection, before any step.
    pub(crate) fn ready_proxy_ring(&self) {
        let mut ops = self.proxy.lock().unwrap_or_else(|p| p.into_inner());
        if ops.capacity() < OP_RING {
            let mut made = ring(ProxyOp { rank: self.rank, ..ProxyOp::default() });
            made.extend(ops.drain(..));
            *ops = made;
        }
    }

    #[cfg(test)]
    pub(crate) fn proxy_ring_capacity(&self) -> usize {
        self.proxy.lock().unwrap_or_else(|p| p.into_inner()).capacity()
    }

    /// The most recent proxy sub-operations, oldest first.
    pub fn proxy_ops(&self) -> Vec<ProxyOp> {
        self.proxy.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    pub fn connections(&self) -> Vec<Connection> {
        self.connections.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What telemetry reads (`collscope_model::observe`): the running totals, the operations not read yet, the call
/// in progress.
impl CommRecords for Records {
    fn id(&self) -> u64 {
        self.id
    }

    fn rank(&self) -> u32 {
        self.rank
    }

    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn calls(&self) -> Vec<CallTotals> {
        self.stats.calls()
    }

    fn in_flight(&self) -> u64 {
        self.stats.in_flight()
    }

    fn traffic_totals(&self) -> Vec<TrafficTotals> {
        self.stats.traffic_totals()
    }

    fn ops_after(&self, seq: u64) -> NewOps {
        let ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = ops.partition_point(|o| o.seq <= seq);
        let missed = ops.get(fresh).map_or(0, |o| o.seq.saturating_sub(seq + 1));
        NewOps { ops: ops.range(fresh..).map(|o| self.record(o)).collect(), missed }
    }

    /// As far as a read without locks can tell.
    fn in_progress(&self) -> Option<OpRecord> {
        if self.stats.in_flight() == 0 {
            return None;
        }
        let (seq, coll, datatype, count, started) = self.running.read()?;
        Some(OpRecord { comm: self.name.clone(), ..OpRecord::started(self.rank, seq, coll, datatype, count, started) })
    }
}

// Page faults per thread are a Linux count (RUSAGE_THREAD).
#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Minor page faults this thread has taken so far.
    fn faults() -> libc::c_long {
        // SAFETY: getrusage only writes the struct it is given.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `usage` is a `rusage`, the struct getrusage writes.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) }, 0);
        usage.ru_minflt
    }

    #[test]
    fn filling_the_ring_of_operations_faults_in_no_memory_on_the_data_path() {
        let records = Records::new(0, 2, 1, None);
        let op = OpEntry::started(1, Collective::AllReduce, DataType::F32, 2, 1);
        let before = faults();
        for seq in 1..=OP_RING as u64 {
            records.push_op(OpEntry { seq, ..op });
        }
        let taken = faults() - before;
        // Grown by pushes, filling the ring took 69 faults here; only reserved, 44.
        assert!(taken <= 2, "filling the ring took {taken} page faults");
        assert_eq!(records.ops().len(), OP_RING);
    }

    #[test]
    fn a_full_ring_of_operations_keeps_the_latest_in_order() {
        let records = Records::new(0, 2, 1, None);
        let op = OpEntry::started(1, Collective::AllReduce, DataType::F32, 2, 1);
        let last = OP_RING as u64 + 300;
        for seq in 1..=last {
            records.push_op(OpEntry { seq, ..op });
        }
        let seqs: Vec<u64> = records.ops().iter().map(|o| o.seq).collect();
        assert_eq!(seqs, (last - OP_RING as u64 + 1..=last).collect::<Vec<_>>());
        // A reader 10 calls behind gets those 10; one behind the ring's start is told how many it missed.
        let after = records.ops_after(last - 10);
        assert_eq!((after.ops.len(), after.missed), (10, 0));
        let after = records.ops_after(5);
        assert_eq!((after.ops.len(), after.missed), (OP_RING, last - OP_RING as u64 - 5));
    }

    #[test]
    fn filling_the_ring_of_proxy_sub_operations_faults_in_no_memory_on_the_data_path() {
        let records = Records::new(0, 2, 1, None);
        records.ready_proxy_ring();
        let before = faults();
        for seq in 1..=OP_RING as u64 {
            records.update_proxy(&ProxyOp { seq, n_steps: 1, ..ProxyOp::default() }, |o| o.posted += 1);
        }
        let taken = faults() - before;
        // Grown by the updates, filling the ring took 30 faults here.
        assert!(taken <= 2, "filling the ring took {taken} page faults");
        assert_eq!(records.proxy.lock().unwrap().len(), OP_RING);
    }
}
