//! The reference programs bench/compare.sh runs beside collscope (examples, built by `cargo test`): their tables
//! are whole, their results right, and their bad arguments named.

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    // Examples land in `examples/` beside the binaries of the same profile.
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_collscope"));
    let path = bin.parent().expect("the binary's directory").join("examples").join(name);
    assert!(path.exists(), "{} is not built: `cargo test` builds it (run it without `--test`)", path.display());
    path
}

fn run(name: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(example(name));
    cmd.args(args).env_remove("NCCL_BUFFSIZE").envs(env.iter().copied());
    let out = collscope_testkit::output(&mut cmd, collscope_testkit::DEADLINE);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// The rows of an anchor-style table (size count type op time_us algbw busbw wrong): (size, time_us, wrong).
fn rows(out: &str) -> Vec<(u64, f64, u64)> {
    out.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 8, "row has the anchors' 8 columns: {l}");
            (f[0].parse().expect("size"), f[4].parse().expect("time"), f[7].parse().expect("wrong"))
        })
        .collect()
}

#[test]
fn plain_shm_ring_reduces_right_at_every_size_even_below_one_element_a_rank() {
    // 3 ranks: chunks of unequal length; 4 and 8 bytes leave ranks with nothing to send; with NCCL_BUFFSIZE's
    // 64 KiB slots, 8 MiB spans eleven of the ring's loops (each 4 slots a rank).
    let (ok, out, err) = run("shm_ring", &["3", "4", "8388608", "2"], &[("NCCL_BUFFSIZE", "524288")]);
    assert!(ok, "{out}\n{err}");
    let r = rows(&out);
    assert_eq!(r.iter().map(|&(s, _, _)| s).collect::<Vec<_>>(), (2..=23).map(|k| 1u64 << k).collect::<Vec<_>>());
    assert!(r.iter().all(|&(_, us, wrong)| wrong == 0 && us > 0.0), "{out}");
    assert!(out.starts_with("# plain ring over shared memory, 3 rank processes, 8 slots of 64 KiB, median of 2\n"));
}

#[test]
fn tcp_bound_moves_a_ring_allreduce_of_bytes_with_and_without_its_work() {
    for flags in [&[][..], &["reduce", "ring"][..]] {
        let args: Vec<&str> = ["2", "1048576", "2097152", "1"].iter().chain(flags).copied().collect();
        let (ok, out, err) = run("tcp_bound", &args, &[]);
        assert!(ok, "{args:?}: {out}\n{err}");
        let r = rows(&out);
        assert_eq!(r.iter().map(|&(s, _, _)| s).collect::<Vec<_>>(), [1 << 20, 2 << 20], "{out}");
        assert!(r.iter().all(|&(_, us, _)| us > 0.0), "{out}");
    }
}

#[test]
fn bad_arguments_are_named_with_what_was_expected() {
    for (name, args, env, says) in [
        ("shm_ring", &["1", "4", "8"][..], None, "expected 2 <= NRANKS <= 1024"),
        ("shm_ring", &["4", "6", "8"][..], None, "MINBYTES a positive multiple of 4"),
        ("shm_ring", &["four", "4", "8"][..], None, "shm_ring: NRANKS must be a whole number, got 'four'"),
        ("shm_ring", &["4"][..], None, "usage: shm_ring NRANKS MINBYTES MAXBYTES [ITERS]"),
        ("shm_ring", &["2", "4", "8"][..], Some(("NCCL_BUFFSIZE", "1000")), "NCCL_BUFFSIZE"),
        ("shm_ring", &["2", "4", "8"][..], Some(("COLLSCOPE_BIND", "every")), "COLLSCOPE_BIND"),
        ("tcp_bound", &["2", "4", "8", "1", "fast"][..], None, "usage: tcp_bound"),
    ] {
        let (ok, out, err) = run(name, args, env.as_slice());
        assert!(!ok && err.contains(says), "{name} {args:?} {env:?}: {out}\n{err}");
    }
}
