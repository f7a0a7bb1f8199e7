//! The attributes an RC queue pair moves through INIT -> RTR -> RTS with (NCCL 2.28.9 `net_ib.cc`
//! `ncclIbCreateQp`, `ncclIbRtrQp`, `ncclIbRtsQp`), the traffic class and service level a connection uses, and
//! the automatic GID choice (`ncclIbGetGidIndex`). Pure values: [`super::verbs`] hands them to `ibv_modify_qp`.

use super::meta::{ConnMeta, LINK_LAYER_ETHERNET};
use super::params::{AddrFamily, IbParams};
use std::path::Path;

/// Work requests a queue pair holds (`2*MAX_REQUESTS` sends: a CTS write and a data write per request).
pub(crate) const MAX_SEND_WR: u32 = 2 * super::fifo::MAX_REQUESTS as u32;
pub(crate) const MAX_RECV_WR: u32 = super::fifo::MAX_REQUESTS as u32;

/// Remote access a queue pair grants: the sender's peer writes CTS entries into its FIFO, the receiver's peer
/// writes data (NCCL also grants atomics on the receive side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Access {
    pub remote_write: bool,
    pub remote_atomic: bool,
}

/// RESET -> INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InitAttrs {
    pub pkey_index: u16,
    pub port: u8,
    pub access: Access,
}

pub(crate) fn init_attrs(params: &IbParams, port: u8, send: bool) -> InitAttrs {
    InitAttrs { pkey_index: params.pkey, port, access: Access { remote_write: true, remote_atomic: !send } }
}

/// How packets reach the peer: by LID inside one IB subnet, or with a global route header (RoCE, or IB across
/// subnets through the peer's FLID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    Lid { dlid: u16 },
    Global { dlid: u16, dgid: [u8; 16], sgid_index: u8, hop_limit: u8, traffic_class: u8 },
}

/// INIT -> RTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RtrAttrs {
    pub path_mtu: u8,
    pub dest_qpn: u32,
    pub rq_psn: u32,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub route: Route,
    pub sl: u8,
    pub port: u8,
}

/// This side's port as the RTR transition needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LocalPort {
    pub port: u8,
    pub active_mtu: u8,
    pub gid_index: u8,
    pub gid: [u8; 16],
}

/// The 16-bit subnet prefix NCCL compares (low bits of the big-endian subnet prefix, GID bytes 6..8).
fn local_subnet(gid: &[u8; 16]) -> u16 {
    u16::from_be_bytes([gid[6], gid[7]])
}

/// The FLID of an IB GID (bytes 4..6).
fn flid(gid: &[u8; 16]) -> u16 {
    u16::from_be_bytes([gid[4], gid[5]])
}

/// RTR towards `remote`, with the traffic class and service level the sender chose (`remote.tc`/`remote.sl` on
/// the receiver, its own on the sender). The receiver's CTS writes may use `NCCL_IB_FIFO_TC` instead (`fifo`).
pub(crate) fn rtr_attrs(local: &LocalPort, remote: &ConnMeta, tc: u8, sl: u8, fifo_tc: Option<u8>) -> RtrAttrs {
    let d = &remote.dev;
    let global = |dlid, traffic_class| Route::Global {
        dlid,
        dgid: d.gid,
        sgid_index: local.gid_index,
        hop_limit: 255,
        traffic_class,
    };
    let route = if d.link_layer == LINK_LAYER_ETHERNET {
        global(0, fifo_tc.unwrap_or(tc))
    } else if local_subnet(&local.gid) == local_subnet(&d.gid) {
        Route::Lid { dlid: d.lid }
    } else {
        // Across IB subnets the peer is reached through its FLID; NCCL falls back to the LID when it is 0, and
        // sets no traffic class on InfiniBand.
        match flid(&d.gid) {
            0 => global(d.lid, 0),
            f => global(f, 0),
        }
    };
    RtrAttrs {
        path_mtu: d.mtu.min(local.active_mtu),
        dest_qpn: remote.qpn,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        route,
        sl,
        port: local.port,
    }
}

/// RTR -> RTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RtsAttrs {
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub sq_psn: u32,
    pub max_rd_atomic: u8,
}

pub(crate) fn rts_attrs(params: &IbParams) -> RtsAttrs {
    RtsAttrs { timeout: params.timeout, retry_cnt: params.retry_cnt, rnr_retry: 7, sq_psn: 0, max_rd_atomic: 1 }
}

/// The traffic class and service level the sender announces: `NCCL_IB_TC`/`NCCL_IB_SL`, else 0
/// (`NCCL_IB_TC_DEFAULT`, `NCCL_IB_SL_DEFAULT`; collscope has no communicator traffic-class config).
pub(crate) fn tc_sl(params: &IbParams) -> (u8, u8) {
    (params.traffic_class.unwrap_or(0), params.service_level.unwrap_or(0))
}

/// One GID table entry: the GID and its RoCE version from sysfs (`None` when unreadable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GidEntry {
    pub gid: [u8; 16],
    pub roce_version: Option<u8>,
}

fn family(gid: &[u8; 16]) -> AddrFamily {
    let mapped = gid[..10].iter().all(|&b| b == 0) && gid[10..12] == [0xff, 0xff];
    let mapped_mcast =
        gid[..4] == [0xff, 0x0e, 0, 0] && gid[4..10].iter().all(|&b| b == 0) && gid[10..12] == [0xff, 0xff];
    if mapped || mapped_mcast {
        AddrFamily::Inet
    } else {
        AddrFamily::Inet6
    }
}

/// Configured (not all zero, not a bare fe80::) and not link-local.
fn valid(gid: &[u8; 16]) -> bool {
    let link_local = gid[..4] == [0xfe, 0x80, 0, 0] && gid[4..8] == [0; 4];
    gid.iter().any(|&b| b != 0) && !link_local
}

/// The GID index a port uses. InfiniBand: `NCCL_IB_ROUTABLE_FLID_GID_INDEX` when that GID carries a FLID, else
/// 0 (`NCCL_IB_GID_INDEX` does not apply). RoCE: `NCCL_IB_GID_INDEX` when set, else NCCL's scan for a valid GID
/// of `NCCL_IB_ADDR_FAMILY` and `NCCL_IB_ROCE_VERSION_NUM` (collscope does not read `NCCL_IB_ADDR_RANGE`).
pub(crate) fn select_gid_index(params: &IbParams, ethernet: bool, table: &[GidEntry]) -> usize {
    if !ethernet {
        let r = params.routable_flid_gid_index as usize;
        return match table.get(r) {
            Some(e) if flid(&e.gid) != 0 => r,
            _ => 0,
        };
    }
    if params.gid_index >= 0 {
        return params.gid_index as usize;
    }
    let want = params.addr_family;
    let mut best = 0;
    for (i, c) in table.iter().enumerate().skip(1) {
        let Some(cur) = table.get(best) else { break };
        let fam = family(&c.gid);
        // A GID of the wanted family replaces one of the other family; among the wanted family, a valid GID of
        // the wanted RoCE version replaces one of another version or an invalid one.
        let other_family = fam != family(&cur.gid);
        let better_version = valid(&c.gid)
            && (cur.roce_version != c.roce_version || !valid(&cur.gid))
            && c.roce_version == Some(params.roce_version);
        if fam == want && (other_family || better_version) {
            best = i;
        }
    }
    best
}

/// The RoCE version of GID `index` from `<root>/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>`
/// (`IB/RoCE v1`, `RoCE v1` or `RoCE v2`); `None` when the file is missing or says something else.
pub(crate) fn roce_version(root: &Path, dev: &str, port: u32, index: usize) -> Option<u8> {
    let p = root.join(format!("sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types/{index}"));
    let s = std::fs::read_to_string(p).ok()?;
    if s.starts_with("IB/RoCE v1") || s.starts_with("RoCE v1") {
        Some(1)
    } else if s.starts_with("RoCE v2") {
        Some(2)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::meta::{DevInfo, LINK_LAYER_IB};
    use super::*;
    use collscope_debug::env::Env;

    fn params(pairs: &[(&str, &str)]) -> IbParams {
        IbParams::from_env(&Env::from_pairs(pairs.iter().copied())).unwrap()
    }

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&a);
        g
    }

    fn remote(link_layer: u8, gid: [u8; 16], lid: u16, mtu: u8) -> ConnMeta {
        ConnMeta {
            qpn: 77,
            dev: DevInfo { lid, ib_port: 1, mtu, link_layer, gid, fifo_rkey: 0 },
            fifo_addr: 0,
            tc: 0,
            sl: 0,
            dev_name: "mlx5_1".into(),
        }
    }

    #[test]
    fn init_and_rts_follow_the_parameters() {
        let p = params(&[]);
        assert_eq!(
            init_attrs(&p, 1, true),
            InitAttrs { pkey_index: 0, port: 1, access: Access { remote_write: true, remote_atomic: false } }
        );
        assert!(init_attrs(&params(&[("NCCL_IB_PKEY", "2")]), 2, false).access.remote_atomic);
        assert_eq!(init_attrs(&params(&[("NCCL_IB_PKEY", "2")]), 2, false).pkey_index, 2);
        assert_eq!(rts_attrs(&p), RtsAttrs { timeout: 20, retry_cnt: 7, rnr_retry: 7, sq_psn: 0, max_rd_atomic: 1 });
        let p = params(&[("NCCL_IB_TIMEOUT", "23"), ("NCCL_IB_RETRY_CNT", "5")]);
        assert_eq!((rts_attrs(&p).timeout, rts_attrs(&p).retry_cnt), (23, 5));
        assert_eq!(tc_sl(&params(&[])), (0, 0));
        assert_eq!(tc_sl(&params(&[("NCCL_IB_TC", "106"), ("NCCL_IB_SL", "3")])), (106, 3));
    }

    #[test]
    fn rtr_routes_by_link_layer_and_subnet() {
        let local = LocalPort { port: 1, active_mtu: 4, gid_index: 3, gid: v4([10, 0, 0, 1]) };
        let r = rtr_attrs(&local, &remote(LINK_LAYER_ETHERNET, v4([10, 0, 0, 2]), 0, 5), 106, 3, None);
        assert_eq!((r.path_mtu, r.dest_qpn, r.min_rnr_timer, r.sl, r.port), (4, 77, 12, 3, 1));
        assert_eq!(
            r.route,
            Route::Global { dlid: 0, dgid: v4([10, 0, 0, 2]), sgid_index: 3, hop_limit: 255, traffic_class: 106 }
        );
        // The receiver's CTS queue pair may use NCCL_IB_FIFO_TC.
        let r = rtr_attrs(&local, &remote(LINK_LAYER_ETHERNET, v4([10, 0, 0, 2]), 0, 5), 106, 0, Some(96));
        assert!(matches!(r.route, Route::Global { traffic_class: 96, .. }));
        // IB in the same subnet: by LID.
        let mut ib = [0u8; 16];
        ib[..2].copy_from_slice(&[0xfe, 0x80]);
        let local_ib = LocalPort { port: 1, active_mtu: 5, gid_index: 0, gid: ib };
        let r = rtr_attrs(&local_ib, &remote(LINK_LAYER_IB, ib, 12, 5), 0, 0, None);
        assert_eq!((r.route, r.path_mtu), (Route::Lid { dlid: 12 }, 5));
        // IB across subnets: through the FLID, or the LID when the FLID is 0.
        let mut other = ib;
        other[7] = 9;
        let r = rtr_attrs(&local_ib, &remote(LINK_LAYER_IB, other, 12, 5), 0, 0, None);
        assert!(matches!(r.route, Route::Global { dlid: 12, .. }));
        other[4..6].copy_from_slice(&0x0abcu16.to_be_bytes());
        let r = rtr_attrs(&local_ib, &remote(LINK_LAYER_IB, other, 12, 5), 0, 0, None);
        assert!(matches!(r.route, Route::Global { dlid: 0x0abc, hop_limit: 255, .. }));
    }

    #[test]
    fn gid_choice() {
        let link_local = {
            let mut g = [0u8; 16];
            g[..2].copy_from_slice(&[0xfe, 0x80]);
            g[15] = 1;
            g
        };
        let table = [
            GidEntry { gid: link_local, roce_version: Some(1) },
            GidEntry { gid: link_local, roce_version: Some(2) },
            GidEntry { gid: v4([10, 0, 0, 1]), roce_version: Some(1) },
            GidEntry { gid: v4([10, 0, 0, 1]), roce_version: Some(2) },
        ];
        // RoCE v2 over IPv4 is preferred, as on a usual mlx5 RoCE port.
        assert_eq!(select_gid_index(&params(&[]), true, &table), 3);
        assert_eq!(select_gid_index(&params(&[("NCCL_IB_ROCE_VERSION_NUM", "1")]), true, &table), 2);
        assert_eq!(select_gid_index(&params(&[("NCCL_IB_GID_INDEX", "1")]), true, &table), 1);
        // IPv6 wanted and only link-local IPv6 GIDs: the first entry stays.
        assert_eq!(select_gid_index(&params(&[("NCCL_IB_ADDR_FAMILY", "AF_INET6")]), true, &table), 0);
        // InfiniBand ignores NCCL_IB_GID_INDEX: index 1 only when it carries a FLID.
        let p = params(&[("NCCL_IB_GID_INDEX", "3")]);
        assert_eq!(select_gid_index(&p, false, &table), 0);
        let mut routable = link_local;
        routable[4] = 1;
        let ib = [table[0], GidEntry { gid: routable, roce_version: None }];
        assert_eq!(select_gid_index(&p, false, &ib), 1);
    }

    #[test]
    fn roce_versions_from_a_fake_sys_tree() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("0"), "IB/RoCE v1\n").unwrap();
        std::fs::write(dir.join("1"), "RoCE v2\n").unwrap();
        std::fs::write(dir.join("2"), "\n").unwrap();
        assert_eq!(roce_version(root.path(), "mlx5_0", 1, 0), Some(1));
        assert_eq!(roce_version(root.path(), "mlx5_0", 1, 1), Some(2));
        assert_eq!(roce_version(root.path(), "mlx5_0", 1, 2), None);
        assert_eq!(roce_version(root.path(), "mlx5_0", 1, 9), None);
    }
}
