//! AllReduce bus bandwidth with ranks as threads: `cargo run --release -p collscope-runtime --example
//! allreduce_bw -- [nranks] [bytes...]`. Honours NCCL_ALGO, NCCL_PROTO, NCCL_P2P_DISABLE and friends.

use collscope_model::RedOp;
use collscope_runtime::{Comm, CommOptions};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nranks: u32 = args.first().map(|a| a.parse()).transpose()?.unwrap_or(4);
    let sizes: Vec<usize> = if args.len() > 1 {
        args[1..].iter().map(|a| a.parse()).collect::<Result<_, _>>()?
    } else {
        vec![1 << 20, 64 << 20]
    };
    let comms = Comm::init_threads(nranks, CommOptions::default())?;
    println!("# nranks {nranks}, threads, {} channels", comms[0].nchannels());
    println!("{:>12} {:>8} {:>6} {:>10} {:>10} {:>10}", "size(B)", "algo", "proto", "time(us)", "algbw", "busbw");
    let results: Vec<Vec<(usize, f64, String)>> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|mut c| {
                let sizes = sizes.clone();
                s.spawn(move || {
                    let mut out = Vec::new();
                    for &bytes in &sizes {
                        let n = bytes / 4;
                        let send = vec![1.0f32; n];
                        let mut recv = vec![0.0f32; n];
                        let iters = ((256usize << 20) / bytes.max(1)).clamp(5, 200);
                        for _ in 0..3 {
                            c.all_reduce(&send, &mut recv, RedOp::Sum).expect("warm-up all_reduce");
                        }
                        let t = Instant::now();
                        for _ in 0..iters {
                            c.all_reduce(&send, &mut recv, RedOp::Sum).expect("all_reduce");
                        }
                        let us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
                        assert!(recv.iter().all(|v| *v == c.nranks() as f32), "wrong result");
                        let plan = c.plan(collscope_model::Collective::AllReduce, bytes as u64);
                        out.push((bytes, us, format!("{:>8} {:>6}", plan.algo, plan.proto)));
                    }
                    out
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    });
    for (i, (bytes, _, plan)) in results[0].iter().enumerate() {
        let us = results.iter().map(|r| r[i].1).fold(0.0, f64::max);
        let algbw = *bytes as f64 / us / 1e3;
        let busbw = algbw * 2.0 * (nranks as f64 - 1.0) / nranks as f64;
        println!("{bytes:>12} {plan} {us:>10.1} {algbw:>10.2} {busbw:>10.2}");
    }
    Ok(())
}
