//! `collscope tune`: the host tuning model. `calibrate` times AllReduce for every algorithm, protocol and
//! channel count over P2P (ranks as threads), SHM (processes) and NET/Socket (processes), fits latency and
//! bandwidth per cell (`tuning::host::fit`), prints the constants and the per-size choices they give, and
//! writes the profile that communicators then load. `show` prints the profile in use.

use super::ranks::{self, Job, LaunchMode, Rank, TransportChoice};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use collscope_debug::env::Env;
use collscope_model::{Algorithm, Collective, Protocol, RedOp, Transport};
use collscope_runtime::tuning::{
    cell_from_fits, fit_line, HostProfile, LinkProfile, MachineFacts, BUILTIN, TUNING_FILE_VAR,
};
use collscope_runtime::{select, Choice, SelectConfig};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

#[derive(Debug, Subcommand)]
pub(crate) enum TuneCommand {
    /// Measure this machine's latency and bandwidth per link, algorithm and protocol and write the profile.
    Calibrate(CalibrateArgs),
    /// Print the profile communicators load (COLLSCOPE_TUNING_FILE, the default file, or the built-in one).
    Show(ShowArgs),
    /// One link's timings, as `calibrate` runs it (internal).
    #[command(hide = true)]
    Measure(MeasureArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CalibrateArgs {
    /// Where to write the profile (default: $XDG_CACHE_HOME/collscope/tuning.json or ~/.cache/collscope/).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Ranks of the timed communicators.
    #[arg(long, default_value_t = 4)]
    pub nranks: u32,
    /// Fewer sizes and iterations (about a minute instead of several).
    #[arg(long)]
    pub quick: bool,
    /// Largest size timed (K, M suffixes); the sizes go from 1K up by 4x.
    #[arg(long, value_parser = super::perf::parse_size)]
    pub max_bytes: Option<usize>,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// A profile file instead of the one communicators would load.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Ranks for the choice table (default: the profile's).
    #[arg(long)]
    pub nranks: Option<u32>,
}

#[derive(Debug, Args)]
pub(crate) struct MeasureArgs {
    #[arg(long, value_enum)]
    launch: LaunchMode,
    #[arg(long, value_enum)]
    transport: TransportChoice,
    #[arg(long)]
    nranks: u32,
    #[arg(long)]
    max_bytes: u64,
    /// Bytes to move per size and cell; the iterations follow from it.
    #[arg(long)]
    budget: u64,
    #[arg(long)]
    max_iters: usize,
    #[arg(long)]
    out: PathBuf,
}

/// Far above what `tune measure` writes for one link (a few points per cell, a few KiB).
const MAX_TIMINGS_BYTES: u64 = 16 << 20;

/// What one `measure` run hands back: AllReduce times per cell.
#[derive(Debug, Serialize, Deserialize)]
struct Timings {
    link: Transport,
    nranks: u32,
    max_channels: u32,
    cells: Vec<CellTimings>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CellTimings {
    algo: Algorithm,
    proto: Protocol,
    nchannels: u32,
    /// (bytes, microseconds per call).
    points: Vec<(f64, f64)>,
}

const MIN_BYTES: u64 = 1024;
/// Timed batches per size; each point is their median.
const BATCHES: u64 = 5;
const CELL_ALGOS: [Algorithm; 2] = [Algorithm::Tree, Algorithm::Ring];

pub(crate) fn run(cmd: TuneCommand) -> Result<()> {
    match cmd {
        TuneCommand::Calibrate(a) => calibrate(&a),
        TuneCommand::Show(a) => show(&a),
        TuneCommand::Measure(a) => measure(&a),
    }
}

fn sizes(max_bytes: u64) -> Result<Vec<u64>> {
    let v: Vec<u64> = std::iter::successors(Some(MIN_BYTES), |s| Some(s * 4)).take_while(|s| *s <= max_bytes).collect();
    if v.len() < 2 {
        bail!("--max-bytes {max_bytes} leaves fewer than two sizes from {MIN_BYTES} up by 4x: expected at least 4K");
    }
    Ok(v)
}

fn calibrate(a: &CalibrateArgs) -> Result<()> {
    if a.nranks < 2 {
        bail!("--nranks {}: calibration needs at least 2 ranks", a.nranks);
    }
    let max_bytes = a.max_bytes.map_or(if a.quick { 1 << 20 } else { 4 << 20 }, |b| b as u64);
    let sizes = sizes(max_bytes)?;
    let (budget, max_iters) = if a.quick { (4u64 << 20, 50usize) } else { (32 << 20, 200) };
    let out = match &a.out {
        Some(p) => p.clone(),
        None => HostProfile::default_path().context("neither XDG_CACHE_HOME nor HOME is set: give --out")?,
    };
    let phases = [
        (LaunchMode::Threads, TransportChoice::P2p),
        (LaunchMode::Processes, TransportChoice::Shm),
        (LaunchMode::Processes, TransportChoice::Socket),
    ];
    let exe = std::env::current_exe().context("cannot find this program to run the measurements")?;
    let dir = std::env::temp_dir().join(format!("collscope-calibrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut links = Vec::new();
    let mut max_channels = 1;
    for (launch, transport) in phases {
        let file = dir.join(format!("{transport:?}.json"));
        let started = Instant::now();
        let status = Command::new(&exe)
            .args(["tune", "measure", "--launch", &arg(launch), "--transport", &arg(transport)])
            .args(["--nranks", &a.nranks.to_string(), "--max-bytes", &max_bytes.to_string()])
            .args(["--budget", &budget.to_string(), "--max-iters", &max_iters.to_string()])
            .arg("--out")
            .arg(&file)
            // The cells are forced; the built-in table keeps a bad profile file from stopping a recalibration.
            .env(TUNING_FILE_VAR, BUILTIN)
            .status()
            .context("cannot start a measurement")?;
        if !status.success() {
            bail!("measuring {transport:?} with {} ranks failed ({status})", a.nranks);
        }
        let text = collscope_debug::file::read_small_string(&file, MAX_TIMINGS_BYTES)
            .with_context(|| format!("no timings in {}", file.display()))?;
        let t: Timings = serde_json::from_str(&text).with_context(|| format!("bad timings in {}", file.display()))?;
        eprintln!(
            "# measured {} ({} ranks, {:?}) in {:.1} s",
            t.link,
            t.nranks,
            launch,
            started.elapsed().as_secs_f64()
        );
        max_channels = t.max_channels;
        links.push(fit_link(&t)?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let how = format!(
        "collscope tune calibrate --nranks {}{}: AllReduce float sum in place, {} to {} bytes by 4x, {} MB or at most {} calls per size, median of {BATCHES} batches",
        a.nranks,
        if a.quick { " --quick" } else { "" },
        sizes[0],
        sizes[sizes.len() - 1],
        budget >> 20,
        max_iters
    );
    let profile = HostProfile {
        format: 1,
        machine: machine_facts(a.nranks, max_channels, how),
        links,
        origin: out.display().to_string(),
    };
    print_profile(&profile, a.nranks)?;
    profile.save(&out)?;
    if HostProfile::default_path().as_deref() == Some(out.as_path()) {
        println!("# wrote {} (communicators load it unless COLLSCOPE_TUNING_FILE names another)", out.display());
    } else {
        println!("# wrote {} (communicators load it with COLLSCOPE_TUNING_FILE={0})", out.display());
    }
    Ok(())
}

fn arg<T: clap::ValueEnum>(v: T) -> String {
    v.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()
}

/// One link's cells from its timings: one fit with one channel, one with all of them.
fn fit_link(t: &Timings) -> Result<LinkProfile> {
    let mut cells = Vec::new();
    for algo in CELL_ALGOS {
        for &proto in Protocol::ALL {
            let fit = |nch: u32| {
                let c = t.cells.iter().find(|c| c.algo == algo && c.proto == proto && c.nchannels == nch);
                c.and_then(|c| fit_line(&c.points))
                    .with_context(|| format!("{} {algo}/{proto} with {nch} channels: no usable timings", t.link))
            };
            let one = fit(1)?;
            let all = if t.max_channels > 1 { fit(t.max_channels)? } else { one };
            cells.push(cell_from_fits(algo, proto, t.nranks, one, all, t.max_channels));
        }
    }
    Ok(LinkProfile { transport: t.link, cells })
}

fn machine_facts(nranks: u32, max_channels: u32, how: String) -> MachineFacts {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_string()))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    MachineFacts {
        cpu_model,
        cores: std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1),
        date: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        collscope_version: env!("CARGO_PKG_VERSION").to_string(),
        nranks,
        max_channels,
        how,
    }
}

fn show(a: &ShowArgs) -> Result<()> {
    let profile = match &a.file {
        Some(p) => HostProfile::load(p)?,
        None => HostProfile::resolve(&Env::from_process())?,
    };
    println!("# profile: {}", profile.origin);
    let m = &profile.machine;
    println!("# measured {} on {} ({} cores), collscope {}", m.date, m.cpu_model, m.cores, m.collscope_version);
    println!("# how: {}", m.how);
    print_profile(&profile, a.nranks.unwrap_or(m.nranks))
}

/// The constants, then what AllReduce and AllGather pick per size on each link.
fn print_profile(p: &HostProfile, nranks: u32) -> Result<()> {
    let ch = p.machine.max_channels;
    println!("#");
    println!(
        "# {:<5} {:<12} {:>12} {:>12} {:>12} {:>12}",
        "link",
        "algo/proto",
        "lat/step us",
        "1ch GB/s",
        format!("{ch}ch GB/s"),
        "+us/channel"
    );
    for l in &p.links {
        for c in &l.cells {
            println!(
                "  {:<5} {:<12} {:>12.2} {:>12.3} {:>12.3} {:>12.2}",
                l.transport.to_string(),
                format!("{}/{}", c.algo, c.proto),
                c.lat_us,
                c.bw_gbps,
                c.max_bw_gbps,
                c.channel_lat_us
            );
        }
    }
    let base = SelectConfig::new(p.clone(), ch);
    for coll in [Collective::AllReduce, Collective::AllGather] {
        println!("#");
        println!("# {coll} choices on {nranks} ranks (bytes per rank: algo/proto/channels)");
        let links: Vec<String> = p.links.iter().map(|l| format!("{:>18}", l.transport.to_string())).collect();
        println!("# {:>10} {}", "bytes", links.join(""));
        for bytes in std::iter::successors(Some(8u64), |b| Some(b * 4)).take_while(|b| *b <= 64 << 20) {
            let row: Vec<String> = p
                .links
                .iter()
                .map(|l| {
                    let c: Choice = select(&base.clone().on_link(l.transport), coll, bytes, nranks);
                    format!("{:>18}", format!("{}/{}/{}", c.algo, c.proto, c.nchannels))
                })
                .collect();
            println!("  {bytes:>10} {}", row.join(""));
        }
    }
    Ok(())
}

fn measure(a: &MeasureArgs) -> Result<()> {
    let sizes = sizes(a.max_bytes)?;
    let job = Job { nranks: a.nranks, launch: a.launch, transport: a.transport, background: None };
    ranks::run(&job, |rank| measure_rank(a, &sizes, rank))
}

/// Every rank times every cell at every size; rank 0 writes the timings.
fn measure_rank(a: &MeasureArgs, sizes: &[u64], rank: Rank) -> Result<()> {
    let comm = rank.comm;
    let base = comm.select_config().clone();
    let boot = comm.bootstrap().clone();
    let max_channels = comm.nchannels();
    let mut channels = vec![1];
    if max_channels > 1 {
        channels.push(max_channels);
    }
    let mut cells = Vec::new();
    for algo in CELL_ALGOS {
        for &proto in Protocol::ALL {
            for &nchannels in &channels {
                comm.set_select_config(base.clone().forced(Choice { algo, proto, nchannels }));
                let mut points = Vec::new();
                for &bytes in sizes {
                    let mut buf = vec![1.0f32; (bytes / 4) as usize];
                    let iters = (a.budget / bytes).clamp(BATCHES, a.max_iters as u64) as usize;
                    for _ in 0..2 {
                        comm.all_reduce_in_place(&mut buf, RedOp::Sum)?;
                    }
                    // The median of a few batches: a rank descheduled by other load spoils one, not the point.
                    let per_batch = iters.div_ceil(BATCHES as usize);
                    let mut batches = Vec::new();
                    for _ in 0..BATCHES {
                        boot.barrier()?;
                        let t = Instant::now();
                        for _ in 0..per_batch {
                            comm.all_reduce_in_place(&mut buf, RedOp::Sum)?;
                        }
                        batches.push(t.elapsed().as_secs_f64() * 1e6 / per_batch as f64);
                    }
                    batches.sort_by(f64::total_cmp);
                    points.push((bytes as f64, batches[batches.len() / 2]));
                }
                cells.push(CellTimings { algo, proto, nchannels, points });
            }
        }
    }
    comm.set_select_config(base);
    if comm.rank() == 0 {
        let link = comm.select_config().link();
        let t = Timings { link, nranks: comm.nranks(), max_channels, cells };
        write_timings(&a.out, &t)?;
    }
    Ok(())
}

fn write_timings(path: &Path, t: &Timings) -> Result<()> {
    let text = serde_json::to_string(t)?;
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
