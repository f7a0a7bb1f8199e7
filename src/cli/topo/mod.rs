//! `collscope topo show|dump`: the machine as NCCL sees it, from a preset, an NCCL topology file
//! (`--topo-file`, `NCCL_TOPO_FILE`) or detection of this host.

pub(crate) mod explain;
pub(crate) mod upgrade;

use anyhow::Result;
use clap::{Args, Subcommand};
use collscope_debug::env::Env;
use collscope_nccl::topo::{self, print, TopoEnv, TopoSource};
use std::io::Write;
use std::path::PathBuf;

#[derive(Args)]
pub(crate) struct TopoArgs {
    #[command(subcommand)]
    command: TopoCommand,
}

/// Where the topology comes from; neither flag: `NCCL_TOPO_FILE`, else this host.
#[derive(Args, Debug)]
pub(crate) struct SourceArgs {
    /// An NCCL topology XML file (as NCCL_TOPO_FILE).
    #[arg(long, value_name = "FILE", conflicts_with = "preset")]
    topo_file: Option<PathBuf>,
    /// A reference machine: dgx-a100, dgx-h100, hgx-pcie, nvlink-bridge-4, cpu-host.
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
}

impl SourceArgs {
    pub(crate) fn source(&self, env: &Env) -> TopoSource {
        match (&self.topo_file, &self.preset) {
            (Some(f), _) => TopoSource::File(f.clone()),
            (None, Some(p)) => TopoSource::Preset(p.clone()),
            (None, None) => TopoSource::from_env(env),
        }
    }
}

#[derive(Subcommand)]
enum TopoCommand {
    /// Print the NCCL-style system tree, paths, GPU/NIC matrix and the P2P and GPUDirect RDMA decisions.
    Show {
        #[command(flatten)]
        source: SourceArgs,
        /// Print the topology part of the model as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Write the topology as NCCL topology XML (as NCCL_TOPO_DUMP_FILE does).
    Dump {
        #[command(flatten)]
        source: SourceArgs,
        /// Write to this file instead of standard output.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Everything NCCL would decide at init for N identical nodes (graphs, channels, rings, trees, tuning),
    /// and per collective and size the algorithm, protocol and channels it would pick, and why.
    Explain(explain::ExplainArgs),
}

fn section(out: &mut String, title: &str, lines: &[String]) {
    out.push('\n');
    out.push_str(title);
    out.push('\n');
    for l in lines {
        out.push_str(l);
        out.push('\n');
    }
}

/// Writes to standard output; a reader that went away (`| head`) ends the command quietly.
fn emit(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|_| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

pub(crate) fn run(args: TopoArgs) -> Result<()> {
    if let TopoCommand::Explain(a) = args.command {
        // Explain sets up its own logger before anything reads the environment.
        return explain::run(a);
    }
    let env = Env::from_process();
    match args.command {
        TopoCommand::Explain(_) => unreachable!("handled above"),
        TopoCommand::Show { source, json } => {
            let topo_env = TopoEnv::from_env(&env)?;
            let (xml, notes) = topo::load_noting(&source.source(&env))?;
            for n in notes {
                eprintln!("collscope: note: {n}");
            }
            topo::dump_if_requested(&xml, &env)?;
            let topology = topo::build(&xml, &topo_env)?;
            // With NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH, the same lines NCCL logs at init.
            print::log_system(&topology);
            if json {
                return emit(&format!("{}\n", serde_json::to_string_pretty(&topology)?));
            }
            let host = topology.host.as_ref().map_or(String::new(), |h| format!(" ({h})"));
            let mut out = format!("Topology: {}{host}\n", topology.source);
            section(&mut out, "Devices", &print::summary_lines(&topology));
            section(&mut out, "System (NCCL_DEBUG_SUBSYS=GRAPH)", &print::system_lines(&topology));
            section(&mut out, "Paths (hops/bandwidth/type)", &print::path_lines(&topology));
            section(&mut out, "GPU/NIC matrix", &print::matrix(&topology));
            let p2p = print::p2p_lines(&topology, &topo_env);
            if !p2p.is_empty() {
                section(&mut out, "P2P", &p2p);
            }
            let gdr = print::gdr_lines(&topology, &topo_env)?;
            if !gdr.is_empty() {
                section(&mut out, "GPU Direct RDMA (NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ)", &gdr);
            }
            emit(&out)
        }
        TopoCommand::Dump { source, output } => {
            let xml = topo::load(&source.source(&env))?;
            match output {
                Some(path) => {
                    topo::xml::write_file(&xml, &path)?;
                    eprintln!("wrote {}", path.display());
                }
                None => emit(&topo::dump(&xml))?,
            }
            Ok(())
        }
    }
}
