//! `--nranks-per-node K`: a communicator that uses only the first K GPUs of each node. Like NCCL's
//! `ncclTopoTrimSystem`, the other GPUs leave the topology (with the NVLinks that lead to them); NICs, CPUs and
//! switches stay.

use anyhow::{bail, Result};
use collscope_nccl::topo::xml::XmlNode;
use collscope_nccl::topo::TopoXml;

/// Bus ids of the GPUs in file order (a `<gpu>` sits in the `<pci>` that carries its bus id).
fn gpu_bus_ids(node: &XmlNode, out: &mut Vec<String>) {
    for s in &node.subs {
        if s.name == "pci" && s.sub("gpu").is_some() {
            out.push(s.attr("busid").unwrap_or_default().to_ascii_lowercase());
        }
        gpu_bus_ids(s, out);
    }
}

fn drop_gpus(node: &mut XmlNode, gone: &[String]) {
    let is_gone = |busid: Option<&str>| busid.is_some_and(|b| gone.contains(&b.to_ascii_lowercase()));
    node.subs.retain(|s| {
        let gpu_pci = s.name == "pci" && s.sub("gpu").is_some() && is_gone(s.attr("busid"));
        let link_to_gone = s.name == "nvlink" && is_gone(s.attr("target"));
        !(gpu_pci || link_to_gone)
    });
    for s in &mut node.subs {
        drop_gpus(s, gone);
    }
}

/// Keeps the first `k` GPUs of the node.
pub fn keep_gpus(xml: &mut TopoXml, k: u32) -> Result<()> {
    let mut ids = Vec::new();
    gpu_bus_ids(&xml.system, &mut ids);
    if k == 0 || k as usize > ids.len() {
        bail!("--nranks-per-node {k}: the topology has {} GPUs; give 1 to {}", ids.len(), ids.len());
    }
    drop_gpus(&mut xml.system, &ids[k as usize..]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_nccl::topo;

    fn gpus(xml: &TopoXml) -> usize {
        let mut ids = Vec::new();
        gpu_bus_ids(&xml.system, &mut ids);
        ids.len()
    }

    #[test]
    fn keeps_the_first_gpus_and_their_links() {
        let mut xml = topo::presets::load("nvlink-bridge-4").unwrap();
        assert_eq!(gpus(&xml), 4);
        keep_gpus(&mut xml, 2).unwrap();
        assert_eq!(gpus(&xml), 2);
        let text = topo::dump(&xml);
        let mut kept = Vec::new();
        gpu_bus_ids(&xml.system, &mut kept);
        for line in text.lines().filter(|l| l.contains("<nvlink")) {
            assert!(kept.iter().any(|b| line.to_ascii_lowercase().contains(b.as_str())), "dangling {line}");
        }
        let e = keep_gpus(&mut xml, 3).unwrap_err().to_string();
        assert!(e.contains("has 2 GPUs"), "{e}");
    }
}
