//! The host-memory hardware profile: per link (P2P between threads, SHM between processes, NET/Socket) and per
//! algorithm and protocol, the latency of one step and the bandwidth of one channel and of all channels, with
//! the facts of the machine that measured them. Stored as JSON; found through `COLLSCOPE_TUNING_FILE`, else
//! the default path, else the built-in table.

use collscope_debug::env::Env;
use collscope_model::{Algorithm, Protocol, Transport};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The variable naming the profile to load (a path, or `builtin` for the built-in table).
pub const TUNING_FILE_VAR: &str = "COLLSCOPE_TUNING_FILE";
/// The value of `COLLSCOPE_TUNING_FILE` that selects the built-in table.
pub const BUILTIN: &str = "builtin";
/// The built-in table ([`HostProfile::builtin`]).
const BUILTIN_JSON: &str = include_str!("builtin.json");
/// The JSON layout this build reads and writes.
pub(crate) const FORMAT: u32 = 1;
/// The links, algorithms and protocols a profile must time: what the runtime implements.
pub(crate) const LINKS: [Transport; 3] = [Transport::P2p, Transport::Shm, Transport::Net];
pub(crate) const ALGOS: [Algorithm; 2] = [Algorithm::Tree, Algorithm::Ring];
/// A profile is a few KiB of JSON; a file past this is not one.
pub(crate) const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// Where and how a profile was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineFacts {
    pub cpu_model: String,
    pub cores: u32,
    /// When it was measured (RFC 3339).
    pub date: String,
    pub collscope_version: String,
    /// Ranks of the communicators the timings came from.
    pub nranks: u32,
    /// Channels of the all-channel timings.
    pub max_channels: u32,
    /// How it was measured (the command, sizes, iterations).
    pub how: String,
}

/// One (algorithm, protocol) cell of one link.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CellCost {
    pub algo: Algorithm,
    pub proto: Protocol,
    /// Latency of one step (one wait on a peer), us: the counterpart of NCCL's `hwLatencies`.
    pub lat_us: f64,
    /// Bus bandwidth of one channel, GB/s: the counterpart of NCCL's per-channel bandwidths (for Tree, twice
    /// the algorithm bandwidth, as NCCL counts it).
    pub bw_gbps: f64,
    /// Bus bandwidth of all channels together (`max_channels` of the facts), GB/s.
    pub max_bw_gbps: f64,
    /// Latency each channel beyond the first adds to a call, us.
    pub channel_lat_us: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkProfile {
    pub transport: Transport,
    pub cells: Vec<CellCost>,
}

impl LinkProfile {
    /// The constants of `algo`/`proto` on this link. collscope's OneShot is priced with Ring's: its steps are
    /// a ring's, one slot from a rank to a peer over the same link, only each with more bytes (see
    /// `predict::steps`).
    pub fn cell(&self, algo: Algorithm, proto: Protocol) -> Option<CellCost> {
        let measured = if algo == Algorithm::OneShot { Algorithm::Ring } else { algo };
        let cell = self.cells.iter().find(|c| c.algo == measured && c.proto == proto)?;
        Some(CellCost { algo, ..*cell })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostProfile {
    pub format: u32,
    pub machine: MachineFacts,
    pub links: Vec<LinkProfile>,
    /// Where this profile was loaded from ("built-in" or the file), for logs.
    #[serde(skip)]
    pub origin: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot read the tuning profile {path}: {source}")]
    Read { path: PathBuf, source: collscope_debug::file::FileError },
    #[error("cannot write the tuning profile {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error(
        "{path} is not a collscope tuning profile ({source}): expected the JSON `collscope tune calibrate` writes"
    )]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("tuning profile {path}: {what}")]
    Invalid { path: PathBuf, what: String },
}

impl HostProfile {
    pub fn link(&self, t: Transport) -> Option<&LinkProfile> {
        self.links.iter().find(|l| l.transport == t)
    }

    /// The profile in `text`, checked: every link the runtime has, every cell it implements, sane numbers.
    pub fn from_json(text: &str, path: &Path) -> Result<HostProfile, ProfileError> {
        let mut p: HostProfile =
            serde_json::from_str(text).map_err(|source| ProfileError::Parse { path: path.to_path_buf(), source })?;
        p.validate().map_err(|what| ProfileError::Invalid { path: path.to_path_buf(), what })?;
        p.origin = path.display().to_string();
        Ok(p)
    }

    pub fn load(path: &Path) -> Result<HostProfile, ProfileError> {
        let text = collscope_debug::file::read_small_string(path, MAX_PROFILE_BYTES)
            .map_err(|source| ProfileError::Read { path: path.to_path_buf(), source })?;
        Self::from_json(&text, path)
    }

    /// Writes the profile as pretty JSON, creating the parent directory.
    pub fn save(&self, path: &Path) -> Result<(), ProfileError> {
        let err = |source| ProfileError::Write { path: path.to_path_buf(), source };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let text = serde_json::to_string_pretty(self).map_err(|e| err(std::io::Error::other(e)))?;
        std::fs::write(path, text + "\n").map_err(err)
    }

    fn validate(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!("format {} is not supported: expected {FORMAT}", self.format));
        }
        if self.machine.nranks < 2 || self.machine.max_channels < 1 {
            return Err("machine.nranks must be at least 2 and machine.max_channels at least 1".into());
        }
        for t in LINKS {
            let link = self.link(t).ok_or_else(|| format!("no {t} link: expected P2P, SHM and NET"))?;
            for a in ALGOS {
                for &p in Protocol::ALL {
                    let c = link.cell(a, p).ok_or_else(|| format!("{t} has no {a}/{p} cell"))?;
                    let ok =
                        |v: f64, min_exclusive: bool| v.is_finite() && if min_exclusive { v > 0.0 } else { v >= 0.0 };
                    if !(ok(c.lat_us, false)
                        && ok(c.channel_lat_us, false)
                        && ok(c.bw_gbps, true)
                        && ok(c.max_bw_gbps, true))
                    {
                        return Err(format!(
                            "{t} {a}/{p}: latencies must be finite and >= 0 us, bandwidths finite and > 0 GB/s"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The default file: `tuning.json` in collscope's cache folder (`COLLSCOPE_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/collscope`, else `~/.cache/collscope`).
    pub fn default_path() -> Option<PathBuf> {
        Some(collscope_debug::params::cache_dir()?.join("tuning.json"))
    }

    /// The built-in profile: constants like NCCL's tables, used when no calibration file is found. Measured with
    /// `collscope tune calibrate --nranks 4` (release build) on the project's 2-core build machine (the facts
    /// inside `builtin.json` say which CPU, when and how); a machine that differs should calibrate its own.
    pub fn builtin() -> HostProfile {
        let mut p = HostProfile::from_json(BUILTIN_JSON, Path::new("builtin.json"))
            .unwrap_or_else(|e| unreachable!("the built-in tuning profile is checked by its tests: {e}"));
        p.origin = "built-in".into();
        p
    }

    /// The profile a communicator uses: the file `COLLSCOPE_TUNING_FILE` names (`builtin`: the built-in
    /// table), else the default file if it exists, else the built-in table. A file that is named or present
    /// but bad is an error.
    pub fn resolve(env: &Env) -> Result<HostProfile, ProfileError> {
        match env.str(TUNING_FILE_VAR) {
            Some(BUILTIN) => return Ok(Self::builtin()),
            Some(path) => return Self::load(Path::new(path)),
            None => {}
        }
        match Self::default_path().filter(|p| p.exists()) {
            Some(path) => Self::load(&path),
            None => Ok(Self::builtin()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_round_trips_and_bad_files_name_file_and_expectation() {
        let b = HostProfile::builtin();
        assert_eq!(b.origin, "built-in");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/tuning.json");
        b.save(&path).unwrap();
        let back = HostProfile::load(&path).unwrap();
        assert_eq!((back.links.clone(), back.machine.clone()), (b.links.clone(), b.machine.clone()));

        let e = HostProfile::load(&dir.path().join("missing.json")).unwrap_err().to_string();
        assert!(e.contains("missing.json") && e.contains("cannot read"), "{e}");
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{\"format\": 1, \"links\": 3}").unwrap();
        let e = HostProfile::load(&bad).unwrap_err().to_string();
        assert!(e.contains("bad.json") && e.contains("expected the JSON `collscope tune calibrate` writes"), "{e}");

        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        v["links"][1]["cells"][2]["bw_gbps"] = serde_json::json!(-1.0);
        std::fs::write(&bad, v.to_string()).unwrap();
        let e = HostProfile::load(&bad).unwrap_err().to_string();
        assert!(e.contains("bad.json") && e.contains("bandwidths finite and > 0"), "{e}");
        v["links"][1]["cells"][2]["bw_gbps"] = serde_json::json!(1.0);
        v["links"].as_array_mut().unwrap().truncate(2);
        std::fs::write(&bad, v.to_string()).unwrap();
        let e = HostProfile::load(&bad).unwrap_err().to_string();
        assert!(e.contains("no NET link"), "{e}");
        v["format"] = serde_json::json!(7);
        std::fs::write(&bad, v.to_string()).unwrap();
        assert!(HostProfile::load(&bad).unwrap_err().to_string().contains("format 7 is not supported"));

        let env = Env::from_pairs([(TUNING_FILE_VAR, bad.to_str().unwrap())]);
        assert!(HostProfile::resolve(&env).unwrap_err().to_string().contains("bad.json"));
        let env = Env::from_pairs([(TUNING_FILE_VAR, path.to_str().unwrap())]);
        assert_eq!(HostProfile::resolve(&env).unwrap().origin, path.display().to_string());
        let env = Env::from_pairs([(TUNING_FILE_VAR, BUILTIN)]);
        assert_eq!(HostProfile::resolve(&env).unwrap().origin, "built-in");
    }
}
