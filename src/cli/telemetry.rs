//! Telemetry for commands that run ranks (`demo`): one server per process that runs ranks, on the base port
//! plus the process's local rank, fed by the runtime through the process's recorder.

use super::ranks::{self, LaunchMode};
use anyhow::Result;
use collscope_debug::env::Env;
use collscope_model::Source;
use collscope_runtime::observe::recorder;
use collscope_telemetry::config::local_ranks;
use collscope_telemetry::{LocalRank, Telemetry, TelemetryConfig};
use std::io::Write;

/// Starts telemetry in a process that runs ranks (not in a launcher that only starts them), unless
/// `COLLSCOPE_TELEMETRY=0`, and prints where it serves.
pub fn start(launch: LaunchMode, metrics_addr: Option<&str>) -> Result<Option<Telemetry>> {
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
            local_ranks: local_ranks(|k| std::env::var(k).ok(), i.nranks),
        },
        None => LocalRank { rank: None, local_rank: 0, local_ranks: 1 },
    };
    let cfg = TelemetryConfig::from_env(&env, who, |k| std::env::var(k).ok())?;
    if !cfg.enabled {
        return Ok(None);
    }
    let t = Telemetry::start(&cfg, Source::Runtime, Some(recorder::global()))?;
    let whose = info.map_or_else(|| "ranks of this process".to_string(), |i| format!("rank {}", i.rank));
    let url = t.url();
    // The other ranks reach this one at the address it serves on; a wildcard one by this host's name.
    recorder::global().set_endpoint(t.reachable_url());
    let aggregate = if cfg.aggregate_peers.is_empty() { String::new() } else { format!(", {url}/metrics/aggregate") };
    println!(
        "collscope: telemetry for {whose} at {url}/metrics{aggregate}, {url}/api/v1/snapshot, {url}/api/v1/events"
    );
    std::io::stdout().flush()?;
    Ok(Some(t))
}
