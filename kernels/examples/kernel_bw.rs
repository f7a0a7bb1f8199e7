//! Reduce-kernel throughput per datatype: `cargo run --release -p collscope-kernels --example kernel_bw`.
//! Counts the bytes read and written (two inputs, one output) per second.

use collscope_kernels::{reduce, Element, Op};
use half::{bf16, f16};
use std::time::Instant;

fn bench<T: Element>(name: &str) {
    let n = (8 << 20) / std::mem::size_of::<T>();
    let a: Vec<T> = (0..n).map(T::from_index).collect();
    let b: Vec<T> = (0..n).map(|i| T::from_index(i + 1)).collect();
    let mut d = a.clone();
    reduce(Op::Sum, &mut d, &a, &b);
    let iters = 20;
    let t = Instant::now();
    for _ in 0..iters {
        reduce(Op::Sum, &mut d, &a, &b);
        std::hint::black_box(&mut d);
    }
    let secs = t.elapsed().as_secs_f64();
    println!("{name:>5} sum: {:6.2} GB/s", (3 * n * std::mem::size_of::<T>() * iters) as f64 / secs / 1e9);
}

fn main() {
    bench::<i8>("i8");
    bench::<i32>("i32");
    bench::<i64>("i64");
    bench::<f16>("f16");
    bench::<bf16>("bf16");
    bench::<f32>("f32");
    bench::<f64>("f64");
}
