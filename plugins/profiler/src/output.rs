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
        let ns = if self.gpu_ns > 0 { self.gpu_ns } else { self.completed_ns.saturating_sub(self.started_ns) };
        r.set_end(clock::epoch_us(self.completed_ns), ns as f64 / 1e9, comm.map(|c| c.nranks));
        r
    }
}

/// Seconds in each wait state that took any, from the nanoseconds of a [`ProxyRec`]'s `waits_ns`.
fn waits(ns: &[u64; WAITS]) -> Vec<(ProxyWait, f64)> {
    ns.iter().zip(WAIT_NAMES).filter(|(ns, _)| **ns > 0).map(|(ns, w)| (w, *ns as f64 / 1e9)).collect()
}

impl ProxyRec {
    /// The record as the model's proxy operation.
    fn model(&self) -> ProxyOp {
        ProxyOp {
            rank: self.rank.max(0) as u32,
            seq: self.seq,
            channel: u32::from(self.channel),
            peer: self.peer.max(0) as u32,
            send: self.send,
            n_steps: self.n_steps.max(0) as u64,
            posted: u64::from(self.posted),
            transmitted: u64::from(self.transmitted),
            done: u64::from(self.done),
            waits: waits(&self.waits_ns),
            started_us: None,
            updated_us: None,
        }
    }

    fn same_connection(&self, o: &ProxyRec) -> bool {
        (self.rank, self.channel, self.peer, self.send) == (o.rank, o.channel, o.peer, o.send)
    }
}

/// One connection's finished operations in a drain, summed as the hot path recorded them: a drain builds the
/// model's records once per connection, not once per operation.
struct Tally {
    /// The newest (by call) of them: the connection's row.
    last: ProxyRec,
    ops: u64,
    /// Steps: in the operations, posted, transmitted, done.
    steps: [u64; 4],
    waits_ns: [u64; WAITS],
    /// The bytes of those that moved any, and their time from first to last step.
    bytes: u64,
    busy_ns: u64,
}

impl Tally {
    fn of(r: &ProxyRec) -> Self {
        let mut t = Tally { last: *r, ops: 0, steps: [0; 4], waits_ns: [0; WAITS], bytes: 0, busy_ns: 0 };
        t.add(r);
        t
    }

    fn add(&mut self, r: &ProxyRec) {
        let steps = [r.n_steps.max(0) as u64, r.posted.into(), r.transmitted.into(), r.done.into()];
        self.steps.iter_mut().zip(steps).for_each(|(sum, n)| *sum += n);
        self.waits_ns.iter_mut().zip(r.waits_ns).for_each(|(sum, ns)| *sum += ns);
        if r.bytes > 0 {
            self.bytes += r.bytes;
            self.busy_ns += r.last_step_ns.saturating_sub(r.first_step_ns);
        }
        if r.seq >= self.last.seq {
            self.last = *r;
        }
        self.ops += 1;
    }

    /// The model's tally of the connection, and the traffic of its link when it moved bytes.
    fn events(&self) -> (ProxyTally, Option<ChannelTraffic>) {
        let last = self.last.model();
        let [n_steps, posted, transmitted, done] = self.steps;
        let sum = ProxyOp { n_steps, posted, transmitted, done, waits: waits(&self.waits_ns), ..last.clone() };
        let traffic = (self.bytes > 0).then(|| ChannelTraffic {
            rank: last.rank,
            channel: last.channel,
            peer: last.peer,
            direction: if last.send { Direction::Send } else { Direction::Recv },
            transport: None,
            bytes: self.bytes,
            in_place_bytes: None,
            seconds: self.busy_ns as f64 / 1e9,
        });
        (ProxyTally { last, ops: self.ops, sum }, traffic)
    }
}

/// Hands on the contract events of what `out` holds now (`comm` is None for PXN operations of other processes).
/// Telemetry takes each event the plugin hands it, and NCCL makes several a call, so a drain condenses what only
/// adds up: a call whose completion is in the same drain goes only as completed (nothing could have seen it in
/// flight), each connection's finished proxy operations go as one [`ProxyTally`], and each link's traffic as
/// one sum. Measured on 4 ranks over NET/Socket at 8 B, an event per proxy operation cost the job about 15 %.
/// Proxy records are summed as the hot path wrote them ([`Tally`]): building the model's records for each one,
/// and a name string for each call, were a third of the drain thread's time at 8 B.
fn deliver_ring(out: &Outbox, comm: Option<&CommInfo>, sink: &mut dyn Sink) -> usize {
    // Calls seen enqueued and not (yet) completed: few, and they complete in about the order they came.
    let mut enqueued: Vec<TaskRec> = Vec::new();
    let mut tallies: Vec<Tally> = Vec::new();
    let mut n = 0;
    while let Some(r) = out.pop() {
        match r {
            Raw::Enqueued(t) => enqueued.push(t),
            Raw::Completed(t) => {
                if let Some(i) = enqueued.iter().position(|e| e.seq == t.seq) {
                    enqueued.remove(i);
                }
                sink.deliver(Event::OpCompleted(t.op(comm, OpState::Completed)));
                n += 1;
            }
            Raw::Proxy(p) => match tallies.iter_mut().find(|k| k.last.same_connection(&p)) {
                Some(tally) => tally.add(&p),
                None => tallies.push(Tally::of(&p)),
            },
        }
    }
    for t in enqueued {
        sink.deliver(Event::OpEnqueued(t.op(comm, OpState::Enqueued)));
        n += 1;
    }
    let (tallies, traffic): (Vec<_>, Vec<_>) = tallies.iter().map(Tally::events).unzip();
    let events = tallies.into_iter().map(Event::ProxyTally).chain(traffic.into_iter().flatten().map(Event::Traffic));
    n + events.map(|ev| sink.deliver(ev)).count()
}

fn communicator(c: &CommInfo, state: CommState) -> Communicator {
    Communicator {
        comm: Some(c.name.to_string()),
        comm_id: Some(format!("{:#x}", c.comm_id)),
        name: c.named.then(|| c.name.to_string()),
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
                comm: Some(ctx.comm.name.to_string()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, done: u32, waits_ns: [u64; WAITS], bytes: u64) -> ProxyRec {
        ProxyRec {
            seq,
            rank: 1,
            channel: 0,
            peer: 2,
            send: false,
            n_steps: done as i32,
            posted: done,
            transmitted: done,
            done,
            bytes,
            waits_ns,
            first_step_ns: 1_000,
            last_step_ns: 1_000 + 250_000_000 * u64::from(done),
        }
    }

    #[test]
    fn a_tally_sums_its_connections_operations_and_keeps_the_newest() {
        let mut t = Tally::of(&rec(4, 2, [0, 0, 0, 500_000_000, 0, 0], 64));
        t.add(&rec(6, 3, [0, 0, 0, 250_000_000, 0, 125_000_000], 0));
        t.add(&rec(5, 1, [0; WAITS], 32));
        assert!(t.last.same_connection(&rec(9, 1, [0; WAITS], 0)));
        assert!(!t.last.same_connection(&ProxyRec { send: true, ..rec(9, 1, [0; WAITS], 0) }));
        let (tally, traffic) = t.events();
        assert_eq!((tally.ops, tally.last.seq, tally.last.done), (3, 6, 3));
        assert_eq!((tally.sum.seq, tally.sum.n_steps, tally.sum.done), (6, 6, 6));
        assert_eq!(tally.sum.waits, [(ProxyWait::WaitingForRecv, 0.75), (ProxyWait::RecvGpuWait, 0.125)]);
        let traffic = traffic.expect("bytes moved");
        assert_eq!((traffic.bytes, traffic.direction), (96, Direction::Recv));
        assert_eq!(traffic.seconds, 0.75, "the operations that moved bytes: 0.5 s and 0.25 s");
    }

    #[test]
    fn a_tally_without_bytes_has_no_traffic() {
        assert!(Tally::of(&rec(1, 1, [0; WAITS], 0)).events().1.is_none());
    }
}
