//! The NET proxy's side of the profiler (NCCL 2.28.9 `src/transport/net.cc` `sendProxyProgress` /
//! `recvProxyProgress`): a call posts one proxy operation per NET connection with its step count ([`Posted`]);
//! the proxy thread starts each step's ProxyStep event under its operation, records the states the step really
//! goes through and stops the operation after its last step ([`NetSteps`]).
//!
//! A connection's steps are numbered from its creation on both sides (the rank's `SendEnd`/`RecvEnd` and the
//! proxy), and calls post their operations in order, so step `k` belongs to the operation whose range holds it.

use super::{CommProfiler, Ctrl, Ev, Handle};
use collscope_profiler_abi::{kind, net_socket_v1 as sock, state, StateArgs, StateProxyStep};
use std::collections::VecDeque;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Operations calls posted on one connection that its proxy has not taken yet: (handle, steps), and how many
/// were ever posted, so the proxy, which looks for one at every round while it waits, locks only when one came.
#[derive(Default)]
pub(crate) struct Posted {
    ops: Mutex<VecDeque<(Handle, u64)>>,
    count: AtomicU64,
}

impl Posted {
    pub(super) fn post(&self, h: Handle, steps: u64) {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push_back((h, steps));
        self.count.fetch_add(1, Ordering::Release);
    }

    /// Whether more than `taken` were posted.
    fn pending(&self, taken: u64) -> bool {
        self.count.load(Ordering::Acquire) > taken
    }

    /// The next operation, if more than `taken` were posted.
    fn take(&self, taken: u64) -> Option<(Handle, u64)> {
        if !self.pending(taken) {
            return None;
        }
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).pop_front()
    }
}

/// A ProxyStep state of NCCL's NET proxy.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Send: the rank has not filled the step yet.
    SendGpu,
    /// Send: the network turned the send down until the receiver is ready (NCCL's `SendPeerWait_v4`).
    SendPeer,
    /// Send: handed to the network, waiting for completion.
    Send,
    /// Receive: posted, waiting for the data.
    Recv,
    /// Receive: arrived (no flush on host memory; NCCL records the state before deciding on one).
    RecvFlush,
    /// Receive: published, waiting for the rank to consume it.
    RecvGpu,
}

impl Wait {
    fn state(self) -> c_int {
        match self {
            Wait::SendGpu => state::PROXY_STEP_SEND_GPU_WAIT,
            Wait::SendPeer => state::PROXY_STEP_SEND_PEER_WAIT_V4,
            Wait::Send => state::PROXY_STEP_SEND_WAIT,
            Wait::Recv => state::PROXY_STEP_RECV_WAIT,
            Wait::RecvFlush => state::PROXY_STEP_RECV_FLUSH_WAIT,
            Wait::RecvGpu => state::PROXY_STEP_RECV_GPU_WAIT,
        }
    }
}

/// NCCL's `NCCL_STEPS` (2.28.9 `src/include/device.h`): a connection has at most this many steps in flight.
const NCCL_STEPS: u64 = 8;

/// The most states a step goes through (a receive: Recv, RecvFlush, RecvGpu).
const EARLY: usize = 3;
/// A step's states (with their bytes) before its operation was known.
type Early = [Option<(Wait, usize)>; EARLY];

/// An operation the proxy took: its handle, its first step on the connection, its steps, those done.
struct Op {
    h: Handle,
    first: u64,
    steps: u64,
    done: u64,
}

/// A step in flight: its number on the connection, its event and its last state.
#[derive(Clone, Copy)]
struct Live {
    k: u64,
    h: Handle,
    state: Option<Wait>,
}

struct Conn {
    prof: Arc<CommProfiler>,
    posted: Arc<Posted>,
    ops: VecDeque<Op>,
    /// Where the next operation taken from `posted` starts.
    next_first: u64,
    /// Operations taken from `posted`.
    taken: u64,
    live: [Option<Live>; NCCL_STEPS as usize],
    /// The states, with their bytes, of steps whose operation was not posted yet.
    early: [Option<(u64, Early)>; NCCL_STEPS as usize],
}

/// Where a step's network transfers report, as NCCL's net plugins do through NCCL's profiler callback (2.28.9
/// `src/plugin/profiler.cc` `ncclProfilerCallback`): NetPlugin events under the step's event (NULL when the
/// plugin keeps no steps). Given to a request only when the plugin asked for NetPlugin events.
#[derive(Clone)]
pub(crate) struct NetParent {
    prof: Arc<CommProfiler>,
    step: Handle,
}

impl NetParent {
    /// A transfer of `length` bytes on socket `fd` begins: NCCL's socket plugin event (2.28.9
    /// `src/transport/net_socket.cc`, `ncclProfilerNetSockDescr_v1_t`), stopped when the returned event drops.
    pub(crate) fn socket(&self, fd: c_int, send: bool, length: usize) -> NetEvent {
        let op = if send { sock::OP_SEND } else { sock::OP_RECV };
        let mut d = sock::Descr { type_: sock::PROFILE_SOCKET, sock: sock::Sock { fd, op, length } };
        // The plugin reads `data` during the start call only, as NCCL passes it from the plugin's stack.
        let data = (&mut d as *mut sock::Descr).cast::<c_void>();
        NetEvent { prof: self.prof.clone(), h: self.prof.start(&Ev::NetPlugin { id: sock::ID, data }, self.step) }
    }
}

/// An open NetPlugin event; stopped when dropped.
pub(crate) struct NetEvent {
    prof: Arc<CommProfiler>,
    h: Handle,
}

impl Drop for NetEvent {
    fn drop(&mut self) {
        self.prof.stop(self.h);
    }
}

/// One NET connection's profiler state, owned by the proxy thread; `None` without a plugin or proxy events.
#[derive(Default)]
pub(crate) struct NetSteps(Option<Box<Conn>>);

impl NetSteps {
    /// Registers the connection whose memory is at address `mem` with its communicator's plugin context, if any.
    pub(crate) fn new(prof: Option<Arc<CommProfiler>>, mem: usize) -> NetSteps {
        let Some(prof) = prof else { return NetSteps(None) };
        if !prof.on(super::PROXY_OP_MASK) {
            return NetSteps(None);
        }
        let posted = Arc::new(Posted::default());
        prof.register_net(mem, posted.clone());
        NetSteps(Some(Box::new(Conn {
            prof,
            posted,
            ops: VecDeque::new(),
            next_first: 0,
            taken: 0,
            live: [None; NCCL_STEPS as usize],
            early: [None; NCCL_STEPS as usize],
        })))
    }

    /// Step `k` is in state `st` (`bytes`: what it carries, once known).
    pub(crate) fn state(&mut self, k: u64, st: Wait, bytes: usize) {
        if let Some(c) = &mut self.0 {
            c.state(k, st, bytes);
        }
    }

    /// Step `k` is done: its slot went back to the rank (send) or the rank consumed it (receive).
    pub(crate) fn done(&mut self, k: u64) {
        if let Some(c) = &mut self.0 {
            c.done(k);
        }
    }

    /// Where step `k`'s transfers report, when the plugin asked for NetPlugin events and the step's event is
    /// open. A receive posted before this rank's call posted its operation has none (NCCL posts receives only
    /// for operations it holds), and its transfer goes unreported rather than under no step.
    pub(crate) fn net_parent(&mut self, k: u64) -> Option<NetParent> {
        let c = self.0.as_mut().filter(|c| c.prof.on(kind::NET_PLUGIN))?;
        let step = c.live(k)?.h;
        Some(NetParent { prof: c.prof.clone(), step })
    }
}

impl Conn {
    /// The operation step `k` belongs to, taking posted ones as needed; None when no call posted it yet.
    fn op(&mut self, k: u64) -> Option<usize> {
        loop {
            if let Some(i) = self.ops.iter().position(|o| (o.first..o.first + o.steps).contains(&k)) {
                return Some(i);
            }
            if k < self.next_first {
                return None;
            }
            if !self.posted.pending(self.taken) {
                return None;
            }
            // Taking a posted operation is NCCL's proxy append (2.28.9 `src/proxy.cc` `ncclProxyGetPostedOps`).
            let append = self.prof.ctrl(Ctrl::Append);
            let taken = self.posted.take(self.taken);
            if let Some(e) = append {
                e.then(Ctrl::AppendEnd(u32::from(taken.is_some())));
            }
            let (h, steps) = taken?;
            self.taken += 1;
            self.ops.push_back(Op { h, first: self.next_first, steps, done: 0 });
            self.next_first += steps;
        }
    }

    /// Step `k`'s event, started now if its operation is known; the states it went through before that are
    /// recorded first, in order (a receive can arrive before this rank's call posted its operation).
    fn live(&mut self, k: u64) -> Option<Live> {
        let slot = (k % NCCL_STEPS) as usize;
        if let Some(l) = self.live[slot].filter(|l| l.k == k) {
            return Some(l);
        }
        let i = self.op(k)?;
        let op = &self.ops[i];
        let h = if self.prof.on(super::PROXY_STEP_MASK) {
            self.prof.start(&Ev::ProxyStep((k - op.first) as c_int), op.h)
        } else {
            Handle::NULL
        };
        let mut l = Live { k, h, state: None };
        if let Some((_, early)) = self.early[slot].take().filter(|e| e.0 == k) {
            for (st, bytes) in early.into_iter().flatten() {
                self.prof.record(h, st.state(), StateArgs { proxy_step: StateProxyStep { trans_size: bytes } });
                l.state = Some(st);
            }
        }
        self.live[slot] = Some(l);
        Some(l)
    }

    fn state(&mut self, k: u64, st: Wait, bytes: usize) {
        let slot = (k % NCCL_STEPS) as usize;
        let Some(l) = self.live(k) else {
            let e = &mut self.early[slot];
            if e.is_none_or(|e| e.0 != k) {
                *e = Some((k, [None; EARLY]));
            }
            let Some((_, early)) = e else { return };
            if let Some(free) = early.iter_mut().find(|e| e.is_none_or(|e| e.0 == st)) {
                *free = Some((st, bytes));
            }
            return;
        };
        if l.state != Some(st) {
            self.prof.record(l.h, st.state(), StateArgs { proxy_step: StateProxyStep { trans_size: bytes } });
            self.live[slot] = Some(Live { state: Some(st), ..l });
        }
    }

    fn done(&mut self, k: u64) {
        let Some(l) = self.live(k) else { return };
        self.prof.stop(l.h);
        self.live[(k % NCCL_STEPS) as usize] = None;
        let Some(i) = self.op(k) else { return };
        let op = &mut self.ops[i];
        op.done += 1;
        if op.done == op.steps {
            let h = op.h;
            self.ops.remove(i);
            self.prof.stop(h);
        }
    }
}

impl Drop for Conn {
    /// A connection that leaves with steps or operations open (a failed call) stops them, as NCCL's proxy does
    /// when it frees an operation.
    fn drop(&mut self) {
        for l in self.live.iter().flatten() {
            self.prof.stop(l.h);
        }
        while let Some((h, _)) = self.posted.take(self.taken) {
            self.taken += 1;
            self.ops.push_back(Op { h, first: 0, steps: 0, done: 0 });
        }
        for op in &self.ops {
            self.prof.stop(op.h);
        }
    }
}
