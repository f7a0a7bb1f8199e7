//! The proxy's per-operation step counts over a real NET/Socket run: for every sub-operation NCCL's order of
//! step states holds (done <= transmitted <= posted <= steps), and a step is counted under one call on both
//! of its ends.

use collscope_debug::env::Env;
use collscope_model::{ProxyOp, RedOp};
use collscope_runtime::comm::job::init_threads;
use collscope_runtime::comm::{Comm, CommOptions};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Calls of growing sizes, back to back, so each call's first steps meet the last steps of the one before.
const CALLS: u64 = 24;

fn run(comms: Vec<Comm>) -> Vec<Comm> {
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|mut c| {
                s.spawn(move || {
                    for i in 0..CALLS as usize {
                        let mut buf = vec![1.0f32; 1000 + (i % 6) * 40_000];
                        c.all_reduce_in_place(&mut buf, RedOp::Sum).unwrap();
                        assert!(buf.iter().all(|&v| v == 3.0), "call {i}");
                    }
                    c
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn every_sub_operation_keeps_nccl_step_order_over_net_socket() {
    for proto in ["simple", "ll", "ll128"] {
        let env = Env::from_pairs([
            ("NCCL_P2P_DISABLE", "1"),
            ("NCCL_SHM_DISABLE", "1"),
            ("NCCL_PROTO", proto),
            ("NCCL_BUFFSIZE", "65536"),
            ("COLLSCOPE_TIMEOUT_S", "60"),
        ]);
        let comms = run(init_threads(3, CommOptions { env, net: None, name: None }).unwrap());
        // A send's last steps may complete on the network after its call returned: wait for them, boundedly.
        let start = Instant::now();
        let ops: Vec<ProxyOp> = loop {
            let ops: Vec<ProxyOp> = comms.iter().flat_map(|c| c.records().proxy_ops()).collect();
            if ops.iter().all(|p| p.done == p.n_steps) || start.elapsed() > Duration::from_secs(10) {
                break ops;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(ops.iter().filter(|p| p.send).count() > CALLS as usize, "{proto}: {} sub-operations", ops.len());
        let bad: Vec<&ProxyOp> = ops
            .iter()
            .filter(|p| !(p.done <= p.transmitted && p.transmitted <= p.posted && p.posted <= p.n_steps))
            .collect();
        assert!(bad.is_empty(), "{proto}: {} of {} sub-operations out of order: {:?}", bad.len(), ops.len(), &bad[..]);
        assert!(ops.iter().all(|p| p.seq >= 1 && p.seq <= CALLS), "{proto}: {ops:?}");
        // Once every call returned, every step went the whole way on both ends, under the same call.
        let mut steps: BTreeMap<(u64, u32, u32, u32), [u64; 2]> = BTreeMap::new();
        for p in &ops {
            assert_eq!(p.done, p.n_steps, "{proto}: unfinished {p:?}");
            let (from, to) = if p.send { (p.rank, p.peer) } else { (p.peer, p.rank) };
            steps.entry((p.seq, p.channel, from, to)).or_default()[usize::from(p.send)] += p.n_steps;
        }
        for (key, [recv, send]) in &steps {
            assert_eq!(recv, send, "{proto}: (seq, channel, from, to) {key:?}: received {recv} steps, sent {send}");
        }
    }
}
