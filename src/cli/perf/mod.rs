//! `collscope perf <collective>`: nccl-tests' benchmarks on collscope's runtime, with nccl-tests' flags, table
//! (byte for byte), `-J` JSON and bus bandwidth (NVIDIA/nccl-tests `src/common.cu`, `src/util.cu`).

mod coll;
mod format;
mod gpu;
mod json;

use super::ranks::{self, Job, LaunchMode, Rank, TransportChoice};
use anyhow::{bail, Context, Result};
use clap::Args;
use coll::{count_wrong, expected, Bench, Buffers, Counts, Windows};
use collscope_kernels::Element;
use collscope_model::{DataType, RedOp};
use collscope_runtime::{Bootstrap, Comm};
use format::{c_g, float_str};
use json::J;
use std::io::Write;
use std::time::Instant;

/// `NCCL_VERSION_CODE` of the NCCL release collscope models (2.28.9).
const NCCL_VERSION_CODE: u32 = 22809;

#[derive(Debug, Args)]
pub(crate) struct PerfArgs {
    /// The benchmark, as nccl-tests names its programs (without `_perf`).
    #[arg(value_enum)]
    pub bench: Bench,
    /// Smallest size in bytes (K, M, G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "32M", value_parser = parse_size)]
    pub min_bytes: usize,
    /// Largest size in bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "32M", value_parser = parse_size)]
    pub max_bytes: usize,
    /// Size increment when no factor is given.
    #[arg(short = 'i', long = "stepbytes", default_value = "1M", value_parser = parse_size)]
    pub step_bytes: usize,
    /// Size multiplication factor.
    #[arg(short = 'f', long = "stepfactor")]
    pub step_factor: Option<usize>,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
    /// Untimed warmup iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: usize,
    /// Check results (1) or not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: usize,
    /// Data type.
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub datatype: DataType,
    /// Reduction op.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: RedOp,
    /// Root rank of Broadcast and Reduce.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: u32,
    /// Operations aggregated per timed iteration.
    #[arg(short = 'm', long = "agg_iters", default_value_t = 1)]
    pub agg_iters: usize,
    /// Barrier after each operation (1).
    #[arg(short = 'z', long = "blocking", default_value_t = 0)]
    pub blocking: usize,
    /// Write nccl-tests' JSON report to this file.
    #[arg(short = 'J', long = "output_file")]
    pub json: Option<String>,
    /// Ranks this process starts (ignored when a launcher started this process). `-g` is nccl-tests' GPUs
    /// per thread: each of them is one rank here, so `perf all_reduce -g 4` runs 4 ranks.
    #[arg(short = 'g', long = "nranks", default_value_t = 1)]
    pub nranks: u32,
    /// nccl-tests' threads per process, each driving `-g` GPUs: here the process starts `-t` times `-g` ranks.
    #[arg(short = 't', long = "nthreads", default_value_t = 1)]
    pub threads: u32,
    #[arg(long, value_enum, default_value = "threads")]
    pub launch: LaunchMode,
    #[arg(long, value_enum, default_value = "auto")]
    pub transport: TransportChoice,
    /// Buffers in host memory or on GPUs (all_reduce; ranks of this process, see `collscope perf --help`).
    #[arg(long, value_enum, default_value = "host")]
    pub memory: gpu::Memory,
    /// Buffer registration: 0 none, 2 symmetric (shared-memory windows registered by every rank, which SHM
    /// reads and writes in place). nccl-tests' 1 (local registration) has no host-memory counterpart here.
    #[arg(short = 'R', long = "local_register", default_value_t = 0, value_parser = parse_register)]
    pub register: u8,
}

/// `-R`: 0 or 2 (nccl-tests' `SYMMETRIC_REGISTER`).
fn parse_register(s: &str) -> Result<u8, String> {
    match s.trim() {
        "0" => Ok(0),
        "2" => Ok(2),
        "1" => Err("'1' (local registration) is not available for host memory: use 2 (symmetric windows)".into()),
        _ => Err(format!("'{s}' is not a registration mode: expected 0 (none) or 2 (symmetric windows)")),
    }
}

/// nccl-tests' `parsesize`: a number with an optional K, M or G (powers of 1024).
pub(crate) fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, c)) if i + c.len_utf8() == t.len() => (&t[..i], c),
        None => (t, 'B'),
        _ => return Err(format!("'{s}' is not a size: expected a number with an optional K, M or G suffix")),
    };
    let mult: f64 = match unit.to_ascii_uppercase() {
        'B' => 1.0,
        'K' => 1024.0,
        'M' => 1024.0 * 1024.0,
        'G' => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("'{s}' has an unknown unit '{unit}': expected K, M or G")),
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("'{s}' is not a size: expected a number like 8, 1K or 64M"))?;
    if v.is_nan() || v < 0.0 || v * mult > 1e15 {
        return Err(format!("'{s}' is out of range"));
    }
    Ok((v * mult) as usize)
}

impl PerfArgs {
    /// The ranks this process starts: `-t` threads of `-g` GPUs each, as nccl-tests counts them.
    fn ranks(&self) -> Result<u32> {
        self.nranks
            .checked_mul(self.threads)
            .with_context(|| format!("-t {} times -g {} ranks is too many", self.threads, self.nranks))
    }

    fn sizes(&self) -> Result<Vec<usize>> {
        if self.min_bytes > self.max_bytes {
            bail!("-b {} is larger than -e {}", self.min_bytes, self.max_bytes);
        }
        let mut v = Vec::new();
        let mut s = self.min_bytes;
        loop {
            v.push(s);
            let next = match self.step_factor {
                Some(f) if f > 1 => s.saturating_mul(f),
                _ if self.step_bytes == 0 => bail!("-i 0 with no -f factor would never reach -e"),
                _ => s.saturating_add(self.step_bytes),
            };
            if next > self.max_bytes || next == s {
                return Ok(v);
            }
            s = next;
        }
    }
}

pub(crate) fn run(args: &PerfArgs) -> Result<()> {
    let sizes = args.sizes()?;
    if args.iters == 0 || args.agg_iters == 0 {
        bail!("-n and -m must be at least 1");
    }
    if args.memory == gpu::Memory::Gpu {
        if args.bench != Bench::AllReduce {
            bail!("--memory gpu runs all_reduce only");
        }
        if args.register != 0 {
            bail!("-R registers host memory: it does not apply to --memory gpu");
        }
        return gpu::perf(args, &sizes);
    }
    let job = Job { nranks: args.ranks()?, launch: args.launch, transport: args.transport, background: None };
    ranks::run(&job, |rank| bench_rank(args, &sizes, rank))
}

/// Every rank runs this; rank 0 prints.
fn bench_rank(args: &PerfArgs, sizes: &[usize], rank: Rank) -> Result<()> {
    macro_rules! by_type {
        ($($dt:ident => $t:ty),+) => {
            match args.datatype { $(DataType::$dt => bench_typed::<$t>(args, sizes, rank),)+ }
        };
    }
    by_type!(I8 => i8, U8 => u8, I32 => i32, U32 => u32, I64 => i64, U64 => u64, F16 => half::f16,
        F32 => f32, F64 => f64, Bf16 => half::bf16)
}

struct Report {
    out: std::io::Stdout,
    bw_sum: f64,
    bw_count: usize,
    errors: usize,
}

fn bench_typed<T: Element>(args: &PerfArgs, sizes: &[usize], rank: Rank) -> Result<()> {
    let comm = rank.comm;
    let (me, n) = (comm.rank() as usize, comm.nranks() as usize);
    if args.root as usize >= n && args.bench.uses_root() {
        bail!("-r {} is not a rank of {n} ranks", args.root);
    }
    let boot = comm.bootstrap().clone();
    check_memory(&*boot, args, sizes, std::mem::size_of::<T>(), me)?;
    let devices = device_lines(&*boot, me, rank.local_rank)?;
    let init_line = init_line(&*boot, rank.init)?;
    let main = me == 0;
    let mut report = Report { out: std::io::stdout(), bw_sum: 0.0, bw_count: 0, errors: 0 };
    let start_time = now_string();
    if main {
        print_preamble(args, &devices, &init_line, rank.threads_per_process, &mut report.out)?;
    }
    let ts = std::mem::size_of::<T>();
    let mut windows = match args.register {
        0 => None,
        _ => {
            let counts = sizes.iter().map(|&size| args.bench.counts(size / ts, n));
            let send = counts.clone().map(|c| c.send).max().unwrap_or(0) * ts;
            let recv = counts.map(|c| c.recv_len(args.bench, true).max(c.recv)).max().unwrap_or(0) * ts;
            Some(Windows::register(comm, send, recv).with_context(|| format!("rank {me}: -R {}", args.register))?)
        }
    };
    let progress = main.then(|| progress_bar(sizes.len() as u64 * 2));
    let op_name = if args.bench.uses_op() { args.op.as_str() } else { "none" };
    let root = if args.bench.uses_root() { args.root as i32 } else { -1 };
    let mut results = Vec::new();
    for &size in sizes {
        let c = args.bench.counts(size / ts, n);
        let bytes = c.send.max(c.recv) * ts;
        let mut line =
            format!("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}", bytes, c.param, args.datatype.as_str(), op_name, root);
        let mut fields = vec![
            ("size", J::Int(bytes as i64)),
            ("count", J::Int(c.param as i64)),
            ("type", J::str(args.datatype.as_str())),
            ("redop", J::str(op_name)),
            ("root", J::str(format!("{root:6}"))),
        ];
        for in_place in [false, true] {
            let (secs, wrong) = time_one::<T>(comm, &*boot, args, c, in_place, windows.as_mut())?;
            let (algbw, busbw) = args.bench.bandwidth(c.param, ts, secs, n);
            report.bw_sum += busbw;
            report.bw_count += 1;
            if wrong > 0 {
                report.errors += 1;
            }
            let check = args.check > 0;
            line += &if check {
                format!(
                    "  {:>7}  {:>6}  {:>6}  {:>6}",
                    float_str(secs * 1e6, 7),
                    float_str(algbw, 6),
                    float_str(busbw, 6),
                    c_g(wrong as f64)
                )
            } else {
                format!(
                    "  {:>7}  {:>6}  {:>6}    N/A",
                    float_str(secs * 1e6, 7),
                    float_str(algbw, 6),
                    float_str(busbw, 6)
                )
            };
            fields.push((
                if in_place { "in_place" } else { "out_of_place" },
                J::Obj(vec![
                    ("time", J::Double(secs * 1e6)),
                    ("alg_bw", J::Double(algbw)),
                    ("bus_bw", J::Double(busbw)),
                    ("nwrong", if check { J::Double(wrong as f64) } else { J::Null }),
                ]),
            ));
            if let Some(p) = &progress {
                p.inc(1);
            }
        }
        fields.push(("actual_iterations", J::Int(args.iters as i64)));
        fields.push(("experiment_name", J::str("")));
        if main {
            if let Some(p) = &progress {
                p.suspend(|| writeln!(report.out, "{line}"))?;
            } else {
                writeln!(report.out, "{line}")?;
            }
            report.out.flush()?;
        }
        results.push(J::Obj(fields));
    }
    if let Some(p) = progress {
        p.finish_and_clear();
    }
    if let Some(w) = windows {
        w.deregister(comm)?;
    }
    let peak = rss_line(&*boot, "VmHWM", "Peak RSS (VmHWM)")?;
    if main {
        let avg = if report.bw_count > 0 { report.bw_sum / report.bw_count as f64 } else { 0.0 };
        let w = &mut report.out;
        writeln!(
            w,
            "# {:<20} : {} {}",
            "Out of bounds values",
            report.errors,
            if report.errors > 0 { "FAILED" } else { "OK" }
        )?;
        writeln!(w, "# {:<20} : {} ", "Avg bus bandwidth", c_g(avg))?;
        writeln!(w, "{peak}")?;
        writeln!(w, "#")?;
        writeln!(w, "# Collective test concluded: {}", args.bench.program())?;
        if let Some(path) = &args.json {
            write_json(path, args, &devices, rank.threads_per_process, start_time, results, report.errors, avg)?;
        }
    }
    if report.errors > 0 {
        bail!("{} of {} results were wrong", report.errors, sizes.len() * 2);
    }
    Ok(())
}

/// Warms up, times `iters` x `agg_iters` calls, then checks one call. Returns the time per call averaged over
/// ranks (nccl-tests' default `-a 1`) and the wrong elements summed over ranks.
fn time_one<T: Element>(
    comm: &mut Comm,
    boot: &dyn Bootstrap,
    args: &PerfArgs,
    c: Counts,
    in_place: bool,
    windows: Option<&mut Windows>,
) -> Result<(f64, u64)> {
    let (me, n) = (comm.rank() as usize, comm.nranks() as usize);
    let mut bufs = Buffers::<T>::new(args.bench, c, in_place, windows)
        .with_context(|| format!("rank {me}: {}", args.bench.program()))?;
    bufs.fill(args.bench, c, me, args.op, in_place);
    let blocking = args.blocking > 0;
    let call = |bufs: &mut Buffers<T>, comm: &mut Comm| -> Result<()> {
        bufs.run(comm, args.bench, args.op, args.root, in_place)?;
        if blocking {
            boot.barrier()?;
        }
        Ok(())
    };
    // The bootstrap's barrier goes over TCP and its ranks sleep in it; nccl-tests' MPI barrier spins in shared
    // memory. Warming up after it, not before, times calls as they run back to back: on 2 cores, 2 rank
    // processes, the first hundreds of 8-256 B calls after it took 0.35-0.6 us, those after them 0.27-0.30.
    boot.barrier()?;
    for _ in 0..args.warmup {
        call(&mut bufs, comm)?;
    }
    let t = Instant::now();
    for _ in 0..args.iters * args.agg_iters {
        call(&mut bufs, comm)?;
    }
    let secs = t.elapsed().as_secs_f64() / (args.iters * args.agg_iters) as f64;
    let mut wrong = 0u64;
    if args.check > 0 {
        bufs.fill(args.bench, c, me, args.op, in_place);
        call(&mut bufs, comm)?;
        if let Some(want) = expected::<T>(args.bench, c, me, n, args.root as usize, args.op) {
            wrong = count_wrong(bufs.result(args.bench, c, me, in_place), &want, n);
        }
    }
    let mut mine = secs.to_le_bytes().to_vec();
    mine.extend_from_slice(&wrong.to_le_bytes());
    let all = boot.all_gather(&mine)?;
    let (mut tsum, mut wsum) = (0.0, 0u64);
    for b in &all {
        let b: [u8; 16] = b.as_slice().try_into().context("a rank sent a malformed timing")?;
        tsum += f64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        wsum += u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
    }
    Ok((tsum / n as f64, wsum))
}

/// Checks before anything is allocated that each host has the memory its ranks need at the largest size
/// (ranks that are threads of one process, or processes of one host, share it), on every rank together, so
/// that all of them stop with the same error naming the rank(s) short of memory instead of aborting in the
/// allocator or being killed by the kernel.
fn check_memory(boot: &dyn Bootstrap, args: &PerfArgs, sizes: &[usize], ts: usize, me: usize) -> Result<()> {
    let host = collscope_debug::sys::hostname();
    let hosts = boot.all_gather(host.as_bytes())?;
    let local: Vec<usize> = (0..hosts.len()).filter(|&r| hosts[r] == host.as_bytes()).collect();
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let per_rank = args.bench.peak_bytes(args.bench.counts(largest / ts, hosts.len()), ts, args.check > 0);
    let need = per_rank * local.len() as u128;
    // One report per host, from its first rank.
    let short = match collscope_debug::sys::available_memory() {
        Some(avail) if local.first() == Some(&me) && need > avail as u128 => format!(
            "rank {me}: {} at {} ({largest} B) needs {} on host {host} ({} rank(s) x {} for buffers and checks), more than the {} available",
            args.bench.program(),
            coll::human_bytes(largest as u128),
            coll::human_bytes(need),
            local.len(),
            coll::human_bytes(per_rank),
            coll::human_bytes(avail as u128)
        ),
        _ => String::new(),
    };
    let reports: Vec<String> = boot
        .all_gather(short.as_bytes())?
        .into_iter()
        .filter(|r| !r.is_empty())
        .map(|r| String::from_utf8_lossy(&r).into_owned())
        .collect();
    if !reports.is_empty() {
        bail!("not enough memory: {} (choose a smaller -e)", reports.join("; "));
    }
    Ok(())
}

/// `#  Init 45.10 ms (slowest rank); RSS (VmRSS) after init per rank (MiB): 9.8 9.9`: collscope's own line
/// (nccl-tests has none), a comment to nccl-tests' parsers.
fn init_line(boot: &dyn Bootstrap, init: std::time::Duration) -> Result<String> {
    let slowest = boot
        .all_gather(&init.as_secs_f64().to_le_bytes())?
        .iter()
        .map(|b| b.as_slice().try_into().map(f64::from_le_bytes).unwrap_or(0.0))
        .fold(0.0, f64::max);
    let rss = rss_line(boot, "VmRSS", "RSS (VmRSS) after init")?;
    Ok(format!("#  Init {:.2} ms (slowest rank);{}", slowest * 1e3, rss.trim_start_matches('#')))
}

/// `# LABEL per rank (MiB): ...` from each rank's `/proc/self/status` field (`VmRSS`, `VmHWM`); ranks that are
/// threads of one process share its figure. `?` where the kernel does not report it.
fn rss_line(boot: &dyn Bootstrap, field: &str, label: &str) -> Result<String> {
    let kib = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        s.lines().find_map(|l| {
            l.strip_prefix(field)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
    });
    let mine = kib.map_or(String::from("?"), |k| format!("{:.1}", k as f64 / 1024.0));
    let all = boot.all_gather(mine.as_bytes())?;
    let all: Vec<String> = all.into_iter().map(|b| String::from_utf8_lossy(&b).into_owned()).collect();
    Ok(format!("# {label} per rank (MiB): {}", all.join(" ")))
}

/// nccl-tests' `#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s` for every rank, in order.
fn device_lines(boot: &dyn Bootstrap, rank: usize, local_rank: u32) -> Result<Vec<String>> {
    let host = collscope_debug::sys::hostname();
    let line = format!(
        "#  Rank {:>2} Group {:>2} Pid {:>6} on {:>10} device {:>2} [{:04x}:{:02x}:{:02x}] {}",
        rank,
        0,
        std::process::id(),
        host,
        local_rank,
        0,
        0,
        0,
        "Host memory (collscope)"
    );
    boot.all_gather(line.as_bytes())?
        .into_iter()
        .map(|b| String::from_utf8(b).context("a rank sent a malformed device line"))
        .collect()
}

fn header_config(args: &PerfArgs, threads: u32) -> String {
    let (step, kind) = match args.step_factor {
        Some(f) if f > 1 => (f, "factor"),
        _ => (args.step_bytes, "bytes"),
    };
    format!(
        "# nThread {} nGpus {} minBytes {} maxBytes {} step: {}({}) warmup iters: {} iters: {} agg iters: {} validation: {} graph: {} unalign: {}",
        threads, 1, args.min_bytes, args.max_bytes, step, kind, args.warmup, args.iters, args.agg_iters, args.check, 0, 0
    )
}

fn print_preamble(args: &PerfArgs, devices: &[String], init: &str, threads: u32, w: &mut impl Write) -> Result<()> {
    if let Some(p) = &args.json {
        writeln!(w, "# Writing JSON output to {p}")?;
    }
    writeln!(
        w,
        "# nccl-tests version collscope-{} nccl-headers={NCCL_VERSION_CODE} nccl-library={NCCL_VERSION_CODE}",
        env!("CARGO_PKG_VERSION")
    )?;
    writeln!(w, "# Collective test starting: {}", args.bench.program())?;
    writeln!(w, "{}", header_config(args, threads))?;
    if args.blocking > 0 {
        writeln!(w, "# Blocking Enabled: wait for completion and barrier after each collective ")?;
    }
    writeln!(w, "#")?;
    writeln!(w, "# Using devices")?;
    for d in devices {
        writeln!(w, "{d}")?;
    }
    writeln!(w, "{init}")?;
    writeln!(w, "#")?;
    writeln!(
        w,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          ",
        "", "", "", "", ""
    )?;
    let names = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"];
    let units = ["(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""];
    writeln!(w, "{}", header_row(&names))?;
    writeln!(w, "{}", header_row(&units))?;
    w.flush()?;
    Ok(())
}

/// `# %10s  %12s  %8s  %6s  %6s` then `  %7s  %6s  %6s  %6s` for out-of-place and in-place, then `" %*s"` with
/// no timestamp column: nccl-tests' header rows end in a space.
fn header_row(c: &[&str; 9]) -> String {
    let half = format!("  {:>7}  {:>6}  {:>6}  {:>6}", c[5], c[6], c[7], c[8]);
    format!("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}{half}{half} ", c[0], c[1], c[2], c[3], c[4])
}

fn progress_bar(len: u64) -> indicatif::ProgressBar {
    let p = indicatif::ProgressBar::with_draw_target(Some(len), indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{spinner} {pos}/{len} size runs [{elapsed_precise}] {wide_bar}")
    {
        p.set_style(style);
    }
    p
}

fn now_string() -> String {
    chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string()
}

#[allow(clippy::too_many_arguments)]
fn write_json(
    path: &str,
    args: &PerfArgs,
    devices: &[String],
    threads: u32,
    start_time: String,
    results: Vec<J>,
    errors: usize,
    avg: f64,
) -> Result<()> {
    let mut config = vec![
        ("nthreads", J::Int(threads as i64)),
        ("ngpus", J::Int(1)),
        ("minimum_bytes", J::Int(args.min_bytes as i64)),
        ("maximum_bytes", J::Int(args.max_bytes as i64)),
    ];
    match args.step_factor {
        Some(f) if f > 1 => config.push(("step_factor", J::Int(f as i64))),
        _ => config.push(("step_bytes", J::Int(args.step_bytes as i64))),
    }
    config.extend([
        ("warmup_iters", J::Int(args.warmup as i64)),
        ("iterations", J::Int(args.iters as i64)),
        ("aggregated_iterations", J::Int(args.agg_iters as i64)),
        ("validation", J::Int(args.check as i64)),
        ("graph", J::Int(0)),
        ("blocking_collectives", J::bool(args.blocking > 0)),
        ("per_iter_timing", J::bool(false)),
        ("parallel_init", J::bool(false)),
    ]);
    let devices: Vec<J> = devices.iter().enumerate().map(|(r, d)| device_json(r, d)).collect();
    config.push(("devices", J::List(devices)));
    let doc = J::Obj(vec![
        ("version", J::Int(2)),
        ("start_time", J::str(start_time)),
        ("args", J::List(std::env::args().map(J::str).collect())),
        (
            "env",
            // Every variable, as nccl-tests records them, but a secret (`COLLSCOPE_BOOTSTRAP_SECRET`).
            J::List(
                collscope_debug::params::process_vars()
                    .into_iter()
                    .filter(|(k, _)| !collscope_debug::params::lookup(k).is_some_and(|p| p.secret))
                    .map(|(k, v)| J::str(format!("{k}={v}")))
                    .collect(),
            ),
        ),
        ("nccl_version", J::Int(NCCL_VERSION_CODE as i64)),
        ("config", J::Obj(config)),
        ("results", J::List(results)),
        ("out_of_bounds", J::Obj(vec![("count", J::Int(errors as i64)), ("okay", J::bool(errors == 0))])),
        ("average_bus_bandwidth", J::Obj(vec![("bandwidth", J::Double(avg)), ("okay", J::str("unchecked"))])),
        ("errors", J::List(Vec::new())),
        ("end_time", J::str(now_string())),
    ]);
    let mut s = String::new();
    doc.write(&mut s);
    std::fs::write(path, s).with_context(|| format!("cannot write the JSON report to '{path}'"))
}

/// The fields nccl-tests parses back out of a device line.
fn device_json(rank: usize, line: &str) -> J {
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |key: &str| words.iter().position(|w| *w == key).and_then(|i| words.get(i + 1)).copied().unwrap_or("");
    let num = |key: &str| after(key).parse::<i64>().unwrap_or(0);
    let hex = line.split_once('[').and_then(|(_, r)| r.split_once(']')).map(|(h, _)| h).unwrap_or("");
    let info = line.rsplit_once("] ").map(|(_, i)| i).unwrap_or("");
    J::Obj(vec![
        ("rank", J::Int(rank as i64)),
        ("group", J::Int(num("Group"))),
        ("pid", J::Int(num("Pid"))),
        ("hostname", J::str(after("on"))),
        ("device", J::Int(num("device"))),
        ("device_hex", J::str(hex)),
        ("device_info", J::str(info)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: PerfArgs,
    }

    #[test]
    fn sizes_and_flags_like_nccl_tests() {
        let t = T::try_parse_from(["x", "all_reduce", "-b", "8", "-e", "64M", "-f", "4"]).unwrap();
        let s = t.a.sizes().unwrap();
        assert_eq!((s[0], s[1], *s.last().unwrap(), s.len()), (8, 32, 32 << 20, 12));
        let t = T::try_parse_from(["x", "all_gather", "-b", "1K", "-e", "3K", "-i", "1K"]).unwrap();
        assert_eq!(t.a.sizes().unwrap(), vec![1024, 2048, 3072]);
        assert_eq!(parse_size("1.5k").unwrap(), 1536);
        assert!(parse_size("12Q").unwrap_err().contains("'12Q'"));
        assert!(T::try_parse_from(["x", "all_reduce", "-d", "float7"]).is_err());
        let t = T::try_parse_from(["x", "sendrecv", "-b", "9", "-e", "8"]).unwrap();
        assert!(t.a.sizes().is_err());
        assert!(header_config(&t.a, 4).starts_with("# nThread 4 nGpus 1 minBytes 9 maxBytes 8 step: 1048576(bytes)"));
    }

    #[test]
    fn device_lines_parse_back_for_json() {
        let line = "#  Rank  3 Group  0 Pid   4242 on      node1 device  3 [0000:00:00] Host memory (collscope)";
        let mut s = String::new();
        device_json(3, line).write(&mut s);
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["pid"], 4242);
        assert_eq!(v["hostname"], "node1");
        assert_eq!(v["device_hex"], "0000:00:00");
        assert_eq!(v["device_info"], "Host memory (collscope)");
    }
}
