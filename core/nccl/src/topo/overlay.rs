//! Topology files that are overlays: cloud images ship files that list switches and NICs without `class` or
//! link attributes, and often no GPU, because NCCL fills the rest from /sys and CUDA at run time
//! (`ncclTopoGetSystem` in NCCL 2.28.9 `src/graph/topo.cc` loads the file, then `ncclTopoFillGpu` /
//! `ncclTopoFillNet` complete it for the devices it finds). [`complete`] does the same from a detected host's
//! XML when given one, else with NCCL's defaults, and says what was filled.

use super::xml::{TopoXml, XmlNode};
use std::collections::HashMap;

/// What was missing from an overlay and how it was filled; empty for a complete file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filled {
    /// `<pci>` elements without `class`.
    pub classes: usize,
    /// `<pci>` elements without `link_speed`/`link_width`.
    pub links: usize,
    /// Bus ids of GPUs listed only as PCI leaves (a display or 3D class, no `<gpu>`).
    pub bare_gpus: Vec<String>,
    /// Attributes and GPUs/NICs taken from the detected host (by bus id).
    pub from_host: usize,
    /// Whether the file lists any `<gpu>`.
    pub has_gpu: bool,
}

impl Filled {
    pub fn is_overlay(&self) -> bool {
        self.classes + self.links > 0 || !self.bare_gpus.is_empty() || !self.has_gpu
    }

    /// One note per gap, naming what NCCL fills at run time.
    pub fn notes(&self, origin: &str) -> Vec<String> {
        if !self.is_overlay() {
            return Vec::new();
        }
        let mut v = vec![format!(
            "{origin} is an overlay: NCCL completes it at run time from /sys (PCI class, link speed and width) \
             and CUDA/NVML (the GPUs)"
        )];
        if self.from_host > 0 {
            v.push(format!("{} attributes and devices taken from this host at the same bus ids", self.from_host));
        }
        if self.classes > 0 {
            v.push(format!(
                "{} <pci> without class: a PCI switch when it holds devices, a NIC when it holds <nic>",
                self.classes
            ));
        }
        if self.links > 0 {
            v.push(format!(
                "{} <pci> without link_speed/link_width: NCCL's defaults (x16, Gen3 speed: 12 GB/s)",
                self.links
            ));
        }
        if !self.bare_gpus.is_empty() {
            v.push(format!(
                "GPUs listed only as PCI leaves (no <gpu>: NCCL adds dev, sm and rank from CUDA), not modelled: {}",
                self.bare_gpus.join(", ")
            ));
        }
        if !self.has_gpu {
            v.push("no <gpu>: the file describes the switches and NICs only; graphs need a GPU".into());
        }
        v
    }
}

fn busid(x: &XmlNode) -> Option<String> {
    x.attr("busid").map(str::to_ascii_lowercase)
}

fn index<'a>(x: &'a XmlNode, out: &mut HashMap<String, &'a XmlNode>) {
    if x.name == "pci" {
        if let Some(b) = busid(x) {
            out.insert(b, x);
        }
    }
    for s in &x.subs {
        index(s, out);
    }
}

fn fill(x: &mut XmlNode, host: &HashMap<String, &XmlNode>, f: &mut Filled) {
    if x.name == "gpu" {
        f.has_gpu = true;
    }
    if x.name == "pci" {
        if let Some(h) = busid(x).and_then(|b| host.get(&b).copied()) {
            for (k, v) in &h.attrs {
                if x.attr(k).is_none() {
                    x.set(k, v.clone());
                    f.from_host += 1;
                }
            }
            // The GPU or NIC the host has at that bus id, as ncclTopoFillGpu / ncclTopoFillNet add it.
            for sub in h.subs.iter().filter(|s| matches!(s.name.as_str(), "gpu" | "nic")) {
                if x.sub(&sub.name).is_none() {
                    x.subs.push(sub.clone());
                    f.from_host += 1;
                }
            }
        }
        let is_gpu_class = x.attr("class").is_some_and(|c| c.starts_with("0x03"));
        if is_gpu_class && x.sub("gpu").is_none() {
            f.bare_gpus.push(x.attr("busid").unwrap_or("?").to_string());
        }
        if x.attr("class").is_none() {
            f.classes += 1;
            // What kvDictPciClass would give the device /sys describes: a bridge above devices, a NIC.
            let class = if x.sub("nic").is_some() {
                "0x020000"
            } else if x.sub("gpu").is_some() {
                "0x030200"
            } else {
                "0x060400"
            };
            x.set("class", class);
        }
        if x.attr("link_speed").is_none() || x.attr("link_width").is_none() {
            f.links += 1;
            // An empty width reads as x16 and an unknown speed as Gen3, as NCCL reads what /sys lacks.
            if x.attr("link_width").is_none() {
                x.set("link_width", "");
            }
            if x.attr("link_speed").is_none() {
                x.set("link_speed", "");
            }
        }
    }
    for s in &mut x.subs {
        fill(s, host, f);
    }
}

/// Fills an overlay's gaps, from `host` (the detected XML of the machine it runs on) where it has a device
/// with the same bus id, else with NCCL's defaults.
pub fn complete(xml: &mut TopoXml, host: Option<&TopoXml>) -> Filled {
    let mut map = HashMap::new();
    if let Some(h) = host {
        index(&h.system, &mut map);
    }
    let mut f = Filled::default();
    fill(&mut xml.system, &map, &mut f);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topo::{build, xml, TopoEnv};
    use collscope_model::NodeType;

    /// A cloud image's file: switches and NICs without class or link attributes, no GPU.
    const OVERLAY: &str = r#"<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:10:00.0">
      <pci busid="0000:11:00.0">
        <nic><net name="efa0" dev="0" speed="100000" port="1" gdr="1"/></nic>
      </pci>
      <pci busid="0000:12:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16"/>
    </pci>
  </cpu>
</system>"#;

    #[test]
    fn an_overlay_loads_with_notes_naming_what_nccl_fills() {
        let mut x = xml::parse(OVERLAY, "overlay.xml").unwrap();
        assert!(build(&x, &TopoEnv::default()).is_err(), "as read, the file lacks what NCCL fills");
        let f = complete(&mut x, None);
        assert_eq!((f.classes, f.links, f.has_gpu), (2, 2, false));
        assert_eq!(f.bare_gpus, vec!["0000:12:00.0".to_string()]);
        let notes = f.notes("overlay.xml").join("\n");
        for want in ["overlay", "without class", "link_speed", "PCI leaves", "0000:12:00.0", "no <gpu>"] {
            assert!(notes.contains(want), "{want}: {notes}");
        }
        let t = build(&x, &TopoEnv::default()).unwrap();
        assert_eq!(t.nodes_of(NodeType::NET).count(), 1);
        assert_eq!(t.nodes_of(NodeType::NIC).count(), 1);
        assert_eq!(t.nodes_of(NodeType::GPU).count(), 0);
    }

    #[test]
    fn an_overlay_takes_the_hosts_attributes_and_a_full_file_is_no_overlay() {
        let host = xml::parse(
            r#"<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
            <pci busid="0000:10:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
            <pci busid="0000:12:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">
            <gpu dev="0" sm="90" rank="0" gdr="1"/></pci></pci></cpu></system>"#,
            "detected",
        )
        .unwrap();
        let mut x = xml::parse(OVERLAY, "overlay.xml").unwrap();
        let f = complete(&mut x, Some(&host));
        assert_eq!((f.from_host, f.classes, f.links), (4, 1, 1));
        assert!(f.has_gpu && f.bare_gpus.is_empty(), "{f:?}");
        assert_eq!(x.system.subs[0].subs[0].attr("link_speed"), Some("32.0 GT/s PCIe"));
        // Merged with the host, the overlay is a machine the search runs on.
        let t = build(&x, &TopoEnv::default()).unwrap();
        assert_eq!((t.nodes_of(NodeType::GPU).count(), t.nodes_of(NodeType::NET).count()), (1, 1));

        let mut full = crate::topo::presets::load("dgx-a100").unwrap();
        let f = complete(&mut full, None);
        assert!(!f.is_overlay() && f.notes("x").is_empty(), "{f:?}");
    }
}
