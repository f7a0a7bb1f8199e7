//! `collscope log analyze PATH... [--json] [--strict] [--no-fail]`: read real NCCL logs and report what they
//! say. For scripts: exit status 2 when a finding is an error (unless `--no-fail`), 1 when the input is no log.

use anyhow::Context;
use clap::Subcommand;
use collscope_logreader::{classify, gdrdma, Options};
use collscope_model::{Severity, Snapshot, Transport};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

#[derive(Subcommand)]
pub(crate) enum LogCommand {
    /// Read NCCL_DEBUG=INFO logs (files, directories, `-` for stdin, .gz) as one job and diagnose it.
    Analyze {
        /// Log files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Print the model with findings as JSON.
        #[arg(long)]
        json: bool,
        /// List the NCCL lines the reader did not understand.
        #[arg(long)]
        strict: bool,
        /// Exit with status 0 even when a finding is an error (otherwise 2).
        #[arg(long)]
        no_fail: bool,
    },
    /// Rebuild the machine from a log, run NCCL's model on it and compare what NCCL printed (graphs, channels,
    /// tuning, decisions) with what the model predicts; --set/--nics/--gdr/--p2p: what would change.
    Explain(crate::cli::log_explain::ExplainArgs),
}

pub(crate) fn run(cmd: LogCommand) -> anyhow::Result<()> {
    match cmd {
        LogCommand::Explain(args) => crate::cli::log_explain::run(args),
        LogCommand::Analyze { paths, json, strict, no_fail } => {
            let snap = collscope_logreader::read_paths(&paths, Options { strict }).context("reading the logs")?;
            for w in snap.warnings.iter().filter(|w| w.class == classify::INPUT) {
                eprintln!("collscope: warning: {}", w.text);
            }
            collscope_logreader::expect_nccl_lines(&snap, &paths)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&snap)?);
            } else {
                print!("{}", report(&snap, strict));
            }
            if !no_fail && snap.findings.iter().any(|f| f.severity == Severity::Error) {
                std::io::stdout().flush()?;
                std::process::exit(2);
            }
            Ok(())
        }
    }
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or("not printed".to_string(), T::to_string)
}

fn list(items: impl IntoIterator<Item = String>, max: usize) -> String {
    let items: Vec<String> = items.into_iter().collect();
    let mut s = items.iter().take(max).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > max {
        let _ = write!(s, " (+{} more)", items.len() - max);
    }
    if s.is_empty() {
        s.push_str("none seen");
    }
    s
}

/// The human report.
pub(crate) fn report(s: &Snapshot, strict: bool) -> String {
    let mut o = String::new();
    let inferred = |fact: &str| {
        if s.log.as_ref().is_some_and(|l| l.inferred.iter().any(|i| i.fact == fact)) {
            " (inferred)"
        } else {
            ""
        }
    };
    let _ = writeln!(o, "== Job");
    if s.log.as_ref().is_some_and(|l| l.rccl) {
        let _ =
            writeln!(o, "  RCCL version   {} (RCCL, AMD's NCCL: the NCCL release it follows)", opt(&s.nccl_version));
    } else {
        let _ = writeln!(o, "  NCCL version   {}", opt(&s.nccl_version));
    }
    let _ = writeln!(o, "  ranks          {}{}", opt(&s.nranks), inferred("nranks"));
    let _ = writeln!(o, "  nodes          {}{}", opt(&s.nnodes), inferred("nnodes"));
    let _ = writeln!(o, "  hosts          {}", list(s.hosts.iter().cloned(), 8));
    let ready = s.communicators.iter().filter(|c| c.state == collscope_model::CommState::Ready).count();
    let _ = writeln!(o, "  communicators  {} seen, {} completed init", s.communicators.len(), ready);
    if let Some(l) = &s.log {
        let st = &l.stats;
        let _ = writeln!(
            o,
            "  lines          {} ({} NCCL, {} other; {} duplicate, {} repeated kept, {} wrapped, {} truncated, {} garbled, {} not UTF-8, {} not understood)",
            st.lines, st.nccl_lines, st.context_lines, st.duplicate_lines, st.repeated_lines, st.wrapped_lines,
            st.truncated_lines, st.garbled_lines, st.invalid_utf8_lines, st.unparsed_nccl_lines
        );
        if st.bare_lines > 0 {
            let _ = writeln!(
                o,
                "  without prefix {} NCCL lines had no `host:pid:tid [dev] NCCL INFO`: each of their {} stretch(es) read \
                 as one anonymous process, tied to no host or rank",
                st.bare_lines, st.bare_processes
            );
        }
    }

    let _ = writeln!(o, "\n== Network");
    let _ = writeln!(o, "  network        {}", opt(&s.network));
    let devs = s.net_devices.iter().map(|d| {
        format!(
            "[{}]{}{}{}",
            d.index,
            d.name,
            d.port.map_or(String::new(), |p| format!(":{p}")),
            d.link.as_ref().map_or(String::new(), |l| format!("/{l}"))
        )
    });
    let mut devs: Vec<String> = devs.collect();
    devs.dedup();
    let _ = writeln!(o, "  devices        {}", list(devs, 8));
    let mut boot: Vec<String> = s.bootstrap.iter().map(|b| format!("{}:{}", b.name, b.address)).collect();
    boot.sort();
    boot.dedup();
    let _ = writeln!(o, "  bootstrap      {}", list(boot, 4));
    if let Some(l) = &s.log {
        let _ =
            writeln!(o, "  plugins        {}", list(l.plugins.iter().map(|p| format!("{}: {}", p.kind, p.text)), 4));
    }

    let _ = writeln!(o, "\n== Transports (connections by edge kind)");
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for c in &s.connections {
        let label = match c.transport {
            Transport::P2p => format!(
                "P2P/{} (GPU to GPU, same node)",
                c.mode.as_deref().unwrap_or("").split('/').next().unwrap_or("")
            ),
            Transport::Shm => "SHM (through host memory, same node)".to_string(),
            Transport::Net => format!("NET/{} (between nodes)", c.net.as_deref().unwrap_or("?")),
            t => t.to_string(),
        };
        let label = if c.inferred { format!("{label}, inferred: no line printed it") } else { label };
        *kinds.entry(label).or_default() += 1;
    }
    if !s.connections.iter().any(|c| !c.inferred) {
        let _ = writeln!(o, "  no connection lines in the log");
    }
    for (k, n) in kinds {
        let _ = writeln!(o, "  {n:>6}  {k}");
    }

    let _ = writeln!(o, "\n== GPUDirect RDMA");
    let net: Vec<_> = s.connections.iter().filter(|c| c.transport == Transport::Net && !c.inferred).collect();
    let with = net.iter().filter(|c| c.gdrdma == Some(true)).count();
    let state = match gdrdma(s) {
        None => "no NET connections".to_string(),
        Some(true) => format!("used on all {} NET connections", net.len()),
        Some(false) => format!("used on {with} of {} NET connections", net.len()),
    };
    let _ = writeln!(o, "  {state}");
    if let Some(l) = &s.log {
        for g in l.gdr_checks.iter().take(6) {
            let _ = writeln!(
                o,
                "  {} for {}{}",
                if g.enabled { "enabled" } else { "disabled" },
                g.place(),
                g.reason.as_deref().map_or(String::new(), |r| format!(" ({r})"))
            );
        }
    }

    let _ = writeln!(o, "\n== Rings and trees");
    for r in s.rings.iter().filter(|r| !r.order.is_empty()).take(4) {
        let order: Vec<String> = r.order.iter().map(u32::to_string).collect();
        let _ = writeln!(o, "  ring {:02}: {}{}", r.channel, list(order, 16), if r.truncated { " ..." } else { "" });
    }
    let neighbours: usize = s.rings.iter().map(|r| r.neighbours.len()).sum();
    let _ = writeln!(
        o,
        "  {} rings with an order, {} ring neighbour lines, {} tree entries",
        s.rings.iter().filter(|r| !r.order.is_empty()).count(),
        neighbours,
        s.trees.len()
    );
    for g in &s.graphs {
        let _ = writeln!(
            o,
            "  graph pattern {:?}: {} channels, bw {}/{}, type {}/{}",
            g.pattern, g.n_channels, g.bw_intra, g.bw_inter, g.type_intra, g.type_inter
        );
    }

    let _ = writeln!(o, "\n== Channels");
    let c = &s.channels;
    let _ = writeln!(
        o,
        "  coll {}  collnet {}  nvls {}  p2p {}  p2p per peer {}{}",
        opt(&c.coll),
        opt(&c.collnet),
        opt(&c.nvls),
        opt(&c.p2p),
        opt(&c.p2p_per_peer),
        inferred("channels.coll")
    );

    let _ = writeln!(o, "\n== Tuning");
    if let Some(ar) = s.tuning.get(&collscope_model::Collective::AllReduce) {
        for bytes in [1u64 << 10, 1 << 20, 1 << 28] {
            let best = ar
                .iter()
                .flat_map(|(a, ps)| ps.iter().filter_map(move |(p, c)| Some((a, p, c.time_us(bytes)?))))
                .min_by(|x, y| x.2.total_cmp(&y.2));
            if let Some((a, p, t)) = best {
                let _ = writeln!(o, "  AllReduce {bytes:>10} bytes: table picks {a}/{p} ({t:.1} us)");
            }
        }
    } else {
        let _ = writeln!(o, "  no tuning table in the log (printed by rank 0 with NCCL_DEBUG_SUBSYS=TUNING)");
    }
    let unnamed = s.log.as_ref().map_or(0, |l| l.unnamed_decisions.len());
    if unnamed > 0 {
        let _ = writeln!(
            o,
            "  {} per-call decisions, and {unnamed} that name no collective (`N Bytes -> Algo A proto P time T`)",
            s.decisions.len()
        );
    } else {
        let _ = writeln!(o, "  {} per-call decisions", s.decisions.len());
    }
    for d in s.decisions.iter().take(5) {
        let _ = writeln!(o, "    {} {} bytes -> {}/{} on {} channels", d.coll, d.bytes, d.algo, d.proto, d.n_channels);
    }
    let _ = writeln!(
        o,
        "  {} environment settings: {}",
        s.env.len(),
        list(s.env.iter().map(|e| format!("{}={}", e.name, e.value)), 8)
    );

    let _ = writeln!(o, "\n== Findings");
    if s.findings.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for sev in [Severity::Error, Severity::Warning, Severity::Info] {
        for f in s.findings.iter().filter(|f| f.severity == sev) {
            let _ = writeln!(o, "  [{}] {} ({})", f.severity, f.title, f.code);
            if let Some(c) = &f.comm {
                let _ = writeln!(o, "      communicator: {c}");
            }
            let _ = writeln!(o, "      {}", f.detail);
            for e in f.evidence.iter().take(3) {
                let _ = writeln!(o, "      at {}:{}: {}", e.file, e.line, e.text.trim());
            }
            let _ = writeln!(o, "      fix: {}", f.fix);
        }
    }
    let count = |sev| s.findings.iter().filter(|f| f.severity == sev).count();
    let _ = writeln!(
        o,
        "  {} findings ({} error, {} warning, {} info); {} WARN/error lines in the log",
        s.findings.len(),
        count(Severity::Error),
        count(Severity::Warning),
        count(Severity::Info),
        s.warnings.iter().filter(|w| w.class != classify::INPUT).count()
    );
    if strict {
        let _ = writeln!(o, "\n== NCCL lines not understood ({})", s.unparsed_nccl_lines.len());
        for l in &s.unparsed_nccl_lines {
            let _ = writeln!(o, "  {}:{}: {}", l.file, l.line, l.text);
        }
    }
    o
}
