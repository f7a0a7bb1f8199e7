//! Reader throughput on one core over a large log in collscope's own logger format (`debug::format_line`):
//! 64 ranks on 8 hosts that initialise communicators (connections, rings, trees, tuning) and then run many
//! collectives with COLL and TUNING lines, like a long training job at NCCL_DEBUG=INFO with COLL,TUNING.
//!
//! `cargo bench -p collscope-logreader` writes ~1 GB to a temporary file (COLLSCOPE_BENCH_MB to change it),
//! reads it once and prints MB/s.

use collscope_debug::{format_line, Level, Origin};
use collscope_logreader::{input, Options, Reader};
use std::io::{BufWriter, Write};
use std::time::Instant;

const RANKS: u32 = 64;
const PER_HOST: u32 = 8;

fn origin(rank: u32) -> Origin {
    Origin { host: format!("gpu-node{:02}", rank / PER_HOST), pid: 40_000 + rank }
}

fn info(out: &mut impl Write, rank: u32, msg: &str) -> std::io::Result<()> {
    let dev = (rank % PER_HOST) as i32;
    let line = format_line(Level::Info, &origin(rank), 50_000 + rank, dev, ("", 0), None, 0.0, msg);
    writeln!(out, "{line}")
}

fn init(out: &mut impl Write, comm: u64) -> std::io::Result<()> {
    for r in 0..RANKS {
        let dev = r % PER_HOST;
        let c = format!("0x{:x}", comm + r as u64);
        info(out, r, "NCCL version 2.28.9+cuda12.9")?;
        info(out, r, "Bootstrap: Using ib0:10.0.0.1<0>")?;
        info(
            out,
            r,
            "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [RO]; OOB ib0:10.0.0.1<0>",
        )?;
        info(out, r, &format!("ncclCommInitRank comm {c} rank {r} nranks {RANKS} cudaDev {dev} nvmlDev {dev} busId {:x}000 commId 0x{comm:x} - Init START", 0x18 + dev * 0x10))?;
        info(
            out,
            r,
            &format!(
                "comm {c} rank {r} nRanks {RANKS} nNodes {} localRanks {PER_HOST} localRank {dev} MNNVL 0",
                RANKS / PER_HOST
            ),
        )?;
        let next = (r + 1) % RANKS;
        let prev = (r + RANKS - 1) % RANKS;
        for ch in 0..16 {
            info(out, r, &format!("Ring {ch:02} : {prev} -> {r} -> {next}"))?;
        }
        info(out, r, &format!("Trees [0] {}/-1/-1->{r}->{} [1] {}/-1/-1->{r}->{}", next, prev, next, prev))?;
        for ch in 0..16 {
            if next.is_multiple_of(PER_HOST) {
                info(
                    out,
                    r,
                    &format!("Channel {ch:02}/0 : {r}[{dev}] -> {next}[0] [send] via NET/IB/{}/GDRDMA", ch % 4),
                )?;
                info(
                    out,
                    r,
                    &format!(
                        "Channel {ch:02}/0 : {prev}[{}] -> {r}[{dev}] [receive] via NET/IB/{}/GDRDMA",
                        prev % PER_HOST,
                        ch % 4
                    ),
                )?;
            } else {
                info(
                    out,
                    r,
                    &format!("Channel {ch:02}/0 : {r}[{dev}] -> {next}[{}] via P2P/CUMEM/read", next % PER_HOST),
                )?;
            }
        }
        info(out, r, "Connected all rings, use ring PXN 0 GDR 1")?;
        info(out, r, "Connected all trees")?;
        info(out, r, "threadThresholds 8/8/64 | 512/8/64 | 512 | 512")?;
        info(
            out,
            r,
            "16 coll channels, 16 collnet channels, 0 nvls channels, 16 p2p channels, 2 p2p channels per peer",
        )?;
        info(out, r, &format!("ncclCommInitRank comm {c} rank {r} nranks {RANKS} cudaDev {dev} nvmlDev {dev} busId {:x}000 commId 0x{comm:x} - Init COMPLETE", 0x18 + dev * 0x10))?;
    }
    Ok(())
}

fn generate(path: &std::path::Path, target: u64) -> std::io::Result<u64> {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut written = 0u64;
    let mut call = 0u64;
    let comm = 0x7f00_0000_0000u64;
    while written < target {
        if call.is_multiple_of(20_000) {
            init(&mut out, comm + call)?;
        }
        // One collective, printed by every rank: COLL then TUNING.
        let count = 1u64 << (call % 24);
        let bytes = count * 4;
        let (algo, proto) = if bytes < 65536 { ("Tree", "LL") } else { ("Ring", "Simple") };
        for r in 0..RANKS {
            let c = format!("0x{:x}", comm + (call / 20_000) * 20_000 + r as u64);
            let coll = format!(
                "AllReduce: opCount {call:x} sendbuff 0x7f3a{r:04x}0000 recvbuff 0x7f3b{r:04x}0000 count {count} datatype 7 op 0 root 0 comm {c} [nranks={RANKS}] stream 0x5581{r:04x}"
            );
            info(&mut out, r, &coll)?;
            info(
                &mut out,
                r,
                &format!("AllReduce: {bytes} Bytes -> Algo {algo} proto {proto} channel{{Lo..Hi}}={{0..15}}"),
            )?;
            written += 2 * 170;
        }
        call += 1;
    }
    out.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

/// Peak resident memory of this process in MB (`VmHWM`), where Linux has it.
fn peak_rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = s.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// CPU time of this thread, from `/proc/thread-self/schedstat` (nanoseconds on a CPU), where Linux has it.
fn cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(s.split_whitespace().next()?.parse::<f64>().ok()? / 1e9)
}

fn main() -> std::io::Result<()> {
    // `cargo test --benches` runs bench binaries with `--bench` absent: stay quick there.
    if !std::env::args().any(|a| a == "--bench") {
        return Ok(());
    }
    let mb: u64 = std::env::var("COLLSCOPE_BENCH_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    // COLLSCOPE_BENCH_FILE reads (and keeps) an existing log instead, e.g. for profiling.
    let given = std::env::var_os("COLLSCOPE_BENCH_FILE").map(std::path::PathBuf::from);
    let path = given
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("collscope-logreader-bench-{}.log", std::process::id())));
    let size = if given.is_some() && path.exists() {
        std::fs::metadata(&path)?.len()
    } else {
        let t = Instant::now();
        let size = generate(&path, mb << 20)?;
        eprintln!("generated {:.0} MB in {:.1} s at {}", size as f64 / 1e6, t.elapsed().as_secs_f64(), path.display());
        size
    };
    let cpu0 = cpu_seconds();
    let t = Instant::now();
    let mut reader = Reader::new(Options::default());
    let result = reader.read("bench.log", input::open(&path).map_err(std::io::Error::other)?);
    let snap = reader.finish();
    let wall = t.elapsed().as_secs_f64();
    // On a shared machine wall time includes waiting for a core: rate by the CPU time this thread used.
    let secs = cpu_seconds().zip(cpu0).map_or(wall, |(b, a)| b - a);
    if given.is_none() {
        std::fs::remove_file(&path)?;
    }
    result.map_err(std::io::Error::other)?;
    let stats = snap.log.as_ref().map(|l| l.stats.clone()).unwrap_or_default();
    println!(
        "logreader throughput: {:.0} MB in {secs:.2} s of CPU ({wall:.2} s wall) = {:.0} MB/s on one core ({} lines, {:.2} M lines/s; {} ranks, {} connections, {} decisions, {} unparsed; peak RSS {:.0} MB)",
        size as f64 / 1e6,
        size as f64 / 1e6 / secs,
        stats.lines,
        stats.lines as f64 / 1e6 / secs,
        snap.nranks.unwrap_or(0),
        snap.connections.len(),
        snap.decisions.len(),
        stats.unparsed_nccl_lines,
        peak_rss_mb().unwrap_or(0.0)
    );
    Ok(())
}
