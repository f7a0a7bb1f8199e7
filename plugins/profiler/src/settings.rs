//! What the plugin reads from the environment at `init`.

use crate::abi::kind;
use collscope_debug::params::{process_path, process_var};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Group, Coll, P2p, ProxyOp, ProxyStep, KernelCh: the calls, their proxy work and wait states, and their GPU time.
/// (NCCL starts Group events whenever a call event is on, so the bit costs nothing.)
pub const DEFAULT_MASK: u64 =
    kind::GROUP | kind::COLL | kind::P2P | kind::PROXY_OP | kind::PROXY_STEP | kind::KERNEL_CH;

#[derive(Debug, PartialEq)]
pub(crate) struct Settings {
    pub mask: u64,
    /// `COLLSCOPE_PROFILER_DUMP`: a file the plugin appends its output to, one JSON object a line.
    pub dump: Option<PathBuf>,
    /// `COLLSCOPE_PROFILER_METRICS` (default 1): serve collscope's telemetry from this process. The runtime's
    /// own switch, `COLLSCOPE_TELEMETRY`, is not read: the plugin serves for NCCL, whichever runtime runs it.
    pub metrics: bool,
    /// `COLLSCOPE_RENDEZVOUS_DIR`: where the ranks of a communicator leave their endpoints for each other (default
    /// this user's private folder, `rendezvous::default_dir`); checked as private when joined.
    pub rendezvous: PathBuf,
    /// `COLLSCOPE_PROFILER_LINGER_S` (default 0): after the last communicator is finalised, keep serving this long
    /// so a scrape still sees the final figures of a job shorter than the scrape interval (NCCL's finalize waits).
    pub linger: Duration,
}

/// The longest linger accepted: a job's end is held at most this long.
const MAX_LINGER_S: u64 = 3600;

#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum SettingsError {
    #[error(
        "NCCL_PROFILE_EVENT_MASK='{0}' is not an event mask: expected a number from 0 to 2147483647 (decimal or \
         0x hex) that adds up ncclProfile* bits, e.g. 95 (0x5f) for Group, Coll, P2p, ProxyOp, ProxyStep, KernelCh"
    )]
    Mask(String),
    #[error("COLLSCOPE_PROFILER_DUMP is empty: expected the path of a file to append the plugin's events to")]
    EmptyDump,
    #[error("COLLSCOPE_PROFILER_METRICS='{0}' is not valid: expected 0 (no telemetry server) or 1 (serve it)")]
    Metrics(String),
    #[error("COLLSCOPE_PROFILER_LINGER_S='{0}' is not valid: expected whole seconds from 0 to 3600 to keep serving after the job")]
    Linger(String),
}

impl Settings {
    pub(crate) fn from_env() -> Result<Self, SettingsError> {
        Self::from(
            process_var("NCCL_PROFILE_EVENT_MASK"),
            process_path("COLLSCOPE_PROFILER_DUMP"),
            process_var("COLLSCOPE_PROFILER_METRICS"),
            process_path("COLLSCOPE_RENDEZVOUS_DIR"),
            process_var("COLLSCOPE_PROFILER_LINGER_S"),
        )
    }

    fn from(
        mask: Option<String>,
        dump: Option<OsString>,
        metrics: Option<String>,
        rendezvous: Option<OsString>,
        linger: Option<String>,
    ) -> Result<Self, SettingsError> {
        let mask = match mask {
            None => DEFAULT_MASK,
            Some(m) => parse_mask(&m).ok_or(SettingsError::Mask(m))?,
        };
        let dump = match dump {
            Some(d) if d.is_empty() => return Err(SettingsError::EmptyDump),
            d => d.map(PathBuf::from),
        };
        let metrics = match metrics.as_deref().map(str::trim) {
            None | Some("" | "1") => true,
            Some("0") => false,
            Some(_) => return Err(SettingsError::Metrics(metrics.unwrap_or_default())),
        };
        let rendezvous = rendezvous.filter(|d| !d.is_empty()).map_or_else(
            || crate::rendezvous::default_dir(process_path("XDG_RUNTIME_DIR").as_deref().map(Path::new)),
            PathBuf::from,
        );
        let linger = match linger {
            None => Duration::ZERO,
            Some(l) => match l.trim().parse::<u64>() {
                Ok(s) if s <= MAX_LINGER_S => Duration::from_secs(s),
                _ => return Err(SettingsError::Linger(l)),
            },
        };
        Ok(Settings { mask, dump, metrics, rendezvous, linger })
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
        let mask = |m: &str| Settings::from(Some(m.into()), None, None, None, None);
        assert_eq!(Settings::from(None, None, None, None, None).unwrap().mask, 95);
        assert_eq!(mask("4095").unwrap().mask, 4095);
        assert_eq!(mask(" 0x7f ").unwrap().mask, 127);
        for bad in ["abc", "-1", "4294967296", ""] {
            let e = mask(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("'{bad}'")) && e.to_string().contains("95"), "{e}");
        }
        let dump = |d: &str| Settings::from(None, Some(d.into()), None, None, None);
        assert_eq!(dump("").unwrap_err(), SettingsError::EmptyDump);
        assert_eq!(dump("x.jsonl").unwrap().dump, Some(PathBuf::from("x.jsonl")));
    }

    #[test]
    fn the_telemetry_switch_and_the_rendezvous_folder() {
        let s = Settings::from(None, None, None, None, None).unwrap();
        assert!(s.metrics, "served by default");
        let runtime = std::env::var_os("XDG_RUNTIME_DIR");
        assert_eq!(s.rendezvous, crate::rendezvous::default_dir(runtime.as_deref().map(Path::new)));
        let s = Settings::from(None, None, Some("0".into()), Some("/shared/rv".into()), None).unwrap();
        assert!(!s.metrics);
        assert_eq!(s.rendezvous, PathBuf::from("/shared/rv"));
        let e = Settings::from(None, None, Some("off".into()), None, None).unwrap_err().to_string();
        assert!(e.contains("COLLSCOPE_PROFILER_METRICS='off'") && e.contains("expected 0"), "{e}");
    }

    #[test]
    fn linger_is_whole_seconds_up_to_an_hour() {
        let linger = |l: &str| Settings::from(None, None, None, None, Some(l.into()));
        assert_eq!(Settings::from(None, None, None, None, None).unwrap().linger, Duration::ZERO);
        assert_eq!(linger(" 20 ").unwrap().linger, Duration::from_secs(20));
        for bad in ["-1", "1.5", "3601", "soon"] {
            let e = linger(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("COLLSCOPE_PROFILER_LINGER_S='{bad}'")) && e.contains("0 to 3600"), "{e}");
        }
    }
}
