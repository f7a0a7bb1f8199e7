//! Telemetry settings from the environment and the command line.
//!
//! | variable | meaning |
//! |---|---|
//! | `COLLSCOPE_TELEMETRY` | `0` turns telemetry off (no recording, no server); default `1` |
//! | `COLLSCOPE_METRICS_ADDR` | base `HOST:PORT` (or `PORT`) to serve on; each process adds its local rank to the port |
//! | `COLLSCOPE_METRICS_AGGREGATE` | `1`: local rank 0 also serves `/metrics/aggregate`, every local rank's metrics in one |
//! | `COLLSCOPE_TELEMETRY_RECORDS` | records of each kind kept for `/api/v1/snapshot` (default 4096) |
//! | `COLLSCOPE_DUMP_DIR` | where each rank writes its dump (calls, stalls, findings) on a timeout, a peer's failure, SIGTERM or `POST /api/v1/dump` |
//! | `COLLSCOPE_NOT_ARRIVED_S` | seconds ranks wait in a call before `/api/v1/job` names the ranks not there (default 3) |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | OTLP/HTTP base URL; when set, metrics and spans are pushed there |
//! | `OTEL_SERVICE_NAME` | the OTel `service.name` (default `collscope`) |
//! | `SLURM_JOB_ID` | the job id put on OTel resources |

use crate::otel::OtelConfig;
use collscope_debug::env::{Env, EnvError};
use collscope_model::job::STALL_AFTER_S;
use collscope_model::Bounds;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// The port served when `COLLSCOPE_METRICS_ADDR` gives none.
pub const DEFAULT_PORT: u16 = 9470;
/// How long a client may take to send a request's head, on a new connection or between requests on a kept one.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections one server holds at once (event streams included); past it a new one gets 503 and is closed.
pub const MAX_CONNECTIONS: usize = 512;
/// Event streams (`/api/v1/events`) one server holds at once: a few viewers a rank (the TUI, a dashboard), far
/// below [`MAX_CONNECTIONS`], so held streams never keep scrapes, snapshots and the job view out. Past it a stream
/// request gets 503 and its connection is closed.
pub const MAX_STREAMS: usize = 64;
/// How long a write to a client may wait for it to read: a client that stops reading (an event stream nobody
/// drains) is closed then. Twice the event stream's 15 s keep-alive, so a reader that is merely slow stays.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    pub enabled: bool,
    /// Base address; a process serves on its port plus its local rank (port 0: any free port).
    pub addr: SocketAddr,
    pub local_rank: u32,
    /// Other local ranks' servers whose metrics `/metrics/aggregate` merges (local rank 0 only).
    pub aggregate_peers: Vec<SocketAddr>,
    pub limits: Bounds,
    /// Events the runtime may queue between two drains.
    pub queue_capacity: usize,
    /// How often queued events and the communicators' records are taken into the state (often enough for a live
    /// view, rarely enough that reading costs the ranks nothing measurable).
    pub drain_interval: Duration,
    pub otel: Option<OtelConfig>,
    /// `COLLSCOPE_PROMETHEUS_SD_DIR`: where this server writes its Prometheus target file ([`crate::discovery`]).
    pub sd_dir: Option<PathBuf>,
    /// The labels Prometheus gives that target (`collscope_job`: the Slurm job, where there is one).
    pub sd_labels: Vec<(&'static str, String)>,
    /// [`HEADER_TIMEOUT`], [`MAX_CONNECTIONS`], [`MAX_STREAMS`] and [`WRITE_TIMEOUT`], smaller in tests.
    pub header_timeout: Duration,
    pub max_connections: usize,
    pub max_streams: usize,
    pub write_timeout: Duration,
    /// `COLLSCOPE_NOT_ARRIVED_S`: how long ranks wait in a call before the job view names the ranks not there.
    pub not_arrived_after: Duration,
    /// `COLLSCOPE_DUMP_DIR`: where each rank writes its dump ([`crate::dump`]) on a timeout, a peer's failure,
    /// SIGTERM or `POST /api/v1/dump`; unset: no dumps.
    pub dump_dir: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error("{name}='{value}' is not valid: expected {expected}")]
    Invalid { name: &'static str, value: String, expected: String },
}

/// Who this process is among the ranks of its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LocalRank {
    pub rank: Option<u32>,
    pub local_rank: u32,
    pub local_ranks: u32,
}

impl LocalRank {
    /// This process among its node's ranks, from the first launcher whose local rank variable is set (read
    /// through `get`); without one, the only rank of its node.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<LocalRank, ConfigError> {
        let num = |name: &'static str| -> Result<Option<u32>, ConfigError> {
            let Some(v) = get(name).filter(|v| !v.trim().is_empty()) else { return Ok(None) };
            v.trim().parse().map(Some).map_err(|_| ConfigError::Invalid {
                name,
                value: v,
                expected: "a non-negative integer".into(),
            })
        };
        // Each launcher's variables, in the order collscope's runtime reads them (`params::LAUNCHERS`).
        for l in collscope_debug::params::LAUNCHERS {
            if let Some(local_rank) = num(l.local_rank)? {
                let local_ranks = local_ranks(&get, local_rank + 1).max(local_rank + 1);
                return Ok(LocalRank { rank: num(l.rank)?, local_rank, local_ranks });
            }
        }
        Ok(LocalRank { rank: None, local_rank: 0, local_ranks: 1 })
    }
}

/// Ranks on this node as the launcher says (Open MPI, Slurm, torchrun: `params::LAUNCHERS`), else `default`.
pub fn local_ranks(get: impl Fn(&str) -> Option<String>, default: u32) -> u32 {
    collscope_debug::params::LAUNCHERS
        .iter()
        .filter_map(|l| l.local_size)
        .find_map(|k| {
            let v = get(k)?;
            // Slurm writes `4(x2)` for 4 tasks on each of 2 nodes.
            v.split('(').next()?.trim().parse().ok()
        })
        .unwrap_or(default)
}

impl TelemetryConfig {
    /// Settings on loopback at the default port, without OTLP.
    pub fn new(addr: SocketAddr) -> Self {
        TelemetryConfig {
            enabled: true,
            addr,
            local_rank: 0,
            aggregate_peers: Vec::new(),
            limits: Bounds::default(),
            queue_capacity: collscope_model::observe::DEFAULT_CAPACITY,
            drain_interval: Duration::from_millis(100),
            otel: None,
            sd_dir: None,
            sd_labels: Vec::new(),
            header_timeout: HEADER_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            max_streams: MAX_STREAMS,
            write_timeout: WRITE_TIMEOUT,
            not_arrived_after: Duration::from_secs_f64(STALL_AFTER_S),
            dump_dir: None,
        }
    }

    /// Reads the `COLLSCOPE_*` settings from `env` and the OTel and Slurm variables through `lookup`.
    pub fn from_env(env: &Env, who: LocalRank, lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let default_addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), DEFAULT_PORT);
        let addr = match env.str("COLLSCOPE_METRICS_ADDR") {
            Some(v) => parse_addr(v).map_err(|expected| ConfigError::Invalid {
                name: "COLLSCOPE_METRICS_ADDR",
                value: v.to_string(),
                expected,
            })?,
            None => default_addr,
        };
        let mut cfg = TelemetryConfig::new(addr);
        cfg.enabled = env_flag(env, "COLLSCOPE_TELEMETRY", true)?;
        cfg.local_rank = who.local_rank;
        let records = env.int("COLLSCOPE_TELEMETRY_RECORDS", 4096)?;
        if records < 1 {
            return Err(ConfigError::Invalid {
                name: "COLLSCOPE_TELEMETRY_RECORDS",
                value: records.to_string(),
                expected: "a positive number of records".into(),
            });
        }
        cfg.limits = Bounds::histories(records as usize);
        cfg.not_arrived_after = env.seconds("COLLSCOPE_NOT_ARRIVED_S", STALL_AFTER_S as i64)?;
        if env_flag(env, "COLLSCOPE_METRICS_AGGREGATE", false)? && who.local_rank == 0 {
            if addr.port() == 0 {
                return Err(ConfigError::Invalid {
                    name: "COLLSCOPE_METRICS_AGGREGATE",
                    value: "1".into(),
                    expected: "a fixed port in COLLSCOPE_METRICS_ADDR (port 0 gives each rank a random one)".into(),
                });
            }
            cfg.aggregate_peers = (1..who.local_ranks.max(1))
                .map(|r| port_for(addr, r).map(|p| SocketAddr::new(addr.ip(), p)))
                .collect::<Result<_, _>>()?;
        }
        cfg.dump_dir = env.str("COLLSCOPE_DUMP_DIR").filter(|v| !v.is_empty()).map(PathBuf::from);
        cfg.sd_dir = env.str("COLLSCOPE_PROMETHEUS_SD_DIR").filter(|v| !v.is_empty()).map(PathBuf::from);
        cfg.sd_labels =
            lookup("SLURM_JOB_ID").filter(|v| !v.is_empty()).map(|j| ("collscope_job", j)).into_iter().collect();
        cfg.otel = lookup("OTEL_EXPORTER_OTLP_ENDPOINT").filter(|v| !v.is_empty()).map(|endpoint| OtelConfig {
            endpoint,
            service_name: lookup("OTEL_SERVICE_NAME").filter(|v| !v.is_empty()).unwrap_or_else(|| "collscope".into()),
            host: collscope_debug::sys::hostname(),
            rank: who.rank,
            job_id: lookup("SLURM_JOB_ID").filter(|v| !v.is_empty()),
            export_interval: Duration::from_secs(10),
        });
        Ok(cfg)
    }

    /// The address this process serves on: the base port plus the local rank.
    pub fn bind_addr(&self) -> Result<SocketAddr, ConfigError> {
        Ok(SocketAddr::new(self.addr.ip(), port_for(self.addr, self.local_rank)?))
    }
}

fn port_for(base: SocketAddr, local_rank: u32) -> Result<u16, ConfigError> {
    if base.port() == 0 {
        return Ok(0);
    }
    u16::try_from(u32::from(base.port()) + local_rank).map_err(|_| ConfigError::Invalid {
        name: "COLLSCOPE_METRICS_ADDR",
        value: base.to_string(),
        expected: format!("a base port that leaves room for local rank {local_rank} below 65536"),
    })
}

fn env_flag(env: &Env, name: &'static str, default: bool) -> Result<bool, ConfigError> {
    match env.int(name, i64::from(default))? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(ConfigError::Invalid { name, value: v.to_string(), expected: "0 or 1".into() }),
    }
}

/// `HOST:PORT`, `[V6]:PORT`, `:PORT` or `PORT` (host 127.0.0.1); `localhost` means 127.0.0.1.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let expected = || "HOST:PORT or PORT with an IP address (or localhost) and a port 0-65535".to_string();
    let t = s.trim();
    if let Ok(port) = t.trim_start_matches(':').parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok(a);
    }
    match t.rsplit_once(':') {
        Some((host, port)) if host.eq_ignore_ascii_case("localhost") => {
            let port = port.parse::<u16>().map_err(|_| expected())?;
            Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port))
        }
        _ => Err(expected()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn addresses_accept_host_port_or_port_and_name_the_input_when_bad() {
        assert_eq!(parse_addr("9500").unwrap().to_string(), "127.0.0.1:9500");
        assert_eq!(parse_addr(":9500").unwrap().to_string(), "127.0.0.1:9500");
        assert_eq!(parse_addr("0.0.0.0:80").unwrap().to_string(), "0.0.0.0:80");
        assert_eq!(parse_addr("[::1]:80").unwrap().to_string(), "[::1]:80");
        assert_eq!(parse_addr("localhost:81").unwrap().to_string(), "127.0.0.1:81");
        assert!(parse_addr("host:99999").is_err());
        let env = Env::from_pairs([("COLLSCOPE_METRICS_ADDR", "nowhere:x")]);
        let e = TelemetryConfig::from_env(&env, LocalRank::default(), lookup(&[])).unwrap_err().to_string();
        assert!(e.contains("COLLSCOPE_METRICS_ADDR='nowhere:x'") && e.contains("HOST:PORT"), "{e}");
    }

    #[test]
    fn the_local_rank_comes_from_the_first_launcher_that_sets_one() {
        let who = |pairs| LocalRank::from_env(lookup(pairs)).unwrap();
        assert_eq!(who(&[]), LocalRank { rank: None, local_rank: 0, local_ranks: 1 });
        const TORCHRUN: &[(&str, &str)] = &[("RANK", "5"), ("LOCAL_RANK", "1"), ("LOCAL_WORLD_SIZE", "4")];
        assert_eq!(who(TORCHRUN), LocalRank { rank: Some(5), local_rank: 1, local_ranks: 4 });
        const SLURM: &[(&str, &str)] =
            &[("SLURM_PROCID", "9"), ("SLURM_LOCALID", "3"), ("SLURM_NTASKS_PER_NODE", "4(x2)"), ("LOCAL_RANK", "0")];
        assert_eq!(who(SLURM), LocalRank { rank: Some(9), local_rank: 3, local_ranks: 4 });
        assert_eq!(
            who(&[("OMPI_COMM_WORLD_LOCAL_RANK", "2")]),
            LocalRank { rank: None, local_rank: 2, local_ranks: 3 }
        );
        let e = LocalRank::from_env(lookup(&[("SLURM_LOCALID", "x")])).unwrap_err().to_string();
        assert!(e.contains("SLURM_LOCALID='x'") && e.contains("non-negative integer"), "{e}");
        assert_eq!(local_ranks(lookup(&[]), 7), 7);
    }

    #[test]
    fn each_local_rank_gets_its_own_port_and_rank_zero_aggregates() {
        let env = Env::from_pairs([("COLLSCOPE_METRICS_ADDR", "127.0.0.1:9600"), ("COLLSCOPE_METRICS_AGGREGATE", "1")]);
        let who = LocalRank { rank: Some(8), local_rank: 0, local_ranks: 3 };
        let cfg = TelemetryConfig::from_env(&env, who, lookup(&[])).unwrap();
        assert_eq!(cfg.bind_addr().unwrap().port(), 9600);
        let peers: Vec<_> = cfg.aggregate_peers.iter().map(|a| a.port()).collect();
        assert_eq!(peers, [9601, 9602]);
        let cfg = TelemetryConfig::from_env(&env, LocalRank { local_rank: 2, ..who }, lookup(&[])).unwrap();
        assert_eq!(cfg.bind_addr().unwrap().port(), 9602);
        assert!(cfg.aggregate_peers.is_empty());
    }

    #[test]
    fn defaults_are_loopback_on_and_without_otlp() {
        let cfg = TelemetryConfig::from_env(&Env::default(), LocalRank::default(), lookup(&[])).unwrap();
        assert!(cfg.enabled);
        assert_eq!(cfg.addr.to_string(), format!("127.0.0.1:{DEFAULT_PORT}"));
        assert!(cfg.otel.is_none());
    }

    #[test]
    fn off_switch_and_otel_variables_are_read() {
        let env = Env::from_pairs([("COLLSCOPE_TELEMETRY", "0")]);
        let vars = lookup(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"), ("SLURM_JOB_ID", "77")]);
        let who = LocalRank { rank: Some(3), local_rank: 1, local_ranks: 2 };
        let cfg = TelemetryConfig::from_env(&env, who, vars).unwrap();
        assert!(!cfg.enabled);
        let otel = cfg.otel.unwrap();
        assert_eq!(otel.endpoint, "http://127.0.0.1:4318");
        assert_eq!((otel.rank, otel.job_id.as_deref(), otel.service_name.as_str()), (Some(3), Some("77"), "collscope"));
        let e = TelemetryConfig::from_env(&Env::from_pairs([("COLLSCOPE_TELEMETRY", "2")]), who, lookup(&[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("COLLSCOPE_TELEMETRY='2'") && e.contains("0 or 1"), "{e}");
    }
}
