//! The environment parameters that steer path computation, P2P and GPUDirect RDMA decisions, read once
//! through [`Env`] (NCCL 2.28.9 `paths.cc`, `topo.cc`). NCCL ignores a malformed level; collscope reports it.

use crate::version::{self, VersionError, VersionProfile};
use collscope_debug::env::{Env, EnvError};
use collscope_model::PathType;

/// The variable `--nccl-version` sets: the NCCL release whose constants the model uses.
pub const VERSION_VAR: &str = "COLLSCOPE_NCCL_VERSION";

/// How many NICs a GPU spreads its channels over (`NCCL_NETDEVS_POLICY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetDevsPolicy {
    #[default]
    Auto,
    All,
    Max(u32),
}

#[derive(Debug, Clone, PartialEq)]
pub struct TopoEnv {
    /// `NCCL_P2P_DISABLE=1` (as LOC) or `NCCL_P2P_LEVEL`; `None` keeps NCCL's default rules.
    pub p2p_level: Option<PathType>,
    /// `NCCL_NET_GDR_LEVEL`; `None` means PXB.
    pub gdr_level: Option<PathType>,
    /// `NCCL_NET_GDR_READ`: 0 off, 1 on, negative (default -2) on for Ampere and later or NVLink systems.
    pub gdr_read: i64,
    /// `NCCL_NET_GDR_C2C` (default 1): GDR through the C2C link to NICs on the CPU.
    pub gdr_c2c: bool,
    /// `NCCL_NVB_DISABLE`: no routing through an intermediate GPU.
    pub nvb_disable: bool,
    /// `NCCL_PXN_DISABLE`: no NIC access through a peer GPU.
    pub pxn_disable: bool,
    /// `NCCL_PXN_C2C` (default 1): peers reaching the NIC over C2C qualify for PXN.
    pub pxn_c2c: bool,
    pub netdevs: NetDevsPolicy,
    /// `NCCL_NET_DISABLE_INTRA`: never use the network between GPUs of one node.
    pub net_disable_intra: bool,
    /// `NCCL_NET_FORCE_FLUSH`: flush GDR receives even on Hopper and later.
    pub net_force_flush: bool,
    /// `COLLSCOPE_ASSUME_P2P=1`: P2P wherever the path allows it, instead of the NVML refusal inferred for
    /// consumer GPUs (`paths::nvml_refuses_p2p`); what `--p2p on` asks.
    pub assume_p2p: bool,
    /// [`VERSION_VAR`] (default 2.28.9): the NCCL release whose constants the model uses; what
    /// `--nccl-version` sets.
    pub profile: VersionProfile,
}

impl Default for TopoEnv {
    fn default() -> Self {
        TopoEnv {
            p2p_level: None,
            gdr_level: None,
            gdr_read: -2,
            gdr_c2c: true,
            nvb_disable: false,
            pxn_disable: false,
            pxn_c2c: true,
            netdevs: NetDevsPolicy::Auto,
            net_disable_intra: false,
            net_force_flush: false,
            assume_p2p: false,
            profile: VersionProfile::default(),
        }
    }
}

/// NCCL's pre-2.4 numeric levels (`levelsOldToNew`): 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS.
const OLD_LEVELS: [PathType; 6] =
    [PathType::LOC, PathType::PIX, PathType::PXB, PathType::PHB, PathType::SYS, PathType::SYS];

/// A P2P or GDR level as `ncclGetLevel` reads it: a path type name up to SYS, or an old numeric level.
pub fn parse_level(name: &str, value: &str) -> Result<PathType, EnvError> {
    let v = value.trim();
    if let Ok(t) = v.parse::<PathType>() {
        if t <= PathType::SYS {
            return Ok(t);
        }
    }
    if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) {
        let old = v.parse::<usize>().unwrap_or(usize::MAX).min(OLD_LEVELS.len() - 1);
        return Ok(OLD_LEVELS[old]);
    }
    Err(EnvError {
        name: name.to_string(),
        value: value.to_string(),
        expected: "one of LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS, or an old numeric level 0-5".into(),
    })
}

fn parse_netdevs(value: &str) -> Result<NetDevsPolicy, EnvError> {
    let v = value.trim();
    if v.eq_ignore_ascii_case("AUTO") {
        return Ok(NetDevsPolicy::Auto);
    }
    if v.eq_ignore_ascii_case("ALL") {
        return Ok(NetDevsPolicy::All);
    }
    if v.len() > 4 && v[..4].eq_ignore_ascii_case("MAX:") {
        if let Ok(n) = v[4..].parse::<u32>() {
            if n > 0 {
                return Ok(NetDevsPolicy::Max(n));
            }
        }
    }
    Err(EnvError {
        name: "NCCL_NETDEVS_POLICY".into(),
        value: value.to_string(),
        expected: "AUTO, ALL or MAX:<n> with n > 0".into(),
    })
}

impl TopoEnv {
    pub fn from_env(env: &Env) -> Result<Self, EnvError> {
        let mut t = TopoEnv::default();
        if env.int("NCCL_P2P_DISABLE", 0)? == 1 {
            t.p2p_level = Some(PathType::LOC);
        } else if let Some(v) = env.str("NCCL_P2P_LEVEL") {
            t.p2p_level = Some(parse_level("NCCL_P2P_LEVEL", v)?);
        }
        if let Some(v) = env.str("NCCL_NET_GDR_LEVEL") {
            t.gdr_level = Some(parse_level("NCCL_NET_GDR_LEVEL", v)?);
        }
        t.gdr_read = env.int("NCCL_NET_GDR_READ", -2)?;
        t.gdr_c2c = env.int("NCCL_NET_GDR_C2C", 1)? != 0;
        t.nvb_disable = env.int("NCCL_NVB_DISABLE", 0)? != 0;
        t.pxn_disable = env.int("NCCL_PXN_DISABLE", 0)? == 1;
        t.pxn_c2c = env.int("NCCL_PXN_C2C", 1)? != 0;
        t.net_disable_intra = env.int("NCCL_NET_DISABLE_INTRA", 0)? == 1;
        t.net_force_flush = env.int("NCCL_NET_FORCE_FLUSH", 0)? != 0;
        t.assume_p2p = env.int("COLLSCOPE_ASSUME_P2P", 0)? != 0;
        if let Some(v) = env.str("NCCL_NETDEVS_POLICY") {
            t.netdevs = parse_netdevs(v)?;
        }
        if let Some(v) = env.str(VERSION_VAR) {
            t.profile = v.parse().map_err(|_: VersionError| EnvError {
                name: VERSION_VAR.into(),
                value: v.to_string(),
                expected: version::EXPECTED.into(),
            })?;
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_by_name_and_old_number() {
        assert_eq!(parse_level("X", "PIX").unwrap(), PathType::PIX);
        assert_eq!(parse_level("X", "SYS").unwrap(), PathType::SYS);
        assert_eq!(parse_level("X", "nvl").unwrap(), PathType::NVL);
        assert_eq!(parse_level("X", "0").unwrap(), PathType::LOC);
        assert_eq!(parse_level("X", "1").unwrap(), PathType::PIX);
        assert_eq!(parse_level("X", "2").unwrap(), PathType::PXB);
        assert_eq!(parse_level("X", "3").unwrap(), PathType::PHB);
        assert_eq!(parse_level("X", "4").unwrap(), PathType::SYS);
        assert_eq!(parse_level("X", "9").unwrap(), PathType::SYS, "old levels above 5 clamp to SYS");
        for bad in ["NET", "DIS", "FAR", "-1", ""] {
            let e = parse_level("NCCL_P2P_LEVEL", bad).unwrap_err().to_string();
            assert!(e.contains("NCCL_P2P_LEVEL") && e.contains("PHB"), "{e}");
        }
    }

    #[test]
    fn env_overrides() {
        let t = TopoEnv::from_env(&Env::default()).unwrap();
        assert_eq!(t, TopoEnv::default());
        let env = Env::from_pairs([
            ("NCCL_P2P_LEVEL", "SYS"),
            ("NCCL_NET_GDR_LEVEL", "PHB"),
            ("NCCL_NET_GDR_READ", "0"),
            ("NCCL_PXN_DISABLE", "1"),
            ("NCCL_NVB_DISABLE", "1"),
            ("NCCL_NETDEVS_POLICY", "MAX:2"),
            ("NCCL_NET_DISABLE_INTRA", "1"),
            ("NCCL_NET_FORCE_FLUSH", "1"),
            ("NCCL_PXN_C2C", "0"),
            ("NCCL_NET_GDR_C2C", "0"),
        ]);
        let t = TopoEnv::from_env(&env).unwrap();
        assert_eq!(t.p2p_level, Some(PathType::SYS));
        assert_eq!(t.gdr_level, Some(PathType::PHB));
        assert_eq!(t.gdr_read, 0);
        assert!(t.pxn_disable && t.nvb_disable);
        assert_eq!(t.netdevs, NetDevsPolicy::Max(2));
        assert!(t.net_disable_intra && t.net_force_flush && !t.pxn_c2c && !t.gdr_c2c);
        let names: Vec<_> = env.settings().into_iter().map(|s| s.name).collect();
        assert!(names.contains(&"NCCL_P2P_LEVEL".to_string()) && names.contains(&"NCCL_NET_GDR_LEVEL".to_string()));

        let disabled = TopoEnv::from_env(&Env::from_pairs([("NCCL_P2P_DISABLE", "1"), ("NCCL_P2P_LEVEL", "SYS")]));
        assert_eq!(disabled.unwrap().p2p_level, Some(PathType::LOC), "P2P_DISABLE wins over P2P_LEVEL");

        let e = TopoEnv::from_env(&Env::from_pairs([("NCCL_NETDEVS_POLICY", "MAX:0")])).unwrap_err().to_string();
        assert!(e.contains("NCCL_NETDEVS_POLICY='MAX:0'"), "{e}");
        let e = TopoEnv::from_env(&Env::from_pairs([("NCCL_NET_GDR_READ", "yes")])).unwrap_err().to_string();
        assert!(e.contains("NCCL_NET_GDR_READ='yes'"), "{e}");
    }
}
