//! The built-in host profile: constants like NCCL's tables, used when no calibration file is found. Measured
//! with `collscope tune calibrate --nranks 4` (release build) on the project's 2-core build machine
//! (the facts inside `builtin.json` say which CPU, when and how); a machine that differs should calibrate
//! its own.

use super::profile::HostProfile;
use std::path::Path;

const BUILTIN: &str = include_str!("builtin.json");

pub fn profile() -> HostProfile {
    let mut p = HostProfile::from_json(BUILTIN, Path::new("builtin.json"))
        .unwrap_or_else(|e| unreachable!("the built-in tuning profile is checked by its tests: {e}"));
    p.origin = "built-in".into();
    p
}
