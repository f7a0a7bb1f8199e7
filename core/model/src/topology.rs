//! The machine as NCCL sees it: typed nodes (GPU, PCI switch, NVSwitch, CPU/NUMA domain, NIC, NET port),
//! bandwidth-weighted links between them, and the best path from every node to every GPU and NET.
//! Node, link and path kinds keep NCCL 2.28.9's numeric order (`src/graph/topo.h`) because NCCL compares
//! them numerically ("type <= P2P level").

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! ordered_kind {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $id:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[allow(clippy::upper_case_acronyms)]
        pub enum $name { $($variant = $id),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => stringify!($variant)),+ }
            }
            pub fn id(self) -> u8 { self as u8 }
            pub fn from_id(id: u8) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| *v as u8 == id)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.pad(self.as_str()) }
        }

        impl std::str::FromStr for $name {
            type Err = super::names::UnknownName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::ALL.iter().copied().find(|v| v.as_str().eq_ignore_ascii_case(s.trim())).ok_or_else(|| {
                    super::names::UnknownName {
                        kind: stringify!($name),
                        value: s.to_string(),
                        expected: Self::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", "),
                    }
                })
            }
        }
    };
}

ordered_kind!(
    /// Node types (`GPU 0` .. `NET 5`).
    NodeType { GPU = 0, PCI = 1, NVS = 2, CPU = 3, NIC = 4, NET = 5 }
);

ordered_kind!(
    /// Link types; the gaps are the path types that are not links.
    LinkType { LOC = 0, NVL = 1, C2C = 3, PCI = 4, SYS = 9, NET = 10 }
);

ordered_kind!(
    /// Path types, from best to worst: a path's type is the worst of its hops.
    PathType { LOC = 0, NVL = 1, NVB = 2, C2C = 3, PIX = 4, PXB = 5, P2C = 6, PXN = 7, PHB = 8, SYS = 9, NET = 10, DIS = 11 }
);

/// NCCL's 64-bit node id: the top 8 bits say which system (node of a multi-host fused topology), the rest
/// is the local id (a PCI bus id as a number for GPUs/PCI/NICs, the NUMA id for CPUs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId {
    pub system: u64,
    pub local: u64,
}

/// CPU architecture, vendor and model as NCCL numbers them (`NCCL_TOPO_CPU_*`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuAttrs {
    /// "x86_64", "arm64", "ppc64".
    pub arch: String,
    /// "GenuineIntel", "AuthenticAMD", "HygonGenuine", "CentaurHauls", "Shanghai".
    pub vendor: String,
    pub family_id: Option<u32>,
    pub model_id: Option<u32>,
    pub numa_id: Option<i32>,
    /// CPU affinity mask as sysfs prints it (hex words separated by commas).
    pub affinity: Option<String>,
}

/// PCI device attributes as sysfs and NCCL's XML carry them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PciAttrs {
    /// "0000:47:00.0".
    pub busid: String,
    pub class: Option<String>,
    pub vendor: Option<String>,
    pub device: Option<String>,
    pub subsystem_vendor: Option<String>,
    pub subsystem_device: Option<String>,
    /// "16.0 GT/s PCIe".
    pub link_speed: Option<String>,
    pub link_width: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuAttrs {
    /// Device index (NVML / CUDA ordinal).
    pub dev: i32,
    /// The communicator rank on this GPU, when known.
    pub rank: Option<i32>,
    /// Compute capability as NCCL keeps it: 80 for sm_80.
    pub sm: u32,
    pub gdr: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetAttrs {
    pub dev: i32,
    /// Device name as the plugin reports it ("mlx5_0", "eth0").
    pub name: String,
    /// GB/s, as NCCL keeps it (speed in Mbps / 8000).
    pub bw: f64,
    pub latency: f64,
    pub port: u32,
    pub guid: Option<String>,
    pub max_conn: Option<u32>,
    pub gdr: bool,
    pub coll: bool,
}

/// A node and what NCCL knows of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub kind: NodeType,
    pub id: NodeId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuAttrs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<PciAttrs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuAttrs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<NetAttrs>,
}

impl Node {
    /// NCCL's printed name, `GPU/0-47000` (`%s/%lx-%lx` of type, system id, local id).
    pub fn name(&self) -> String {
        format!("{}/{:x}-{:x}", self.kind, self.id.system, self.id.local)
    }
}

/// A directed link; NCCL keeps one in each direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Index into `Topology::nodes`.
    pub from: usize,
    pub to: usize,
    pub kind: LinkType,
    /// GB/s.
    pub bw: f64,
}

/// The best path NCCL found from one node to another (GPU or NET targets, as NCCL computes them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Path {
    pub from: usize,
    pub to: usize,
    pub kind: PathType,
    /// GB/s, the narrowest link on the way.
    pub bw: f64,
    /// Number of links.
    pub hops: u32,
    /// The links walked, as indices into `Topology::links`, from `from` towards `to` (empty when the
    /// producer, e.g. a log, does not know them). Graph search subtracts bandwidth along them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<usize>,
}

/// One host's topology.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    pub host: Option<String>,
    /// Where it came from: "detected", "preset:dgx-a100", "file:/path.xml", "log".
    pub source: String,
    pub nodes: Vec<Node>,
    pub links: Vec<Link>,
    #[serde(default)]
    pub paths: Vec<Path>,
    pub max_bw: f64,
    pub total_bw: f64,
}

impl Topology {
    pub fn nodes_of(&self, kind: NodeType) -> impl Iterator<Item = (usize, &Node)> {
        self.nodes.iter().enumerate().filter(move |(_, n)| n.kind == kind)
    }

    pub fn path(&self, from: usize, to: usize) -> Option<&Path> {
        self.paths.iter().find(|p| p.from == from && p.to == to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_keep_nccl_ids_and_order() {
        assert_eq!(PathType::PIX.id(), 4);
        assert_eq!(PathType::DIS.id(), 11);
        assert_eq!(LinkType::NET.id(), 10);
        assert!(PathType::PXB < PathType::PHB);
        assert_eq!(PathType::from_id(9), Some(PathType::SYS));
        assert_eq!("phb".parse::<PathType>().unwrap(), PathType::PHB);
        assert!("PIXX".parse::<PathType>().is_err());
    }

    #[test]
    fn node_name_matches_nccl_print() {
        let n = Node {
            kind: NodeType::GPU,
            id: NodeId { system: 0, local: 0x47000 },
            cpu: None,
            pci: None,
            gpu: None,
            net: None,
        };
        assert_eq!(n.name(), "GPU/0-47000");
    }
}
