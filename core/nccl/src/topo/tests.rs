//! End-to-end checks of the topology module on the presets and on small hand-written machines.

use super::*;
use collscope_model::{LinkType, NodeType, PathType, Topology};

fn preset(name: &str, env: &TopoEnv) -> Topology {
    build(&presets::load(name).unwrap(), env).unwrap()
}

fn from_xml(text: &str, env: &TopoEnv) -> Topology {
    build(&xml::parse(text, "test.xml").unwrap(), env).unwrap()
}

fn nth(t: &Topology, kind: NodeType, i: usize) -> usize {
    t.nodes_of(kind).nth(i).map(|(idx, _)| idx).unwrap()
}

fn kind(t: &Topology, a: usize, b: usize) -> PathType {
    paths::path(t, a, b).unwrap().kind
}

#[test]
fn dgx_a100_matches_nccl() {
    let t = preset("dgx-a100", &TopoEnv::default());
    assert_eq!((t.max_bw, t.total_bw), (240.0, 240.0));
    assert_eq!(t.nodes_of(NodeType::GPU).count(), 8);
    assert_eq!(t.nodes_of(NodeType::NET).count(), 8);
    assert_eq!(t.nodes_of(NodeType::NVS).count(), 1);
    assert_eq!(t.nodes_of(NodeType::CPU).count(), 2);
    let g0 = nth(&t, NodeType::GPU, 0);
    assert_eq!(t.nodes[g0].name(), "GPU/0-7000");
    let nvl: Vec<_> = t.links.iter().filter(|l| l.from == g0 && l.kind == LinkType::NVL).collect();
    assert_eq!(nvl.len(), 1);
    assert_eq!(nvl[0].bw, 240.0);
    assert_eq!(t.nodes[nvl[0].to].name(), "NVS/0-0");
    let pci = t.links.iter().find(|l| l.from == g0 && l.kind == LinkType::PCI).unwrap();
    assert_eq!(pci.bw, 24.0);
    let net0 = nth(&t, NodeType::NET, 0);
    let nic_link = t.links.iter().find(|l| l.to == net0).unwrap();
    assert_eq!(nic_link.bw, 25.0);
    for (g, _) in t.nodes_of(NodeType::GPU) {
        for (h, _) in t.nodes_of(NodeType::GPU) {
            let p = paths::path(&t, g, h).unwrap();
            if g != h {
                assert_eq!((p.kind, p.bw, p.hops), (PathType::NVL, 240.0, 2));
            }
        }
    }
    assert_eq!(kind(&t, g0, net0), PathType::PIX);
    let gdr = check_gdr(&t, &TopoEnv::default(), g0, net0, false).unwrap();
    assert!(gdr.enabled());
    assert_eq!(gdr.lines, ["GPU Direct RDMA Enabled for GPU 0 / HCA 0 (distance 4 <= 5), read 0 mode Default"]);
    // NIC 1 sits under the other switch of GPU0's complex: PXB at the same 24 GB/s as through GPU1, so
    // NCCL keeps it; across sockets (SYS, worse than PXN) the NIC's own GPU relays over NVLink.
    let (net1, net7) = (nth(&t, NodeType::NET, 1), nth(&t, NodeType::NET, 7));
    assert_eq!(kind(&t, g0, net1), PathType::PXB);
    assert_eq!(kind(&t, g0, net7), PathType::PXN);
    assert_eq!(paths::pxn_proxy(&t, g0, net7).unwrap(), nth(&t, NodeType::GPU, 7));
    assert_eq!(paths::pxn_proxy(&t, g0, net1).unwrap(), g0, "no proxy on a direct path");
    let g1 = nth(&t, NodeType::GPU, 1);
    let p2p = check_p2p(&t, &TopoEnv::default(), g0, g1);
    assert!(p2p.p2p && p2p.read, "A100 NVLink pairs use P2P read");
}

#[test]
fn pxn_disable_keeps_pci_paths() {
    let env = TopoEnv { pxn_disable: true, ..TopoEnv::default() };
    let t = preset("dgx-a100", &env);
    let (g0, net1, net7) = (nth(&t, NodeType::GPU, 0), nth(&t, NodeType::NET, 1), nth(&t, NodeType::NET, 7));
    assert_eq!(kind(&t, g0, net1), PathType::PXB);
    assert_eq!(kind(&t, g0, net7), PathType::SYS);
}

#[test]
fn dgx_h100_bandwidths() {
    let t = preset("dgx-h100", &TopoEnv::default());
    let g0 = nth(&t, NodeType::GPU, 0);
    let nvl = t.links.iter().find(|l| l.from == g0 && l.kind == LinkType::NVL).unwrap();
    assert!((nvl.bw - 18.0 * 20.6).abs() < 1e-9);
    assert!((t.max_bw - 370.8).abs() < 1e-9 && (t.total_bw - 370.8).abs() < 1e-9);
    let pci = t.links.iter().find(|l| l.from == g0 && l.kind == LinkType::PCI).unwrap();
    assert_eq!(pci.bw, 48.0);
    let net0 = nth(&t, NodeType::NET, 0);
    assert_eq!(t.links.iter().find(|l| l.to == net0).unwrap().bw, 50.0);
    assert_eq!(kind(&t, g0, net0), PathType::PIX);
    let (c0, c1) = (nth(&t, NodeType::CPU, 0), nth(&t, NodeType::CPU, 1));
    let sys = t.links.iter().find(|l| l.from == c0 && l.to == c1).unwrap();
    assert_eq!((sys.kind, sys.bw), (LinkType::SYS, 22.0), "Sapphire Rapids UPI");
}

#[test]
fn hgx_pcie_refuses_p2p_and_gdr_across_sockets() {
    let env = TopoEnv::default();
    let t = preset("hgx-pcie", &env);
    let gpus: Vec<usize> = t.nodes_of(NodeType::GPU).map(|(i, _)| i).collect();
    let net0 = nth(&t, NodeType::NET, 0);
    // Same switch: PIX; same socket, other switch: PHB; other socket: SYS.
    assert_eq!(check_p2p(&t, &env, gpus[0], gpus[1]).path, PathType::PIX);
    assert!(check_p2p(&t, &env, gpus[0], gpus[1]).p2p);
    assert_eq!(check_p2p(&t, &env, gpus[0], gpus[2]).path, PathType::PHB);
    assert!(!check_p2p(&t, &env, gpus[0], gpus[2]).p2p);
    let cross = check_p2p(&t, &env, gpus[0], gpus[4]);
    assert_eq!((cross.path, cross.p2p), (PathType::SYS, false));
    let p = paths::path(&t, gpus[0], gpus[4]).unwrap();
    assert_eq!(p.bw, 10.0, "Ice Lake UPI is the narrowest link");
    assert_eq!(p.hops, 5);
    assert_eq!(p.links.iter().filter(|&&l| t.nodes[t.links[l].to].kind == NodeType::CPU).count(), 2);
    assert_eq!(kind(&t, gpus[0], net0), PathType::PIX);
    let on = check_gdr(&t, &env, gpus[0], net0, true).unwrap();
    assert_eq!(on.lines, ["GPU Direct RDMA Enabled for GPU 0 / HCA 0 (distance 4 <= 5), read 1 mode Default"]);
    let off = check_gdr(&t, &env, gpus[4], net0, false).unwrap();
    assert!(!off.enabled());
    assert_eq!(off.lines, ["GPU Direct RDMA Disabled for GPU 4 / HCA 0 (distance 9 > 5)"]);
    let phb = check_gdr(&t, &env, gpus[2], net0, false).unwrap();
    assert_eq!(phb.lines, ["GPU Direct RDMA Disabled for GPU 2 / HCA 0 (distance 8 > 5)"]);

    let sys = TopoEnv::from_env(&collscope_debug::env::Env::from_pairs([("NCCL_NET_GDR_LEVEL", "SYS")])).unwrap();
    let t2 = preset("hgx-pcie", &sys);
    let now = check_gdr(&t2, &sys, gpus[4], net0, false).unwrap();
    assert!(now.enabled());
    assert_eq!(now.lines, ["GPU Direct RDMA Enabled for GPU 4 / HCA 0 (distance 9 <= 9), read 0 mode Default"]);
    let p2p_sys = TopoEnv { p2p_level: Some(PathType::SYS), ..TopoEnv::default() };
    assert!(check_p2p(&preset("hgx-pcie", &p2p_sys), &p2p_sys, gpus[0], gpus[4]).p2p);
    let disabled = TopoEnv { p2p_level: Some(PathType::LOC), ..TopoEnv::default() };
    assert!(!check_p2p(&preset("hgx-pcie", &disabled), &disabled, gpus[0], gpus[1]).p2p);
}

#[test]
fn nvlink_bridge_pairs() {
    let env = TopoEnv::default();
    let t = preset("nvlink-bridge-4", &env);
    let g: Vec<usize> = t.nodes_of(NodeType::GPU).map(|(i, _)| i).collect();
    let p01 = paths::path(&t, g[0], g[1]).unwrap();
    assert_eq!((p01.kind, p01.bw, p01.hops), (PathType::NVL, 48.0, 1), "4 sm86 links of 12 GB/s");
    assert_eq!(kind(&t, g[0], g[2]), PathType::PHB);
    assert!(!check_p2p(&t, &env, g[0], g[2]).p2p, "AMD with more than 2 GPUs keeps the PXB default");
    assert_eq!(t.nodes_of(NodeType::NVS).count(), 0);
    assert_eq!((t.max_bw, t.total_bw), (48.0, 48.0));
}

#[test]
fn cpu_host_has_no_gpu() {
    let t = preset("cpu-host", &TopoEnv::default());
    assert_eq!(t.nodes_of(NodeType::GPU).count(), 0);
    assert_eq!(t.nodes_of(NodeType::CPU).count(), 2);
    let net = nth(&t, NodeType::NET, 0);
    assert_eq!(t.links.iter().find(|l| l.to == net).unwrap().bw, 1.25);
    assert_eq!((t.max_bw, t.total_bw), (0.0, 0.0));
    let c1 = nth(&t, NodeType::CPU, 1);
    assert_eq!(kind(&t, net, c1), PathType::SYS);
}

#[test]
fn dump_then_load_gives_the_same_model() {
    for name in presets::names() {
        let x = presets::load(name).unwrap();
        let t = build(&x, &TopoEnv::default()).unwrap();
        let text = dump(&x);
        let back = xml::parse(&text, &format!("preset:{name}")).unwrap();
        assert_eq!(back.system, strip_lines(&x.system), "{name}");
        assert_eq!(build(&back, &TopoEnv::default()).unwrap(), t, "{name}");
    }
}

fn strip_lines(n: &xml::XmlNode) -> xml::XmlNode {
    let mut out = n.clone();
    fn rec(n: &mut xml::XmlNode, line: &mut usize) {
        *line += 1;
        n.line = *line;
        for s in &mut n.subs {
            rec(s, line);
        }
        if !n.subs.is_empty() {
            *line += 1;
        }
    }
    let mut line = 0;
    rec(&mut out, &mut line);
    out
}

#[test]
fn reference_text_example_loads() {
    let Some(dir) = collscope_testkit::shared("reference/texts", "the topology example of reference text 000") else {
        return;
    };
    let file = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("000_")))
        .unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let start = text.find("\n<system").unwrap() + 1;
    let end = text[start..].find("</system>").unwrap() + start + "</system>".len();
    let x = xml::parse(&text[start..end], "reference-000").unwrap();
    let t = build(&x, &TopoEnv::default()).unwrap();
    let g0 = nth(&t, NodeType::GPU, 0);
    let net0 = nth(&t, NodeType::NET, 0);
    assert_eq!(t.nodes[g0].name(), "GPU/0-47000");
    assert_eq!(kind(&t, g0, net0), PathType::PIX);
    assert_eq!(t.nodes_of(NodeType::CPU).count(), 2);
    let nvl = t.links.iter().find(|l| l.from == g0 && l.kind == LinkType::NVL).unwrap();
    assert_eq!(nvl.bw, 80.0, "the example keeps 2 of the 6 NVSwitch entries: 2 x 2 links x 20");
    assert_eq!(t.links.iter().find(|l| l.to == net0).unwrap().bw, 25.0);
    assert_eq!((t.max_bw, t.total_bw), (5000.0, 5000.0), "one GPU");
}

/// One socket: GPU0-GPU1 and GPU1-GPU2 NVLink (no NVSwitch), GPU0 and GPU1 behind one switch, GPU2 behind a
/// second switch under a first one, a NIC on the CPU, and an NVLink-less GPU3 on the second socket.
const CHAIN: &str = r#"<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:10:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
      <pci busid="0000:11:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="70" rank="0" gdr="1"><nvlink target="0000:12:00.0" count="2" tclass="0x030200"/></gpu>
      </pci>
      <pci busid="0000:12:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="1" sm="70" rank="1" gdr="1">
          <nvlink target="0000:11:00.0" count="2" tclass="0x030200"/>
          <nvlink target="0000:22:00.0" count="2" tclass="0x030200"/>
        </gpu>
      </pci>
      <pci busid="0000:20:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
        <pci busid="0000:22:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
          <gpu dev="2" sm="70" rank="2" gdr="1"><nvlink target="0000:12:00.0" count="2" tclass="0x030200"/></gpu>
        </pci>
      </pci>
    </pci>
    <pci busid="0000:30:00.0" class="0x020000" link_speed="8.0 GT/s PCIe" link_width="16">
      <nic><net name="eth0" dev="0" speed="100000" gdr="1"/></nic>
    </pci>
  </cpu>
  <cpu numaid="1" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:80:00.0" class="0x030200" link_speed="8.0 GT/s PCIe" link_width="16">
      <gpu dev="3" sm="70" rank="3" gdr="1"/>
    </pci>
  </cpu>
</system>"#;

#[test]
fn every_path_type_rule() {
    let env = TopoEnv::default();
    let t = from_xml(CHAIN, &env);
    let g: Vec<usize> = t.nodes_of(NodeType::GPU).map(|(i, _)| i).collect();
    let net = nth(&t, NodeType::NET, 0);
    let sw = nth(&t, NodeType::PCI, 0);
    // LOC: a node to itself.
    assert_eq!(paths::path(&t, g[0], g[0]).unwrap().kind, PathType::LOC);
    assert_eq!(paths::path(&t, g[0], g[0]).unwrap().bw, bandwidth::LOC_BW);
    // NVL: a direct NVLink, 2 x 20 GB/s at sm70.
    let p = paths::path(&t, g[0], g[1]).unwrap();
    assert_eq!((p.kind, p.bw, p.hops), (PathType::NVL, 40.0, 1));
    // NVB: NVLink through one intermediate GPU; P2P through it names the intermediate.
    let p = paths::path(&t, g[0], g[2]).unwrap();
    assert_eq!((p.kind, p.hops), (PathType::NVB, 2));
    assert_eq!(check_p2p(&t, &env, g[0], g[2]).intermediate, Some(g[1]));
    // PIX: through at most one PCI switch.
    assert_eq!(kind(&t, sw, g[0]), PathType::PIX);
    // PXB: between bridges without the CPU (GPU0 -> switch -> switch -> GPU2 once NVB is off).
    let no_nvb = TopoEnv { nvb_disable: true, ..TopoEnv::default() };
    let t2 = from_xml(CHAIN, &no_nvb);
    assert_eq!(kind(&t2, g[0], g[2]), PathType::PXB);
    // PHB: through the CPU; bandwidth is the narrowest link (Gen3 x16 NIC = 12, NET 12.5).
    let p = paths::path(&t, g[0], net).unwrap();
    assert_eq!((p.kind, p.bw), (PathType::PHB, 12.0));
    // SYS: across CPUs, at Skylake's inter-socket 10 GB/s.
    let p = paths::path(&t, g[3], net).unwrap();
    assert_eq!((p.kind, p.bw), (PathType::SYS, 10.0));
    // GPUs never relay more than one hop, nor PCI traffic: GPU3 reaches GPU0 through the CPUs.
    assert_eq!(kind(&t, g[3], g[0]), PathType::SYS);
    // The NET link itself counts as LOC for the NIC -> NET hop.
    let nic = nth(&t, NodeType::NIC, 0);
    assert_eq!(kind(&t, nic, net), PathType::LOC);
}

const GRACE: &str = r#"<system version="1">
  <cpu numaid="0" arch="arm64">
    <pci busid="0009:01:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">
      <gpu dev="0" sm="90" rank="0" gdr="1"><c2c count="10" bw="45000"/></gpu>
    </pci>
    <pci busid="0000:01:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16">
      <nic><net name="mlx5_0" dev="0" speed="400000" gdr="1"/></nic>
    </pci>
  </cpu>
</system>"#;

#[test]
fn c2c_and_p2c() {
    let env = TopoEnv::default();
    let t = from_xml(GRACE, &env);
    let (g, net, cpu) = (nth(&t, NodeType::GPU, 0), nth(&t, NodeType::NET, 0), nth(&t, NodeType::CPU, 0));
    let p = paths::path(&t, g, cpu).unwrap();
    assert_eq!((p.kind, p.bw), (PathType::C2C, 450.0));
    assert_eq!(kind(&t, g, net), PathType::P2C);
    let gdr = check_gdr(&t, &env, g, net, false).unwrap();
    assert_eq!(
        gdr.lines,
        [
            "GPU 0 / HCA 0 connected via C2C link",
            "GPU Direct RDMA Enabled for GPU 0 / HCA 0 (distance 3 <= 5), read 0 mode Default"
        ]
    );
}

#[test]
fn gdr_needs_support_on_both_sides_and_reads_follow_the_parameter() {
    let env = TopoEnv::default();
    let t =
        from_xml(&CHAIN.replace(r#"dev="0" sm="70" rank="0" gdr="1""#, r#"dev="0" sm="70" rank="0" gdr="0""#), &env);
    let (g0, g1, net) = (nth(&t, NodeType::GPU, 0), nth(&t, NodeType::GPU, 1), nth(&t, NodeType::NET, 0));
    let off = check_gdr(&t, &env, g0, net, false).unwrap();
    assert!(!off.enabled() && off.lines.is_empty() && off.distance.is_none());
    let phb = TopoEnv { gdr_level: Some(PathType::PHB), ..TopoEnv::default() };
    assert!(check_gdr(&t, &phb, g1, net, false).unwrap().enabled());
    // sm70 with an NVLink peer may read; with NCCL_NET_GDR_READ=0 it may not.
    assert!(check_gdr(&t, &phb, g1, net, true).unwrap().enabled());
    let no_read = TopoEnv { gdr_read: 0, ..phb.clone() };
    assert!(!check_gdr(&t, &no_read, g1, net, true).unwrap().enabled());
    // The GPU on the other socket has no NVLink peer: pre-Ampere reads stay off by default.
    let sys = TopoEnv { gdr_level: Some(PathType::SYS), ..TopoEnv::default() };
    let g3 = nth(&t, NodeType::GPU, 3);
    assert!(!check_gdr(&t, &sys, g3, net, true).unwrap().enabled());
    assert!(check_gdr(&t, &sys, g3, net, false).unwrap().enabled());
    let nic_off = from_xml(&CHAIN.replace(r#"speed="100000" gdr="1""#, r#"speed="100000" gdr="0""#), &env);
    assert!(!check_gdr(&nic_off, &phb, g1, net, false).unwrap().enabled());
}

fn parse_err(text: &str) -> String {
    match xml::parse(text, "bad.xml").and_then(|x| build(&x, &TopoEnv::default())) {
        Ok(_) => panic!("expected an error for {text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn malformed_input_is_reported_with_file_line_and_expectation() {
    let e = parse_err(
        "<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\">\n  </pci>\n</system>",
    );
    assert!(e.starts_with("bad.xml:3: malformed XML"), "{e}");
    let e = parse_err("<system version=\"1\">\n  <cpu arch=\"x86_64\"/>\n</system>");
    assert_eq!(e, "bad.xml:2: <cpu> is missing the attribute 'numaid'");
    let e = parse_err("<system version=\"1\">\n<cpu numaid=\"0\" arch=\"arm64\">\n<pci busid=\"0000:01:00.0\" class=\"0x060400\" link_speed=\"8 GT/s\" link_width=\"wide\"/>\n</cpu></system>");
    assert_eq!(e, "bad.xml:3: <pci link_width=\"wide\"> is not valid: expected a PCIe link width (0 to 64 lanes)");
    let e = parse_err(
        "<system version=\"1\"><cpu numaid=\"0\" arch=\"arm64\"><pci busid=\"47\" class=\"0x0302\"/></cpu></system>",
    );
    assert!(e.contains("<pci busid=\"47\"> is not valid: expected a PCI bus id"), "{e}");
    let e = parse_err("<system version=\"3\"/>");
    assert!(e.contains("<system version=\"3\"> is not valid: expected 1"), "{e}");
    let e = parse_err("<graphs/>");
    assert_eq!(e, "bad.xml: expected a <system version=\"1\"> element at the top, found <graphs>");
    let e = parse_err("<!-- nothing -->");
    assert_eq!(e, "bad.xml: expected a <system version=\"1\"> element at the top, found no element");
    let e = parse_err("<system version=\"1\"><cpu numaid=\"0\" arch=\"arm64\"><pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"\" link_width=\"16\"><gpu dev=\"0\" rank=\"0\" gdr=\"1\"/></pci></cpu></system>");
    assert_eq!(e, "bad.xml:1: <gpu> is missing the attribute 'sm'");
    let e = parse_err("<system version=\"1\"><cpu numaid=\"0\" arch=\"arm64\"><pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"\" link_width=\"16\"><gpu dev=\"0\" sm=\"80\" gdr=\"1\"><nvlink count=\"1\" tclass=\"0x068000\"/></gpu></pci></cpu></system>");
    assert_eq!(e, "bad.xml:1: <nvlink> refers to GPU '0000:01:00.0', which is not in the topology");
    let e = parse_err("<system version=\"1\">\n<cpu numaid=\"0\" arch=\"x86_64\"/>\n</system>");
    assert_eq!(e, "bad.xml:2: <cpu> is missing the attribute 'vendor'");
    let e = presets::load("dgx-z").unwrap_err().to_string();
    assert_eq!(e, "unknown preset 'dgx-z', expected one of: dgx-a100, dgx-h100, hgx-pcie, nvlink-bridge-4, cpu-host");
    let e = xml::read_file(std::path::Path::new("/nonexistent/topo.xml")).unwrap_err().to_string();
    assert!(e.starts_with("cannot read topology file '/nonexistent/topo.xml'"), "{e}");
}

#[test]
fn size_limits() {
    let open = r#"<pci busid="0000:01:00.0" class="0x060400" link_speed="" link_width="16">"#;
    let deep = format!(
        r#"<system version="1"><cpu numaid="0" arch="arm64">{}{}</cpu></system>"#,
        open.repeat(100),
        "</pci>".repeat(100)
    );
    let e = parse_err(&deep);
    assert!(e.starts_with("bad.xml:1: malformed XML: elements nested deeper than 64 levels"), "{e}");
    let many = format!(
        r#"<system version="1"><cpu numaid="0" arch="arm64"><nic>{}</nic></cpu></system>"#,
        r#"<net dev="0"/>"#.repeat(300)
    );
    let e = parse_err(&many);
    assert!(e.contains("more than 256 elements"), "{e}");
}

#[test]
fn unknown_elements_are_dropped_like_nccl() {
    let x = xml::parse(
        "<system version=\"1\"><cpu numaid=\"0\" arch=\"arm64\"><foo><pci/></foo></cpu><bar/></system>",
        "t",
    )
    .unwrap();
    assert_eq!(x.system.subs.len(), 1);
    assert!(x.system.subs[0].subs.is_empty());
}

#[test]
fn topo_file_and_dump_file_from_env() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dump.xml");
    let env = collscope_debug::env::Env::from_pairs([("NCCL_TOPO_DUMP_FILE", out.to_str().unwrap())]);
    let x = presets::load("hgx-pcie").unwrap();
    assert_eq!(dump_if_requested(&x, &env).unwrap(), Some(out.clone()));
    let env = collscope_debug::env::Env::from_pairs([("NCCL_TOPO_FILE", out.to_str().unwrap())]);
    let source = TopoSource::from_env(&env);
    assert_eq!(source, TopoSource::File(out.clone()));
    let back = load(&source).unwrap();
    let t = build(&back, &TopoEnv::default()).unwrap();
    assert_eq!(t.source, format!("file:{}", out.display()));
    let mut orig = build(&x, &TopoEnv::default()).unwrap();
    orig.source = t.source.clone();
    assert_eq!(t, orig);
    assert_eq!(dump_if_requested(&x, &collscope_debug::env::Env::default()).unwrap(), None);
    assert_eq!(TopoSource::from_env(&collscope_debug::env::Env::default()), TopoSource::Detect { root: "/".into() });
}

#[test]
fn broadcom_gen4_switches_are_flattened() {
    let bcm = r#"vendor="0x1000" device="0xc010" subsystem_vendor="0x1000" subsystem_device="0xa064" link_speed="16.0 GT/s PCIe" link_width="16""#;
    let gpu = |bus: &str, dev: u32| {
        format!(
            r#"<pci busid="{bus}" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="{dev}" sm="80" rank="{dev}" gdr="1"/></pci>"#
        )
    };
    let text = format!(
        r#"<system version="1"><cpu numaid="0" arch="arm64">
        <pci busid="0000:01:00.0" class="0x060400" {bcm}>
          <pci busid="0000:02:00.0" class="0x060400" {bcm}>{}</pci>
          <pci busid="0000:03:00.0" class="0x060400" {bcm}>{}</pci>
        </pci></cpu></system>"#,
        gpu("0000:04:00.0", 0),
        gpu("0000:05:00.0", 1)
    );
    let t = from_xml(&text, &TopoEnv::default());
    assert_eq!(t.nodes_of(NodeType::PCI).count(), 1, "sub-switches folded into the top one");
    let (sw, node) = t.nodes_of(NodeType::PCI).next().unwrap();
    assert_eq!(node.name(), "PCI/0-1000");
    assert_eq!(node.pci.as_ref().unwrap().subsystem_device.as_deref(), Some("0xffff"));
    let (g0, g1) = (nth(&t, NodeType::GPU, 0), nth(&t, NodeType::GPU, 1));
    assert_eq!(kind(&t, g0, g1), PathType::PIX);
    assert!(t.links.iter().any(|l| l.from == g0 && l.to == sw));
    assert!(t.links.iter().any(|l| l.from == sw && l.to == g1));
    // Without the Broadcom ids the two levels stay: PXB.
    let plain =
        from_xml(&text.replace(r#"subsystem_device="0xa064""#, r#"subsystem_device="0x0000""#), &TopoEnv::default());
    assert_eq!(plain.nodes_of(NodeType::PCI).count(), 3);
    assert_eq!(kind(&plain, g0, g1), PathType::PXB);
}

#[test]
fn amd_with_two_gpus_allows_p2p_across_sockets() {
    let gpu = |numa: u32, bus: &str, dev: u32| {
        format!(
            r#"<cpu numaid="{numa}" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="1"><pci busid="{bus}" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="{dev}" sm="80" rank="{dev}" gdr="1"/></pci></cpu>"#
        )
    };
    let text = format!(r#"<system version="1">{}{}</system>"#, gpu(0, "0000:01:00.0", 0), gpu(1, "0000:81:00.0", 1));
    let env = TopoEnv::default();
    let t = from_xml(&text, &env);
    let (g0, g1) = (nth(&t, NodeType::GPU, 0), nth(&t, NodeType::GPU, 1));
    let d = check_p2p(&t, &env, g0, g1);
    assert_eq!((d.path, d.level, d.p2p), (PathType::SYS, PathType::SYS, true));
    assert_eq!(paths::path(&t, g0, g1).unwrap().bw, bandwidth::AMD_BW);
    // The user's level still wins.
    let pxb = TopoEnv { p2p_level: Some(PathType::PXB), ..TopoEnv::default() };
    assert!(!check_p2p(&t, &pxb, g0, g1).p2p);
}

#[test]
fn separate_hosts_are_disconnected() {
    let cpu = |hash: &str, bus: &str, dev: u32| {
        format!(
            r#"<cpu host_hash="{hash}" numaid="0" arch="arm64"><pci busid="{bus}" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="{dev}" sm="90" rank="{dev}" gdr="1"/></pci></cpu>"#
        )
    };
    let text =
        format!(r#"<system version="1">{}{}</system>"#, cpu("0xa", "0000:01:00.0", 0), cpu("0xb", "0000:01:00.0", 1));
    let t = from_xml(&text, &TopoEnv::default());
    let (g0, g1) = (nth(&t, NodeType::GPU, 0), nth(&t, NodeType::GPU, 1));
    assert_eq!(t.nodes[g1].name(), "GPU/1-1000", "the second host is system 1");
    assert_eq!(kind(&t, g0, g1), PathType::DIS);
    assert!(!check_p2p(&t, &TopoEnv::default(), g0, g1).p2p);
}

#[test]
fn gdr_c2c_parameter() {
    let off = TopoEnv { gdr_c2c: false, ..TopoEnv::default() };
    let t = from_xml(GRACE, &off);
    let (g, net) = (nth(&t, NodeType::GPU, 0), nth(&t, NodeType::NET, 0));
    let d = check_gdr(&t, &off, g, net, false).unwrap();
    assert_eq!(d.lines, ["GPU Direct RDMA Disabled for GPU 0 / HCA 0 (distance 6 > 5)"]);
    // Without GDR the NIC path is rerouted through the CPU's memory: P2C stays the merged type.
    assert_eq!(kind(&t, g, net), PathType::P2C);
}

#[test]
fn net_between_local_gpus_and_flush() {
    let env = TopoEnv::default();
    let t = preset("hgx-pcie", &env);
    let g: Vec<usize> = t.nodes_of(NodeType::GPU).map(|(i, _)| i).collect();
    // GPU0 and GPU3 (PHB, 24 GB/s between them) each reach a NIC at PIX, but at the same 24 GB/s: no.
    assert!(!paths::check_net(&t, &env, g[0], g[3]));
    // Across sockets (10 GB/s) only GPU0 has a NIC at PXB or better: no.
    assert!(!paths::check_net(&t, &env, g[0], g[4]));
    let nvb = preset("nvlink-bridge-4", &env);
    let h: Vec<usize> = nvb.nodes_of(NodeType::GPU).map(|(i, _)| i).collect();
    assert!(!paths::check_net(&nvb, &env, h[0], h[2]), "the NIC is PHB away from every GPU");
    let net = nth(&t, NodeType::NET, 0);
    assert!(paths::need_flush(&t, &env, g[0], net, false), "Ampere flushes");
    let h100 = preset("dgx-h100", &env);
    let (hg, hn) = (nth(&h100, NodeType::GPU, 0), nth(&h100, NodeType::NET, 0));
    assert!(!paths::need_flush(&h100, &env, hg, hn, false), "Hopper does not");
    assert!(paths::need_flush(&h100, &env, hg, hn, true));
    let forced = TopoEnv { net_force_flush: true, ..TopoEnv::default() };
    assert!(paths::need_flush(&h100, &forced, hg, hn, false));
}

#[test]
fn net_wins_when_faster_than_p2p() {
    // Two GPUs on different sockets of an Ice Lake host (10 GB/s between them), each with its own 50 GB/s NIC
    // on its switch (PCIe Gen4: 24 GB/s paths), so the network is faster.
    let side = |numa: u32, sw: &str, gpu: &str, nic: &str, dev: u32| {
        format!(
            r#"<cpu numaid="{numa}" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="106"><pci busid="{sw}" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16"><pci busid="{gpu}" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="{dev}" sm="80" rank="{dev}" gdr="1"/></pci><pci busid="{nic}" class="0x020700" link_speed="16.0 GT/s PCIe" link_width="16"><nic><net name="mlx5_{dev}" dev="{dev}" speed="400000" gdr="1"/></nic></pci></pci></cpu>"#
        )
    };
    let text = format!(
        r#"<system version="1">{}{}</system>"#,
        side(0, "0000:10:00.0", "0000:11:00.0", "0000:12:00.0", 0),
        side(1, "0000:90:00.0", "0000:91:00.0", "0000:92:00.0", 1)
    );
    let env = TopoEnv::default();
    let t = from_xml(&text, &env);
    let (g0, g1) = (nth(&t, NodeType::GPU, 0), nth(&t, NodeType::GPU, 1));
    assert!(paths::check_net(&t, &env, g0, g1));
    let off = TopoEnv { net_disable_intra: true, ..TopoEnv::default() };
    assert!(!paths::check_net(&t, &off, g0, g1));
}

/// 8 GeForce RTX 4090 (`device="0x2684"`) behind two PCIe switches on one CPU, as a consumer workstation.
pub(crate) fn geforce_box() -> String {
    let gpu = |bus: u32, dev: u32| {
        format!(
            r#"<pci busid="0000:{bus:02x}:00.0" class="0x030000" vendor="0x10de" device="0x2684" subsystem_vendor="0x10de" subsystem_device="0x167c" link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="{dev}" sm="89" rank="{dev}" gdr="0"/></pci>"#
        )
    };
    let switch = |bus: u32, first: u32| {
        let gpus: String = (0..4).map(|i| gpu(bus + 1 + i, first + i)).collect();
        format!(
            r#"<pci busid="0000:{bus:02x}:00.0" class="0x060400" vendor="0x1000" device="0xc010" link_speed="16.0 GT/s PCIe" link_width="16">{gpus}</pci>"#
        )
    };
    format!(
        r#"<system version="1"><cpu numaid="0" affinity="ffffffff" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="1">{}{}</cpu></system>"#,
        switch(0x10, 0),
        switch(0x40, 4)
    )
}

#[test]
fn geforce_gpus_get_no_p2p_as_nvml_refuses_it() {
    let t = from_xml(&geforce_box(), &TopoEnv::default());
    let (g0, g1) = (nth(&t, NodeType::GPU, 0), nth(&t, NodeType::GPU, 1));
    assert!(paths::nvml_refuses_p2p(&t.nodes[g0]));
    let d = check_p2p(&t, &TopoEnv::default(), g0, g1);
    assert!(!d.p2p && d.nvml_refused && d.path == PathType::PHB, "{d:?}");
    let line = print::p2p_lines(&t, &TopoEnv::default()).into_iter().find(|l| l.starts_with("GPU0 -> GPU1")).unwrap();
    assert!(line.contains("NVML"), "{line}");
    // NCCL's graph goes through the CPU: graph::plan's tests.

    // --p2p on: the same machine as if NVML allowed it.
    let on = TopoEnv { assume_p2p: true, ..TopoEnv::default() };
    let t = from_xml(&geforce_box(), &on);
    assert!(check_p2p(&t, &on, g0, g1).p2p);
    assert_eq!(kind(&t, g0, g1), PathType::PIX);
    // Data-center GPUs on the same tree keep P2P.
    let t = from_xml(&geforce_box().replace("0x2684", "0x20b5"), &TopoEnv::default());
    assert!(check_p2p(&t, &TopoEnv::default(), g0, g1).p2p);
}

#[test]
fn rccl_files_are_named() {
    let v2 = r#"<system version="2"><cpu numaid="0" arch="x86_64" vendor="AuthenticAMD"/></system>"#;
    let e = xml::parse(v2, "mi300.xml").unwrap_err().to_string();
    assert!(e.contains("RCCL") && e.contains("version=\"2\"") && e.contains("mi300.xml:1"), "{e}");
    let xgmi = r#"<system version="1">
<cpu numaid="0" arch="x86_64" vendor="AuthenticAMD"><pci busid="0000:0c:00.0" class="0x038000" link_speed="32.0 GT/s PCIe" link_width="16"><gpu dev="0" sm="94" rank="0" gdr="1">
<xgmi target="0000:22:00.0" count="1" tclass="0x038000"/></gpu></pci></cpu></system>"#;
    let e = xml::parse(xgmi, "mi250.xml").unwrap_err().to_string();
    assert!(e.contains("RCCL") && e.contains("<xgmi>") && e.contains("mi250.xml:3"), "{e}");
}
