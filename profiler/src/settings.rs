//! What the plugin reads from the environment at `init`.

use crate::abi::kind;
use std::path::PathBuf;

/// Group, Coll, P2p, ProxyOp, ProxyStep, KernelCh: the calls, their proxy work and wait states, and their GPU time.
/// (NCCL starts Group events whenever a call event is on, so the bit costs nothing.)
pub const DEFAULT_MASK: u64 =
    kind::GROUP | kind::COLL | kind::P2P | kind::PROXY_OP | kind::PROXY_STEP | kind::KERNEL_CH;

#[derive(Debug, PartialEq)]
pub(crate) struct Settings {
    pub mask: u64,
    /// `COLLSCOPE_PROFILER_DUMP`: a file the plugin appends its output to, one JSON object a line.
    pub dump: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum SettingsError {
    #[error(
        "NCCL_PROFILE_EVENT_MASK='{0}' is not an event mask: expected a number from 0 to 2147483647 (decimal or \
         0x hex) that adds up ncclProfile* bits, e.g. 95 (0x5f) for Group, Coll, P2p, ProxyOp, ProxyStep, KernelCh"
    )]
    Mask(String),
    #[error("COLLSCOPE_PROFILER_DUMP is empty: expected the path of a file to append the plugin's events to")]
    EmptyDump,
}

impl Settings {
    pub(crate) fn from_env() -> Result<Self, SettingsError> {
        Self::from(std::env::var("NCCL_PROFILE_EVENT_MASK").ok(), std::env::var_os("COLLSCOPE_PROFILER_DUMP"))
    }

    fn from(mask: Option<String>, dump: Option<std::ffi::OsString>) -> Result<Self, SettingsError> {
        let mask = match mask {
            None => DEFAULT_MASK,
            Some(m) => parse_mask(&m).ok_or(SettingsError::Mask(m))?,
        };
        let dump = match dump {
            Some(d) if d.is_empty() => return Err(SettingsError::EmptyDump),
            d => d.map(PathBuf::from),
        };
        Ok(Settings { mask, dump })
    }
}

/// NCCL's mask is a C `int` (NCCL's example plugin reads the variable with `atoi`; hex is accepted too).
fn parse_mask(s: &str) -> Option<u64> {
    let t = s.trim();
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => t.parse::<u64>().ok()?,
    };
    (v <= i32::MAX as u64).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_defaults_parses_and_names_bad_input() {
        assert_eq!(Settings::from(None, None).unwrap().mask, 95);
        assert_eq!(Settings::from(Some("4095".into()), None).unwrap().mask, 4095);
        assert_eq!(Settings::from(Some(" 0x7f ".into()), None).unwrap().mask, 127);
        for bad in ["abc", "-1", "4294967296", ""] {
            let e = Settings::from(Some(bad.into()), None).unwrap_err();
            assert!(e.to_string().contains(&format!("'{bad}'")) && e.to_string().contains("95"), "{e}");
        }
        assert_eq!(Settings::from(None, Some("".into())).unwrap_err(), SettingsError::EmptyDump);
        assert_eq!(Settings::from(None, Some("x.jsonl".into())).unwrap().dump, Some(PathBuf::from("x.jsonl")));
    }
}
