//! The machine as NCCL sees it: topology XML (read, detected or preset), the node/link graph built from it,
//! and NCCL's paths, P2P and GPUDirect RDMA decisions (modelled on NCCL 2.28.9, `src/graph/`).
//!
//! For other parts of collscope:
//! - [`load`] a [`TopoSource`] (preset, file, host detection) into a [`TopoXml`]; [`build()`] it into a
//!   `model::Topology` with nodes, links, paths (`Path::links` lists the links walked) and `max_bw`/`total_bw`;
//!   [`dump`] / [`dump_if_requested`] write NCCL XML.
//! - Decisions on a built topology (node indices): [`check_p2p`], [`check_gdr`], [`paths::check_net`],
//!   [`paths::need_flush`], [`paths::local_net`], [`paths::local_gpu`], [`paths::pxn_proxy`],
//!   [`paths::local_cpu`], [`paths::nearest`], [`paths::search_init_bw`] (inter-node `maxBw`/`totalBw`).
//! - Constants and CPU kinds: [`bandwidth`] (`LOC_BW`, NVLink/PCI/QPI figures, `intel_p2p_overhead`, `CpuKind`).
//! - NCCL's printouts: [`mod@print`].
//!
//! Typical use:
//! ```
//! use collscope_nccl::topo::{self, TopoEnv, TopoSource};
//! let xml = topo::load(&TopoSource::Preset("dgx-a100".into())).unwrap();
//! let topology = topo::build(&xml, &TopoEnv::default()).unwrap();
//! assert_eq!(topology.max_bw, 240.0);
//! ```

pub mod bandwidth;
pub mod build;
pub mod detect;
pub mod error;
pub mod gdr;
pub mod overlay;
pub mod paths;
pub mod presets;
pub mod print;
pub mod settings;
pub mod trim;
pub mod xml;

pub use error::TopoError;
pub use paths::{check_gdr, check_p2p, GdrDecision, GdrMode, P2pDecision};
pub use settings::TopoEnv;
pub use xml::TopoXml;

use collscope_debug::env::Env;
use collscope_model::{NodeType, Topology};
use std::path::PathBuf;

/// Where a topology comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopoSource {
    /// A shipped reference machine (see [`presets::names`]).
    Preset(String),
    /// An NCCL topology XML file.
    File(PathBuf),
    /// The running host, read from the sysfs/procfs tree under `root` (`/` for the real one).
    Detect { root: PathBuf },
}

impl TopoSource {
    /// `NCCL_TOPO_FILE` when set, else detection of the running host.
    pub fn from_env(env: &Env) -> Self {
        match env.str("NCCL_TOPO_FILE") {
            Some(f) => TopoSource::File(PathBuf::from(f)),
            None => TopoSource::Detect { root: PathBuf::from("/") },
        }
    }
}

/// Reads the topology XML from its source; detection reads `NCCL_SOCKET_IFNAME` from the process. A file
/// that is an overlay is completed as NCCL completes it ([`load_noting`] also says how).
pub fn load(source: &TopoSource) -> Result<TopoXml, TopoError> {
    Ok(load_noting(source)?.0)
}

/// [`load`], with notes on what an overlay file lacked and how it was filled: from this host's devices when
/// it has GPUs (the file is then read on the machine it describes), else with NCCL's defaults.
pub fn load_noting(source: &TopoSource) -> Result<(TopoXml, Vec<String>), TopoError> {
    match source {
        TopoSource::Preset(name) => Ok((presets::load(name)?, Vec::new())),
        TopoSource::File(path) => {
            let mut xml = xml::read_file(path)?;
            let host = detect::detect(std::path::Path::new("/"), &Env::from_process())
                .ok()
                .filter(|h| xml::to_string(h).contains("<gpu "));
            let filled = overlay::complete(&mut xml, host.as_ref());
            Ok((xml, filled.notes(&path.display().to_string())))
        }
        TopoSource::Detect { root } => Ok((detect::detect(root, &Env::from_process())?, Vec::new())),
    }
}

/// Builds the model topology from XML and computes its paths, P2P/PXN/GDR rewrites and bandwidths, with the
/// link bandwidths of `env`'s NCCL release.
pub fn build(xml: &TopoXml, env: &TopoEnv) -> Result<Topology, TopoError> {
    let detected = xml.origin == "detected";
    let host = detected.then(collscope_debug::sys::hostname);
    let mut topology = build::topology_from_xml(xml, host, &env.profile)?;
    if !detected && !xml.origin.starts_with("preset:") {
        topology.source = format!("file:{}", xml.origin);
    }
    check_size(&topology, &xml.origin)?;
    paths::compute(&mut topology, env)?;
    Ok(topology)
}

/// NCCL's `NCCL_TOPO_MAX_NODES`: nodes of one type in one system (2.28.9 `src/include/graph.h`, v2.28.9-1).
pub const MAX_NODES_PER_TYPE: usize = 576;
/// NCCL's `NCCL_TOPO_MAX_LINKS`: links of one node (2.28.9 `src/graph/topo.h`, v2.28.9-1).
pub const MAX_LINKS_PER_NODE: usize = 576;

/// Refuses a topology larger than NCCL's `ncclTopoSystem` can hold, before any work grows with it (paths are
/// quadratic in nodes): `what` names where it came from.
pub fn check_size(topology: &Topology, what: &str) -> Result<(), TopoError> {
    for kind in NodeType::ALL.iter().copied() {
        let n = topology.nodes_of(kind).count();
        if n > MAX_NODES_PER_TYPE {
            return Err(TopoError::TooLarge {
                origin: what.to_string(),
                count: n,
                what: format!("{kind} nodes"),
                limit: MAX_NODES_PER_TYPE,
                constant: "NCCL_TOPO_MAX_NODES",
            });
        }
    }
    let mut links = vec![0usize; topology.nodes.len()];
    for l in &topology.links {
        if let Some(c) = links.get_mut(l.from) {
            *c += 1;
        }
    }
    if let Some((i, &n)) = links.iter().enumerate().find(|(_, &n)| n > MAX_LINKS_PER_NODE) {
        let node = &topology.nodes[i];
        return Err(TopoError::TooLarge {
            origin: what.to_string(),
            count: n,
            what: format!("links from {}/{:x}-{:x}", node.kind, node.id.system, node.id.local),
            limit: MAX_LINKS_PER_NODE,
            constant: "NCCL_TOPO_MAX_LINKS",
        });
    }
    Ok(())
}

/// The XML as NCCL writes it.
pub fn dump(xml: &TopoXml) -> String {
    xml::to_string(xml)
}

/// Writes the XML to `NCCL_TOPO_DUMP_FILE` when it is set; returns the path written.
pub fn dump_if_requested(xml: &TopoXml, env: &Env) -> Result<Option<PathBuf>, TopoError> {
    let Some(file) = env.str("NCCL_TOPO_DUMP_FILE") else { return Ok(None) };
    let path = PathBuf::from(file);
    xml::write_file(xml, &path)?;
    Ok(Some(path))
}

#[cfg(test)]
pub(crate) mod tests;
