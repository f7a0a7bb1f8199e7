//! What an NCCL profiler plugin costs collscope's runtime, measured inside one process: two sets of
//! communicators on the same ranks, one with collscope's plugin (`NCCL_PROFILER_PLUGIN`) and one whose
//! environment says `none`, run AllReduce in alternating rounds (the order flips every round), so the
//! machine's drift hits both alike. Ranks are threads over NET/Socket (P2P and SHM off), so proxy operations
//! and steps are profiled too; the plugin's own threads (drain, telemetry server) run as they do for a user.
//! Prints, per size, the median round of each, the median of the rounds' with/without ratios and the middle
//! half of those ratios (how far one round can be trusted).
//!
//! Ranks default to 2, one per core on a 2-core machine: with more ranks than cores, rounds of the same
//! communicators against each other (`--control`) already spread from 0.65 to 1.22 at 1 MiB, too wide to see
//! a few percent; pinned, they stay within a few percent.
//!
//! `cargo bench --bench profiler_overhead [-- --nranks N --rounds N --plugin PATH --control --bytes N...]`. The
//! plugin defaults to the `libcollscope_profiler.so` cargo builds beside this bench (a dev-dependency);
//! `--control` gives both sets `none`, the method's own noise; `--bytes` (repeatable) replaces 8 B and 1 MiB.

mod common;

use collscope_debug::env::Env;
use collscope_runtime::comm::affinity;
use collscope_runtime::comm::{job, CommOptions};
use common::{quantile, run};
use std::path::PathBuf;

struct Args {
    nranks: u32,
    rounds: usize,
    plugin: PathBuf,
    control: bool,
    /// Message sizes, bytes.
    sizes: Vec<usize>,
}

fn args() -> Args {
    let beside = std::env::current_exe().ok().and_then(|e| Some(e.parent()?.join("libcollscope_profiler.so")));
    let mut a = Args { nranks: 2, rounds: 21, plugin: beside.unwrap_or_default(), control: false, sizes: vec![] };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().unwrap_or_else(|| panic!("{name} needs a value"));
        match flag.as_str() {
            // What `cargo bench` passes to every bench.
            "--bench" => {}
            "--nranks" => a.nranks = value("--nranks").parse().expect("--nranks: a number of ranks"),
            "--rounds" => a.rounds = value("--rounds").parse().expect("--rounds: a number of rounds"),
            "--plugin" => a.plugin = value("--plugin").into(),
            "--control" => a.control = true,
            "--bytes" => a.sizes.push(value("--bytes").parse().expect("--bytes: a size in bytes")),
            other => panic!(
                "unknown argument {other}: expected --nranks N, --rounds N, --plugin PATH, --control or --bytes N"
            ),
        }
    }
    if a.sizes.is_empty() {
        a.sizes = vec![8, 1 << 20];
    }
    assert!(a.nranks >= 2 && a.rounds >= 1, "--nranks must be at least 2 and --rounds at least 1");
    let shown = a.plugin.display();
    assert!(a.plugin.is_file(), "no plugin at {shown}: build it (cargo build -p collscope-profiler) or pass --plugin");
    a
}

fn main() {
    let a = args();
    let base = Env::from_process().with("NCCL_P2P_DISABLE", "1").with("NCCL_SHM_DISABLE", "1");
    let comms = |plugin: &str, name: &str| {
        let opts = CommOptions { env: base.with("NCCL_PROFILER_PLUGIN", plugin), net: None, name: Some(name.into()) };
        job::init_threads(a.nranks, opts).expect("communicators")
    };
    // The first communicator that names the plugin loads it for the process; `none` keeps the others off it.
    let plugin = if a.control { "none".to_string() } else { a.plugin.display().to_string() };
    let mut with = comms(&plugin, "with");
    let mut without = comms("none", "without");
    let cpus = affinity::plan(&base, a.nranks).expect("COLLSCOPE_BIND");
    println!("# {} ranks as threads over NET/Socket, {} rounds per size, plugin {plugin}", a.nranks, a.rounds);
    println!("{:>10} {:>14} {:>14} {:>8} {:>16}", "size", "without (us)", "with (us)", "ratio", "middle half");
    for &bytes in &a.sizes {
        let elems = (bytes / 4).max(1);
        // Small calls are many a round already; large ones need longer rounds to average their steps.
        let budget = if bytes < 65536 { 0.3 } else { 0.5 };
        // Warm up both (connections, caches) and size the rounds to about `budget` seconds each.
        run(&mut with, &cpus, elems, 20);
        let per_call = run(&mut without, &cpus, elems, 50);
        let iters = ((budget / per_call) as usize).clamp(20, 200_000);
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for round in 0..a.rounds {
            if round % 2 == 0 {
                off.push(run(&mut without, &cpus, elems, iters));
                on.push(run(&mut with, &cpus, elems, iters));
            } else {
                on.push(run(&mut with, &cpus, elems, iters));
                off.push(run(&mut without, &cpus, elems, iters));
            }
        }
        let mut ratios: Vec<f64> = on.iter().zip(&off).map(|(w, o)| w / o).collect();
        let (lo, mid, hi) = (quantile(&mut ratios, 0.25), quantile(&mut ratios, 0.5), quantile(&mut ratios, 0.75));
        let (off, on) = (quantile(&mut off, 0.5) * 1e6, quantile(&mut on, 0.5) * 1e6);
        println!("{bytes:>10} {off:>14.2} {on:>14.2} {mid:>8.3} {:>16}   ({iters} calls a round)", {
            format!("{lo:.3}-{hi:.3}")
        });
    }
}
