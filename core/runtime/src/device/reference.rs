//! The value a reduction must produce, computed one element at a time in rank order: what the correctness
//! tests and `collscope perf`'s `#wrong` column check results against.

use collscope_kernels::Element;
use collscope_model::RedOp;

/// Reduces `at(0) .. at(n-1)` with `op` (Avg divides the sum by `n` at the end, as the kernels do).
pub fn reference_reduce<T: Element>(op: RedOp, n: usize, at: impl Fn(usize) -> T) -> T {
    let mut acc = at(0);
    for q in 1..n {
        let v = at(q);
        acc = match op {
            RedOp::Sum | RedOp::Avg => acc.add(v),
            RedOp::Prod => acc.mul(v),
            RedOp::Max => acc.max_of(v),
            RedOp::Min => acc.min_of(v),
        };
    }
    if op == RedOp::Avg {
        acc.div_n(n as u32)
    } else {
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduces_in_rank_order() {
        let v = [3i32, -7, 5, 2];
        assert_eq!(reference_reduce(RedOp::Sum, 4, |q| v[q]), 3);
        assert_eq!(reference_reduce(RedOp::Prod, 4, |q| v[q]), -210);
        assert_eq!(reference_reduce(RedOp::Max, 4, |q| v[q]), 5);
        assert_eq!(reference_reduce(RedOp::Min, 4, |q| v[q]), -7);
        assert_eq!(reference_reduce(RedOp::Avg, 4, |q| v[q] as f32), 0.75);
    }
}
