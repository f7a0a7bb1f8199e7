//! From the XML tree to the model's node/link graph, as NCCL 2.28.9's `ncclTopoGetSystemFromXml` (`topo.cc`)
//! does: CPUs and their PCI trees first, then NVLinks, C2C links and PCI switch peer links, then the
//! links between CPU sockets; finally each node's links are ordered as NCCL orders them (highest bandwidth
//! first, the PCI link towards the CPU last) because path search visits links in that order.

use super::bandwidth::{self, CpuKind, LOC_BW};
use super::error::TopoError;
use super::xml::{TopoXml, XmlNode};
use crate::version::VersionProfile;
use collscope_debug::env::parse_c_int;
use collscope_model::topology::{CpuAttrs, GpuAttrs, NetAttrs, PciAttrs};
use collscope_model::{Link, LinkType, Node, NodeId, NodeType, Topology};

/// NCCL keeps the system (host) index in the top 8 bits of a node id and masks it off the local id.
const LOCAL_ID_MASK: u64 = 0x00ff_ffff_ffff_ffff;
/// `MAXCHANNELS`, the default `maxconn` of a NET.
const MAX_CHANNELS: u32 = 64;

/// A node during construction: its type and its index among nodes of that type (NCCL's per-type arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NRef {
    kind: NodeType,
    index: usize,
}

#[derive(Debug, Clone)]
struct BLink {
    to: NRef,
    kind: LinkType,
    bw: f64,
}

/// The link passes NCCL makes after creating the nodes, in its order.
#[derive(Debug, Clone, Copy)]
enum LinkPass {
    NvLink,
    C2c,
    PciLink,
}

struct Builder<'a> {
    origin: &'a str,
    profile: &'a VersionProfile,
    nodes: [Vec<Node>; 6],
    links: [Vec<Vec<BLink>>; 6],
    host_hashes: Vec<u64>,
}

/// `strtoull(s, NULL, 16)`: the leading hex digits, 0 when there are none. NCCL reads host hashes and GUIDs
/// this way; they are opaque identifiers, so a placeholder such as `0x...` reads as 0 there too.
fn hex_prefix(s: &str) -> u64 {
    let t = s.trim();
    let t = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")).unwrap_or(t);
    let end = t.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(t.len());
    u64::from_str_radix(&t[..end.min(16)], 16).unwrap_or(0)
}

/// A PCI bus id (`0000:47:00.0`) as NCCL's `busIdToInt64` reads it: its hex digits, ':' and '.' skipped.
pub fn bus_id_to_u64(busid: &str) -> Option<u64> {
    if !busid.contains(':') {
        return None;
    }
    let digits: String = busid.chars().filter(|c| *c != ':' && *c != '.').collect();
    if digits.is_empty() || digits.len() > 16 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(&digits, 16).ok()
}

fn node_id(system: usize, local: u64) -> NodeId {
    NodeId { system: system as u64, local: local & LOCAL_ID_MASK }
}

impl<'a> Builder<'a> {
    fn missing(&self, node: &XmlNode, attr: &'static str) -> TopoError {
        TopoError::MissingAttr { origin: self.origin.to_string(), line: node.line, element: node.name.clone(), attr }
    }

    fn bad(&self, node: &XmlNode, attr: &'static str, value: &str, expected: &str) -> TopoError {
        TopoError::BadAttr {
            origin: self.origin.to_string(),
            line: node.line,
            element: node.name.clone(),
            attr,
            value: value.to_string(),
            expected: expected.to_string(),
        }
    }

    fn req<'n>(&self, node: &'n XmlNode, attr: &'static str) -> Result<&'n str, TopoError> {
        node.attr(attr).ok_or_else(|| self.missing(node, attr))
    }

    fn req_int(&self, node: &XmlNode, attr: &'static str) -> Result<i64, TopoError> {
        let v = self.req(node, attr)?;
        parse_c_int(v).ok_or_else(|| self.bad(node, attr, v, "an integer"))
    }

    fn opt_int(&self, node: &XmlNode, attr: &'static str, default: i64) -> Result<i64, TopoError> {
        match node.attr(attr) {
            None => Ok(default),
            Some(v) => parse_c_int(v).ok_or_else(|| self.bad(node, attr, v, "an integer")),
        }
    }

    fn req_busid(&self, node: &XmlNode, attr: &'static str) -> Result<u64, TopoError> {
        let v = self.req(node, attr)?;
        bus_id_to_u64(v).ok_or_else(|| self.bad(node, attr, v, "a PCI bus id such as 0000:47:00.0"))
    }

    fn find(&self, kind: NodeType, id: NodeId) -> Option<NRef> {
        let index = self.nodes[kind as usize].iter().position(|n| n.id == id)?;
        Some(NRef { kind, index })
    }

    fn create(&mut self, kind: NodeType, id: NodeId) -> NRef {
        let t = kind as usize;
        self.nodes[t].push(Node { kind, id, cpu: None, pci: None, gpu: None, net: None });
        self.links[t].push(Vec::new());
        NRef { kind, index: self.nodes[t].len() - 1 }
    }

    fn node(&self, r: NRef) -> &Node {
        &self.nodes[r.kind as usize][r.index]
    }

    fn node_mut(&mut self, r: NRef) -> &mut Node {
        &mut self.nodes[r.kind as usize][r.index]
    }

    fn links_of(&self, r: NRef) -> &Vec<BLink> {
        &self.links[r.kind as usize][r.index]
    }

    /// Adds `bw` to the link `from -> to` of this type (NVLinks aggregate), keeping links sorted by
    /// bandwidth, highest first, as `ncclTopoConnectNodes` does.
    fn connect(&mut self, from: NRef, to: NRef, kind: LinkType, bw: f64) {
        let list = &mut self.links[from.kind as usize][from.index];
        let mut pos = match list.iter().position(|l| l.to == to && l.kind == kind) {
            Some(p) => {
                list[p].bw += bw;
                p
            }
            None => {
                list.push(BLink { to, kind, bw });
                list.len() - 1
            }
        };
        while pos > 0 && list[pos - 1].bw < list[pos].bw {
            list.swap(pos - 1, pos);
            pos -= 1;
        }
    }

    fn system_id(&mut self, cpu: &XmlNode) -> usize {
        let hash = cpu.attr("host_hash").map(hex_prefix).unwrap_or(0);
        match self.host_hashes.iter().position(|h| *h == hash) {
            Some(i) => i,
            None => {
                self.host_hashes.push(hash);
                self.host_hashes.len() - 1
            }
        }
    }

    fn add_cpu(&mut self, x: &XmlNode) -> Result<(), TopoError> {
        let numa = self.req_int(x, "numaid")?;
        let system = self.system_id(x);
        let cpu = self.create(NodeType::CPU, node_id(system, numa as u64));
        let mut attrs = CpuAttrs {
            arch: x.attr("arch").unwrap_or_default().to_string(),
            numa_id: Some(numa as i32),
            affinity: x.attr("affinity").map(str::to_string),
            ..CpuAttrs::default()
        };
        // NCCL reads vendor, family and model only where they matter: x86, and for Intel/Zhaoxin models.
        if bandwidth::cpu_arch_id(&attrs.arch) == bandwidth::CPU_ARCH_X86 {
            attrs.vendor = self.req(x, "vendor")?.to_string();
            let kind = CpuKind::of(&attrs);
            let needs_model =
                kind.vendor == bandwidth::CPU_VENDOR_INTEL || kind.vendor == bandwidth::CPU_VENDOR_ZHAOXIN;
            let (family, model) = if needs_model {
                (Some(self.req_int(x, "familyid")?), Some(self.req_int(x, "modelid")?))
            } else {
                (self.opt_int(x, "familyid", -1).ok(), self.opt_int(x, "modelid", -1).ok())
            };
            attrs.family_id = family.filter(|v| *v >= 0).map(|v| v as u32);
            attrs.model_id = model.filter(|v| *v >= 0).map(|v| v as u32);
        }
        self.node_mut(cpu).cpu = Some(attrs);
        for sub in &x.subs {
            match sub.name.as_str() {
                "pci" => self.add_pci(sub, cpu, system)?,
                "nic" => {
                    // A NIC without PCI information hangs off the CPU itself.
                    let id = node_id(system, 0);
                    let nic = match self.find(NodeType::NIC, id) {
                        Some(n) => n,
                        None => {
                            let n = self.create(NodeType::NIC, id);
                            self.connect(cpu, n, LinkType::PCI, LOC_BW);
                            self.connect(n, cpu, LinkType::PCI, LOC_BW);
                            n
                        }
                    };
                    self.add_nic(sub, nic, system)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn pci_attrs(&self, x: &XmlNode) -> Result<PciAttrs, TopoError> {
        let s = |k: &str| x.attr(k).map(str::to_string);
        Ok(PciAttrs {
            busid: self.req(x, "busid")?.to_string(),
            class: s("class"),
            vendor: s("vendor"),
            device: s("device"),
            subsystem_vendor: s("subsystem_vendor"),
            subsystem_device: s("subsystem_device"),
            link_speed: s("link_speed"),
            link_width: None,
        })
    }

    fn add_pci(&mut self, x: &XmlNode, parent: NRef, system: usize) -> Result<(), TopoError> {
        let mut kind = bandwidth::node_type_of_class(self.req(x, "class")?);
        let bus = self.req_busid(x, "busid")?;
        let mut node = None;
        if let Some(g) = x.sub("gpu") {
            kind = NodeType::GPU;
            // A GPU without a rank is not part of this communicator: NCCL leaves its whole branch out.
            if g.attr("rank").is_none() {
                return Ok(());
            }
            let gpu = self.create(NodeType::GPU, node_id(system, bus));
            let attrs = GpuAttrs {
                sm: self.uint(g, "sm")?,
                rank: Some(self.req_int(g, "rank")? as i32),
                dev: self.req_int(g, "dev")? as i32,
                gdr: self.req_int(g, "gdr")? != 0,
            };
            self.node_mut(gpu).gpu = Some(attrs);
            node = Some(gpu);
        }
        if let Some(n) = x.sub("nic") {
            let id = node_id(system, bus);
            let nic = match self.find(NodeType::NIC, id) {
                Some(existing) => existing,
                None => {
                    let created = self.create(NodeType::NIC, id);
                    node = Some(created);
                    created
                }
            };
            self.add_nic(n, nic, system)?;
        } else if kind == NodeType::PCI {
            let pci = self.create(NodeType::PCI, node_id(system, bus));
            node = Some(pci);
            for sub in x.subs.iter().filter(|s| s.name != "pcilink") {
                self.add_pci(sub, pci, system)?;
            }
        }
        let Some(node) = node else { return Ok(()) };
        let mut pci = self.pci_attrs(x)?;
        let width_str = self.req(x, "link_width")?;
        // Detection writes an empty width when sysfs has none; NCCL reads that as 0, i.e. x16.
        let width = if width_str.is_empty() {
            0
        } else {
            parse_c_int(width_str)
                .filter(|w| (0..=64).contains(w))
                .ok_or_else(|| self.bad(x, "link_width", width_str, "a PCIe link width (0 to 64 lanes)"))?
        };
        let speed = self.req(x, "link_speed")?;
        pci.link_width = Some(width as u32);
        self.node_mut(node).pci = Some(pci);
        let bw = bandwidth::pci_bw(speed, width as u32);
        self.connect(node, parent, LinkType::PCI, bw);
        self.connect(parent, node, LinkType::PCI, bw);
        Ok(())
    }

    fn uint(&self, x: &XmlNode, attr: &'static str) -> Result<u32, TopoError> {
        let v = self.req(x, attr)?;
        parse_c_int(v).and_then(|n| u32::try_from(n).ok()).ok_or_else(|| self.bad(x, attr, v, "a non-negative integer"))
    }

    fn add_nic(&mut self, x: &XmlNode, nic: NRef, system: usize) -> Result<(), TopoError> {
        // A <net> without a device number is not used by this process (NCCL skips it).
        for net in x.subs_named("net").filter(|n| n.attr("dev").is_some()) {
            self.add_net(net, nic, system)?;
        }
        Ok(())
    }

    fn add_net(&mut self, x: &XmlNode, nic: NRef, system: usize) -> Result<(), TopoError> {
        let dev = self.req_int(x, "dev")?;
        let net = self.create(NodeType::NET, node_id(system, dev as u64));
        let latency = match x.attr("latency") {
            None => 0.0,
            Some(v) => v.trim().parse::<f64>().map_err(|_| self.bad(x, "latency", v, "a number"))?,
        };
        let attrs = NetAttrs {
            dev: dev as i32,
            name: x.attr("name").unwrap_or_default().to_string(),
            bw: bandwidth::net_bw(self.opt_int(x, "speed", 0)?),
            latency,
            port: self.opt_int(x, "port", 0)? as u32,
            guid: x.attr("guid").map(str::to_string),
            max_conn: Some(self.opt_int(x, "maxconn", i64::from(MAX_CHANNELS))? as u32),
            gdr: self.opt_int(x, "gdr", 0)? != 0,
            coll: self.opt_int(x, "coll", 0)? != 0,
        };
        let bw = attrs.bw;
        self.node_mut(net).net = Some(attrs);
        self.connect(nic, net, LinkType::NET, bw);
        self.connect(net, nic, LinkType::NET, bw);
        Ok(())
    }

    /// The CPU above a node, following PCI links up through switches (`findLocalCpu`).
    fn find_local_cpu(&self, node: NRef, from: Option<NRef>) -> Option<NRef> {
        if node.kind == NodeType::CPU {
            return Some(node);
        }
        self.links_of(node)
            .iter()
            .filter(|l| {
                l.kind == LinkType::PCI && Some(l.to) != from && matches!(l.to.kind, NodeType::PCI | NodeType::CPU)
            })
            .find_map(|l| self.find_local_cpu(l.to, Some(node)))
    }

    /// A later pass over the tree for elements that link nodes created in the first, each given the bus
    /// id of the closest enclosing element that has one and the system id.
    fn walk_links(
        &mut self,
        x: &XmlNode,
        parent_busid: Option<&str>,
        system: usize,
        pass: LinkPass,
    ) -> Result<(), TopoError> {
        let system = if x.name == "cpu" { self.system_id(x) } else { system };
        match (pass, x.name.as_str()) {
            (LinkPass::NvLink, "nvlink") => self.add_nvlink(x, parent_busid, system)?,
            (LinkPass::C2c, "c2c") => self.add_c2c(x, parent_busid, system)?,
            (LinkPass::PciLink, "pcilink") => self.add_pcilink(x, parent_busid, system)?,
            _ => {}
        }
        let busid = x.attr("busid").or(parent_busid);
        for sub in &x.subs {
            self.walk_links(sub, busid, system, pass)?;
        }
        Ok(())
    }

    /// The GPU an `<nvlink>`/`<c2c>` element belongs to.
    fn owner_gpu(&self, x: &XmlNode, parent_busid: Option<&str>, system: usize) -> Result<NRef, TopoError> {
        let dangling = |target: &str| TopoError::DanglingRef {
            origin: self.origin.to_string(),
            line: x.line,
            element: x.name.clone(),
            what: "GPU",
            target: target.to_string(),
        };
        let busid = parent_busid.ok_or_else(|| dangling("(none: not inside a <pci> element)"))?;
        let bus = bus_id_to_u64(busid).ok_or_else(|| dangling(busid))?;
        self.find(NodeType::GPU, node_id(system, bus)).ok_or_else(|| dangling(busid))
    }

    fn add_nvlink(&mut self, x: &XmlNode, parent_busid: Option<&str>, system: usize) -> Result<(), TopoError> {
        let gpu = self.owner_gpu(x, parent_busid, system)?;
        let count = self.uint(x, "count")?;
        let remote = match bandwidth::node_type_of_class(self.req(x, "tclass")?) {
            NodeType::GPU => {
                let target = self.req_busid(x, "target")?;
                self.find(NodeType::GPU, node_id(system, target))
            }
            NodeType::CPU => self.find_local_cpu(gpu, None),
            _ => Some(match self.nodes[NodeType::NVS as usize].is_empty() {
                true => self.create(NodeType::NVS, node_id(0, 0)),
                false => NRef { kind: NodeType::NVS, index: 0 },
            }),
        };
        if let Some(remote) = remote {
            let sm = self.node(gpu).gpu.as_ref().map_or(0, |g| g.sm);
            let bw = f64::from(count) * self.profile.nvlink_bw(sm);
            self.connect(gpu, remote, LinkType::NVL, bw);
            if remote.kind != NodeType::GPU {
                self.connect(remote, gpu, LinkType::NVL, bw);
            }
        }
        Ok(())
    }

    fn add_c2c(&mut self, x: &XmlNode, parent_busid: Option<&str>, system: usize) -> Result<(), TopoError> {
        let gpu = self.owner_gpu(x, parent_busid, system)?;
        let count = self.uint(x, "count")?;
        let bw = f64::from(self.uint(x, "bw")?) * f64::from(count) / 1000.0;
        if let Some(cpu) = self.find_local_cpu(gpu, None) {
            self.connect(gpu, cpu, LinkType::C2C, bw);
            self.connect(cpu, gpu, LinkType::C2C, bw);
        }
        Ok(())
    }

    fn add_pcilink(&mut self, x: &XmlNode, parent_busid: Option<&str>, system: usize) -> Result<(), TopoError> {
        let own = parent_busid.and_then(bus_id_to_u64).and_then(|b| self.find(NodeType::PCI, node_id(system, b)));
        let Some(pci) = own else {
            return Err(TopoError::DanglingRef {
                origin: self.origin.to_string(),
                line: x.line,
                element: x.name.clone(),
                what: "PCI switch",
                target: parent_busid.unwrap_or("(none)").to_string(),
            });
        };
        let target = self.req_busid(x, "target")?;
        if let Some(remote) = self.find(NodeType::PCI, node_id(system, target)) {
            self.connect(pci, remote, LinkType::LOC, LOC_BW);
        }
        Ok(())
    }

    /// Removes a node and every link to it; later nodes of its type move down one index.
    fn remove_node(&mut self, r: NRef) {
        let t = r.kind as usize;
        self.nodes[t].remove(r.index);
        self.links[t].remove(r.index);
        for lists in self.links.iter_mut() {
            for list in lists.iter_mut() {
                list.retain(|l| l.to != r);
                for l in list.iter_mut().filter(|l| l.to.kind == r.kind && l.to.index > r.index) {
                    l.to.index -= 1;
                }
            }
        }
    }

    fn device_code(&self, r: NRef) -> u64 {
        self.node(r).pci.as_ref().map_or(0, pci_device_code)
    }

    /// Broadcom Gen4/Gen5 switches show up as two levels of switches although they switch at full
    /// bandwidth between all ports; NCCL folds the second level into the first (`ncclTopoFlattenBcmSwitches`).
    fn flatten_bcm_switches(&mut self) {
        let mut s = 0;
        while s < self.nodes[NodeType::PCI as usize].len() {
            let sw = NRef { kind: NodeType::PCI, index: s };
            let gen = bcm_gen(self.device_code(sw), 0);
            if gen == 0 {
                s += 1;
                continue;
            }
            let subs: Vec<NRef> = self
                .links_of(sw)
                .iter()
                .map(|l| l.to)
                .filter(|&to| to.kind == NodeType::PCI && bcm_gen(self.device_code(to), 1) == gen)
                .collect();
            self.links[NodeType::PCI as usize][s].retain(|l| !subs.contains(&l.to));
            // Children of each sub-switch hang directly off the parent switch; each removal shifts the
            // indices of the sub-switches after it, so they are found again by id.
            let ids: Vec<NodeId> = subs.iter().map(|&r| self.node(r).id).collect();
            for id in ids {
                let Some(sub) = self.find(NodeType::PCI, id) else { continue };
                let sw = NRef { kind: NodeType::PCI, index: s };
                for link in self.links_of(sub).clone().into_iter().filter(|l| l.to != sw) {
                    for back in self.links[link.to.kind as usize][link.to.index].iter_mut().filter(|b| b.to == sub) {
                        back.to = sw;
                    }
                    self.links[NodeType::PCI as usize][sw.index].push(link);
                }
                let parent_before = sub.index < sw.index;
                self.remove_node(sub);
                if parent_before {
                    s -= 1;
                }
            }
            // Mark the switch so it is not folded again, as NCCL sets the subsystem device to 0xffff.
            if let Some(pci) = self.nodes[NodeType::PCI as usize][s].pci.as_mut() {
                pci.subsystem_device = Some("0xffff".into());
            }
            s = 0;
        }
    }

    fn connect_cpus(&mut self) {
        let cpus = self.nodes[NodeType::CPU as usize].clone();
        for (n, c1) in cpus.iter().enumerate() {
            let bw = c1.cpu.as_ref().map_or(LOC_BW, |c| self.profile.inter_cpu_bw(CpuKind::of(c)));
            for (p, c2) in cpus.iter().enumerate() {
                if n != p && c1.id.system == c2.id.system {
                    let (a, b) = (NRef { kind: NodeType::CPU, index: n }, NRef { kind: NodeType::CPU, index: p });
                    self.connect(a, b, LinkType::SYS, bw);
                }
            }
        }
    }

    /// Moves each node's link towards the CPU to the end of its list, down the PCI tree (`ncclTopoSort`).
    fn sort(&mut self, node: NRef, up: Option<NRef>) {
        let list = &mut self.links[node.kind as usize][node.index];
        if let Some(up) = up {
            if let Some(pos) = list.iter().position(|l| l.to == up) {
                let link = list.remove(pos);
                list.push(link);
            }
        }
        let down: Vec<NRef> =
            list.iter().filter(|l| l.kind == LinkType::PCI && Some(l.to) != up).map(|l| l.to).collect();
        for d in down {
            self.sort(d, Some(node));
        }
    }

    fn finish(self, source: String, host: Option<String>) -> Topology {
        let mut offset = [0usize; 6];
        for t in 1..6 {
            offset[t] = offset[t - 1] + self.nodes[t - 1].len();
        }
        let flat = |r: NRef| offset[r.kind as usize] + r.index;
        let mut links = Vec::new();
        for (t, per_type) in self.links.iter().enumerate() {
            for (i, list) in per_type.iter().enumerate() {
                let from = offset[t] + i;
                links.extend(list.iter().map(|l| Link { from, to: flat(l.to), kind: l.kind, bw: l.bw }));
            }
        }
        Topology {
            host,
            source,
            nodes: self.nodes.into_iter().flatten().collect(),
            links,
            paths: Vec::new(),
            max_bw: 0.0,
            total_bw: 0.0,
        }
    }
}

/// Builds the node/link graph of a topology XML. Paths and `max_bw`/`total_bw` are left for
/// [`super::paths::compute`]. Link bandwidths are those of NCCL release `profile`.
pub fn topology_from_xml(xml: &TopoXml, host: Option<String>, profile: &VersionProfile) -> Result<Topology, TopoError> {
    let mut b = Builder {
        origin: &xml.origin,
        profile,
        nodes: Default::default(),
        links: Default::default(),
        host_hashes: Vec::new(),
    };
    for cpu in xml.system.subs_named("cpu") {
        b.add_cpu(cpu)?;
    }
    for pass in [LinkPass::NvLink, LinkPass::C2c, LinkPass::PciLink] {
        b.walk_links(&xml.system, None, 0, pass)?;
    }
    b.flatten_bcm_switches();
    b.connect_cpus();
    for index in 0..b.nodes[NodeType::CPU as usize].len() {
        b.sort(NRef { kind: NodeType::CPU, index }, None);
    }
    Ok(b.finish(xml.origin.clone(), host))
}

/// The Broadcom PCIe switch generation of a device code, at the first (`level` 0) or second level
/// (`getBcmGen`): 4 for PEX88000 in base mode, 5 for PEX89000; 0 otherwise.
fn bcm_gen(code: u64, level: u64) -> u32 {
    let masked = code & 0xffff_ffff_ffff_f000;
    if masked == 0x1000_c010_1000_a000 {
        4
    } else if masked == (0x1000_c030_1000_0000 | (level * 0x1000)) {
        5
    } else {
        0
    }
}

/// The 64-bit value NCCL prints for a PCI switch: vendor, device, subsystem vendor and subsystem device
/// packed 16 bits each (`ncclTopoAddPci`).
pub fn pci_device_code(pci: &PciAttrs) -> u64 {
    let field = |v: &Option<String>| v.as_deref().and_then(parse_c_int).unwrap_or(0) as u64 & 0xffff;
    (field(&pci.vendor) << 48)
        | (field(&pci.device) << 32)
        | (field(&pci.subsystem_vendor) << 16)
        | field(&pci.subsystem_device)
}

/// The id NCCL prints for a NET's ASIC: the GUID when there is one, else the NET's own 64-bit id.
pub fn net_asic(node: &Node) -> u64 {
    match node.net.as_ref().and_then(|n| n.guid.as_deref()) {
        Some(g) => hex_prefix(g),
        None => (node.id.system << 56) | node.id.local,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_and_hex_prefixes() {
        assert_eq!(bus_id_to_u64("0000:47:00.0"), Some(0x47000));
        assert_eq!(bus_id_to_u64("0000:c4:00.0"), Some(0xc4000));
        assert_eq!(bus_id_to_u64("0001:0a:1f.7"), Some(0x10a1f7));
        assert_eq!(bus_id_to_u64("47"), None);
        assert_eq!(bus_id_to_u64("0000:zz:00.0"), None);
        assert_eq!(hex_prefix("0x..."), 0);
        assert_eq!(hex_prefix("0x1c5c0300ab12cd"), 0x1c5c0300ab12cd);
        assert_eq!(hex_prefix("ff"), 0xff);
    }

    #[test]
    fn pci_device_code_packs_ids() {
        let p = PciAttrs {
            vendor: Some("0x1000".into()),
            device: Some("0xc010".into()),
            subsystem_vendor: Some("0x1000".into()),
            subsystem_device: Some("0xa064".into()),
            ..PciAttrs::default()
        };
        assert_eq!(pci_device_code(&p), 0x1000_c010_1000_a064);
    }
}
