//! Detection of the running host from `/sys` and `/proc`, building the same XML tree NCCL 2.28.9 builds
//! (`ncclTopoGetXmlFromSys`, `ncclTopoGetXmlFromCpu`, `ncclTopoFillNet` in `src/graph/xml.cc`) so that
//! detected hosts, files and presets take one code path to a [`Topology`](collscope_model::Topology).
//!
//! - CPUs: one `<cpu>` per NUMA node (`/sys/devices/system/node/nodeN/cpumap`), vendor, family and model
//!   from `/proc/cpuinfo`, the architecture this binary runs on.
//! - GPUs: NVIDIA PCI devices (vendor 0x10de, class 0x03xxxx) from `/sys/bus/pci/devices`; the compute
//!   capability comes from the PCI device id (no driver is needed, and NVLinks are not visible this way).
//! - NICs: active RDMA ports from `/sys/class/infiniband`, else the socket interfaces NCCL's socket transport
//!   would pick (`NCCL_SOCKET_IFNAME`, else `ib*`, else anything but docker/lo/virbr, that is not down).
//! - Each device's PCI chain is walked up as NCCL does: every second path component, up to the root complex.
//!
//! `root` is the directory holding `sys/` and `proc/` (`/` for the real host), so tests can use a fake tree.

use super::error::TopoError;
use super::xml::{TopoXml, XmlNode, TOPO_XML_VERSION};
use collscope_debug::env::Env;
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use std::path::{Path, PathBuf};

/// Compute capability of NVIDIA data-center and workstation GPUs by PCI device id.
const NVIDIA_SM: &[(u32, u32)] = &[
    (0x15f7, 60),
    (0x15f8, 60),
    (0x15f9, 60), // P100
    (0x1db1, 70),
    (0x1db4, 70),
    (0x1db5, 70),
    (0x1db6, 70),
    (0x1db8, 70),
    (0x1df6, 70), // V100
    (0x1eb8, 75), // T4
    (0x20b0, 80),
    (0x20b2, 80),
    (0x20b3, 80),
    (0x20b5, 80),
    (0x20f1, 80),
    (0x20f3, 80), // A100/A800
    (0x20b7, 80), // A30
    (0x2230, 86),
    (0x2231, 86),
    (0x2233, 86),
    (0x2235, 86),
    (0x2236, 86),
    (0x2237, 86), // A6000/A5000/A40/A10
    (0x26b5, 89),
    (0x26b9, 89),
    (0x26ba, 89),
    (0x27b8, 89), // L40/L40S/L4
    (0x2321, 90),
    (0x2322, 90),
    (0x2324, 90),
    (0x2330, 90),
    (0x2331, 90),
    (0x2335, 90),
    (0x2339, 90),
    (0x233a, 90),
    (0x2342, 90), // H100/H800/H200/GH200
    (0x2901, 100),
    (0x2941, 100), // B200/GB200
];

fn sm_of_device(device: &str) -> u32 {
    let id = u32::from_str_radix(device.trim_start_matches("0x"), 16).unwrap_or(0);
    match NVIDIA_SM.iter().find(|(d, _)| *d == id) {
        Some((_, sm)) => *sm,
        None => {
            nccl_info!(
                Subsys::GRAPH,
                "Topology detection : unknown NVIDIA device {device}, compute capability unknown"
            );
            0
        }
    }
}

struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// A sysfs attribute, trimmed; `None` when absent, empty or not an attribute (NCCL's
    /// `ncclTopoGetStrFromSys`). The kernel's attributes are at most a page; the root may be a copy.
    fn read(path: &Path) -> Option<String> {
        let s = collscope_debug::file::read_small_string(path, 64 << 10).ok()?;
        let t = s.trim();
        (!t.is_empty()).then(|| t.to_string())
    }

    fn list(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(rel))
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    fn devices_root(&self) -> Option<PathBuf> {
        self.path("sys/devices").canonicalize().ok()
    }
}

fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.char_indices().all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// The CPU attributes of one NUMA node.
fn cpu_node(sys: &Sysfs, numa: &str, host_hash: u64) -> XmlNode {
    let mut cpu = XmlNode::new("cpu").with("host_hash", format!("0x{host_hash:x}")).with("numaid", numa);
    if let Some(mask) = Sysfs::read(&sys.path(&format!("sys/devices/system/node/node{numa}/cpumap"))) {
        cpu.set("affinity", mask);
    }
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x86_64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64",
        other => other,
    };
    cpu.set("arch", arch);
    if arch == "x86_64" {
        // About 1.5 KiB per CPU.
        let info = collscope_debug::file::read_small_string(&sys.path("proc/cpuinfo"), 16 << 20).unwrap_or_default();
        // The first processor's block describes them all (NCCL asks CPUID of the CPU it runs on).
        let field = |name: &str| {
            info.lines()
                .take_while(|l| !l.trim().is_empty())
                .find_map(|l| l.split_once(':').filter(|(k, _)| k.trim() == name).map(|(_, v)| v.trim().to_string()))
        };
        if let Some(v) = field("vendor_id") {
            cpu.set("vendor", v);
        }
        if let Some(v) = field("cpu family") {
            cpu.set("familyid", v);
        }
        if let Some(v) = field("model") {
            cpu.set("modelid", v);
        }
    }
    cpu
}

/// A stable 64-bit id of this host: FNV-1a of host name and boot id (NCCL hashes the same two).
fn host_hash(sys: &Sysfs) -> u64 {
    let boot = Sysfs::read(&sys.path("proc/sys/kernel/random/boot_id")).unwrap_or_default();
    let text = format!("{}{}", collscope_debug::sys::hostname(), boot);
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The leading number of a `max_link_speed` string ("16.0 GT/s PCIe").
fn gts(s: &str) -> f64 {
    s.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(f64::MAX)
}

/// A `<pci>` element for the device at `dir` with NCCL's attributes; link speed and width are the lower of
/// the device's and its upstream port's.
fn pci_node(dir: &Path, busid: &str) -> XmlNode {
    let mut n = XmlNode::new("pci").with("busid", busid);
    for key in ["class", "vendor", "device", "subsystem_vendor", "subsystem_device"] {
        if let Some(v) = Sysfs::read(&dir.join(key)) {
            n.set(key, v);
        }
    }
    let parent = dir.parent().unwrap_or(dir);
    let dev_speed = Sysfs::read(&dir.join("max_link_speed")).unwrap_or_default();
    let port_speed = Sysfs::read(&parent.join("max_link_speed")).unwrap_or_default();
    n.set("link_speed", if gts(&port_speed) < gts(&dev_speed) { port_speed } else { dev_speed });
    let width = |p: &Path| {
        Sysfs::read(&p.join("max_link_width")).and_then(|w| collscope_debug::env::parse_c_int(&w)).unwrap_or(0)
    };
    n.set("link_width", width(dir).min(width(parent)).to_string());
    n
}

/// The chain of `<pci>` elements from the root complex down to the device at `real` (a canonical path
/// under `sys/devices`), and the NUMA node of its top. NCCL steps up two path components at a time,
/// skipping switch downstream ports, and stops when it meets something that is not a PCI address.
fn pci_chain(devices: &Path, real: &Path) -> Option<(Vec<XmlNode>, String)> {
    let rel = real.strip_prefix(devices).ok()?;
    let comps: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    let mut k = comps.len().checked_sub(1)?;
    if !is_bdf(&comps[k]) {
        return None;
    }
    let mut idx = vec![k];
    while k >= 2 && is_bdf(&comps[k - 1]) && is_bdf(&comps[k - 2]) {
        k -= 2;
        idx.push(k);
    }
    idx.reverse();
    let dir_of = |i: usize| comps[..=i].iter().fold(devices.to_path_buf(), |p, c| p.join(c));
    let numa = Sysfs::read(&dir_of(idx[0]).join("numa_node")).unwrap_or_else(|| "-1".to_string());
    Some((idx.iter().map(|&i| pci_node(&dir_of(i), &comps[i].to_lowercase())).collect(), numa))
}

/// Inserts `chain` below `parent`, reusing elements with the same bus id and keeping siblings ordered by bus
/// id (as NCCL does); returns the innermost element.
fn insert_chain<'a>(parent: &'a mut XmlNode, chain: &[XmlNode]) -> &'a mut XmlNode {
    let Some((first, rest)) = chain.split_first() else { return parent };
    let busid = first.attr("busid").unwrap_or_default().to_string();
    let pos = match parent.subs.iter().position(|s| s.name == "pci" && s.attr("busid") == Some(busid.as_str())) {
        Some(p) => p,
        None => {
            let at = parent
                .subs
                .iter()
                .position(|s| s.attr("busid").is_some_and(|b| busid.as_str() < b))
                .unwrap_or(parent.subs.len());
            parent.subs.insert(at, first.clone());
            at
        }
    };
    insert_chain(&mut parent.subs[pos], rest)
}

struct Detector<'a> {
    sys: Sysfs,
    devices: Option<PathBuf>,
    system: XmlNode,
    host_hash: u64,
    env: &'a Env,
}

impl Detector<'_> {
    fn cpu_index(&mut self, numa: &str) -> usize {
        if let Some(i) = self.system.subs.iter().position(|c| c.attr("numaid") == Some(numa)) {
            return i;
        }
        self.system.subs.push(cpu_node(&self.sys, numa, self.host_hash));
        self.system.subs.len() - 1
    }

    /// The `<pci>` leaf for a device, created with its chain; `None` when it is not on PCI.
    fn attach(&mut self, real: &Path) -> Option<&mut XmlNode> {
        let devices = self.devices.as_ref()?;
        let (chain, numa) = pci_chain(devices, real)?;
        let cpu = self.cpu_index(&numa);
        Some(insert_chain(&mut self.system.subs[cpu], &chain))
    }

    /// A peer-memory module is loaded (NCCL's GDR support check on the fake or real /sys).
    fn gdr_support(&self) -> bool {
        super::gdr::peer_mem_loaded(&self.sys.path(""))
    }

    fn add_gpus(&mut self) {
        let gdr = if self.gdr_support() { "1" } else { "0" };
        let mut dev = 0;
        for bdf in self.sys.list("sys/bus/pci/devices") {
            let dir = self.sys.path(&format!("sys/bus/pci/devices/{bdf}"));
            let vendor = Sysfs::read(&dir.join("vendor")).unwrap_or_default();
            let class = Sysfs::read(&dir.join("class")).unwrap_or_default();
            if vendor != "0x10de" || !class.starts_with("0x03") {
                continue;
            }
            let device = Sysfs::read(&dir.join("device")).unwrap_or_default();
            let Ok(real) = dir.canonicalize() else { continue };
            let sm = sm_of_device(&device);
            let Some(leaf) = self.attach(&real) else { continue };
            let gpu = XmlNode::new("gpu")
                .with("dev", dev.to_string())
                .with("sm", sm.to_string())
                .with("rank", dev.to_string())
                .with("gdr", gdr);
            leaf.subs.push(gpu);
            dev += 1;
        }
    }

    /// Adds one `<net>` under the NIC at `device` (a sysfs `device` link), or under the first CPU when the
    /// NIC is not a PCI device.
    fn add_net(&mut self, device: &Path, net: XmlNode) {
        let name = net.attr("name").unwrap_or_default().to_string();
        let real = device.canonicalize().ok();
        let on_pci = real.as_ref().is_some_and(|r| {
            r.join("subsystem").canonicalize().ok().and_then(|s| s.file_name().map(|f| f == "pci")).unwrap_or(false)
        });
        if let (Some(r), false) = (&real, on_pci) {
            let subsystem = r.join("subsystem").canonicalize().ok();
            let sub = subsystem.as_ref().and_then(|s| s.file_name()).map(|f| f.to_string_lossy().into_owned());
            nccl_info!(
                Subsys::NET | Subsys::GRAPH,
                "Topology detection: network path (name = {name}) {} is not a PCI device ({}). Attaching to first CPU",
                r.display(),
                sub.unwrap_or_default()
            );
        }
        let leaf = match real.filter(|_| on_pci) {
            Some(r) => self.attach(&r),
            None => None,
        };
        let parent = match leaf {
            Some(l) => {
                if l.attr("class").is_none() {
                    l.set("class", "0x02");
                }
                l
            }
            None => {
                let first = match self.system.subs.iter().position(|s| s.name == "cpu") {
                    Some(i) => i,
                    None => self.cpu_index("-1"),
                };
                &mut self.system.subs[first]
            }
        };
        match parent.subs.iter().position(|s| s.name == "nic") {
            Some(i) => parent.subs[i].subs.push(net),
            None => parent.subs.push(XmlNode { subs: vec![net], ..XmlNode::new("nic") }),
        }
    }

    /// Active ports of RDMA devices (NCCL's IB transport), as NET devices in name and port order.
    fn add_ib(&mut self) -> usize {
        let gdr = if self.gdr_support() { "1" } else { "0" };
        let mut dev = 0;
        for hca in self.sys.list("sys/class/infiniband") {
            let base = self.sys.path(&format!("sys/class/infiniband/{hca}"));
            let guid = Sysfs::read(&base.join("node_guid")).map(|g| format!("0x{}", g.replace(':', "")));
            for port in self.sys.list(&format!("sys/class/infiniband/{hca}/ports")) {
                let pdir = base.join("ports").join(&port);
                let state = Sysfs::read(&pdir.join("state")).unwrap_or_default();
                if !state.contains("ACTIVE") {
                    continue;
                }
                // "200 Gb/sec (4X HDR)" -> 200000 Mbps.
                let rate = Sysfs::read(&pdir.join("rate")).unwrap_or_default();
                let gbps: f64 = rate.split_whitespace().next().and_then(|r| r.parse().ok()).unwrap_or(0.0);
                let mut net = XmlNode::new("net")
                    .with("name", hca.as_str())
                    .with("dev", dev.to_string())
                    .with("latency", "0")
                    .with("speed", ((gbps * 1000.0) as i64).to_string())
                    .with("port", port.as_str());
                if let Some(g) = &guid {
                    net.set("guid", g.as_str());
                }
                net.set("maxconn", "131072").set("gdr", gdr);
                self.add_net(&base.join("device"), net);
                dev += 1;
            }
        }
        dev
    }

    /// Socket interfaces in NCCL's order of preference (`ncclFindInterfaces`), interfaces that are down left
    /// out since they carry no address.
    fn add_sockets(&mut self) {
        let up: Vec<String> = self
            .sys
            .list("sys/class/net")
            .into_iter()
            .filter(|i| Sysfs::read(&self.sys.path(&format!("sys/class/net/{i}/operstate"))).as_deref() != Some("down"))
            .collect();
        let chosen: Vec<String> = match self.env.str("NCCL_SOCKET_IFNAME") {
            Some(list) if list.len() > 1 => up.iter().filter(|i| if_matches(i, list)).cloned().collect(),
            _ => ["ib", "^docker,lo,virbr", "docker", "lo", "virbr"]
                .iter()
                .map(|l| up.iter().filter(|i| if_matches(i, l)).cloned().collect::<Vec<_>>())
                .find(|v| !v.is_empty())
                .unwrap_or_default(),
        };
        for (dev, ifname) in chosen.iter().enumerate() {
            let base = self.sys.path(&format!("sys/class/net/{ifname}"));
            let speed_path = base.join("speed");
            let speed = Sysfs::read(&speed_path).and_then(|s| collscope_debug::env::parse_c_int(&s)).unwrap_or(0);
            let speed = if speed <= 0 {
                nccl_info!(Subsys::NET, "Could not get speed from {}. Defaulting to 10 Gbps.", speed_path.display());
                10000
            } else {
                speed
            };
            let net = XmlNode::new("net")
                .with("name", ifname.as_str())
                .with("dev", dev.to_string())
                .with("latency", "0")
                .with("speed", speed.to_string())
                .with("port", "0")
                .with("guid", format!("0x{dev:x}"))
                .with("maxconn", "65536")
                .with("gdr", "0");
            self.add_net(&base.join("device"), net);
        }
    }
}

/// NCCL's interface list grammar (`matchIfList`): comma-separated prefixes, `=` for an exact name, a
/// leading `^` to exclude the listed ones instead.
pub fn if_matches(name: &str, list: &str) -> bool {
    let (exclude, body) = match list.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, list),
    };
    let (exact, body) = match body.strip_prefix('=') {
        Some(rest) => (true, rest),
        None => (false, body),
    };
    let hit = body.split(',').filter(|e| !e.is_empty()).any(|e| {
        let e = e.split(':').next().unwrap_or(e);
        if exact {
            name == e
        } else {
            name.starts_with(e)
        }
    });
    hit != exclude
}

/// Detects the host under `root` into an NCCL topology XML tree (origin `detected`).
pub fn detect(root: &Path, env: &Env) -> Result<TopoXml, TopoError> {
    let sys = Sysfs { root: root.to_path_buf() };
    if !sys.path("sys").is_dir() {
        return Err(TopoError::Detect {
            path: sys.path("sys").display().to_string(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no sysfs tree there"),
        });
    }
    let host_hash = host_hash(&sys);
    let devices = sys.devices_root();
    let mut d = Detector {
        system: XmlNode::new("system").with("version", TOPO_XML_VERSION.to_string()),
        sys,
        devices,
        host_hash,
        env,
    };
    // Every NUMA node gets its CPU element, with or without devices, so the host's sockets show.
    let mut numas: Vec<u32> = d
        .sys
        .list("sys/devices/system/node")
        .iter()
        .filter_map(|n| n.strip_prefix("node").and_then(|x| x.parse().ok()))
        .collect();
    numas.sort_unstable();
    for n in numas {
        d.cpu_index(&n.to_string());
    }
    d.add_gpus();
    if d.add_ib() == 0 {
        d.add_sockets();
    }
    if d.system.subs.is_empty() {
        d.cpu_index("-1");
    }
    Ok(TopoXml { origin: "detected".to_string(), system: d.system })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topo::{build, paths, TopoEnv};
    use collscope_model::{NodeType, PathType};
    use std::fs;
    use std::os::unix::fs::symlink;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    /// A PCI device directory with `[class, vendor, device]`, link speed and width, and NUMA node.
    fn pci_dev(root: &Path, rel: &str, [class, vendor, device]: [&str; 3], speed: &str, width: u32, numa: i32) {
        for (k, v) in [
            ("class", class),
            ("vendor", vendor),
            ("device", device),
            ("max_link_speed", speed),
            ("max_link_width", &width.to_string()),
            ("numa_node", &numa.to_string()),
        ] {
            write(root, &format!("sys/devices/{rel}/{k}"), &format!("{v}\n"));
        }
        symlink(root.join("sys/bus/pci"), root.join(format!("sys/devices/{rel}/subsystem"))).unwrap();
        let bdf = rel.rsplit('/').next().unwrap();
        symlink(root.join(format!("sys/devices/{rel}")), root.join(format!("sys/bus/pci/devices/{bdf}"))).unwrap();
    }

    /// Two NUMA nodes; on node 0 a Gen4 switch (upstream 01:00.0, downstream ports 02:00.0/02:01.0) with an
    /// A100 and a ConnectX-6, an H100 on node 1's root port, plus a virtual `eth0` and a `lo`.
    fn fake_host() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        fs::create_dir_all(r.join("sys/bus/pci/devices")).unwrap();
        write(r, "sys/devices/system/node/node0/cpumap", "00000000,0000ffff\n");
        write(r, "sys/devices/system/node/node1/cpumap", "00000000,ffff0000\n");
        write(
            r,
            "proc/cpuinfo",
            "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n\nprocessor\t: 1\n",
        );
        let gen4 = "16.0 GT/s PCIe";
        pci_dev(r, "pci0000:00/0000:00:01.0", ["0x060400", "0x8086", "0x347a"], gen4, 16, 0);
        pci_dev(r, "pci0000:00/0000:00:01.0/0000:01:00.0", ["0x060400", "0x1000", "0xc010"], gen4, 16, 0);
        pci_dev(r, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", ["0x060400", "0x1000", "0xc010"], gen4, 16, 0);
        pci_dev(
            r,
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
            ["0x030200", "0x10de", "0x20b0"],
            gen4,
            16,
            0,
        );
        pci_dev(r, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0", ["0x060400", "0x1000", "0xc010"], gen4, 16, 0);
        pci_dev(
            r,
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
            ["0x020700", "0x15b3", "0x101b"],
            gen4,
            16,
            0,
        );
        pci_dev(r, "pci0000:80/0000:80:01.0", ["0x060400", "0x8086", "0x347a"], "32.0 GT/s PCIe", 16, 1);
        // The GPU can do Gen5 but its port only Gen4: the lower speed wins.
        pci_dev(r, "pci0000:80/0000:80:01.0/0000:81:00.0", ["0x030200", "0x10de", "0x2330"], "32.0 GT/s PCIe", 16, 1);
        fs::write(r.join("sys/devices/pci0000:80/0000:80:01.0/max_link_speed"), "16.0 GT/s PCIe\n").unwrap();
        // RDMA device on the NIC, one active HDR port and one down.
        let ib = r.join("sys/class/infiniband/mlx5_0");
        fs::create_dir_all(&ib).unwrap();
        symlink(
            r.join("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"),
            ib.join("device"),
        )
        .unwrap();
        write(r, "sys/class/infiniband/mlx5_0/node_guid", "1070:fd03:00a3:b420\n");
        write(r, "sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
        write(r, "sys/class/infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)\n");
        write(r, "sys/class/infiniband/mlx5_0/ports/2/state", "1: DOWN\n");
        fs::create_dir_all(r.join("sys/module/nvidia_peermem")).unwrap();
        write(r, "sys/module/nvidia_peermem/version", "1.0\n");
        // Socket interfaces (used only without RDMA devices).
        write(r, "sys/devices/virtual/net/eth0/operstate", "up\n");
        write(r, "sys/devices/virtual/net/eth0/speed", "25000\n");
        write(r, "sys/devices/virtual/net/lo/operstate", "unknown\n");
        write(r, "sys/devices/virtual/net/docker0/operstate", "up\n");
        fs::create_dir_all(r.join("sys/class/net")).unwrap();
        for i in ["eth0", "lo", "docker0"] {
            symlink(r.join(format!("sys/devices/virtual/net/{i}")), r.join(format!("sys/class/net/{i}"))).unwrap();
        }
        dir
    }

    #[test]
    fn fake_host_builds_nccl_tree() {
        let dir = fake_host();
        let x = detect(dir.path(), &Env::default()).unwrap();
        let text = crate::topo::dump(&x);
        assert!(text.contains(r#"<cpu host_hash="0x"#), "{text}");
        assert!(text.contains(r#"numaid="0" affinity="00000000,0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">"#), "{text}");
        // The root port is skipped, as are the switch's downstream ports.
        assert!(!text.contains("0000:00:01.0") && !text.contains("0000:02:00.0"), "{text}");
        assert!(text.contains(r#"<gpu dev="0" sm="80" rank="0" gdr="1"/>"#), "{text}");
        assert!(text.contains(r#"<net name="mlx5_0" dev="0" latency="0" speed="200000" port="1" guid="0x1070fd0300a3b420" maxconn="131072" gdr="1"/>"#), "{text}");
        assert!(text.contains(r#"<pci busid="0000:81:00.0" class="0x030200" vendor="0x10de" device="0x2330" link_speed="16.0 GT/s PCIe" link_width="16">"#), "{text}");

        let t = build(&x, &TopoEnv::default()).unwrap();
        assert_eq!(t.source, "detected");
        assert_eq!(t.nodes_of(NodeType::CPU).count(), 2);
        let g: Vec<usize> = t.nodes_of(NodeType::GPU).map(|(i, _)| i).collect();
        let net = t.nodes_of(NodeType::NET).next().unwrap().0;
        assert_eq!(t.nodes[g[0]].name(), "GPU/0-3000");
        assert_eq!(paths::path(&t, g[0], net).unwrap().kind, PathType::PIX);
        assert_eq!(paths::path(&t, g[1], net).unwrap().kind, PathType::SYS);
        assert_eq!(t.nodes[g[1]].gpu.as_ref().unwrap().sm, 90);
        // dump -> load gives the same model.
        let back = crate::topo::xml::parse(&text, "detected").unwrap();
        assert_eq!(build(&back, &TopoEnv::default()).unwrap(), t);
    }

    #[test]
    fn sockets_without_rdma_follow_nccl_preference() {
        let dir = fake_host();
        fs::remove_dir_all(dir.path().join("sys/class/infiniband")).unwrap();
        let x = detect(dir.path(), &Env::default()).unwrap();
        let nets: Vec<String> =
            crate::topo::dump(&x).lines().filter(|l| l.contains("<net ")).map(str::to_string).collect();
        assert_eq!(nets.len(), 1, "{nets:?}");
        assert!(nets[0].contains(r#"name="eth0" dev="0" latency="0" speed="25000""#), "{nets:?}");
        // A virtual interface hangs off the first CPU.
        let t = build(&x, &TopoEnv::default()).unwrap();
        let nic = t.nodes_of(NodeType::NIC).next().unwrap().1;
        assert_eq!(nic.name(), "NIC/0-0");
        let env = Env::from_pairs([("NCCL_SOCKET_IFNAME", "=lo")]);
        let x = detect(dir.path(), &env).unwrap();
        assert!(crate::topo::dump(&x).contains(r#"name="lo""#));
    }

    #[test]
    fn no_gpu_no_rdma_is_normal_and_missing_sysfs_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "sys/devices/system/node/node0/cpumap", "f\n");
        write(dir.path(), "proc/cpuinfo", "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n");
        let x = detect(dir.path(), &Env::default()).unwrap();
        let t = build(&x, &TopoEnv::default()).unwrap();
        assert_eq!(t.nodes.len(), 1);
        assert_eq!(t.nodes[0].kind, NodeType::CPU);
        let e = detect(&dir.path().join("nope"), &Env::default()).unwrap_err().to_string();
        assert!(e.contains("nope/sys") && e.contains("no sysfs tree"), "{e}");
    }

    #[test]
    fn interface_lists() {
        assert!(if_matches("eth0", "eth"));
        assert!(!if_matches("eth0", "^eth"));
        assert!(if_matches("ens1f0", "^docker,lo,virbr"));
        assert!(!if_matches("lo", "^docker,lo,virbr"));
        assert!(if_matches("ib0", "=ib0"));
        assert!(!if_matches("ib01", "=ib0"));
        assert!(if_matches("eth1", "eth1:1234"));
        assert!(is_bdf("0000:00:01.0") && !is_bdf("pci0000:00") && !is_bdf("virtio2"));
    }

    #[test]
    fn this_host() {
        let x = detect(Path::new("/"), &Env::default()).unwrap();
        let t = build(&x, &TopoEnv::default()).unwrap();
        assert!(t.nodes_of(NodeType::CPU).count() >= 1);
        assert!(t.nodes_of(NodeType::CPU).all(|(_, n)| n.cpu.as_ref().is_some_and(|c| !c.arch.is_empty())));
    }
}
