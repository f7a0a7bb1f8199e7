//! Reader throughput on one core, overall and per line kind.
//!
//! The corpus is built from real logs when `../shared/fixtures/nccl-logs` is beside the workspace (the logs users
//! post, concatenated until the corpus reaches its size: their line mix is the "real mix"), and from collscope's
//! own logger output otherwise (64 ranks initialising communicators, then COLL and TUNING lines). The per-kind rows
//! read corpora of one kind of line each, taken from the same logs plus the fixtures in `tests/data` (which hold
//! the topology, tuning and proxy lines the real excerpts lack).
//!
//! `cargo bench -p collscope-logreader` prints one row per corpus: MB/s on one core (by this thread's CPU time, so
//! waiting for a core on a shared machine does not count), the median of COLLSCOPE_BENCH_RUNS runs (default 3).
//! COLLSCOPE_BENCH_MB sizes the mix (default 256), COLLSCOPE_BENCH_KIND_MB each kind (default 16).
//! COLLSCOPE_BENCH_DIR keeps the corpora there (to read them with another build: COLLSCOPE_BENCH_FILE=path reads
//! one file and prints its row only). With COLLSCOPE_BENCH_FILE, COLLSCOPE_BENCH_SNAPSHOT=path also writes the
//! snapshot read as JSON: a speed change must leave it byte for byte the same.

use collscope_logreader::envelope::{self, Level, Line};
use collscope_logreader::{input, Options, Reader};
use collscope_model::Snapshot;
use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The kinds of line the table reports, in its order.
const KINDS: &[&str] = &[
    "connection",
    "proxy",
    "comm/init",
    "env",
    "net",
    "topology",
    "graph",
    "tuning",
    "coll",
    "warn",
    "other nccl",
    "non-nccl",
];

/// Sorts a line by what it says (the bench's own coarse grouping, not the reader's parser).
fn kind(line: &str) -> &'static str {
    let env = match envelope::split(line) {
        Line::Other { .. } => return "non-nccl",
        Line::Nccl(e) => e,
    };
    if env.level == Level::Warn {
        return "warn";
    }
    let m = env.msg.trim_start();
    let starts = |p: &[&str]| p.iter().any(|x| m.starts_with(x));
    if (starts(&["Channel ", "Ring ", "CollNet "]) && m.contains(" via ")) || starts(&["Connected"]) {
        "connection"
    } else if m.contains("roxy") || starts(&["sendConnect", "recvConnect", "Received and initiated"]) {
        "proxy"
    } else if starts(&["NCCL_"]) {
        "env"
    } else if m.contains(": opCount ") {
        "coll"
    } else if m.contains(" |") || m.contains("Bytes -> Algo") || starts(&["threadThresholds", "Enabled NCCL"]) {
        "tuning"
    } else if starts(&["===", "+ ", "CPU/", "GPU/", "PCI/", "NIC/", "NVS/"])
        || m.strip_prefix("NET/").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    {
        "topology"
    } else if starts(&["Pattern ", "Trees", "Tree ", "Channel ", "Ring ", "NVLS Trees"])
        || m.as_bytes().first().is_some_and(u8::is_ascii_digit) && m.contains(" : ")
    {
        "graph"
    } else if starts(&["NET/", "Using network", "GPU Direct RDMA", "TUNER/", "PROFILER/", "Bootstrap"]) {
        "net"
    } else if starts(&[
        "comm ",
        "ncclComm",
        "Init ",
        "NCCL version",
        "Setting affinity",
        "P2P Chunksize",
        "UDS:",
        "Launch",
    ]) || m.contains(" coll channels")
    {
        "comm/init"
    } else {
        "other nccl"
    }
}

fn env_num(name: &str, default: u64) -> u64 {
    collscope_debug::params::process_var(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The logs of a directory (`*.log`), each as its lines.
fn logs_in(dir: &Path) -> Vec<Vec<String>> {
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    paths.retain(|p| p.extension().is_some_and(|e| e == "log"));
    paths.sort();
    paths
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .map(|b| String::from_utf8_lossy(&b).lines().map(str::to_string).collect())
        .collect()
}

/// The real logs beside the workspace, if there.
fn shared_logs() -> Option<Vec<Vec<String>>> {
    let dir = collscope_testkit::fixtures("the real-log mix (collscope's own output instead)")?;
    Some(logs_in(&dir)).filter(|l| !l.is_empty())
}

/// Writes `lines` again and again until `target` bytes.
fn write_repeated(path: &Path, lines: &[&str], target: u64) -> std::io::Result<u64> {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut written = 0u64;
    while written < target && !lines.is_empty() {
        for l in lines {
            out.write_all(l.as_bytes())?;
            out.write_all(b"\n")?;
            written += l.len() as u64 + 1;
        }
    }
    out.flush()?;
    Ok(written)
}

/// collscope's own logger output (`debug::format_line`): 64 ranks on 8 hosts that initialise communicators and
/// then run collectives with COLL and TUNING lines, the mix of a long training job at NCCL_DEBUG=INFO.
mod own {
    use collscope_debug::{format_line, Level, Origin};
    use collscope_model::lines;

    const RANKS: u32 = 64;
    const PER_HOST: u32 = 8;

    fn info(out: &mut Vec<String>, rank: u32, msg: &str) {
        let origin = Origin { host: format!("gpu-node{:02}", rank / PER_HOST), pid: 40_000 + rank };
        let dev = (rank % PER_HOST) as i32;
        out.push(format_line(Level::Info, &origin, 50_000 + rank, dev, ("", 0), None, 0.0, msg));
    }

    fn init(out: &mut Vec<String>, comm: u64) {
        for r in 0..RANKS {
            let dev = r % PER_HOST;
            let c = format!("0x{:x}", comm + r as u64);
            let bus = 0x18 + dev * 0x10;
            info(out, r, "NCCL version 2.28.9+cuda12.9");
            info(out, r, "Bootstrap: Using ib0:10.0.0.1<0>");
            info(
                out,
                r,
                "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [RO]; OOB ib0:10.0.0.1<0>",
            );
            info(out, r, &format!("ncclCommInitRank comm {c} rank {r} nranks {RANKS} cudaDev {dev} nvmlDev {dev} busId {bus:x}000 commId 0x{comm:x} - Init START"));
            let nodes = RANKS / PER_HOST;
            info(
                out,
                r,
                &format!(
                    "comm {c} rank {r} nRanks {RANKS} nNodes {nodes} localRanks {PER_HOST} localRank {dev} MNNVL 0"
                ),
            );
            let (next, prev) = ((r + 1) % RANKS, (r + RANKS - 1) % RANKS);
            for ch in 0..16 {
                info(out, r, &lines::ring_line(ch, prev, r, next));
            }
            let tree = |channel| lines::TreeEntry { channel, rank: r, up: prev as i32, down: [next as i32, -1, -1] };
            info(out, r, &lines::trees_line(&[tree(0), tree(1)]));
            for ch in 0..16 {
                if next.is_multiple_of(PER_HOST) {
                    let nic = ch % 4;
                    info(
                        out,
                        r,
                        &format!("Channel {ch:02}/0 : {r}[{dev}] -> {next}[0] [send] via NET/IB/{nic}/GDRDMA"),
                    );
                    let pd = prev % PER_HOST;
                    info(
                        out,
                        r,
                        &format!("Channel {ch:02}/0 : {prev}[{pd}] -> {r}[{dev}] [receive] via NET/IB/{nic}/GDRDMA"),
                    );
                } else {
                    let nd = next % PER_HOST;
                    info(out, r, &format!("Channel {ch:02}/0 : {r}[{dev}] -> {next}[{nd}] via P2P/CUMEM/read"));
                }
            }
            info(out, r, "Connected all rings, use ring PXN 0 GDR 1");
            info(out, r, "Connected all trees");
            info(out, r, "threadThresholds 8/8/64 | 512/8/64 | 512 | 512");
            info(
                out,
                r,
                "16 coll channels, 16 collnet channels, 0 nvls channels, 16 p2p channels, 2 p2p channels per peer",
            );
            info(out, r, &format!("ncclCommInitRank comm {c} rank {r} nranks {RANKS} cudaDev {dev} nvmlDev {dev} busId {bus:x}000 commId 0x{comm:x} - Init COMPLETE"));
        }
    }

    /// One communicator's init and 2000 collectives: repeated, it is a long job's log.
    pub(crate) fn lines() -> Vec<String> {
        let comm = 0x7f00_0000_0000u64;
        let mut out = Vec::new();
        init(&mut out, comm);
        for call in 0..2000u64 {
            let count = 1u64 << (call % 24);
            let bytes = count * 4;
            let (algo, proto) = if bytes < 65536 { ("TREE", "LL") } else { ("RING", "SIMPLE") };
            for r in 0..RANKS {
                let c = format!("0x{:x}", comm + r as u64);
                info(&mut out, r, &format!("AllReduce: opCount {call:x} sendbuff 0x7f3a{r:04x}0000 recvbuff 0x7f3b{r:04x}0000 count {count} datatype 7 op 0 root 0 comm {c} [nranks={RANKS}] stream 0x5581{r:04x}"));
                info(
                    &mut out,
                    r,
                    &format!("AllReduce: {bytes} Bytes -> Algo {algo} proto {proto} channel{{Lo..Hi}}={{0..15}}"),
                );
            }
        }
        out
    }
}

/// Peak resident memory of this process in MB (`VmHWM`), where Linux has it.
fn peak_rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok());
    kb.unwrap_or(0.0) / 1024.0
}

/// CPU time of this thread, from `/proc/thread-self/schedstat` (nanoseconds on a CPU), where Linux has it.
fn cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(s.split_whitespace().next()?.parse::<f64>().ok()? / 1e9)
}

/// Reads `path` once: (MB/s on one core, lines, snapshot summary), and the snapshot.
fn read_once(path: &Path) -> std::io::Result<(f64, u64, String, Snapshot)> {
    let size = std::fs::metadata(path)?.len();
    let cpu0 = cpu_seconds();
    let wall = Instant::now();
    let mut reader = Reader::new(Options::default());
    reader.read("bench.log", input::open(path).map_err(std::io::Error::other)?).map_err(std::io::Error::other)?;
    let snap = reader.finish();
    let secs = cpu_seconds().zip(cpu0).map_or(wall.elapsed().as_secs_f64(), |(b, a)| b - a);
    let stats = snap.log.as_ref().map(|l| l.stats.clone()).unwrap_or_default();
    let summary = format!(
        "{} ranks, {} connections, {} decisions, {} ops, {} unparsed",
        snap.nranks.map_or("?".into(), |n| n.to_string()),
        snap.connections.len(),
        snap.decisions.len(),
        snap.ops.len(),
        stats.unparsed_nccl_lines
    );
    Ok((size as f64 / 1e6 / secs.max(1e-9), stats.lines, summary, snap))
}

/// Reads `path` `runs` times; the median rate, and the last run's lines, summary and snapshot.
fn measure(path: &Path, runs: u64) -> std::io::Result<(f64, u64, String, Snapshot)> {
    let mut rates = Vec::new();
    let mut last = None;
    for _ in 0..runs.max(1) {
        let (rate, lines, summary, snap) = read_once(path)?;
        rates.push(rate);
        last = Some((lines, summary, snap));
    }
    rates.sort_by(f64::total_cmp);
    let (lines, summary, snap) = last.ok_or_else(|| std::io::Error::other("no run"))?;
    Ok((rates[rates.len() / 2], lines, summary, snap))
}

fn main() -> std::io::Result<()> {
    // `cargo test --benches` runs bench binaries with `--bench` absent: stay quick there.
    if !std::env::args().any(|a| a == "--bench") {
        return Ok(());
    }
    let runs = env_num("COLLSCOPE_BENCH_RUNS", 3);
    if let Some(file) = collscope_debug::params::process_path("COLLSCOPE_BENCH_FILE") {
        let (rate, lines, summary, snap) = measure(Path::new(&file), runs)?;
        println!("{}: {rate:.0} MB/s on one core ({lines} lines; {summary})", Path::new(&file).display());
        if let Some(out) = collscope_debug::params::process_path("COLLSCOPE_BENCH_SNAPSHOT") {
            std::fs::write(out, serde_json::to_vec_pretty(&snap)?)?;
        }
        return Ok(());
    }
    let keep = collscope_debug::params::process_path("COLLSCOPE_BENCH_DIR").map(PathBuf::from);
    let dir = match &keep {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("collscope-logreader-bench-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    let ours = logs_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data"));
    let (mix_name, mix, kind_sources) = match shared_logs() {
        Some(real) => {
            let mix: Vec<String> = real.iter().flatten().cloned().collect();
            ("real logs (../shared/fixtures/nccl-logs)", mix, real.into_iter().chain(ours).flatten().collect())
        }
        None => {
            let own = own::lines();
            (
                "collscope's own output (no ../shared)",
                own.clone(),
                own.into_iter().chain(ours.into_iter().flatten()).collect::<Vec<_>>(),
            )
        }
    };
    let mut by_kind: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for l in &kind_sources {
        by_kind.entry(kind(l)).or_default().push(l);
    }
    let mut mix_share: BTreeMap<&str, u64> = BTreeMap::new();
    for l in &mix {
        *mix_share.entry(kind(l)).or_default() += l.len() as u64 + 1;
    }
    let mix_bytes: u64 = mix_share.values().sum();

    let kind_mb = env_num("COLLSCOPE_BENCH_KIND_MB", 16);
    println!("logreader throughput, median of {runs} runs, MB/s on one core (CPU time of the reading thread)");
    println!("{:<12} {:>9} {:>9} {:>10}  what", "kind", "mix share", "MB/s", "lines");
    for k in KINDS {
        let Some(lines) = by_kind.get(k) else { continue };
        let path = dir.join(format!("kind-{}.log", k.replace(['/', ' '], "-")));
        write_repeated(&path, lines, kind_mb << 20)?;
        let (rate, n, _, _) = measure(&path, runs)?;
        let share = 100.0 * *mix_share.get(k).unwrap_or(&0) as f64 / mix_bytes.max(1) as f64;
        println!("{k:<12} {share:>8.1}% {rate:>9.0} {n:>10}  {} distinct lines", lines.len());
    }
    // The mix, small then large: peak memory must not grow with the input.
    let mix_refs: Vec<&str> = mix.iter().map(String::as_str).collect();
    let mut rss = Vec::new();
    for mb in [env_num("COLLSCOPE_BENCH_MB", 256) / 4, env_num("COLLSCOPE_BENCH_MB", 256)] {
        let path = dir.join(format!("mix-{mb}MB.log"));
        let t = Instant::now();
        let size = write_repeated(&path, &mix_refs, mb << 20)?;
        eprintln!("generated {:.0} MB in {:.1} s at {}", size as f64 / 1e6, t.elapsed().as_secs_f64(), path.display());
        let (rate, n, summary, _) = measure(&path, runs)?;
        rss.push(peak_rss_mb());
        println!(
            "{:<12} {:>8.1}% {rate:>9.0} {n:>10}  {mix_name}, {:.0} MB: {summary}",
            "mix",
            100.0,
            size as f64 / 1e6
        );
    }
    println!("peak RSS (VmHWM) after the small mix {:.0} MB, after the large one {:.0} MB", rss[0], rss[1]);
    if keep.is_none() {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}
