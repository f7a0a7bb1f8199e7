//! The state machine driven as NCCL drives it: a call started and stopped on one thread, its proxy operations,
//! steps and kernel channels started and ended on another (or the same), in NCCL's orders.

use super::*;
use crate::output::{drain_context, drain_detached};
use collscope_model::{CommState, Direction, Event, OpRecord, OpState, ProxyWait};
use std::thread::sleep;
use std::time::Duration;

const SMALL: Sizes = Sizes { tasks: 8, proxies: 16, kernels: 8, ctrls: 2, ring: 256 };

fn ctx_with(mask: u64, sizes: &Sizes) -> Arc<Context> {
    let comm = CommInfo {
        name: "dp0".into(),
        named: true,
        comm_id: 0xabc,
        rank: 1,
        nranks: 4,
        nnodes: 2,
        host: None,
        version: None,
    };
    Context::new(comm, mask, sizes)
}

fn ctx(mask: u64) -> Arc<Context> {
    ctx_with(mask, &SMALL)
}

const DEFAULT: u64 = crate::settings::DEFAULT_MASK;

fn allreduce(count: u64, n_channels: u8) -> Start {
    Start::Task(TaskStart {
        rank: 1,
        coll: Some(Collective::AllReduce),
        datatype: Some(DataType::F32),
        count,
        root: Some(0),
        peer: None,
        algo: Some(Algorithm::Ring),
        proto: Some(Protocol::Simple),
        n_channels: Some(n_channels),
    })
}

fn send(peer: i32, count: u64) -> Start {
    Start::Task(TaskStart {
        rank: 1,
        coll: Some(Collective::Send),
        datatype: Some(DataType::Bf16),
        count,
        root: None,
        peer: Some(peer),
        algo: None,
        proto: None,
        n_channels: Some(1),
    })
}

fn proxy_op(parent: *mut c_void, channel: u8, is_send: bool, n_steps: i32) -> Start {
    Start::ProxyOp(ProxyOpStart { parent, pid: clock::pid(), rank: 1, channel, peer: 2, n_steps, is_send })
}

/// Starts an event through the same entry NCCL's calls reach.
fn start_on(shared: &Shared, c: &Arc<Context>, d: Start) -> *mut c_void {
    // SAFETY: `c` is a live context, and the tests' parents are handles this plugin returned or NULL.
    unsafe { start(shared, Arc::as_ptr(c), d) }
}

fn rec(h: *mut c_void, st: i32, trans_size: u64) {
    // SAFETY: the tests pass handles `start` returned, whose contexts live on.
    unsafe { record(h, st, Update { trans_size, ..Update::default() }) }
}

fn end(h: *mut c_void) {
    // SAFETY: as for `rec`.
    unsafe { stop(h) }
}

/// A step's start reads only its operation (its `context` may be another process's under PXN).
fn step_of(op: *mut c_void, step: i32) -> *mut c_void {
    static NOT_READ: std::sync::LazyLock<Arc<Shared>> = std::sync::LazyLock::new(|| Shared::new(&DETACHED));
    // SAFETY: a step's start reads only its parent, a proxy operation's handle; the dangling context is never read.
    unsafe { start(&NOT_READ, std::ptr::dangling::<Context>(), Start::ProxyStep { parent: op, step }) }
}

/// One step of a send the way NCCL's sendProgress records it: posted (GPU wait), data ready (peer wait, recorded
/// again while the peer has no room), handed to the network, done.
fn send_step(op: *mut c_void, step: i32, bytes: u64, peer_wait: Duration) {
    let s = step_of(op, step);
    assert!(!s.is_null());
    rec(s, state::PROXY_STEP_SEND_GPU_WAIT, 0);
    rec(s, state::PROXY_STEP_SEND_PEER_WAIT_V4, 0);
    sleep(peer_wait);
    rec(s, state::PROXY_STEP_SEND_PEER_WAIT_V4, 0);
    rec(s, state::PROXY_STEP_SEND_WAIT, bytes);
    end(s);
}

/// One step of a receive (recvProgress): posted (waiting for data), arrived (flush), handed to the GPU, done.
fn recv_step(op: *mut c_void, step: i32, bytes: u64, data_wait: Duration) {
    let s = step_of(op, step);
    assert!(!s.is_null());
    rec(s, state::PROXY_STEP_RECV_WAIT, 0);
    sleep(data_wait);
    rec(s, state::PROXY_STEP_RECV_FLUSH_WAIT, bytes);
    rec(s, state::PROXY_STEP_RECV_GPU_WAIT, bytes);
    end(s);
}

fn kernel(shared: &Shared, parent: *mut c_void, channel: u8, p_start: u64, p_stop: u64) {
    // SAFETY: a kernel channel's start reads only its parent, a handle of this plugin or NULL.
    let k = unsafe { start(shared, null_mut(), Start::KernelCh { parent, channel, p_timer: p_start }) };
    assert!(!k.is_null(), "kernel channel {channel}");
    // SAFETY: `k` is the handle just started.
    unsafe { record(k, state::KERNEL_CH_STOP, Update { p_timer: p_stop, ..Update::default() }) };
    end(k);
}

fn drain(c: &Context) -> Vec<Event> {
    let mut got = Vec::new();
    drain_context(c, &mut |o| got.push(o));
    got
}

fn ops(out: &[Event], completed: bool) -> Vec<OpRecord> {
    out.iter()
        .filter_map(|o| match o {
            Event::OpCompleted(r) if completed => Some(r.clone()),
            Event::OpEnqueued(r) if !completed => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// Each connection's proxy tally of a drain.
fn tallies(out: &[Event]) -> Vec<collscope_model::ProxyTally> {
    out.iter()
        .filter_map(|o| match o {
            Event::ProxyTally(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// The proxy operations of a drain that ran one on each connection.
fn proxies(out: &[Event]) -> Vec<collscope_model::ProxyOp> {
    tallies(out)
        .into_iter()
        .map(|t| {
            assert_eq!((t.ops, &t.sum), (1, &t.last), "one operation: its tally is itself");
            t.last
        })
        .collect()
}

fn traffic(out: &[Event]) -> Vec<collscope_model::ChannelTraffic> {
    out.iter()
        .filter_map(|o| match o {
            Event::Traffic(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

fn wait(p: &collscope_model::ProxyOp, w: ProxyWait) -> f64 {
    p.waits.iter().find(|(k, _)| *k == w).map_or(0.0, |(_, s)| *s)
}

#[test]
fn a_collective_completes_when_its_channels_and_proxy_operations_end() {
    let (shared, c) = (Shared::new(&DETACHED), ctx(DEFAULT));
    let count = 262_144; // 1 MiB of f32
    let call = start_on(&shared, &c, allreduce(count, 2));
    assert!(!call.is_null());
    // NCCL uploads the proxy operations, then stops the call: enqueued, not complete.
    end(call);
    let out = drain(&c);
    assert!(
        matches!(&out[0], Event::Communicator(k) if k.state == CommState::Ready && k.comm.as_deref() == Some("dp0"))
    );
    let enq = ops(&out, false);
    assert_eq!(enq.len(), 1);
    assert_eq!((enq[0].state, enq[0].seq, enq[0].started_us), (OpState::Enqueued, 1, None));
    assert!(ops(&out, true).is_empty());

    // The proxy thread: channel 0's send and receive, and its kernel channel.
    let snd = start_on(&shared, &c, proxy_op(call, 0, true, 2));
    let rcv = start_on(&shared, &c, proxy_op(call, 0, false, 2));
    for step in 0..2 {
        send_step(snd, step, 4096, Duration::from_millis(3));
        recv_step(rcv, step, 4096, Duration::from_millis(2));
    }
    end(snd);
    end(rcv);
    kernel(&shared, call, 0, 1_000, 5_000);
    let mut out = drain(&c);
    assert!(ops(&out, true).is_empty(), "channel 1 has not run yet: the call still awaits it");

    kernel(&shared, call, 1, 1_500, 6_000);
    out.extend(drain(&c));
    let done = ops(&out, true);
    assert_eq!(done.len(), 1, "completed exactly once");
    let r = &done[0];
    assert_eq!((r.state, r.seq, r.rank, r.coll), (OpState::Completed, 1, 1, Collective::AllReduce));
    assert_eq!((r.algo, r.proto, r.n_channels), (Some(Algorithm::Ring), Some(Protocol::Simple), Some(2)));
    assert_eq!((r.bytes, r.comm.as_deref(), r.root), (count * 4, Some("dp0"), None));
    assert_eq!(r.duration_us, Some(5.0), "first channel start to last channel stop on the GPU clock");
    let algbw = r.bytes as f64 / 5e-6 / 1e9;
    assert_eq!(r.algbw_gbps, Some(algbw));
    assert_eq!(r.busbw_gbps, Some(algbw * 1.5), "2(n-1)/n for 4 ranks");
    let (enq, start, fin) = (r.enqueued_us.unwrap(), r.started_us.unwrap(), r.completed_us.unwrap());
    assert!(enq <= start && start <= fin, "{enq} {start} {fin}");

    let kernels: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Event::KernelChannel(k) => Some((k.channel, k.calls, k.gpu_seconds)),
            _ => None,
        })
        .collect();
    assert_eq!(kernels, [(0, 1, 4e-6), (1, 1, 4.5e-6)]);
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn proxy_operations_report_steps_bytes_and_wait_states() {
    let (shared, c) = (Shared::new(&DETACHED), ctx(DEFAULT));
    let call = start_on(&shared, &c, allreduce(1024, 1));
    let snd = start_on(&shared, &c, proxy_op(call, 3, true, 2));
    let rcv = start_on(&shared, &c, proxy_op(call, 3, false, 2));
    end(call);
    for step in 0..2 {
        send_step(snd, step, 1000 + step as u64, Duration::from_millis(4));
        recv_step(rcv, step, 2000, Duration::from_millis(3));
    }
    end(snd);
    end(rcv);
    kernel(&shared, call, 3, 10, 20);
    let out = drain(&c);
    let p = proxies(&out);
    assert_eq!(p.len(), 2);
    let (s, r) = (&p[0], &p[1]);
    assert!(s.send && !r.send);
    assert_eq!((s.seq, s.rank, s.channel, s.peer, s.n_steps), (1, 1, 3, 2, 2));
    assert_eq!((s.posted, s.transmitted, s.done), (2, 2, 2));
    assert_eq!((r.posted, r.transmitted, r.done), (2, 2, 2));
    assert!(wait(s, ProxyWait::WaitingForPeer) >= 0.008, "2 steps x 4 ms, the repeated record counted once: {s:?}");
    assert!(wait(s, ProxyWait::WaitingForData) < 0.004, "{s:?}");
    assert!(s.waits.iter().all(|(w, _)| matches!(
        w,
        ProxyWait::WaitingForData | ProxyWait::WaitingForPeer | ProxyWait::WaitingForSendCompletion
    )));
    assert!(wait(r, ProxyWait::WaitingForRecv) >= 0.006, "{r:?}");
    assert!(r
        .waits
        .iter()
        .all(|(w, _)| matches!(w, ProxyWait::WaitingForRecv | ProxyWait::WaitingForFlush | ProxyWait::RecvGpuWait)));
    let traffic: Vec<_> =
        traffic(&out).iter().map(|t| (t.direction, t.channel, t.peer, t.bytes, t.seconds > 0.0)).collect();
    assert_eq!(traffic, [(Direction::Send, 3, 2, 2001, true), (Direction::Recv, 3, 2, 4000, true)]);
    assert!(wait(r, ProxyWait::RecvGpuWait) > 0.0, "{r:?}");
    assert!(c.out.stats.recv_gpu_wait_ns.load(Relaxed) > 0, "and in the process's total");
}

#[test]
fn a_drain_sums_each_connections_proxy_operations_and_each_links_traffic() {
    let (shared, c) = (Shared::new(&DETACHED), ctx(DEFAULT));
    for _ in 0..3 {
        let call = start_on(&shared, &c, allreduce(1024, 1));
        let snd = start_on(&shared, &c, proxy_op(call, 0, true, 1));
        end(call);
        send_step(snd, 0, 1000, Duration::ZERO);
        end(snd);
        kernel(&shared, call, 0, 1, 2);
    }
    let out = drain(&c);
    let t = tallies(&out);
    assert_eq!(t.len(), 1, "one connection");
    assert_eq!((t[0].ops, t[0].sum.n_steps, t[0].sum.done, t[0].last.seq), (3, 3, 3, 3), "each operation counts");
    let traffic: Vec<_> = traffic(&out).iter().map(|t| (t.channel, t.direction, t.bytes)).collect();
    assert_eq!(traffic, [(0, Direction::Send, 3000)], "one sum for the link");
    assert_eq!((ops(&out, false).len(), ops(&out, true).len()), (0, 3));
}

#[test]
fn children_that_end_before_the_calls_stop_complete_it_at_the_stop() {
    let (shared, c) = (Shared::new(&DETACHED), ctx(DEFAULT));
    let call = start_on(&shared, &c, send(3, 100));
    kernel(&shared, call, 0, 100, 300);
    assert!(ops(&drain(&c), true).is_empty(), "not stopped yet");
    end(call);
    let out = drain(&c);
    let (enq, done) = (ops(&out, false), ops(&out, true));
    assert_eq!((enq.len(), done.len()), (0, 1), "enqueued and completed in one drain: only the completion goes");
    assert_eq!((done[0].coll, done[0].peer, done[0].bytes), (Collective::Send, Some(3), 200));
    assert_eq!(done[0].busbw_gbps, done[0].algbw_gbps, "p2p factor 1");
}

#[test]
fn without_kernel_events_a_call_completes_when_its_stop_and_running_children_end() {
    let (shared, c) = (Shared::new(&DETACHED), ctx(DEFAULT & !kind::KERNEL_CH));
    let call = start_on(&shared, &c, allreduce(8, 2));
    let op = start_on(&shared, &c, proxy_op(call, 0, true, 1));
    end(call);
    assert!(ops(&drain(&c), true).is_empty(), "a proxy operation still runs");
    end(op);
    assert_eq!(ops(&drain(&c), true).len(), 1);
    // A call with no child completes at its stop (CPU time only: NCCL's documented limit).
    let quick = start_on(&shared, &c, allreduce(8, 2));
    end(quick);
    let done = ops(&drain(&c), true);
    assert_eq!((done.len(), done[0].seq), (1, 2));
    // Its proxy operation, if one still comes, names a completed call: an orphan, counted.
    assert!(start_on(&shared, &c, proxy_op(quick, 0, true, 1)).is_null());
    assert_eq!(c.out.stats.orphans.load(Relaxed), 1);
}

#[test]
fn a_child_of_a_completed_call_never_attaches_to_the_call_that_reuses_its_object() {
    let sizes = Sizes { tasks: 1, ..SMALL };
    let (shared, c) = (Shared::new(&DETACHED), ctx_with(DEFAULT, &sizes));
    let first = start_on(&shared, &c, allreduce(8, 1));
    end(first);
    kernel(&shared, first, 0, 1, 2);
    let second = start_on(&shared, &c, allreduce(8, 1));
    assert_eq!(first as usize & !TAG, second as usize & !TAG, "one object, reused");
    assert_ne!(first, second, "a new generation, a new handle");
    // SAFETY: `first` is a handle this plugin returned; its object is reused, which the generation in the handle
    // tells.
    assert!(unsafe { start(&shared, null_mut(), Start::KernelCh { parent: first, channel: 0, p_timer: 5 }) }.is_null());
    assert_eq!(c.out.stats.orphans.load(Relaxed), 1);
    end(second);
    kernel(&shared, second, 0, 10, 30);
    let done = ops(&drain(&c), true);
    assert_eq!(done.iter().map(|r| (r.seq, r.duration_us)).collect::<Vec<_>>(), [(1, Some(0.001)), (2, Some(0.02))]);
    assert_eq!(c.out.stats.misuse.load(Relaxed), 0);
}

#[test]
fn a_pxn_operation_of_another_process_is_kept_apart_and_its_pointers_are_never_read() {
    let shared = Shared::new(&DETACHED);
    // Pointers of another address space: reading either would crash the test.
    let (foreign_ctx, foreign_call) = (std::ptr::dangling::<Context>(), 0x10 as *mut c_void);
    let op = Start::ProxyOp(ProxyOpStart {
        parent: foreign_call,
        pid: clock::pid() + 1,
        rank: 6,
        channel: 5,
        peer: 7,
        n_steps: 1,
        is_send: true,
    });
    // SAFETY: a proxy operation of another process never reads its context.
    let h = unsafe { start(&shared, foreign_ctx, op) };
    assert!(!h.is_null());
    send_step(h, 0, 512, Duration::ZERO);
    end(h);
    let mut got = Vec::new();
    drain_detached(&shared.out, &mut |o| got.push(o));
    let p = proxies(&got);
    assert_eq!(p.len(), 1);
    assert_eq!((p[0].seq, p[0].rank, p[0].channel, p[0].peer, p[0].done), (0, 6, 5, 7, 1), "seq 0: no call here");
    assert_eq!(shared.out.stats.proxy_ops.load(Relaxed), 1);
}

#[test]
fn full_pools_and_rings_drop_and_count_and_what_nccl_does_not_name_gets_no_handle() {
    let sizes = Sizes { tasks: 2, ring: 3, ..SMALL };
    let (shared, c) = (Shared::new(&DETACHED), ctx_with(DEFAULT, &sizes));
    let a = start_on(&shared, &c, allreduce(8, 1));
    let b = start_on(&shared, &c, allreduce(8, 1));
    assert!(start_on(&shared, &c, allreduce(8, 1)).is_null(), "two objects, both in use");
    assert_eq!(c.out.stats.dropped_events.load(Relaxed), 1);
    for h in [a, b] {
        end(h);
        kernel(&shared, h, 0, 1, 2);
    }
    assert_eq!(c.out.stats.dropped_records.load(Relaxed), 1, "4 records, a ring of 3");
    let gather = Start::Task(TaskStart {
        coll: None,
        ..match allreduce(8, 1) {
            Start::Task(t) => t,
            _ => unreachable!(),
        }
    });
    assert!(start_on(&shared, &c, gather).is_null());
    assert_eq!(c.out.stats.unsupported.load(Relaxed), 1);
    assert!(start_on(&shared, &c, Start::Ignored).is_null());
    assert!(start_on(&shared, &c, Start::ProxyStep { parent: null_mut(), step: 0 }).is_null());
    assert!(start_on(&shared, &c, proxy_op(null_mut(), 0, true, 1)).is_null(), "a dropped call's child");
}

#[test]
fn a_handle_stopped_twice_is_counted_and_breaks_nothing() {
    let (shared, c) = (Shared::new(&DETACHED), ctx(DEFAULT));
    let call = start_on(&shared, &c, allreduce(8, 1));
    let op = start_on(&shared, &c, proxy_op(call, 0, true, 1));
    end(call);
    end(call);
    assert_eq!(c.out.stats.misuse.load(Relaxed), 1);
    end(op);
    end(op);
    kernel(&shared, call, 0, 1, 2);
    let k = start_on(&shared, &c, Start::ProxyCtrl);
    end(k);
    end(k);
    assert_eq!(c.out.stats.misuse.load(Relaxed), 3, "the call, the proxy operation and the control event");
    let out = drain(&c);
    assert_eq!((ops(&out, true).len(), proxies(&out).len()), (1, 1));
    // Each object went back to its pool once: a pool hands out as many distinct objects as it holds, no more.
    let distinct = |hs: &[*mut c_void]| {
        let mut a: Vec<_> = hs.iter().filter(|h| !h.is_null()).map(|h| *h as usize & !TAG).collect();
        a.sort();
        a.dedup();
        a.len()
    };
    let calls: Vec<_> = (0..=SMALL.tasks).map(|_| start_on(&shared, &c, allreduce(8, 1))).collect();
    assert_eq!(distinct(&calls), SMALL.tasks);
    let ops: Vec<_> = (0..=SMALL.proxies).map(|_| start_on(&shared, &c, proxy_op(calls[0], 0, true, 1))).collect();
    assert_eq!(distinct(&ops), SMALL.proxies);
    let ctrls: Vec<_> = (0..=SMALL.ctrls).map(|_| start_on(&shared, &c, Start::ProxyCtrl)).collect();
    assert_eq!(distinct(&ctrls), SMALL.ctrls);
}

#[test]
fn proxy_control_events_add_up_the_proxy_threads_time() {
    let (shared, c) = (Shared::new(&DETACHED), ctx(DEFAULT | kind::PROXY_CTRL));
    let ctrl = |st: i32, appended: i32| {
        let h = start_on(&shared, &c, Start::ProxyCtrl);
        assert!(!h.is_null());
        // SAFETY: `h` is the handle just started.
        unsafe { record(h, st, Update { appended, ..Update::default() }) };
        h
    };
    // As NCCL's proxy loop: sleep/wakeup, append/append end, then active and idle transitions.
    let h = ctrl(state::PROXY_CTRL_SLEEP, 0);
    sleep(Duration::from_millis(3));
    // SAFETY: `h` is a live handle of `ctrl`.
    unsafe { record(h, state::PROXY_CTRL_WAKEUP, Update::default()) };
    end(h);
    let h = ctrl(state::PROXY_CTRL_APPEND, 0);
    // SAFETY: `h` is a live handle of `ctrl`.
    unsafe { record(h, state::PROXY_CTRL_APPEND_END, Update { appended: 3, ..Update::default() }) };
    end(h);
    end(ctrl(state::PROXY_CTRL_ACTIVE, 0));
    sleep(Duration::from_millis(2));
    end(ctrl(state::PROXY_CTRL_IDLE, 0));
    let t = &c.ctrl;
    assert!(t.sleep_ns.load(Relaxed) >= 3_000_000);
    assert_eq!(t.appended.load(Relaxed), 3);
    assert!(t.active_ns.load(Relaxed) >= 2_000_000);
    assert_eq!(t.idle_ns.load(Relaxed), 0, "still idle");
}

#[test]
fn a_finalized_communicator_takes_no_new_calls_and_says_goodbye_once_drained() {
    let (shared, c) = (Shared::new(&DETACHED), ctx(DEFAULT));
    let call = start_on(&shared, &c, allreduce(8, 1));
    end(call);
    c.finalize();
    assert!(start_on(&shared, &c, allreduce(8, 1)).is_null());
    kernel(&shared, call, 0, 1, 2);
    let out = drain(&c);
    assert_eq!(ops(&out, true).len(), 1, "events in flight still end");
    assert!(matches!(out.last(), Some(Event::Communicator(k)) if k.state == CommState::Destroyed));
    assert!(c.departed());
    assert!(drain(&c).is_empty());
}

#[test]
fn calls_launched_on_one_thread_complete_exactly_once_with_children_on_another() {
    let (shared, c) = (Shared::new(&DETACHED), ctx_with(DEFAULT, &SIZES));
    const CALLS: usize = 20_000;
    let (tx, rx) = std::sync::mpsc::sync_channel::<usize>(64);
    let proxy = {
        let (shared, c) = (shared.clone(), c.clone());
        std::thread::spawn(move || {
            for (i, h) in rx.iter().enumerate() {
                let h = h as *mut c_void;
                let op = start_on(&shared, &c, proxy_op(h, 0, true, 1));
                send_step(op, 0, 8, Duration::ZERO);
                end(op);
                kernel(&shared, h, 0, 1 + i as u64, 2 + i as u64);
            }
        })
    };
    let mut done = 0;
    let mut sink = |o: Event| {
        if let Event::OpCompleted(_) = o {
            done += 1;
        }
    };
    for i in 0..CALLS {
        let h = start_on(&shared, &c, allreduce(8, 1));
        assert!(!h.is_null(), "call {i}");
        tx.send(h as usize).unwrap();
        end(h);
        if i % 512 == 0 {
            drain_context(&c, &mut sink);
        }
    }
    drop(tx);
    proxy.join().unwrap();
    drain_context(&c, &mut sink);
    let s = &c.out.stats;
    assert_eq!((c.started(), c.in_flight()), (CALLS as u64, 0));
    assert_eq!((s.orphans.load(Relaxed), s.misuse.load(Relaxed), s.dropped_events.load(Relaxed)), (0, 0, 0));
    assert_eq!((done, s.dropped_records.load(Relaxed)), (CALLS, 0), "each completion delivered once");
    assert_eq!(c.in_flight(), 0);
}
