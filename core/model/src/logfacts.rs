//! Facts only a log carries: how the reading went, GPUDirect RDMA checks, plugins, and what was inferred
//! rather than printed.

use super::diag::LineRef;
use super::names::{Algorithm, Protocol};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Counts of what the log reader saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogStats {
    pub lines: u64,
    pub bytes: u64,
    /// Lines with an NCCL prefix (`NCCL INFO|WARN|TRACE`, or the version line).
    pub nccl_lines: u64,
    /// Lines of other programs, kept as context.
    pub context_lines: u64,
    /// A line its thread (host, pid and tid printed) printed just before: an echo (output captured twice), dropped.
    pub duplicate_lines: u64,
    /// A line identical to the one before it, kept as data: its thread unknown (no prefix), or a per-call line
    /// (each call prints its decision again).
    #[serde(default)]
    pub repeated_lines: u64,
    /// NCCL messages read without NCCL's `host:pid:tid [dev] NCCL INFO` prefix (a pasted excerpt).
    #[serde(default)]
    pub bare_lines: u64,
    /// Stretches of such lines (between prefixed lines of a file), each read as one anonymous process.
    #[serde(default)]
    pub bare_processes: u64,
    /// Two lines written into one, or control characters inside a line.
    pub garbled_lines: u64,
    /// A line that continues the NCCL line before it.
    pub wrapped_lines: u64,
    /// Lines cut short (`...`) or longer than the reader keeps.
    pub truncated_lines: u64,
    /// Lines that were not valid UTF-8 (read lossily).
    pub invalid_utf8_lines: u64,
    /// NCCL lines no parser understood, or that said nothing the reader could place.
    pub unparsed_nccl_lines: u64,
    /// Calls left out of the per-communicator op history (it keeps the latest ones).
    #[serde(default)]
    pub dropped_ops: u64,
}

/// One GPUDirect RDMA check as NCCL printed it: per HCA (`NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'
/// (no module)`) or per GPU and NIC (`GPU Direct RDMA Disabled for GPU 2 / HCA 0 (distance 3 > 2)`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GdrCheck {
    pub host: Option<String>,
    /// The rank the check was made for: printed (2.24 and later) or the printing process's.
    pub rank: Option<u32>,
    /// The GPU as the line names it (a device index or bus id before 2.24, the rank since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GdrGpu>,
    /// The network that printed it (`NET/IB : ...`), where the line names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<String>,
    /// HCA index or NCCL's NIC id in hex.
    pub hca: Option<String>,
    pub hca_name: Option<String>,
    pub enabled: bool,
    pub distance: Option<u32>,
    /// `NCCL_NET_GDR_LEVEL` in force (as the number NCCL compared with).
    pub level: Option<u32>,
    /// What enabled or disabled it, in the line's words: "distance 5 > 4", "no module", "not supported by GPU",
    /// "nvidia-peermem", or the words of a line that said so (a network plugin's "disabling GDR").
    pub reason: Option<String>,
    /// The line that said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<LineRef>,
}

impl GdrCheck {
    /// Where the check was made, in words: the host, the GPU as printed, the NIC (`node01 GPU 2 / HCA 0`).
    pub fn place(&self) -> String {
        let mut out = self.host.clone().unwrap_or_else(|| "host ?".to_string());
        if let Some(gpu) = &self.gpu {
            out.push_str(&format!(" {gpu}"));
        }
        if let Some(nic) = self.hca_name.as_deref().or(self.hca.as_deref()) {
            out.push_str(&format!("{}HCA {nic}", if self.gpu.is_some() { " / " } else { " " }));
        }
        out
    }
}

/// How a GPU Direct RDMA line names the GPU: NCCL changed it over releases (`src/transport/net_ib.cu` in 2.3,
/// `src/transport/net.cc` in 2.4 and 2.5, `src/graph/paths.cc` since 2.6; 2.28.9 prints the rank).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GdrGpu {
    /// 2.24 and later: `GPU 3` is rank 3.
    Rank(u32),
    /// 2.3 and 2.4: the CUDA device (`GPU 2`, 2.4's `GPU 2[2]` adding the NVML device), not a rank.
    Device(u32),
    /// 2.5 to 2.23: the GPU's PCI bus id (`GPU 1b000`).
    BusId(String),
}

impl std::fmt::Display for GdrGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GdrGpu::Rank(r) => write!(f, "GPU of rank {r}"),
            GdrGpu::Device(d) => write!(f, "GPU {d}"),
            GdrGpu::BusId(b) => write!(f, "GPU {b}"),
        }
    }
}

/// A plugin line: `NET/Plugin: Loaded net plugin IBext (v8)`, `No plugin found (libnccl-net.so)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginNote {
    /// "net", "collnet", "gin", "tuner", "profiler", "env".
    pub kind: String,
    pub name: Option<String>,
    pub loaded: bool,
    pub text: String,
    /// The plugin API version NCCL loaded it as (`(v8)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
}

/// A per-call decision that names no collective: NCCL 2.21 to 2.23 print `65536 Bytes -> Algo 1 proto 2 time
/// 34.69` on rank 0 (`src/enqueue.cc`), and without COLL lines nothing says which call it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnnamedDecision {
    pub bytes: u64,
    pub algo: Algorithm,
    pub proto: Protocol,
    pub time_us: Option<f64>,
    pub rank: Option<u32>,
}

/// A fact the log did not print but the reader concluded, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inference {
    pub fact: String,
    pub value: String,
    pub reason: String,
}

/// What a log says beyond the shared model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LogFacts {
    pub stats: LogStats,
    pub gdr_checks: Vec<GdrCheck>,
    pub plugins: Vec<PluginNote>,
    pub inferred: Vec<Inference>,
    /// `threadThresholds ...` as printed (distinct values).
    pub thread_thresholds: Vec<String>,
    /// NVLS was set up (`NVLS comm ...`, `Connected NVLS tree`).
    #[serde(default)]
    pub nvls_used: bool,
    /// `Connected all rings, use ring PXN x GDR y`.
    pub ring_pxn: Option<bool>,
    pub ring_gdr: Option<bool>,
    /// `Collective/Protocol` and `Collective/Algorithm` pairs the enabled matrix shows as off.
    #[serde(default)]
    pub disabled: Vec<String>,
    /// Every NCCL version string printed, with the ranks or hosts that printed it.
    pub versions: Vec<(String, Vec<String>)>,
    /// The log is RCCL's (AMD's fork of NCCL): `RCCL version`, or RCCL's own fields on NCCL's lines.
    #[serde(default)]
    pub rccl: bool,
    /// The tuning table's `Max NThreads` row: threads per channel for each algorithm and protocol.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max_threads: BTreeMap<Algorithm, BTreeMap<Protocol, u32>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unnamed_decisions: Vec<UnnamedDecision>,
    /// Peers whose proxy connection closed (each host and local rank once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers_closed: Vec<PeerClosed>,
    /// What NCCL's memory traces (`NCCL_DEBUG_SUBSYS=ALLOC`) say it allocated, all processes together.
    #[serde(default, skip_serializing_if = "Allocations::is_empty")]
    pub allocations: Allocations,
    /// Topology detection's notes as printed (`Topology detection : could not read ...`, a NIC `Attaching to
    /// first CPU`, `Loading topology file ...`), distinct.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_notes: Vec<String>,
}

/// `[Service thread] Connection closed by localRank 1` (NCCL 2.28.9 `src/proxy.cc`): a process on `host` saw
/// the process of that local rank go away, usually because it died.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerClosed {
    pub host: Option<String>,
    pub local_rank: u32,
    /// The rank of the process that printed it, where known.
    pub seen_by: Option<u32>,
}

/// Allocations NCCL's memory traces printed: how many, and their bytes, on GPUs and in host memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocations {
    pub device_calls: u64,
    pub device_bytes: u64,
    pub host_calls: u64,
    pub host_bytes: u64,
}

impl Allocations {
    pub fn is_empty(&self) -> bool {
        self.device_calls == 0 && self.host_calls == 0
    }
}
