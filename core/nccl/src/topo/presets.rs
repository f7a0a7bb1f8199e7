//! Reference machines shipped as NCCL topology XML files (`core/nccl/presets/*.xml`), so `topo show --preset`
//! and the graph search can reason about hardware collscope does not run on.

use super::error::TopoError;
use super::xml::{self, TopoXml};

/// Name and file text of each preset.
pub const PRESETS: &[(&str, &str)] = &[
    ("dgx-a100", include_str!("../../presets/dgx-a100.xml")),
    ("dgx-h100", include_str!("../../presets/dgx-h100.xml")),
    ("hgx-pcie", include_str!("../../presets/hgx-pcie.xml")),
    ("nvlink-bridge-4", include_str!("../../presets/nvlink-bridge-4.xml")),
    ("cpu-host", include_str!("../../presets/cpu-host.xml")),
];

pub fn names() -> Vec<&'static str> {
    PRESETS.iter().map(|(n, _)| *n).collect()
}

/// The preset's XML text; an unknown name is an error listing the known ones.
pub fn text(name: &str) -> Result<&'static str, TopoError> {
    PRESETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .ok_or_else(|| TopoError::UnknownPreset { name: name.to_string(), known: names().join(", ") })
}

/// Parses a preset.
pub fn load(name: &str) -> Result<TopoXml, TopoError> {
    xml::parse(text(name)?, &format!("preset:{name}"))
}
