//! The `NCCL_IB_*` basics a queue pair is built with (NCCL 2.28.9 `net_ib.cc` `NCCL_PARAM`s), read once and
//! range-checked so a bad value is named before any verbs call.

use collscope_debug::env::{Env, EnvError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IbParams {
    /// `NCCL_IB_GID_INDEX`: -1 picks the GID automatically (RoCE v2 IPv4 first, as NCCL).
    pub gid_index: i32,
    /// `NCCL_IB_TIMEOUT` (default 20): local ACK timeout exponent, 4.096 us * 2^timeout.
    pub timeout: u8,
    /// `NCCL_IB_RETRY_CNT` (default 7).
    pub retry_cnt: u8,
    /// `NCCL_IB_TC` (-1: not set) traffic class for RoCE.
    pub traffic_class: Option<u8>,
    /// `NCCL_IB_SL` (-1: not set) service level.
    pub service_level: Option<u8>,
    /// `NCCL_IB_PKEY` (default 0) partition key index.
    pub pkey: u16,
    /// `NCCL_IB_DISABLE` (default 0).
    pub disable: bool,
    /// `NCCL_IB_FIFO_TC` (-1: not set): traffic class of the receiver's clear-to-send writes on RoCE.
    pub fifo_tc: Option<u8>,
    /// `NCCL_IB_ROCE_VERSION_NUM` (default 2): the RoCE version automatic GID selection prefers.
    pub roce_version: u8,
    /// `NCCL_IB_ADDR_FAMILY` (default AF_INET): the address family automatic GID selection prefers.
    pub addr_family: AddrFamily,
    /// `NCCL_IB_ROUTABLE_FLID_GID_INDEX` (default 1): on InfiniBand, the GID index used when it carries a FLID.
    pub routable_flid_gid_index: u32,
}

/// The address family a RoCE GID carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddrFamily {
    Inet,
    Inet6,
}

fn ranged(env: &Env, name: &str, default: i64, lo: i64, hi: i64) -> Result<i64, EnvError> {
    let v = env.int(name, default)?;
    if v < lo || v > hi {
        return Err(EnvError { name: name.into(), value: v.to_string(), expected: format!("a value in {lo}..={hi}") });
    }
    Ok(v)
}

impl IbParams {
    pub(crate) fn from_env(env: &Env) -> Result<IbParams, EnvError> {
        let opt = |v: i64| u8::try_from(v).ok();
        Ok(IbParams {
            gid_index: ranged(env, "NCCL_IB_GID_INDEX", -1, -1, 255)? as i32,
            timeout: ranged(env, "NCCL_IB_TIMEOUT", 20, 1, 31)? as u8,
            retry_cnt: ranged(env, "NCCL_IB_RETRY_CNT", 7, 0, 7)? as u8,
            traffic_class: opt(ranged(env, "NCCL_IB_TC", -1, -1, 255)?),
            service_level: opt(ranged(env, "NCCL_IB_SL", -1, -1, 15)?),
            pkey: ranged(env, "NCCL_IB_PKEY", 0, 0, 0xffff)? as u16,
            disable: env.int("NCCL_IB_DISABLE", 0)? != 0,
            fifo_tc: opt(ranged(env, "NCCL_IB_FIFO_TC", -1, -1, 255)?),
            roce_version: ranged(env, "NCCL_IB_ROCE_VERSION_NUM", 2, 1, 2)? as u8,
            addr_family: match env.str("NCCL_IB_ADDR_FAMILY") {
                None | Some("AF_INET") => AddrFamily::Inet,
                Some("AF_INET6") => AddrFamily::Inet6,
                Some(v) => {
                    return Err(EnvError {
                        name: "NCCL_IB_ADDR_FAMILY".into(),
                        value: v.into(),
                        expected: "AF_INET or AF_INET6".into(),
                    })
                }
            },
            routable_flid_gid_index: ranged(env, "NCCL_IB_ROUTABLE_FLID_GID_INDEX", 1, 0, 255)? as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let p = IbParams::from_env(&Env::default()).unwrap();
        assert_eq!((p.gid_index, p.timeout, p.retry_cnt, p.traffic_class, p.disable), (-1, 20, 7, None, false));
        let env = Env::from_pairs([("NCCL_IB_GID_INDEX", "3"), ("NCCL_IB_TC", "106"), ("NCCL_IB_TIMEOUT", "22")]);
        let p = IbParams::from_env(&env).unwrap();
        assert_eq!((p.gid_index, p.traffic_class, p.timeout), (3, Some(106), 22));
        assert_eq!(
            (p.fifo_tc, p.roce_version, p.addr_family, p.routable_flid_gid_index),
            (None, 2, AddrFamily::Inet, 1)
        );
        let p = IbParams::from_env(&Env::from_pairs([("NCCL_IB_ADDR_FAMILY", "AF_INET6"), ("NCCL_IB_FIFO_TC", "96")]))
            .unwrap();
        assert_eq!((p.addr_family, p.fifo_tc), (AddrFamily::Inet6, Some(96)));
    }

    #[test]
    fn out_of_range_is_named() {
        let e = IbParams::from_env(&Env::from_pairs([("NCCL_IB_RETRY_CNT", "9")])).unwrap_err();
        assert_eq!(e.name, "NCCL_IB_RETRY_CNT");
        assert!(e.to_string().contains("0..=7"), "{e}");
        let e = IbParams::from_env(&Env::from_pairs([("NCCL_IB_ADDR_FAMILY", "inet")])).unwrap_err();
        assert!(e.to_string().contains("AF_INET or AF_INET6"), "{e}");
    }
}
