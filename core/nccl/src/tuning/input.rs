//! What the tuning model needs to know about a communicator: plain data, so it can be built from the graph
//! search, from a log, or by hand in a test.

use crate::graph::Found;
use collscope_model::{Algorithm, PathType, Pattern};
use serde::{Deserialize, Serialize};

/// The part of a search result the tuning model reads (NCCL 2.28.9 `struct ncclTopoGraph`, after the
/// all-ranks reduction in `initTransportsRank`: min channels/bandwidths, max path types).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AlgoGraph {
    pub pattern: Pattern,
    pub n_channels: u32,
    pub bw_intra: f64,
    pub bw_inter: f64,
    /// Extra latency of the network device, us (`latencyInter`; 0 for IB).
    #[serde(default)]
    pub latency_inter: f64,
    pub type_intra: PathType,
    pub type_inter: PathType,
    pub same_channels: bool,
}

/// The one conversion from the search's result: the tuning model reads neither the channels nor the lines.
impl From<&Found> for AlgoGraph {
    fn from(f: &Found) -> Self {
        let g = &f.graph;
        AlgoGraph {
            pattern: g.pattern,
            n_channels: g.n_channels,
            bw_intra: g.bw_intra,
            bw_inter: g.bw_inter,
            latency_inter: f.latency_inter,
            type_intra: g.type_intra,
            type_inter: g.type_inter,
            same_channels: g.same_channels,
        }
    }
}

/// The graphs NCCL hands to `ncclTopoTuneModel`, one per search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TuningGraphs {
    pub tree: AlgoGraph,
    pub ring: AlgoGraph,
    pub collnet_direct: AlgoGraph,
    pub collnet_chain: AlgoGraph,
    pub nvls: AlgoGraph,
}

impl TuningGraphs {
    /// NCCL 2.28.9 `init.cc`: NVLSTree uses the NVLS graph and PAT the tree graph.
    pub fn for_algo(&self, a: Algorithm) -> &AlgoGraph {
        match a {
            Algorithm::Tree | Algorithm::Pat => &self.tree,
            // collscope's OneShot is priced on the ring (never asked for here: NCCL's tables hold NCCL's algorithms).
            Algorithm::Ring | Algorithm::OneShot => &self.ring,
            Algorithm::CollNetDirect => &self.collnet_direct,
            Algorithm::CollNetChain => &self.collnet_chain,
            Algorithm::Nvls | Algorithm::NvlsTree => &self.nvls,
        }
    }

    /// Ring and tree graphs as given, the others as not searched (ids as in init.cc's graph array).
    pub fn ring_tree(ring: AlgoGraph, tree: AlgoGraph) -> Self {
        TuningGraphs {
            tree,
            ring,
            collnet_direct: AlgoGraph::from(&Found::none(4, Pattern::CollnetDirect)),
            collnet_chain: AlgoGraph::from(&Found::none(2, Pattern::Tree)),
            nvls: AlgoGraph::from(&Found::none(3, Pattern::Nvls)),
        }
    }
}

/// `NCCL_TOPO_CPU_ARCH_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuArch {
    #[default]
    X86,
    Power,
    Arm,
    Mixed,
}

/// `NCCL_TOPO_CPU_VENDOR_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuVendor {
    #[default]
    Intel,
    Amd,
    Zhaoxin,
    Mixed,
    Other,
}

impl CpuArch {
    /// From the architecture string collscope's topology keeps ("x86_64", "arm64", "ppc64").
    pub fn from_name(arch: &str) -> Self {
        match arch.to_ascii_lowercase().as_str() {
            "ppc64" | "ppc64le" | "power" => CpuArch::Power,
            "arm64" | "aarch64" | "arm" => CpuArch::Arm,
            _ => CpuArch::X86,
        }
    }
}

impl CpuVendor {
    /// From the vendor string ("GenuineIntel", "AuthenticAMD", "HygonGenuine", "CentaurHauls", "Shanghai").
    pub fn from_name(vendor: &str) -> Self {
        match vendor.trim() {
            "GenuineIntel" | "intel" | "Intel" => CpuVendor::Intel,
            "AuthenticAMD" | "HygonGenuine" | "amd" | "AMD" => CpuVendor::Amd,
            "CentaurHauls" | "Shanghai" => CpuVendor::Zhaoxin,
            _ => CpuVendor::Other,
        }
    }
}

/// A communicator as the tuning model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuningInput {
    pub graphs: TuningGraphs,
    pub n_ranks: u32,
    pub n_nodes: u32,
    /// The most ranks on one node (`maxLocalRanks`; `localRanks` for identical nodes).
    pub local_ranks: u32,
    /// Compute capability as NCCL keeps it (80 for sm_80); collscope's CPU ranks use the modelled GPU's.
    pub min_comp_cap: u32,
    pub max_comp_cap: u32,
    pub cpu_arch: CpuArch,
    pub cpu_vendor: CpuVendor,
    /// Channels after connect (`comm->nChannels`: the search's channels, duplicated).
    pub coll_channels: u32,
    /// NVLS multicast available (`comm->nvlsSupport`) and its channel count.
    pub nvls_support: bool,
    pub nvls_channels: u32,
    /// `config.collnetEnable` after NCCL's checks, the CollNet heads per node, and whether the CollNet plugin
    /// offers allgather / reducescatter.
    pub collnet_enable: bool,
    pub collnet_heads: u32,
    pub collnet_allgather: bool,
    pub collnet_reducescatter: bool,
    /// NVSwitches in the topology (CollNetDirect needs one).
    pub nvs_count: u32,
    /// The network is driven by the host (`NCCL_NET_DEVICE_HOST`), as PAT requires.
    pub net_device_host: bool,
    /// CUDA runtime version NCCL was built with (12080 for 12.8); one LL128 rule depends on 11.8.
    pub cudart_version: u32,
}

impl TuningInput {
    /// A communicator of `n_nodes` identical nodes of `ranks_per_node` ranks, with the given graphs.
    pub fn new(graphs: TuningGraphs, n_nodes: u32, ranks_per_node: u32, comp_cap: u32) -> Self {
        let coll_channels = graphs.ring.n_channels.min(graphs.tree.n_channels) * 2;
        TuningInput {
            graphs,
            n_ranks: n_nodes * ranks_per_node,
            n_nodes,
            local_ranks: ranks_per_node,
            min_comp_cap: comp_cap,
            max_comp_cap: comp_cap,
            cpu_arch: CpuArch::X86,
            cpu_vendor: CpuVendor::Intel,
            coll_channels,
            nvls_support: false,
            nvls_channels: 0,
            collnet_enable: false,
            collnet_heads: 0,
            collnet_allgather: false,
            collnet_reducescatter: false,
            nvs_count: 0,
            net_device_host: true,
            cudart_version: 12080,
        }
    }
}
