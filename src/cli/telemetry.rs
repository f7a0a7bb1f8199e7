//! Telemetry for commands that run ranks (`demo`): one server per process that runs ranks, on the base port
//! plus the process's local rank, fed by the runtime through the process's recorder. Another program holding
//! the port, collscope's default or one the user chose, does not stop the ranks (issue 55): they serve on a free
//! port instead and say which.

use super::ranks::{self, LaunchMode};
use anyhow::Result;
use collscope_debug::env::Env;
use collscope_model::{routes, DumpReason, Source};
use collscope_runtime::observe::recorder;
use collscope_telemetry::config::local_ranks;
use collscope_telemetry::{Dumper, LocalRank, Telemetry, TelemetryConfig, TelemetryError};
use std::io::Write;

/// Starts telemetry in a process that runs ranks (not in a launcher that only starts them), unless
/// `COLLSCOPE_TELEMETRY=0`, and prints where it serves.
pub(crate) fn start(launch: LaunchMode, metrics_addr: Option<&str>) -> Result<Option<Telemetry>> {
    let info = ranks::launched()?;
    if info.is_none() && launch != LaunchMode::Threads {
        return Ok(None);
    }
    let mut env = Env::from_process();
    if let Some(addr) = metrics_addr {
        env = env.with("COLLSCOPE_METRICS_ADDR", addr);
    }
    let who = match &info {
        // Without the launcher's count, all of them: collscope's own launcher starts every rank here.
        Some(i) => LocalRank {
            rank: Some(i.rank),
            local_rank: i.local_rank,
            local_ranks: local_ranks(collscope_debug::params::process_var, i.nranks),
        },
        None => LocalRank { rank: None, local_rank: 0, local_ranks: 1 },
    };
    let cfg = TelemetryConfig::from_env(&env, who, collscope_debug::params::process_var)?;
    if !cfg.enabled {
        return Ok(None);
    }
    let whose = info.map_or_else(|| "ranks of this process".to_string(), |i| format!("rank {}", i.rank));
    let mut moved = None;
    let t = match Telemetry::start(&cfg, Source::Runtime, Some(recorder::global())) {
        Err(TelemetryError::Bind { addr, source }) if source.kind() == std::io::ErrorKind::AddrInUse => {
            let mut any = cfg.clone();
            any.addr.set_port(0);
            let t = Telemetry::start(&any, Source::Runtime, Some(recorder::global()))?;
            collscope_debug::eprintln_whole!(
                "collscope: WARNING: telemetry port {} is taken by another program ({}); serving {whose} on port {} \
                 instead",
                addr.port(),
                whose_port(metrics_addr, &env),
                t.addr().port()
            );
            moved = Some(addr.port());
            t
        }
        r => r?,
    };
    let dumper = t.dumper();
    ranks::before_sigterm(move || dump_on_sigterm(&dumper));
    let url = t.url();
    // The other ranks reach this one at the address it serves on; a wildcard one by this host's name.
    recorder::global().set_endpoint(t.reachable_url());
    let aggregate =
        if cfg.aggregate_peers.is_empty() { String::new() } else { format!(", {url}{}", routes::METRICS_AGGREGATE) };
    let (metrics, snapshot, events) = (routes::METRICS, routes::SNAPSHOT, routes::EVENTS);
    let moved = moved.map_or(String::new(), |p| format!(" (not port {p}: taken)"));
    println!("collscope: telemetry for {whose} at {url}{metrics}{aggregate}, {url}{snapshot}, {url}{events}{moved}");
    std::io::stdout().flush()?;
    Ok(Some(t))
}

/// Before a rank process ends by SIGTERM: its ranks write their dumps (`COLLSCOPE_DUMP_DIR`), and say where or
/// why not. Runs in the rank's signal thread, never in the handler.
fn dump_on_sigterm(d: &Dumper) {
    match d.dump(DumpReason::Sigterm) {
        Ok(files) => {
            for f in files {
                collscope_debug::eprintln_whole!("collscope: SIGTERM: dump written to {}", f.display());
            }
        }
        Err(e) => collscope_debug::eprintln_whole!("collscope: SIGTERM: {e}"),
    }
}

/// Whose choice the telemetry port was, for the line that says it was taken: the user's (`--metrics-addr`, or
/// `COLLSCOPE_METRICS_ADDR` in `env`) or collscope's default.
pub(crate) fn whose_port(metrics_addr: Option<&str>, env: &Env) -> &'static str {
    if metrics_addr.is_some() {
        "chosen with --metrics-addr"
    } else if env.str("COLLSCOPE_METRICS_ADDR").is_some() {
        "chosen with COLLSCOPE_METRICS_ADDR"
    } else {
        "collscope's default"
    }
}
