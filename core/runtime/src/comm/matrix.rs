//! The correctness matrix: every collective, datatype, op, algorithm, protocol, transport, rank count, size
//! class and placement appears, all value pairs combined (a greedy pairwise covering), plus the full product
//! of the other dimensions for AllReduce f32 sum and every op on every datatype for each reducing path. Communicators are reused across a group's cases, which also
//! exercises step counters and protocol switches across calls.

use super::select::{Choice, SelectConfig};
use crate::comm::{Comm, CommOptions};
use crate::device::reference::reference_reduce;
use collscope_debug::env::Env;
use collscope_kernels::Element;
use collscope_model::{Algorithm, Collective, DataType, Protocol, RedOp, Transport};
use half::{bf16, f16};
use std::collections::{BTreeMap, HashSet};

const COLLS: [Collective; 7] = [
    Collective::AllReduce,
    Collective::AllGather,
    Collective::ReduceScatter,
    Collective::Broadcast,
    Collective::Reduce,
    Collective::SendRecv,
    Collective::AllToAll,
];
const OPS: [RedOp; 5] = [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg];
const ALGOS: [Algorithm; 3] = [Algorithm::Ring, Algorithm::Tree, Algorithm::OneShot];
const PROTOS: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];
const NRANKS: [u32; 6] = [1, 2, 3, 4, 7, 8];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Size {
    Zero,
    One,
    Odd,
    /// Several protocol steps plus a few elements: not a multiple of any chunk.
    OffChunk,
    MultiMb,
}
const SIZES: [Size; 5] = [Size::Zero, Size::One, Size::Odd, Size::OffChunk, Size::MultiMb];

/// Small per-step buffers so that modest sizes take many steps (slots of 8 KiB, 32 LL lines, 6 LL128 lines).
const SMALL_BUFFERS: [(&str, &str); 3] =
    [("NCCL_BUFFSIZE", "65536"), ("NCCL_LL_BUFFSIZE", "4096"), ("NCCL_LL128_BUFFSIZE", "6144")];

#[derive(Debug, Clone, Copy)]
struct Case {
    coll: Collective,
    dt: DataType,
    op: RedOp,
    algo: Algorithm,
    proto: Protocol,
    shm: bool,
    nranks: u32,
    size: Size,
    in_place: bool,
}

const DIMS: [usize; 9] = [COLLS.len(), 10, OPS.len(), ALGOS.len(), PROTOS.len(), 2, NRANKS.len(), SIZES.len(), 2];

impl Case {
    fn from_indices(v: &[usize]) -> Case {
        Case {
            coll: COLLS[v[0]],
            dt: DataType::ALL[v[1]],
            op: OPS[v[2]],
            algo: ALGOS[v[3]],
            proto: PROTOS[v[4]],
            shm: v[5] == 1,
            nranks: NRANKS[v[6]],
            size: SIZES[v[7]],
            in_place: v[8] == 1,
        }
    }
}

fn is_p2p(c: Collective) -> bool {
    matches!(c, Collective::SendRecv | Collective::AllToAll)
}

fn reduces(c: Collective) -> bool {
    matches!(c, Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce)
}

/// Which partial assignments can run: Tree and OneShot are AllReduce's only, point-to-point is Simple and out of
/// place, and only reductions take an op other than the default.
fn valid(a: &[Option<usize>]) -> bool {
    let Some(c) = a[0].map(|i| COLLS[i]) else { return true };
    let not_ring = a[3].is_some_and(|i| ALGOS[i] != Algorithm::Ring);
    let not_simple = a[4].is_some_and(|p| PROTOS[p] != Protocol::Simple);
    let not_sum = a[2].is_some_and(|o| o != 0);
    let in_place = a[8] == Some(1);
    !((not_ring && c != Collective::AllReduce) || (is_p2p(c) && (not_simple || in_place)) || (!reduces(c) && not_sum))
}

/// xorshift64*, deterministic so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

type Pair = (usize, usize, usize, usize);

fn feasible_pairs(dims: &[usize], valid: &dyn Fn(&[Option<usize>]) -> bool) -> HashSet<Pair> {
    let mut out = HashSet::new();
    for i in 0..dims.len() {
        for j in i + 1..dims.len() {
            for a in 0..dims[i] {
                for b in 0..dims[j] {
                    let mut p = vec![None; dims.len()];
                    p[i] = Some(a);
                    p[j] = Some(b);
                    if valid(&p) {
                        out.insert((i, a, j, b));
                    }
                }
            }
        }
    }
    out
}

fn pairs_of(v: &[usize]) -> impl Iterator<Item = Pair> + '_ {
    (0..v.len()).flat_map(move |i| (i + 1..v.len()).map(move |j| (i, v[i], j, v[j])))
}

/// A greedy pairwise covering: each row starts from an uncovered pair and fills the other dimensions with the
/// values that cover the most uncovered pairs; the best of a few randomized rows is kept.
fn pairwise(dims: &[usize], valid: &dyn Fn(&[Option<usize>]) -> bool, seed: u64) -> Vec<Vec<usize>> {
    let mut uncovered = feasible_pairs(dims, valid);
    let mut rng = Rng(seed | 1);
    let mut rows = Vec::new();
    while !uncovered.is_empty() {
        let mut sorted: Vec<Pair> = uncovered.iter().copied().collect();
        sorted.sort_unstable();
        let mut best: Option<(usize, Vec<usize>)> = None;
        for attempt in 0..12 {
            let (i, a, j, b) = sorted[if attempt == 0 { 0 } else { rng.next(sorted.len()) }];
            let mut row = vec![None; dims.len()];
            row[i] = Some(a);
            row[j] = Some(b);
            let mut order: Vec<usize> = (0..dims.len()).filter(|&d| d != i && d != j).collect();
            for k in (1..order.len()).rev() {
                order.swap(k, rng.next(k + 1));
            }
            for d in order {
                let mut choice = None;
                let mut score_best = -1i64;
                let start = rng.next(dims[d]);
                for off in 0..dims[d] {
                    let v = (start + off) % dims[d];
                    row[d] = Some(v);
                    if !valid(&row) {
                        continue;
                    }
                    let score = (0..dims.len())
                        .filter_map(|e| row[e].filter(|_| e != d).map(|w| (e, w)))
                        .filter(|&(e, w)| {
                            let p = if e < d { (e, w, d, v) } else { (d, v, e, w) };
                            uncovered.contains(&p)
                        })
                        .count() as i64;
                    if score > score_best {
                        score_best = score;
                        choice = Some(v);
                    }
                }
                row[d] = choice;
                if choice.is_none() {
                    break;
                }
            }
            if row.iter().any(Option::is_none) {
                continue;
            }
            let row: Vec<usize> = row.into_iter().flatten().collect();
            let gain = pairs_of(&row).filter(|p| uncovered.contains(p)).count();
            if best.as_ref().is_none_or(|(g, _)| gain > *g) {
                best = Some((gain, row));
            }
        }
        let (_, row) = best.expect("a valid row exists for every feasible pair");
        for p in pairs_of(&row) {
            uncovered.remove(&p);
        }
        rows.push(row);
    }
    rows
}

fn all_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = pairwise(&DIMS, &valid, 0x5eed).iter().map(|r| Case::from_indices(r)).collect();
    for algo in ALGOS {
        for proto in PROTOS {
            for shm in [false, true] {
                for nranks in NRANKS {
                    for size in SIZES {
                        for in_place in [false, true] {
                            cases.push(Case {
                                coll: Collective::AllReduce,
                                dt: DataType::F32,
                                op: RedOp::Sum,
                                algo,
                                proto,
                                shm,
                                nranks,
                                size,
                                in_place,
                            });
                        }
                    }
                }
            }
        }
    }
    // Every op on every datatype through each reducing path, where pairs alone may miss a combination.
    for (coll, algo) in [
        (Collective::AllReduce, Algorithm::Ring),
        (Collective::AllReduce, Algorithm::Tree),
        (Collective::AllReduce, Algorithm::OneShot),
        (Collective::ReduceScatter, Algorithm::Ring),
        (Collective::Reduce, Algorithm::Ring),
    ] {
        for dt in DataType::ALL.iter().copied() {
            for op in OPS {
                let (proto, shm) = (PROTOS[cases.len() % 3], false);
                cases.push(Case { coll, dt, op, algo, proto, shm, nranks: 4, size: Size::Odd, in_place: false });
            }
        }
    }
    cases
}

/// Elements per rank (per block for the collectives whose buffers hold one block per rank).
fn count(case: &Case, esize: usize) -> usize {
    let payload = match case.proto {
        Protocol::Simple => 8192,
        Protocol::Ll => 256,
        Protocol::Ll128 => 720,
    };
    let blocks = matches!(case.coll, Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll);
    match case.size {
        Size::Zero => 0,
        Size::One => 1,
        Size::Odd => 1001,
        Size::OffChunk => 5 * payload / esize + 3,
        Size::MultiMb => {
            let n = (3 << 19) / esize;
            if blocks {
                (n / case.nranks as usize).max(1)
            } else {
                n
            }
        }
    }
}

fn value<T: Element>(op: RedOp, rank: usize, i: usize) -> T {
    if op == RedOp::Prod {
        // Products of ones and twos stay exact in every type.
        T::from_index(1 + (i + rank) % 2)
    } else {
        T::from_index(i * 5 + rank * 3)
    }
}

fn close<T: Element>(got: T, want: T) -> bool {
    if T::DTYPE.is_float() {
        // Reduction order differs between algorithms; inputs are small integers, so any error is tiny.
        let (g, w) = (got.to_f64(), want.to_f64());
        (g - w).abs() <= 1e-3 * w.abs().max(1.0)
    } else {
        got == want
    }
}

fn check<T: Element>(case: &Case, what: &str, got: &[T], want: impl Fn(usize) -> T) -> Result<(), String> {
    for (i, g) in got.iter().enumerate() {
        let w = want(i);
        if !close(*g, w) {
            return Err(format!("{case:?}: {what}[{i}] = {g:?}, expected {w:?}"));
        }
    }
    Ok(())
}

/// Runs one case on one rank and checks this rank's output.
fn run_case<T: Element>(comm: &mut Comm, case: &Case) -> Result<(), String> {
    let (r, n) = (comm.rank() as usize, comm.nranks() as usize);
    let count = count(case, std::mem::size_of::<T>());
    let op = case.op;
    let v = |rank: usize, i: usize| value::<T>(op, rank, i);
    let sentinel = T::from_index(6);
    let root = (n / 2) as u32;
    let err = |e: super::RuntimeError| format!("{case:?}: rank {r}: {e}");
    match case.coll {
        Collective::AllReduce => {
            let input: Vec<T> = (0..count).map(|i| v(r, i)).collect();
            let out = if case.in_place {
                let mut buf = input;
                comm.all_reduce_in_place(&mut buf, op).map_err(err)?;
                buf
            } else {
                let mut out = vec![sentinel; count];
                comm.all_reduce(&input, &mut out, op).map_err(err)?;
                out
            };
            check(case, "out", &out, |i| reference_reduce(op, n, |r| v(r, i)))
        }
        Collective::AllGather => {
            let mut out = vec![sentinel; count * n];
            if case.in_place {
                for i in 0..count {
                    out[r * count + i] = v(r, i);
                }
                comm.all_gather_in_place(&mut out).map_err(err)?;
            } else {
                let input: Vec<T> = (0..count).map(|i| v(r, i)).collect();
                comm.all_gather(&input, &mut out).map_err(err)?;
            }
            check(case, "out", &out, |i| v(i / count.max(1), i % count.max(1)))
        }
        Collective::ReduceScatter => {
            let input: Vec<T> = (0..count * n).map(|i| v(r, i)).collect();
            let out = if case.in_place {
                let mut buf = input;
                comm.reduce_scatter_in_place(&mut buf, op).map_err(err)?;
                buf[r * count..(r + 1) * count].to_vec()
            } else {
                let mut out = vec![sentinel; count];
                comm.reduce_scatter(&input, &mut out, op).map_err(err)?;
                out
            };
            check(case, "out", &out, |i| reference_reduce(op, n, |q| v(q, r * count + i)))
        }
        Collective::Broadcast => {
            let mine: Vec<T> = (0..count).map(|i| if r as u32 == root { v(r, i) } else { sentinel }).collect();
            let out = if case.in_place {
                let mut buf = mine;
                comm.broadcast_in_place(&mut buf, root).map_err(err)?;
                buf
            } else {
                let mut out = vec![sentinel; count];
                comm.broadcast(&mine, &mut out, root).map_err(err)?;
                out
            };
            check(case, "out", &out, |i| v(root as usize, i))
        }
        Collective::Reduce => {
            let input: Vec<T> = (0..count).map(|i| v(r, i)).collect();
            let out = if case.in_place {
                let mut buf = input;
                comm.reduce_in_place(&mut buf, op, root).map_err(err)?;
                buf
            } else {
                let mut out = vec![sentinel; count];
                comm.reduce(&input, &mut out, op, root).map_err(err)?;
                out
            };
            if r as u32 == root {
                check(case, "out", &out, |i| reference_reduce(op, n, |r| v(r, i)))
            } else {
                Ok(())
            }
        }
        Collective::SendRecv => {
            let input: Vec<T> = (0..count).map(|i| v(r, i)).collect();
            let mut out = vec![sentinel; count];
            let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
            let mut g = comm.group();
            // Receive posted first on odd ranks: group semantics must make either order work.
            if r % 2 == 1 {
                g.recv(&mut out, prev as u32).map_err(err)?;
                g.send(&input, next as u32).map_err(err)?;
            } else {
                g.send(&input, next as u32).map_err(err)?;
                g.recv(&mut out, prev as u32).map_err(err)?;
            }
            g.end().map_err(err)?;
            check(case, "out", &out, |i| v(prev, i))
        }
        _ => {
            let input: Vec<T> = (0..count * n).map(|i| v(r, i)).collect();
            let mut out = vec![sentinel; count * n];
            comm.all_to_all(&input, &mut out).map_err(err)?;
            check(case, "out", &out, |i| v(i / count.max(1), r * count + i % count.max(1)))
        }
    }
}

fn dispatch(comm: &mut Comm, case: &Case) -> Result<(), String> {
    let mut env = Env::from_pairs([("NCCL_ALGO", case.algo.as_str()), ("NCCL_PROTO", case.proto.as_str())]);
    if case.coll != Collective::AllReduce || case.algo.is_extension() {
        env = Env::from_pairs([("NCCL_PROTO", case.proto.as_str())]);
    }
    let mut cfg = SelectConfig::from_env(&env, comm.nchannels()).map_err(|e| e.to_string())?;
    // NCCL_ALGO names NCCL's algorithms only: collscope's own is forced, on every channel.
    if case.algo.is_extension() {
        cfg = cfg.forced(Choice { algo: case.algo, proto: case.proto, nchannels: comm.nchannels() });
    }
    comm.set_select_config(cfg);
    match case.dt {
        DataType::I8 => run_case::<i8>(comm, case),
        DataType::U8 => run_case::<u8>(comm, case),
        DataType::I32 => run_case::<i32>(comm, case),
        DataType::U32 => run_case::<u32>(comm, case),
        DataType::I64 => run_case::<i64>(comm, case),
        DataType::U64 => run_case::<u64>(comm, case),
        DataType::F16 => run_case::<f16>(comm, case),
        DataType::F32 => run_case::<f32>(comm, case),
        DataType::F64 => run_case::<f64>(comm, case),
        DataType::Bf16 => run_case::<bf16>(comm, case),
    }
}

/// Runs a group of cases sharing transport, rank count and buffer sizes on one set of communicators.
fn run_group(shm: bool, nranks: u32, big: bool, cases: &[Case]) -> Vec<String> {
    let mut pairs: Vec<(&str, &str)> = vec![("COLLSCOPE_TIMEOUT_S", "60")];
    if big {
        pairs.extend([("NCCL_MIN_NCHANNELS", "3"), ("NCCL_MAX_NCHANNELS", "3")]);
    } else {
        pairs.extend(SMALL_BUFFERS);
    }
    if shm {
        // SHM between threads writes through slots: every destination it may stream is streamed, so each
        // collective checks the streaming stores (`comm::stream`) at every size.
        pairs.extend([("NCCL_P2P_DISABLE", "1"), ("COLLSCOPE_STREAM_STORES", "always")]);
    }
    let opts = CommOptions { env: Env::from_pairs(pairs), net: None, name: None };
    let comms = match Comm::init_threads(nranks, opts) {
        Ok(c) => c,
        Err(e) => return vec![format!("init of {nranks} ranks (shm {shm}) failed: {e}")],
    };
    let want = if shm { Transport::Shm } else { Transport::P2p };
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .map(|mut comm| {
                s.spawn(move || {
                    let mut errors = Vec::new();
                    for case in cases {
                        if let Err(e) = dispatch(&mut comm, case) {
                            let fatal = e.contains("timed out") || e.contains("aborted");
                            errors.push(e);
                            if fatal {
                                break;
                            }
                        }
                    }
                    for c in comm.records().connections() {
                        if c.transport != want {
                            errors.push(format!(
                                "rank {} used {} where {want} was expected: {c:?}",
                                comm.rank(),
                                c.transport
                            ));
                        }
                    }
                    errors
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|_| vec!["a rank thread panicked".into()])).collect()
    })
}

#[test]
fn pairwise_rows_cover_every_feasible_pair_and_respect_constraints() {
    let rows = pairwise(&DIMS, &valid, 0x5eed);
    let covered: HashSet<Pair> = rows.iter().flat_map(|r| pairs_of(r).collect::<Vec<_>>()).collect();
    let feasible = feasible_pairs(&DIMS, &valid);
    assert!(feasible.is_subset(&covered));
    assert!(rows.iter().all(|r| valid(&r.iter().map(|v| Some(*v)).collect::<Vec<_>>())));
    // Far fewer rows than the product (7 * 10 * 5 * 3 * 3 * 2 * 6 * 5 * 2 = 378000).
    assert!(rows.len() < 150, "{} rows", rows.len());
    assert!(!valid(&[Some(1), None, None, Some(1), None, None, None, None, None]));
}

#[test]
fn correctness_matrix() {
    let mut groups: BTreeMap<(bool, u32, bool), Vec<Case>> = BTreeMap::new();
    for case in all_cases() {
        groups.entry((case.shm, case.nranks, case.size == Size::MultiMb)).or_default().push(case);
    }
    let keys: Vec<_> = groups.keys().copied().collect();
    let errors: Vec<String> = std::thread::scope(|s| {
        // Two groups at a time: enough to keep both cores busy without drowning them in rank threads.
        let mut errors = Vec::new();
        for pair in keys.chunks(2) {
            let handles: Vec<_> = pair
                .iter()
                .map(|k| {
                    let cases = &groups[k];
                    let k = *k;
                    s.spawn(move || run_group(k.0, k.1, k.2, cases))
                })
                .collect();
            for h in handles {
                errors.extend(h.join().unwrap_or_else(|_| vec!["a group panicked".into()]));
            }
        }
        errors
    });
    assert!(errors.is_empty(), "{} failures, first ones:\n{}", errors.len(), errors[..errors.len().min(15)].join("\n"));
}
