//! Where records leave the hot path: each communicator's ring of [`crate::record`]s, drained off the hot path into
//! collscope's model and handed to a [`Sink`].

use crate::clock;
use crate::machine::{CommInfo, Context, MAX_CHANNELS};
use crate::record::{Outbox, ProxyRec, Raw, TaskRec, WAITS};
use collscope_model::Collective;
use collscope_model::{
    ChannelTraffic, CommState, Communicator, Direction, Event, KernelChannel, OpRecord, OpState, ProxyOp, ProxyTally,
    ProxyWait,
};
use std::collections::HashSet;

/// Takes the plugin's output, the contract events collscope's runtime reports too (telemetry applies them as they
/// are), on the thread that drains (never on NCCL's threads).
pub trait Sink: Send {
    fn deliver(&mut self, ev: Event);
    /// Called after each drain and at the end.
    fn flush(&mut self) {}
}

impl<F: FnMut(Event) + Send> Sink for F {
    fn deliver(&mut self, ev: Event) {
        self(ev)
    }
}

/// Every sink gets every event.
impl Sink for Vec<Box<dyn Sink>> {
    fn deliver(&mut self, ev: Event) {
        if let Some((last, rest)) = self.split_last_mut() {
            for s in rest {
                s.deliver(ev.clone());
            }
            last.deliver(ev);
        }
    }

    fn flush(&mut self) {
        self.iter_mut().for_each(|s| s.flush());
    }
}

/// The model's name of each wait of a [`ProxyRec`], in its order.
const WAIT_NAMES: [ProxyWait; WAITS] = ProxyWait::ALL;

impl TaskRec {
    fn op(&self, comm: Option<&CommInfo>, state: OpState) -> OpRecord {
        let mut r = OpRecord::started(
            self.rank.max(0) as u32,
            self.seq,
            self.coll,
            self.datatype,
            self.count,
            clock::epoch_us(self.started_ns),
        );
        r.comm = comm.map(|c| c.name.clone());
        r.root = self.root.filter(|_| matches!(self.coll, Collective::Broadcast | Collective::Reduce));
        r.peer = self.peer;
        r.algo = self.algo;
        r.proto = self.proto;
        r.n_channels = self.n_channels.map(u32::from);
        r.enqueued_us = Some(clock::epoch_us(self.enqueued_ns));
        r.state = state;
        if state == OpState::Enqueued {
            r.started_us = None;
            return r;
        }
        r.completed_us = Some(clock::epoch_us(self.completed_ns));
        let ns = if self.gpu_ns > 0 { self.gpu_ns } else { self.completed_ns.saturating_sub(self.started_ns) };
        let secs = ns as f64 / 1e9;
        r.duration_us = Some(secs * 1e6);
        if secs > 0.0 {
            let algbw = r.bytes as f64 / secs / 1e9;
            r.algbw_gbps = Some(algbw);
            r.busbw_gbps = comm.map(|c| algbw * self.coll.bus_bw_factor(c.nranks.max(1)));
        }
        r
    }
}

impl ProxyRec {
    /// The record as the model's proxy operation and the traffic it carried.
    fn model(&self) -> (ProxyOp, ChannelTraffic) {
        let (rank, channel, peer) = (self.rank.max(0) as u32, u32::from(self.channel), self.peer.max(0) as u32);
        let waits = self
            .waits_ns
            .iter()
            .zip(WAIT_NAMES)
            .filter(|(ns, _)| **ns > 0)
            .map(|(ns, w)| (w, *ns as f64 / 1e9))
            .collect();
        let proxy = ProxyOp {
            rank,
            seq: self.seq,
            channel,
            peer,
            send: self.send,
            n_steps: self.n_steps.max(0) as u64,
            posted: u64::from(self.posted),
            transmitted: u64::from(self.transmitted),
            done: u64::from(self.done),
            waits,
            started_us: None,
            updated_us: None,
        };
        let traffic = ChannelTraffic {
            rank,
            channel,
            peer,
            direction: if self.send { Direction::Send } else { Direction::Recv },
            transport: None,
            bytes: self.bytes,
            seconds: self.last_step_ns.saturating_sub(self.first_step_ns) as f64 / 1e9,
        };
        (proxy, traffic)
    }
}

/// Hands on the contract events of what `out` holds now (`comm` is None for PXN operations of other processes).
/// Telemetry takes each event the plugin hands it, and NCCL makes several a call, so a drain condenses what only
/// adds up: a call whose completion is in the same drain goes only as completed (nothing could have seen it in
/// flight), each connection's finished proxy operations go as one [`ProxyTally`], and each link's traffic as
/// one sum. Measured on 4 ranks over NET/Socket at 8 B, an event per proxy operation cost the job about 15 %.
fn deliver_ring(out: &Outbox, comm: Option<&CommInfo>, sink: &mut dyn Sink) -> usize {
    let batch: Vec<Raw> = std::iter::from_fn(|| out.pop()).collect();
    let completed: HashSet<u64> =
        batch.iter().filter_map(|r| if let Raw::Completed(t) = r { Some(t.seq) } else { None }).collect();
    let mut tallies: Vec<ProxyTally> = Vec::new();
    let mut traffic: Vec<ChannelTraffic> = Vec::new();
    let mut n = 0;
    for r in batch {
        let ev = match r {
            Raw::Enqueued(t) if completed.contains(&t.seq) => continue,
            Raw::Enqueued(t) => Event::OpEnqueued(t.op(comm, OpState::Enqueued)),
            Raw::Completed(t) => Event::OpCompleted(t.op(comm, OpState::Completed)),
            Raw::Proxy(p) => {
                let (proxy, t) = p.model();
                match tallies.iter_mut().find(|k| k.last.same_connection(&proxy)) {
                    Some(tally) => tally.add(proxy),
                    None => tallies.push(ProxyTally::of(proxy)),
                }
                let link = |o: &ChannelTraffic| (o.rank, o.channel, o.peer, o.direction);
                if t.bytes > 0 {
                    match traffic.iter_mut().find(|o| link(o) == link(&t)) {
                        Some(sum) => (sum.bytes, sum.seconds) = (sum.bytes + t.bytes, sum.seconds + t.seconds),
                        None => traffic.push(t),
                    }
                }
                continue;
            }
        };
        sink.deliver(ev);
        n += 1;
    }
    let tallies = tallies.into_iter().map(Event::ProxyTally);
    n + tallies.chain(traffic.into_iter().map(Event::Traffic)).map(|ev| sink.deliver(ev)).count()
}

fn communicator(c: &CommInfo, state: CommState) -> Communicator {
    Communicator {
        comm: Some(c.name.clone()),
        comm_id: Some(format!("{:#x}", c.comm_id)),
        rank: Some(c.rank),
        nranks: Some(c.nranks),
        nnodes: Some(c.nnodes),
        host: c.host.clone(),
        pid: Some(clock::pid() as u32),
        version: c.version.clone(),
        state,
        ..Communicator::default()
    }
}

/// Hands on what one communicator has: its arrival, its ring, the channels whose GPU time grew, and its end once
/// it is finalised and drained. Returns how many outputs it delivered.
pub(crate) fn drain_context(ctx: &Context, sink: &mut dyn Sink) -> usize {
    let mut n = 0;
    if ctx.take_arrival() {
        sink.deliver(Event::Communicator(communicator(&ctx.comm, CommState::Ready)));
        n += 1;
    }
    n += deliver_ring(&ctx.out, Some(&ctx.comm), sink);
    for ch in 0..MAX_CHANNELS {
        if let Some((calls, gpu_ns)) = ctx.channel_growth(ch) {
            let k = KernelChannel {
                comm: Some(ctx.comm.name.clone()),
                rank: ctx.comm.rank,
                channel: ch as u32,
                calls,
                gpu_seconds: gpu_ns as f64 / 1e9,
            };
            sink.deliver(Event::KernelChannel(k));
            n += 1;
        }
    }
    if ctx.take_departure() {
        sink.deliver(Event::Communicator(communicator(&ctx.comm, CommState::Destroyed)));
        n += 1;
    }
    n
}

/// Hands on the PXN operations this process's proxy ran for other processes.
pub(crate) fn drain_detached(out: &Outbox, sink: &mut dyn Sink) -> usize {
    deliver_ring(out, None, sink)
}
