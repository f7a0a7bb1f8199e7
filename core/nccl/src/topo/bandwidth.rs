//! NCCL's bandwidth constants and the tables that turn XML attributes into link bandwidths and CPU kinds
//! (NCCL 2.28.9, `src/graph/topo.h` and `topo.cc`). All bandwidths are GB/s, NCCL's conservative figures.

use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use collscope_model::topology::CpuAttrs;
use collscope_model::NodeType;

/// A node's bandwidth to itself.
pub const LOC_BW: f64 = 5000.0;
pub const SM60_NVLINK_BW: f64 = 18.0;
pub const SM70_NVLINK_BW: f64 = 20.0;
pub const SM80_NVLINK_BW: f64 = 20.0;
pub const SM90_NVLINK_BW: f64 = 20.6;
pub const SM86_NVLINK_BW: f64 = 12.0;
pub const SM100_NVLINK_BW: f64 = 40.1;
/// PCIe Gen3 x16.
pub const PCI_BW: f64 = 12.0;
pub const AMD_BW: f64 = 16.0;
pub const BDW_QPI_BW: f64 = 6.0;
pub const SKL_QPI_BW: f64 = 10.0;
pub const SRP_QPI_BW: f64 = 22.0;
pub const ERP_QPI_BW: f64 = 40.0;
pub const ZPI_BW: f64 = 6.0;
pub const YONGFENG_ZPI_BW: f64 = 9.0;
pub const P9_BW: f64 = 32.0;
pub const ARM_BW: f64 = 6.0;
/// 100 Gbit/s.
pub const NET_BW: f64 = 12.0;

/// Intel root complexes split GPU peer traffic into 64-byte TLPs, so it costs 6/5 of its size on PCIe.
pub fn intel_p2p_overhead(bw: f64) -> f64 {
    bw * 6.0 / 5.0
}

/// NCCL's `kvDict` lookup: the first key that is a prefix of `s`, else the fallback, logged as NCCL does.
fn kv_lookup(s: &str, dict: &[(&str, i32)], fallback: i32) -> i32 {
    match dict.iter().find(|(k, _)| s.starts_with(k)) {
        Some((_, v)) => *v,
        None => {
            nccl_info!(
                Subsys::GRAPH,
                "KV Convert to int : could not find value of '{s}' in dictionary, falling back to {fallback}"
            );
            fallback
        }
    }
}

/// PCIe link speed strings (sysfs `max_link_speed`) to 100 Mbps per lane (`kvDictPciGen`).
const PCI_GEN: &[(&str, i32)] = &[
    ("2.5 GT/s", 15),
    ("5 GT/s", 30),
    ("8 GT/s", 60),
    ("16 GT/s", 120),
    ("32 GT/s", 240),
    ("2.5 GT/s PCIe", 15),
    ("5.0 GT/s PCIe", 30),
    ("8.0 GT/s PCIe", 60),
    ("16.0 GT/s PCIe", 120),
    ("32.0 GT/s PCIe", 240),
    ("64.0 GT/s PCIe", 480),
];

/// Bandwidth of a PCIe link: width x per-lane speed / 80 (`ncclTopoAddPci`). Width 0 (unknown) counts as 16,
/// an unknown speed as Gen3.
pub fn pci_bw(link_speed: &str, link_width: u32) -> f64 {
    let width = if link_width == 0 { 16 } else { link_width };
    let speed = kv_lookup(link_speed, PCI_GEN, 60);
    f64::from(width) * f64::from(speed) / 80.0
}

/// The node type a PCI class code makes (`kvDictPciClass`): bridges are PCI switches, 0x068000 NVSwitch,
/// 0x068001 a CPU (C2C), 0x03xxxx GPUs, 0x02xxxx NICs; anything else a PCI node.
pub fn node_type_of_class(class: &str) -> NodeType {
    const CLASSES: &[(&str, i32)] =
        &[("0x060400", 1), ("0x080100", 1), ("0x068000", 2), ("0x068001", 3), ("0x03", 0), ("0x02", 4)];
    let id = kv_lookup(class, CLASSES, 1);
    NodeType::from_id(id as u8).unwrap_or(NodeType::PCI)
}

/// NCCL's CPU kind numbers (`NCCL_TOPO_CPU_*`), as printed in the tree (`CPU/0-0 (1/2/-1)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuKind {
    pub arch: i32,
    pub vendor: i32,
    pub model: i32,
}

pub const CPU_ARCH_X86: i32 = 1;
pub const CPU_ARCH_POWER: i32 = 2;
pub const CPU_ARCH_ARM: i32 = 3;
pub const CPU_VENDOR_INTEL: i32 = 1;
pub const CPU_VENDOR_AMD: i32 = 2;
pub const CPU_VENDOR_ZHAOXIN: i32 = 3;
pub const CPU_MODEL_INTEL_BDW: i32 = 1;
pub const CPU_MODEL_INTEL_SKL: i32 = 2;
pub const CPU_MODEL_INTEL_SRP: i32 = 3;
pub const CPU_MODEL_INTEL_ERP: i32 = 4;
pub const CPU_MODEL_YONGFENG: i32 = 1;
const UNDEF: i32 = -1;

/// NCCL's number for an architecture name (`kvDictCpuArch`); -1 when the topology does not say.
pub fn cpu_arch_id(arch: &str) -> i32 {
    if arch.is_empty() {
        UNDEF
    } else {
        kv_lookup(arch, &[("x86_64", CPU_ARCH_X86), ("arm64", CPU_ARCH_ARM), ("ppc64", CPU_ARCH_POWER)], 0)
    }
}

impl CpuKind {
    /// Classifies a CPU node as `ncclTopoAddCpu` does.
    pub fn of(cpu: &CpuAttrs) -> CpuKind {
        let arch = cpu_arch_id(&cpu.arch);
        let mut kind = CpuKind { arch, vendor: UNDEF, model: UNDEF };
        if arch != CPU_ARCH_X86 {
            return kind;
        }
        const VENDORS: &[(&str, i32)] = &[
            ("GenuineIntel", CPU_VENDOR_INTEL),
            ("AuthenticAMD", CPU_VENDOR_AMD),
            ("CentaurHauls", CPU_VENDOR_ZHAOXIN),
            ("  Shanghai  ", CPU_VENDOR_ZHAOXIN),
        ];
        kind.vendor = kv_lookup(&cpu.vendor, VENDORS, 0);
        let (family, model) = (cpu.family_id.unwrap_or(0), cpu.model_id.unwrap_or(0));
        if kind.vendor == CPU_VENDOR_INTEL {
            kind.model = match (family, model) {
                (6, 0xCF..) => CPU_MODEL_INTEL_ERP,
                (6, 0x8F..) => CPU_MODEL_INTEL_SRP,
                (6, 0x55..) => CPU_MODEL_INTEL_SKL,
                _ => CPU_MODEL_INTEL_BDW,
            };
        } else if kind.vendor == CPU_VENDOR_ZHAOXIN && family == 7 && model == 0x5B {
            kind.model = CPU_MODEL_YONGFENG;
        }
        kind
    }

    pub fn is_x86_intel(self) -> bool {
        self.arch == CPU_ARCH_X86 && self.vendor == CPU_VENDOR_INTEL
    }

    pub fn is_x86_amd(self) -> bool {
        self.arch == CPU_ARCH_X86 && self.vendor == CPU_VENDOR_AMD
    }
}

/// A NIC port's bandwidth from its speed in Mbps (`ncclTopoAddNet`): speed / 8000, and 10 Gbps when the NIC
/// reports none or a negative speed.
pub fn net_bw(speed_mbps: i64) -> f64 {
    let mbps = if speed_mbps <= 0 { 10000 } else { speed_mbps };
    mbps as f64 / 8000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(arch: &str, vendor: &str, family: u32, model: u32) -> CpuAttrs {
        CpuAttrs {
            arch: arch.into(),
            vendor: vendor.into(),
            family_id: Some(family),
            model_id: Some(model),
            ..CpuAttrs::default()
        }
    }

    #[test]
    fn cpu_kinds_by_arch_vendor_and_model() {
        let kind = |c: CpuAttrs| {
            let k = CpuKind::of(&c);
            (k.arch, k.vendor, k.model)
        };
        assert_eq!(kind(cpu("x86_64", "AuthenticAMD", 23, 49)), (1, 2, -1));
        assert_eq!(kind(cpu("x86_64", "GenuineIntel", 6, 0x4F)), (1, 1, CPU_MODEL_INTEL_BDW));
        assert_eq!(kind(cpu("x86_64", "GenuineIntel", 6, 0x55)), (1, 1, CPU_MODEL_INTEL_SKL));
        assert_eq!(kind(cpu("x86_64", "GenuineIntel", 6, 0x8F)), (1, 1, CPU_MODEL_INTEL_SRP));
        assert_eq!(kind(cpu("x86_64", "GenuineIntel", 6, 0xCF)), (1, 1, CPU_MODEL_INTEL_ERP));
        assert_eq!(kind(cpu("x86_64", "CentaurHauls", 7, 0x5B)), (1, 3, CPU_MODEL_YONGFENG));
        assert_eq!(kind(cpu("arm64", "", 0, 0)), (CPU_ARCH_ARM, -1, -1));
        assert_eq!(kind(cpu("ppc64", "", 0, 0)), (CPU_ARCH_POWER, -1, -1));
        let k = CpuKind::of(&cpu("x86_64", "GenuineIntel", 6, 0x8F));
        assert!(k.is_x86_intel() && !k.is_x86_amd());
    }

    #[test]
    fn pci_bandwidth_is_width_times_speed_over_80() {
        assert_eq!(pci_bw("8.0 GT/s PCIe", 16), 12.0);
        assert_eq!(pci_bw("16.0 GT/s PCIe", 16), 24.0);
        assert_eq!(pci_bw("32.0 GT/s PCIe", 16), 48.0);
        assert_eq!(pci_bw("64.0 GT/s PCIe", 16), 96.0);
        assert_eq!(pci_bw("16 GT/s", 8), 12.0, "old kernels print no 'PCIe' suffix");
        assert_eq!(pci_bw("2.5 GT/s PCIe", 1), 0.1875);
        assert_eq!(pci_bw("16.0 GT/s PCIe", 0), 24.0, "width 0 counts as x16");
        assert_eq!(pci_bw("Unknown", 16), 12.0, "unknown speed falls back to Gen3");
        assert_eq!(pci_bw("", 16), PCI_BW);
    }

    #[test]
    fn net_and_intel_overhead() {
        assert_eq!(net_bw(200000), 25.0);
        assert_eq!(net_bw(400000), 50.0);
        assert_eq!(net_bw(100000), 12.5);
        assert_eq!(net_bw(-1), 1.25, "NICs reporting no speed count as 10 Gbps");
        assert_eq!(intel_p2p_overhead(20.0), 24.0);
        assert_eq!(LOC_BW, 5000.0);
    }

    #[test]
    fn pci_class_codes() {
        assert_eq!(node_type_of_class("0x060400"), NodeType::PCI);
        assert_eq!(node_type_of_class("0x030200"), NodeType::GPU);
        assert_eq!(node_type_of_class("0x030000"), NodeType::GPU);
        assert_eq!(node_type_of_class("0x020700"), NodeType::NIC);
        assert_eq!(node_type_of_class("0x068000"), NodeType::NVS);
        assert_eq!(node_type_of_class("0x068001"), NodeType::CPU);
        assert_eq!(node_type_of_class("0x010802"), NodeType::PCI, "anything else is a PCI node");
    }
}
