//! A communicator that uses only the first K GPUs of each node (`--nranks-per-node K`). NCCL 2.28.9
//! (`src/graph/topo.cc`, `ncclTopoTrimSystem`, v2.28.9-1) removes from the system the GPUs outside the
//! communicator, and `ncclTopoRemoveNode` the links that lead to them; NICs, CPUs and switches stay. Here the GPUs
//! leave the XML, before the system is built from it.

use super::xml::XmlNode;
use super::{TopoError, TopoXml};

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

/// Keeps the first `k` GPUs of the node, with the NVLinks between them.
pub fn keep_gpus(xml: &mut TopoXml, k: u32) -> Result<(), TopoError> {
    let mut ids = Vec::new();
    gpu_bus_ids(&xml.system, &mut ids);
    if k == 0 || k as usize > ids.len() {
        return Err(TopoError::TrimGpus { keep: k, gpus: ids.len() });
    }
    drop_gpus(&mut xml.system, &ids[k as usize..]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topo;

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
        assert!(e.contains("has 2 GPUs") && e.contains("1 to 2"), "{e}");
        assert!(keep_gpus(&mut xml, 0).is_err());
    }
}
