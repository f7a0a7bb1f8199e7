//! The constants that changed between NCCL 2.12 and 2.29, per release, read from the tagged sources of
//! NVIDIA/nccl (`src/graph/topo.h`, `src/graph/topo.cc`, `src/include/device.h`/`devcomm.h`). The default is
//! 2.28.9, the release the rest of the model follows; versions outside 2.12..2.29 are clamped with a note.

use crate::topo::bandwidth::{
    CpuKind, ARM_BW, BDW_QPI_BW, CPU_ARCH_ARM, CPU_ARCH_POWER, CPU_ARCH_X86, CPU_MODEL_INTEL_ERP, CPU_MODEL_INTEL_SKL,
    CPU_MODEL_INTEL_SRP, CPU_MODEL_YONGFENG, CPU_VENDOR_AMD, CPU_VENDOR_INTEL, CPU_VENDOR_ZHAOXIN, ERP_QPI_BW, LOC_BW,
    P9_BW, SM60_NVLINK_BW, SM86_NVLINK_BW, SRP_QPI_BW, YONGFENG_ZPI_BW, ZPI_BW,
};
use crate::tuning::constants::{
    TunerConstants, NCCL_2_12, NCCL_2_14, NCCL_2_15, NCCL_2_17, NCCL_2_18, NCCL_2_18_3, NCCL_2_19, NCCL_2_21,
    NCCL_2_23, NCCL_2_25, NCCL_2_27, NCCL_2_28_3, NCCL_2_28_9,
};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// An NCCL release, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl NcclVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        NcclVersion { major, minor, patch }
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Serialize for NcclVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not an NCCL version: {EXPECTED}")]
pub struct VersionError(pub String);

/// What a version looks like, for errors.
pub const EXPECTED: &str = "expected a version like 2.18.3";

impl FromStr for NcclVersion {
    type Err = VersionError;

    /// `2.18.3` or `2.18` (patch 0); a build suffix as NCCL prints it (`2.18.3+cuda12.2`) is ignored.
    fn from_str(s: &str) -> Result<Self, VersionError> {
        let bad = || VersionError(s.to_string());
        let core = s.trim().split(['+', ' ', '-']).next().unwrap_or("");
        let parts: Vec<u32> = core.split('.').map(|p| p.parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
        match parts[..] {
            [major, minor] => Ok(NcclVersion::new(major, minor, 0)),
            [major, minor, patch] => Ok(NcclVersion::new(major, minor, patch)),
            _ => Err(bad()),
        }
    }
}

/// The oldest and newest releases the profiles cover: 2.12 and 2.29 (read from tags v2.12.7-1 to v2.29.7-1;
/// a later 2.29 patch is taken as 2.29.7).
pub const OLDEST: NcclVersion = NcclVersion::new(2, 12, 0);
pub const NEWEST: NcclVersion = NcclVersion::new(2, 29, 7);
/// The release the search and tuning follow.
pub const DEFAULT: NcclVersion = NcclVersion::new(2, 28, 9);

/// The search's per-channel speeds (GB/s), fast to slow, inside a node and across nodes, per release
/// (`speedArrayIntra`/`Inter`, `sm90SpeedArray*` from 2.16.5, `sm100SpeedArray*` from 2.25.1;
/// `src/graph/search.cc` at each tag named).
type Speeds = (&'static [f64], &'static [f64]);
const SPEED_INTRA_2_12: &[f64] = &[44.0, 30.0, 22.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0];
const SPEED_INTRA_2_18: &[f64] = &[40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0];
/// v2.12.7-1 to v2.14.3-1.
const SPEEDS_2_12: Speeds = (
    SPEED_INTRA_2_12,
    &[48.0, 30.0, 24.0, 22.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12],
);
/// v2.15.1-1 to v2.17.1-1.
const SPEEDS_2_15: Speeds = (
    SPEED_INTRA_2_12,
    &[48.0, 30.0, 28.0, 24.0, 22.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12],
);
/// v2.18.1-1 to v2.29.7-1.
const SPEEDS_2_18: Speeds = (
    SPEED_INTRA_2_18,
    &[48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12],
);
/// sm90, v2.16.5-1 and v2.17.1-1.
const SM90_2_16_5: Speeds = (
    &[66.0, 33.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0],
    &[48.0, 45.0, 30.0, 24.0, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12],
);
const SM90_INTRA_2_18: &[f64] = &[60.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0];
const SM90_INTRA_2_19: &[f64] = &[60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0];
const SM90_INTRA_2_21: &[f64] = &[60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0];
const SM90_INTER_2_18_3: &[f64] =
    &[48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12];
const SM90_INTER_2_19_3: &[f64] =
    &[48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12];
/// sm90, v2.18.1-1.
const SM90_2_18: Speeds =
    (SM90_INTRA_2_18, &[48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12]);
const SM100_INTRA_2_27: &[f64] = &[90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0];
const SM100_INTRA_2_29: &[f64] = &[90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0];
const SM100_INTER_2_27_6: &[f64] =
    &[96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12];

/// (generic, sm90, sm100) speeds of a release; a generation without its own arrays takes the older ones.
fn speed_tables(v: NcclVersion) -> (Speeds, Option<Speeds>, Option<Speeds>) {
    let from = |minor, patch| v >= NcclVersion::new(2, minor, patch);
    let sm90 = match () {
        _ if from(21, 0) => Some((SM90_INTRA_2_21, SM90_INTER_2_19_3)),
        _ if from(19, 3) => Some((SM90_INTRA_2_19, SM90_INTER_2_19_3)),
        _ if from(19, 0) => Some((SM90_INTRA_2_19, SM90_INTER_2_18_3)),
        _ if from(18, 3) => Some((SM90_INTRA_2_18, SM90_INTER_2_18_3)),
        _ if from(18, 0) => Some(SM90_2_18),
        _ if from(16, 5) => Some(SM90_2_16_5),
        _ => None,
    };
    let sm100: Option<Speeds> = match () {
        _ if from(29, 7) => Some((
            SM100_INTRA_2_29,
            &[
                96.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
                0.12,
            ],
        )),
        _ if from(29, 0) => Some((SM100_INTRA_2_29, SM100_INTER_2_27_6)),
        _ if from(27, 6) => Some((SM100_INTRA_2_27, SM100_INTER_2_27_6)),
        _ if from(27, 5) => Some((
            SM100_INTRA_2_27,
            &[48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12],
        )),
        _ if from(27, 0) => Some((
            SM100_INTRA_2_27,
            &[47.9, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12],
        )),
        _ if from(25, 0) => Some((&[90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0], SM90_INTER_2_19_3)),
        _ => None,
    };
    let generic = match () {
        _ if from(18, 0) => SPEEDS_2_18,
        _ if from(15, 0) => SPEEDS_2_15,
        _ => SPEEDS_2_12,
    };
    (generic, sm90, sm100)
}

/// The per-release constants; every field names the release that changed it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VersionProfile {
    /// The release modelled (the one asked for, clamped to [`OLDEST`]..[`NEWEST`]).
    pub version: NcclVersion,
    /// Why the release asked for is not the one modelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// `SM70_NVLINK_BW` and `SM80_NVLINK_BW`: 22.0 up to 2.17, 20.0 from 2.18.1.
    pub sm70_nvlink_bw: f64,
    pub sm80_nvlink_bw: f64,
    /// `SM90_NVLINK_BW`: absent before 2.18.1 (Hopper took the SM80 figure), 20.0 in 2.18-2.19, 20.6 from 2.20.3.
    pub sm90_nvlink_bw: Option<f64>,
    /// `SM100_NVLINK_BW`: absent before 2.25.1 (Blackwell took the SM90 figure), 40.0 from 2.25.1, 40.1 from
    /// 2.27.5.
    pub sm100_nvlink_bw: Option<f64>,
    /// `SKL_QPI_BW`: 9.0 up to 2.17, 10.0 from 2.18.1.
    pub skl_qpi_bw: f64,
    /// `SRP_QPI_BW`/`ERP_QPI_BW` and their CPU models: from 2.26.2; before, Intel family 6 model >= 0x55 was
    /// all Skylake (`ncclTopoAddCpu`).
    pub intel_srp_erp: bool,
    /// `AMD_BW` between AMD sockets: 16.0 in 2.16.2 and from 2.19.1; in the releases without it
    /// (`ncclTopoGetInterCpuBw` had no AMD case) the link kept `LOC_BW`.
    pub amd_bw: Option<f64>,
    /// `MAXCHANNELS`: 32 up to 2.24, 64 from 2.25.1 (`src/include/device.h`, `devcomm.h` before 2.19).
    pub max_channels: u32,
    /// `MinTrafficPerChannel` (`src/enqueue.cc`), bytes: 16K from 2.23 (where the scheduling the model follows
    /// appeared; 2.22's 512 went with other code, not modelled), 32K from 2.29.2.
    pub min_traffic_per_channel: u64,
}

impl Default for VersionProfile {
    fn default() -> Self {
        VersionProfile::of(DEFAULT)
    }
}

impl FromStr for VersionProfile {
    type Err = VersionError;

    fn from_str(s: &str) -> Result<Self, VersionError> {
        Ok(VersionProfile::of(s.parse()?))
    }
}

impl VersionProfile {
    /// The constants of release `asked`, clamped to the releases covered.
    pub fn of(asked: NcclVersion) -> Self {
        let v = if (asked.major, asked.minor) == (NEWEST.major, NEWEST.minor) {
            asked
        } else {
            asked.clamp(OLDEST, NEWEST)
        };
        let note = (v != asked).then(|| {
            let (o, n) = (OLDEST, NEWEST);
            format!(
                "NCCL {asked} is outside the releases modelled ({}.{} to {}.{}); using NCCL {v}'s constants",
                o.major, o.minor, n.major, n.minor
            )
        });
        let from = |major, minor, patch| v >= NcclVersion::new(major, minor, patch);
        let nvlink = if from(2, 18, 1) { 20.0 } else { 22.0 };
        VersionProfile {
            version: v,
            note,
            sm70_nvlink_bw: nvlink,
            sm80_nvlink_bw: nvlink,
            sm90_nvlink_bw: match () {
                _ if from(2, 20, 3) => Some(20.6),
                _ if from(2, 18, 1) => Some(20.0),
                _ => None,
            },
            sm100_nvlink_bw: match () {
                _ if from(2, 27, 5) => Some(40.1),
                _ if from(2, 25, 1) => Some(40.0),
                _ => None,
            },
            skl_qpi_bw: if from(2, 18, 1) { 10.0 } else { 9.0 },
            intel_srp_erp: from(2, 26, 2),
            // v2.16.2-1 has AMD_BW; v2.16.5-1 to v2.18.6-1 do not; v2.19.1-1 brought it back.
            amd_bw: (from(2, 19, 1) || (from(2, 16, 2) && !from(2, 16, 5))).then_some(16.0),
            max_channels: if from(2, 25, 1) { 64 } else { 32 },
            min_traffic_per_channel: if from(2, 29, 0) { 32 << 10 } else { 16 << 10 },
        }
    }

    /// The tuning model's constants and rules of this release (`src/graph/tuning.cc` at each tag): Tree/Ring
    /// `baseLat`/`hwLat`, the latency rules (2.14.3, 2.18.1, 2.23.4), Ring/LL's share (2.21.5), Hopper's LL
    /// cap (2.21.5), the NVLS/NVLSTree rules and latencies (2.17.1, 2.18.1, 2.18.3, 2.19.1, 2.21.5, 2.27.3,
    /// 2.28.3, 2.28.9), LL128's generations (2.15.1, 2.25.1, 2.27.3), the algorithms that exist (NVLS 2.17.1,
    /// NVLSTree 2.18.1, PAT 2.23.4) and the Blackwell column (2.25.1, 2.28.3). 2.29 is 2.28.9's.
    pub fn tuner_constants(&self) -> &'static TunerConstants {
        let from = |minor, patch| self.version >= NcclVersion::new(2, minor, patch);
        match () {
            _ if from(28, 9) => &NCCL_2_28_9,
            _ if from(28, 0) => &NCCL_2_28_3,
            _ if from(27, 0) => &NCCL_2_27,
            _ if from(25, 0) => &NCCL_2_25,
            _ if from(23, 0) => &NCCL_2_23,
            _ if from(21, 0) => &NCCL_2_21,
            _ if from(19, 0) => &NCCL_2_19,
            _ if from(18, 3) => &NCCL_2_18_3,
            _ if from(18, 0) => &NCCL_2_18,
            _ if from(17, 0) => &NCCL_2_17,
            _ if from(15, 0) => &NCCL_2_15,
            _ if from(14, 0) => &NCCL_2_14,
            _ => &NCCL_2_12,
        }
    }

    /// The speeds the search tries for the oldest GPU's compute capability `comp_cap`, inside one node or
    /// across nodes (`ncclTopoCompute`: `ccMin >= 100` sm100's, `>= 90` sm90's, where the release has them).
    pub fn speed_array(&self, comp_cap: u32, inter: bool) -> &'static [f64] {
        let (generic, sm90, sm100) = speed_tables(self.version);
        let tables = match (comp_cap >= 100, comp_cap >= 90) {
            (true, _) => sm100.or(sm90).unwrap_or(generic),
            (false, true) => sm90.unwrap_or(generic),
            _ => generic,
        };
        if inter {
            tables.1
        } else {
            tables.0
        }
    }

    /// Bandwidth of one NVLink for a GPU of compute capability `sm` (`ncclTopoNVLinkBw`): a generation the
    /// release does not know takes the figure of the newest one it does.
    pub fn nvlink_bw(&self, sm: u32) -> f64 {
        let sm90 = self.sm90_nvlink_bw.unwrap_or(self.sm80_nvlink_bw);
        match sm {
            100.. => self.sm100_nvlink_bw.unwrap_or(sm90),
            90.. => sm90,
            86 => SM86_NVLINK_BW,
            80.. => self.sm80_nvlink_bw,
            70.. => self.sm70_nvlink_bw,
            60.. => SM60_NVLINK_BW,
            _ => self.sm80_nvlink_bw,
        }
    }

    /// Bandwidth between two CPU sockets of this kind (`ncclTopoGetInterCpuBw`).
    pub fn inter_cpu_bw(&self, kind: CpuKind) -> f64 {
        match (kind.arch, kind.vendor) {
            (CPU_ARCH_POWER, _) => P9_BW,
            (CPU_ARCH_ARM, _) => ARM_BW,
            (CPU_ARCH_X86, CPU_VENDOR_INTEL) => match kind.model {
                CPU_MODEL_INTEL_ERP if self.intel_srp_erp => ERP_QPI_BW,
                CPU_MODEL_INTEL_SRP if self.intel_srp_erp => SRP_QPI_BW,
                CPU_MODEL_INTEL_SKL | CPU_MODEL_INTEL_SRP | CPU_MODEL_INTEL_ERP => self.skl_qpi_bw,
                _ => BDW_QPI_BW,
            },
            (CPU_ARCH_X86, CPU_VENDOR_AMD) => self.amd_bw.unwrap_or(LOC_BW),
            (CPU_ARCH_X86, CPU_VENDOR_ZHAOXIN) if kind.model == CPU_MODEL_YONGFENG => YONGFENG_ZPI_BW,
            (CPU_ARCH_X86, CPU_VENDOR_ZHAOXIN) => ZPI_BW,
            _ => LOC_BW,
        }
    }

    /// One line for reports: the release's constants and what differs from 2.28.9.
    pub fn describe(&self) -> String {
        let differences = self.differences();
        let what = if differences.is_empty() { "as 2.28.9's".to_string() } else { differences.join(", ") };
        // What is still 2.28.9's: the search's rules (not its speeds), CollNet's and PAT's tuning rows; before
        // 2.18 also the bus bandwidth ceilings (235 GB/s Ampere, 370 Hopper) and the single LL128 per-channel cap
        // (v2.17.1-1 src/graph/tuning.cc).
        let old = if self.version < NcclVersion::new(2, 18, 0) {
            ", and 2.12-2.17's bus bandwidth ceilings and single LL128 cap are not modelled"
        } else {
            ""
        };
        format!(
            "NCCL {}'s constants ({what}); search rules and CollNet/PAT tuning rows are NCCL {DEFAULT}'s{old}",
            self.version
        )
    }

    /// What differs from the default release, one short line each (empty for 2.28.x and 2.29).
    pub fn differences(&self) -> Vec<String> {
        let d = VersionProfile::default();
        let mut out = Vec::new();
        if self.sm80_nvlink_bw != d.sm80_nvlink_bw {
            out.push(format!("NVLink {} GB/s per link for SM70/SM80 (20 from 2.18.1)", self.sm80_nvlink_bw));
        }
        if self.sm90_nvlink_bw != d.sm90_nvlink_bw {
            out.push(format!("SM90 NVLink {} GB/s per link (20.6 from 2.20.3)", self.nvlink_bw(90)));
        }
        if self.sm100_nvlink_bw != d.sm100_nvlink_bw {
            out.push(format!("SM100 NVLink {} GB/s per link (40.1 from 2.27.5)", self.nvlink_bw(100)));
        }
        if self.skl_qpi_bw != d.skl_qpi_bw || self.intel_srp_erp != d.intel_srp_erp {
            out.push(format!(
                "Intel inter-socket {} GB/s for Skylake and newer (SRP/ERP from 2.26.2)",
                self.skl_qpi_bw
            ));
        }
        if self.amd_bw != d.amd_bw {
            out.push("AMD inter-socket links at LOC_BW (AMD_BW 16 in 2.16.2 and from 2.19.1)".into());
        }
        if self.max_channels != d.max_channels {
            out.push(format!("MAXCHANNELS {} (64 from 2.25.1)", self.max_channels));
        }
        let tuning = self.tuner_constants();
        if tuning.version != d.tuner_constants().version {
            out.push(format!("tuning tables and rules of NCCL {} ({})", tuning.version, tuning.source));
        }
        if speed_tables(self.version) != speed_tables(d.version) {
            out.push(format!("the search's speed tables of NCCL {} (src/graph/search.cc)", self.version));
        }
        if self.min_traffic_per_channel != d.min_traffic_per_channel {
            out.push(format!("MinTrafficPerChannel {}K (32K from 2.29)", self.min_traffic_per_channel >> 10));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> VersionProfile {
        s.parse().unwrap()
    }

    #[test]
    fn parses_versions_and_rejects_others() {
        assert_eq!("2.18.3".parse(), Ok(NcclVersion::new(2, 18, 3)));
        assert_eq!("2.18".parse(), Ok(NcclVersion::new(2, 18, 0)));
        assert_eq!("2.18.3+cuda12.2".parse(), Ok(NcclVersion::new(2, 18, 3)));
        for bad in ["", "2", "two.18", "2.18.3.1", "2.x.1", "v2.18.3"] {
            let e = bad.parse::<NcclVersion>().unwrap_err().to_string();
            assert!(e.contains(&format!("'{bad}'")) && e.contains("expected a version like 2.18.3"), "{e}");
        }
    }

    #[test]
    fn default_is_2_28_9() {
        let d = VersionProfile::default();
        assert_eq!(d.version.to_string(), "2.28.9");
        assert!(d.note.is_none() && d.differences().is_empty());
        assert_eq!((d.max_channels, d.amd_bw, d.skl_qpi_bw), (64, Some(16.0), 10.0));
    }

    #[test]
    fn nvlink_bandwidth_by_sm_generation_and_release() {
        let d = VersionProfile::default();
        let by_sm = [(60, 18.0), (70, 20.0), (80, 20.0), (86, 12.0), (89, 20.0), (90, 20.6), (100, 40.1), (50, 20.0)];
        for (sm, bw) in by_sm {
            assert_eq!(d.nvlink_bw(sm), bw, "SM{sm} at 2.28.9");
        }
        assert_eq!(12.0 * d.nvlink_bw(80), 240.0, "A100: 12 links");
        // V100 and A100: 22 until 2.17, 20 from 2.18.
        assert_eq!((at("2.17.1").nvlink_bw(70), at("2.18.1").nvlink_bw(70)), (22.0, 20.0));
        assert_eq!((at("2.12.12").nvlink_bw(80), at("2.18.3").nvlink_bw(80)), (22.0, 20.0));
        // Hopper: the SM80 figure before 2.18, then 20, then 20.6 from 2.20.3.
        assert_eq!([at("2.17.1"), at("2.19.4"), at("2.20.3")].map(|p| p.nvlink_bw(90)), [22.0, 20.0, 20.6]);
        // Blackwell: unknown (SM90's figure) before 2.25.1, 40.0, then 40.1 from 2.27.5.
        assert_eq!(
            [at("2.24.3"), at("2.25.1"), at("2.27.3"), at("2.27.5")].map(|p| p.nvlink_bw(100)),
            [20.6, 40.0, 40.0, 40.1]
        );
        assert_eq!(at("2.24.3").sm100_nvlink_bw, None, "a pre-2.25 profile knows no SM100 figure");
    }

    #[test]
    fn speed_arrays_follow_compute_capability_and_release() {
        let d = VersionProfile::default();
        assert_eq!(d.speed_array(80, false)[0], 40.0);
        assert_eq!(d.speed_array(86, true)[0], 48.0);
        assert_eq!(d.speed_array(90, false)[0], 60.0);
        assert_eq!(d.speed_array(90, true)[1], 45.0);
        assert_eq!(d.speed_array(100, false)[0], 90.0);
        assert_eq!(d.speed_array(100, true)[2], 45.1);
        assert_eq!(*d.speed_array(80, true).last().unwrap(), 0.12);
        // v2.12.12-1 src/graph/search.cc: 44/30/22 inside a node (DGX-1's 22 GB/s links), no sm90 arrays.
        assert_eq!(at("2.12.12").speed_array(70, false)[..3], [44.0, 30.0, 22.0]);
        assert_eq!(at("2.12.12").speed_array(90, false)[0], 44.0);
        assert_eq!(at("2.12.12").speed_array(80, true)[2], 24.0);
        // v2.15.1-1 adds 28 across nodes; v2.16.5-1 the sm90 arrays; v2.18.1-1 40/30/20.
        assert_eq!(at("2.15.1").speed_array(80, true)[2], 28.0);
        assert_eq!((at("2.16.2").speed_array(90, false)[0], at("2.16.5").speed_array(90, false)[0]), (44.0, 66.0));
        assert_eq!(at("2.18.1").speed_array(70, false)[..3], [40.0, 30.0, 20.0]);
        // sm90: 50 from v2.19.1-1, 22 across nodes from v2.19.3-1, 11 from v2.21.5-1.
        assert_eq!((at("2.18.6").speed_array(90, false)[1], at("2.19.1").speed_array(90, false)[1]), (40.0, 50.0));
        assert_eq!((at("2.19.1").speed_array(90, true)[6], at("2.19.3").speed_array(90, true)[6]), (20.0, 22.0));
        assert!(!at("2.20.5").speed_array(90, false).contains(&11.0));
        assert!(at("2.21.5").speed_array(90, false).contains(&11.0));
        // sm100: sm90's before v2.25.1-1; 47.9 at v2.27.3-1, 45.1 from v2.27.5-1, 96 from v2.27.6-1, 80 in v2.29.7-1.
        assert_eq!(at("2.24.3").speed_array(100, false)[0], 60.0);
        assert_eq!(at("2.25.1").speed_array(100, false).len(), 10);
        assert_eq!(
            ["2.27.3", "2.27.5", "2.27.6", "2.29.7"].map(|v| at(v).speed_array(100, true)[..2].to_vec()),
            [vec![47.9, 45.0], vec![48.0, 45.1], vec![96.0, 48.0], vec![96.0, 80.0]]
        );
    }

    #[test]
    fn channels_and_inter_cpu_bandwidth_by_release() {
        assert_eq!((at("2.24.3").max_channels, at("2.25.1").max_channels), (32, 64));
        let amd = CpuKind { arch: CPU_ARCH_X86, vendor: CPU_VENDOR_AMD, model: -1 };
        let amd_bw = ["2.16.0", "2.16.2", "2.16.5", "2.18.6", "2.19.1"].map(|v| at(v).inter_cpu_bw(amd));
        assert_eq!(amd_bw, [LOC_BW, 16.0, LOC_BW, LOC_BW, 16.0]);
        let intel = |model| CpuKind { arch: CPU_ARCH_X86, vendor: CPU_VENDOR_INTEL, model };
        let srp = intel(CPU_MODEL_INTEL_SRP);
        assert_eq!([at("2.17.1"), at("2.25.1"), at("2.26.2")].map(|p| p.inter_cpu_bw(srp)), [9.0, 10.0, 22.0]);
        assert_eq!(at("2.26.2").inter_cpu_bw(intel(CPU_MODEL_INTEL_ERP)), 40.0);
        assert_eq!(at("2.12.7").inter_cpu_bw(intel(1)), BDW_QPI_BW);
        let d = VersionProfile::default();
        for (kind, bw) in [
            (CpuKind { arch: CPU_ARCH_POWER, vendor: -1, model: -1 }, P9_BW),
            (CpuKind { arch: CPU_ARCH_ARM, vendor: -1, model: -1 }, ARM_BW),
            (CpuKind { arch: CPU_ARCH_X86, vendor: CPU_VENDOR_ZHAOXIN, model: CPU_MODEL_YONGFENG }, YONGFENG_ZPI_BW),
            (CpuKind { arch: CPU_ARCH_X86, vendor: CPU_VENDOR_ZHAOXIN, model: -1 }, ZPI_BW),
            (CpuKind { arch: 0, vendor: -1, model: -1 }, LOC_BW),
        ] {
            assert_eq!(d.inter_cpu_bw(kind), bw, "{kind:?}");
        }
    }

    #[test]
    fn out_of_range_versions_are_clamped_with_a_note() {
        let old = at("2.8.4");
        assert_eq!(old.version, OLDEST);
        assert!(old.note.as_deref().unwrap().contains("NCCL 2.8.4 is outside"), "{:?}", old.note);
        let new = at("2.30.3");
        assert_eq!((new.version, new.max_channels), (NEWEST, 64));
        assert!(at("2.29.2").note.is_none() && at("2.29.9").note.is_none() && at("2.12").note.is_none());
        assert_eq!(at("2.29.9").version.to_string(), "2.29.9");
        assert_eq!(at("2.17.1").differences().len(), 8, "{:?}", at("2.17.1").differences());
        assert!(at("2.28.9").describe().starts_with("NCCL 2.28.9's constants (as 2.28.9's)"));
        // v2.28.7-1 src/graph/tuning.cc: NVLSTree's NET latency 14 us, not 2.28.9's 20.9.
        assert!(at("2.28.3").describe().contains("tuning tables and rules of NCCL 2.28.3-2.28.7"));
        let d = at("2.29.2").describe();
        assert!(d.contains("MinTrafficPerChannel 32K") && d.contains("speed tables of NCCL 2.29.2"), "{d}");
        assert!(at("2.24.3").describe().contains("MAXCHANNELS 32"), "{}", at("2.24.3").describe());
    }
}
