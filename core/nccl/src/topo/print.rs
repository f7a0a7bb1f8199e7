//! The topology as NCCL 2.28.9 prints it under `NCCL_DEBUG_SUBSYS=GRAPH` (`ncclTopoPrint` in `topo.cc`,
//! `ncclTopoPrintPaths` in `paths.cc`), plus views NCCL does not print: a GPU/NIC matrix in the spirit of
//! `nvidia-smi topo -m`, and the P2P and GPUDirect RDMA decisions for every pair.

use super::bandwidth::CpuKind;
use super::build::{net_asic, pci_device_code};
use super::error::TopoError;
use super::paths::{self, adjacency};
use super::settings::TopoEnv;
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use collscope_model::{LinkType, Node, NodeType, Topology};

/// How a node names itself in the tree (`ncclTopoPrintRec`): type-specific details in parentheses.
fn tree_label(node: &Node) -> String {
    let name = node.name();
    match node.kind {
        NodeType::GPU => format!("{name} ({})", node.gpu.as_ref().and_then(|g| g.rank).unwrap_or(-1)),
        NodeType::CPU => {
            let k = node.cpu.as_ref().map(CpuKind::of).unwrap_or(CpuKind { arch: -1, vendor: -1, model: -1 });
            format!("{name} ({}/{}/{})", k.arch, k.vendor, k.model)
        }
        NodeType::PCI => format!("{name} ({:x})", node.pci.as_ref().map_or(0, pci_device_code)),
        _ => name,
    }
}

/// A NET as a link target: `NET/0-0 (coll/asic/port/bw)`.
fn net_label(node: &Node) -> String {
    let net = node.net.as_ref();
    format!(
        "{} ({}/{:x}/{}/{:.6})",
        node.name(),
        net.map_or(0, |n| u8::from(n.coll)),
        net_asic(node),
        net.map_or(0, |n| n.port),
        net.map_or(0.0, |n| n.bw)
    )
}

/// NCCL fills one line buffer: a child's label goes after its parent's `+ PCI[24.0] - ` on the same line,
/// and once printed, that prefix turns into spaces for the child's own links.
fn tree_rec(
    topo: &Topology,
    adj: &[Vec<usize>],
    node: usize,
    prev: Option<usize>,
    prefix: String,
    out: &mut Vec<String>,
) {
    out.push(format!("{prefix}{}", tree_label(&topo.nodes[node])));
    let indent = " ".repeat(prefix.chars().count());
    for &li in &adj[node] {
        let link = &topo.links[li];
        let rem = &topo.nodes[link.to];
        let head = format!("{indent}+ {}[{:.1}] - ", link.kind, link.bw);
        if link.kind == LinkType::LOC {
            out.push(format!("{head}{}", rem.name()));
        } else if link.kind != LinkType::PCI || Some(link.to) != prev {
            if link.kind == LinkType::PCI {
                tree_rec(topo, adj, link.to, Some(node), head, out);
            } else if rem.kind == NodeType::NET {
                out.push(format!("{head}{}", net_label(rem)));
            } else {
                out.push(format!("{head}{}", rem.name()));
            }
        }
    }
}

/// `=== System : maxBw .. totalBw .. ===`, the tree under each CPU, and the closing rule.
pub fn system_lines(topo: &Topology) -> Vec<String> {
    let adj = adjacency(topo);
    let mut out = vec![format!("=== System : maxBw {:.1} totalBw {:.1} ===", topo.max_bw, topo.total_bw)];
    for (cpu, _) in topo.nodes_of(NodeType::CPU) {
        tree_rec(topo, &adj, cpu, None, String::new(), &mut out);
    }
    out.push("==========================================".to_string());
    out
}

/// One line per GPU and NET: `GPU/0-7000 :GPU/0-7000 (0/5000.0/LOC) GPU/0-f000 (2/240.0/NVL) ...`, targets
/// in NCCL's type order (GPU, NVS, CPU, NET).
pub fn path_lines(topo: &Topology) -> Vec<String> {
    let mut out = Vec::new();
    for kind in [NodeType::GPU, NodeType::NET] {
        for (from, node) in topo.nodes_of(kind) {
            let mut line = format!("{} :", node.name());
            for t in NodeType::ALL {
                let targets: Vec<_> =
                    topo.nodes_of(*t).filter_map(|(to, n)| Some((paths::path(topo, from, to)?, n))).collect();
                if targets.iter().all(|(p, _)| p.kind == collscope_model::PathType::DIS) {
                    continue;
                }
                for (p, n) in targets {
                    line.push_str(&format!("{} ({}/{:.1}/{}) ", n.name(), p.hops, p.bw, p.kind));
                }
            }
            out.push(line);
        }
    }
    out
}

/// Logs the tree and the paths as NCCL's `ncclTopoPrint` does (INFO, GRAPH).
pub fn log_system(topo: &Topology) {
    for line in system_lines(topo).into_iter().chain(path_lines(topo)) {
        nccl_info!(Subsys::GRAPH, "{line}");
    }
}

/// One line per CPU (NUMA node, affinity, kind) and per NET (name, speed, GDR), for a reader of this host.
pub fn summary_lines(topo: &Topology) -> Vec<String> {
    let mut out = Vec::new();
    for (_, n) in topo.nodes_of(NodeType::CPU) {
        let Some(c) = n.cpu.as_ref() else { continue };
        let opt = |v: Option<u32>| v.map_or("-".to_string(), |x| x.to_string());
        out.push(format!(
            "{}: NUMA {} affinity {} arch {} vendor {} family {} model {}",
            n.name(),
            c.numa_id.map_or("-".to_string(), |x| x.to_string()),
            c.affinity.as_deref().unwrap_or("-"),
            if c.arch.is_empty() { "-" } else { &c.arch },
            if c.vendor.is_empty() { "-" } else { &c.vendor },
            opt(c.family_id),
            opt(c.model_id)
        ));
    }
    for (i, n) in topo.nodes_of(NodeType::GPU) {
        let g = n.gpu.as_ref();
        let busid = n.pci.as_ref().map_or("-", |p| p.busid.as_str());
        let cpu = paths::local_cpu(topo, i).map_or("-".to_string(), |c| topo.nodes[c].name());
        out.push(format!(
            "{}: {} sm {} rank {} gdr {} ({busid}, near {cpu})",
            short_name(n),
            n.name(),
            g.map_or(0, |g| g.sm),
            g.and_then(|g| g.rank).unwrap_or(-1),
            u8::from(g.is_some_and(|g| g.gdr))
        ));
    }
    for (i, n) in topo.nodes_of(NodeType::NET) {
        let Some(x) = n.net.as_ref() else { continue };
        let busid = topo
            .links
            .iter()
            .find(|l| l.from == i && l.kind == LinkType::NET)
            .and_then(|l| topo.nodes[l.to].pci.as_ref())
            .map_or("no PCI device".to_string(), |p| p.busid.clone());
        let cpu = paths::local_cpu(topo, i).map_or("-".to_string(), |c| topo.nodes[c].name());
        out.push(format!(
            "{}: {} port {} {:.1} GB/s gdr {} ({busid}, near {cpu})",
            short_name(n),
            x.name,
            x.port,
            x.bw,
            u8::from(x.gdr)
        ));
    }
    out
}

/// Short names for the matrix: GPU by device number, NIC by NET device number.
fn short_name(node: &Node) -> String {
    match node.kind {
        NodeType::GPU => format!("GPU{}", node.gpu.as_ref().map_or(-1, |g| g.dev)),
        NodeType::NET => format!("NIC{}", node.net.as_ref().map_or(-1, |n| n.dev)),
        _ => node.name(),
    }
}

/// A GPU/NIC matrix of path types and bandwidths, with each GPU's NUMA node and a legend.
pub fn matrix(topo: &Topology) -> Vec<String> {
    let ends: Vec<usize> = topo.nodes_of(NodeType::GPU).chain(topo.nodes_of(NodeType::NET)).map(|(i, _)| i).collect();
    if ends.is_empty() {
        return vec!["(no GPU or NIC)".to_string()];
    }
    let cell = |a: usize, b: usize| -> String {
        if a == b {
            return "X".to_string();
        }
        match paths::path(topo, a, b) {
            Some(p) => format!("{}/{:.1}", p.kind, p.bw),
            None => "-".to_string(),
        }
    };
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec![String::new()];
    header.extend(ends.iter().map(|&e| short_name(&topo.nodes[e])));
    header.push("NUMA".to_string());
    rows.push(header);
    for &a in &ends {
        let mut row = vec![short_name(&topo.nodes[a])];
        row.extend(ends.iter().map(|&b| cell(a, b)));
        let numa = paths::local_cpu(topo, a).and_then(|c| topo.nodes[c].cpu.as_ref()).and_then(|c| c.numa_id);
        row.push(numa.map_or("N/A".to_string(), |n| n.to_string()));
        rows.push(row);
    }
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0) + 2).collect();
    let mut out: Vec<String> = rows
        .iter()
        .map(|r| r.iter().zip(&widths).map(|(s, w)| format!("{s:<w$}")).collect::<String>().trim_end().to_string())
        .collect();
    out.push(String::new());
    out.push("Legend: TYPE/bandwidth (GB/s) of the path NCCL uses; X = self".into());
    out.push("  NVL = NVLink, NVB = NVLink through another GPU, C2C = chip-to-chip, PIX = one PCIe switch,".into());
    out.push("  PXB = several PCIe switches, P2C = C2C then PCIe, PXN = through the NIC's own GPU over NVLink,".into());
    out.push("  PHB = through a CPU host bridge, SYS = across CPU sockets".into());
    for (i, n) in topo.nodes_of(NodeType::NET) {
        let name = n.net.as_ref().map_or("", |x| x.name.as_str());
        out.push(format!("  {}: {} ({})", short_name(n), name, topo.nodes[i].name()));
    }
    out
}

/// Every ordered GPU pair's P2P decision.
pub fn p2p_lines(topo: &Topology, env: &TopoEnv) -> Vec<String> {
    let gpus: Vec<usize> = topo.nodes_of(NodeType::GPU).map(|(i, _)| i).collect();
    let mut out = Vec::new();
    if gpus.len() > 1 {
        out.push(format!("P2P level {} (NCCL_P2P_LEVEL / NCCL_P2P_DISABLE, default PXB)", paths::p2p_level(topo, env)));
    }
    for &a in &gpus {
        for &b in gpus.iter().filter(|&&b| b != a) {
            let d = paths::check_p2p(topo, env, a, b);
            let (na, nb) = (short_name(&topo.nodes[a]), short_name(&topo.nodes[b]));
            let mut line = if d.p2p {
                format!("{na} -> {nb}: P2P enabled (path {} <= {})", d.path, d.level)
            } else if d.nvml_refused {
                format!(
                    "{na} -> {nb}: P2P refused by NVML as inferred for consumer (GeForce) GPUs over PCIe (path {}), \
                     traffic goes through host memory (--p2p on assumes it works)",
                    d.path
                )
            } else {
                format!("{na} -> {nb}: P2P refused (path {} > {}), traffic goes through host memory", d.path, d.level)
            };
            if let Some(i) = d.intermediate {
                line.push_str(&format!(", through {}", short_name(&topo.nodes[i])));
            }
            if d.read {
                line.push_str(", P2P read");
            }
            out.push(line);
        }
    }
    out
}

/// Every GPU/NET pair's GDR decision, as NCCL's lines; a pair NCCL decides without a line gets a note.
pub fn gdr_lines(topo: &Topology, env: &TopoEnv) -> Result<Vec<String>, TopoError> {
    let mut out = Vec::new();
    for (g, gn) in topo.nodes_of(NodeType::GPU) {
        for (n, nn) in topo.nodes_of(NodeType::NET) {
            let d = paths::check_gdr(topo, env, g, n, false)?;
            if d.lines.is_empty() {
                let why = if !gn.gpu.as_ref().is_some_and(|x| x.gdr) { "the GPU" } else { "the NIC" };
                out.push(format!(
                    "{} / {}: GPU Direct RDMA not supported by {why} (gdr=0)",
                    short_name(gn),
                    short_name(nn)
                ));
            }
            out.extend(d.lines);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topo::{build, presets};

    fn preset(name: &str) -> Topology {
        build(&presets::load(name).unwrap(), &TopoEnv::default()).unwrap()
    }

    #[test]
    fn dgx_a100_tree_matches_nccl_format() {
        let lines = system_lines(&preset("dgx-a100"));
        assert_eq!(lines[0], "=== System : maxBw 240.0 totalBw 240.0 ===");
        assert_eq!(lines[1], "CPU/0-0 (1/2/-1)");
        assert_eq!(lines[2], "+ PCI[24.0] - PCI/0-1000 (1000c01000000000)");
        assert_eq!(lines[3], "              + PCI[24.0] - PCI/0-3000 (1000c01000000000)");
        assert_eq!(lines[4], "                            + PCI[24.0] - GPU/0-7000 (0)");
        assert_eq!(lines[5], "                                          + NVL[240.0] - NVS/0-0");
        assert_eq!(lines[6], "                            + PCI[24.0] - NIC/0-c000");
        assert_eq!(
            lines[7],
            "                                          + NET[25.0] - NET/0-0 (0/1070fd0300a3b420/1/25.000000)"
        );
        assert!(lines.contains(&"+ SYS[16.0] - CPU/0-1".to_string()), "{lines:#?}");
        assert_eq!(lines.last().unwrap(), "==========================================");
    }

    #[test]
    fn path_lines_match_nccl_format() {
        let lines = path_lines(&preset("dgx-a100"));
        assert_eq!(lines.len(), 16);
        assert!(
            lines[0].starts_with("GPU/0-7000 :GPU/0-7000 (0/5000.0/LOC) GPU/0-f000 (2/240.0/NVL) "),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("NVS/0-0 (1/240.0/NVL) CPU/0-0 (3/24.0/PHB) CPU/0-1 (4/16.0/SYS) NET/0-0 (3/24.0/PIX) NET/0-1 (5/24.0/PXB) NET/0-2 (5/24.0/PXN) "), "{}", lines[0]);
        assert!(lines[8].starts_with("NET/0-0 :GPU/0-7000 (3/24.0/PIX) "), "{}", lines[8]);
    }

    #[test]
    fn matrix_and_decisions() {
        let t = preset("hgx-pcie");
        let m = matrix(&t);
        assert!(m[0]
            .split_whitespace()
            .eq(["GPU0", "GPU1", "GPU2", "GPU3", "GPU4", "GPU5", "GPU6", "GPU7", "NIC0", "NIC1", "NUMA"]));
        let row0: Vec<&str> = m[1].split_whitespace().collect();
        assert_eq!(row0[..6], ["GPU0", "X", "PIX/24.0", "PHB/24.0", "PHB/24.0", "SYS/10.0"]);
        assert_eq!(row0.last(), Some(&"0"));
        assert!(m.iter().any(|l| l.trim() == "NIC0: mlx5_0 (NET/0-0)"));
        let p2p = p2p_lines(&t, &TopoEnv::default());
        assert_eq!(p2p[0], "P2P level PXB (NCCL_P2P_LEVEL / NCCL_P2P_DISABLE, default PXB)");
        assert!(p2p.contains(&"GPU0 -> GPU1: P2P enabled (path PIX <= PXB)".to_string()));
        assert!(
            p2p.contains(&"GPU0 -> GPU4: P2P refused (path SYS > PXB), traffic goes through host memory".to_string())
        );
        let gdr = gdr_lines(&t, &TopoEnv::default()).unwrap();
        assert_eq!(gdr.len(), 16);
        assert!(gdr.contains(&"GPU Direct RDMA Disabled for GPU 7 / HCA 1 (distance 9 > 5)".to_string()));
        let cpu = preset("cpu-host");
        assert!(gdr_lines(&cpu, &TopoEnv::default()).unwrap().is_empty());
        assert!(p2p_lines(&cpu, &TopoEnv::default()).is_empty());
        assert_eq!(matrix(&cpu)[0].split_whitespace().collect::<Vec<_>>(), ["NIC0", "NUMA"]);
        let s = summary_lines(&cpu);
        assert_eq!(
            s[0],
            "CPU/0-0: NUMA 0 affinity 00000000,0fffff00,000fffff arch x86_64 vendor GenuineIntel family 6 model 85"
        );
        assert_eq!(s[2], "NIC0: eno1 port 0 1.2 GB/s gdr 0 (0000:18:00.0, near CPU/0-0)");
    }
}
