//! Tuning lines collscope does not write: the enabled matrix, RCCL's decisions and COLL lines (NCCL 2.28.9
//! `src/graph/tuning.cc`, `src/enqueue.cc`). The table and NCCL's decision lines, which collscope writes too, are
//! parsed beside their formatters in `collscope_model::lines::tuning`.

use super::conn::{algorithm, protocol, split_colon, DecisionLine};
use super::scan::{field, Scan};
use collscope_model::{Algorithm, Collective, Protocol};

/// `AllReduce: opCount 1a sendbuff ... count 64 datatype 7 op 0 root 0 comm 0x... [nranks=2] stream 0x...`
/// (RCCL adds `task 0 globalrank 3`).
#[derive(Debug, Clone, PartialEq)]
pub struct CollLine {
    pub coll: Collective,
    pub op_count: u64,
    pub count: u64,
    pub datatype: Option<usize>,
    pub op: Option<usize>,
    pub root: Option<i32>,
    pub comm: Option<String>,
    pub nranks: Option<u32>,
    pub global_rank: Option<u32>,
}

/// RCCL's choice after its own adjustments: `tunedColl enqueue coll AllReduce(ncclSum, ncclFloat32, RING, SIMPLE),
/// nChannels 2, count 262144 (nbytes 1048576), ...` (also `collnetColl`, `CBDColl`; RCCL `src/enqueue.cc`).
pub fn rccl_enqueue(msg: &str) -> Option<DecisionLine> {
    let mut s = Scan::new(msg);
    s.word()?;
    s.lit(" enqueue coll ")?;
    let coll = s.until("(")?.parse().ok()?;
    s.lit("(")?;
    let args: Vec<&str> = s.until(")")?.split(", ").collect();
    let [_, _, algo, proto] = args.as_slice() else { return None };
    let (algo, proto) = (algorithm(algo)?, protocol(proto)?);
    let n_channels = field(msg, "nChannels").and_then(|v| v.trim_end_matches(',').parse().ok());
    let bytes = msg.split_once("(nbytes ")?.1.split(')').next()?.parse().ok()?;
    Some(DecisionLine { coll: Some(coll), bytes, algo, proto, n_channels, time_us: None })
}

pub fn coll(msg: &str) -> Option<CollLine> {
    let (name, rest) = split_colon(msg)?;
    let rest = rest.strip_prefix("opCount ")?;
    let coll = name.parse().ok()?;
    let mut toks = rest.split_ascii_whitespace();
    let op_count = u64::from_str_radix(toks.next()?, 16).ok()?;
    let mut c = CollLine {
        coll,
        op_count,
        count: 0,
        datatype: None,
        op: None,
        root: None,
        comm: None,
        nranks: None,
        global_rank: None,
    };
    while let Some(key) = toks.next() {
        if let Some(n) = key.strip_prefix("[nranks=").and_then(|r| r.strip_suffix(']')) {
            c.nranks = n.parse().ok();
            continue;
        }
        let Some(value) = toks.next() else { break };
        match key {
            "count" => c.count = value.parse().ok()?,
            "datatype" => c.datatype = value.parse().ok(),
            "op" => c.op = value.parse().ok(),
            "root" => c.root = value.parse().ok(),
            "comm" => c.comm = Some(value.to_string()),
            "globalrank" => c.global_rank = value.parse().ok(),
            _ => {}
        }
    }
    Some(c)
}

/// One value of the enabled matrix: NCCL prints each protocol's and algorithm's enable as a number, 0 for off,
/// 1 for on and 2 (LL128's default) for "on where supported".
fn enable(t: &str) -> Option<bool> {
    Some(t.parse::<u32>().ok()? != 0)
}

/// One row of the enabled matrix printed after `Enabled NCCL Func/Proto/Algo Matrix:` (lines without prefix):
/// `    AllReduce |        1         2         1   |             1              1 ...`. Returns the collective
/// and the flags, protocols first; `None` for the header and for anything else.
pub fn matrix_row(line: &str) -> Option<(Collective, Vec<bool>)> {
    let mut parts = line.split('|');
    let coll: Collective = parts.next()?.trim().parse().ok()?;
    let flags = parts.flat_map(str::split_ascii_whitespace).map(enable).collect::<Option<Vec<_>>>()?;
    Some((coll, flags))
}

/// The matrix header: `     Function |       LL     LL128    Simple   |          Tree           Ring ...`, the
/// protocols and algorithms of the columns.
pub fn matrix_header(line: &str) -> Option<(Vec<Protocol>, Vec<Algorithm>)> {
    let mut parts = line.split('|');
    if parts.next()?.trim() != "Function" {
        return None;
    }
    let protos = parts.next()?.split_ascii_whitespace().map(protocol).collect::<Option<Vec<_>>>()?;
    let algos = parts.next()?.split_ascii_whitespace().map(algorithm).collect::<Option<Vec<_>>>()?;
    Some((protos, algos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coll_lines_and_matrix_rows() {
        let c = coll("AllReduce: opCount 1a sendbuff 0x1 recvbuff 0x2 count 64 datatype 7 op 0 root 0 comm 0xa [nranks=2] stream 0x3").unwrap();
        assert_eq!((c.op_count, c.count, c.datatype, c.nranks), (0x1a, 64, Some(7), Some(2)));
        assert_eq!(c.comm.as_deref(), Some("0xa"));
        let (c, f) =
            matrix_row("    AllReduce |        1         0         1   |             1              1  ").unwrap();
        assert_eq!((c, f), (Collective::AllReduce, vec![true, false, true, true, true]));
        let (c, f) =
            matrix_row("    Broadcast |        1         2         0   |             1              0").unwrap();
        assert_eq!((c, f), (Collective::Broadcast, vec![true, true, false, true, false]));
        assert!(matrix_row("     Function |       LL     LL128    Simple   |").is_none());
        let (p, a) = matrix_header(
            "     Function |       LL     LL128    Simple   |          Tree           Ring            PAT  ",
        )
        .unwrap();
        assert_eq!((p.len(), a), (3, vec![Algorithm::Tree, Algorithm::Ring, Algorithm::Pat]));
        let d = rccl_enqueue("tunedColl enqueue coll AllReduce(ncclSum, ncclFloat32, RING, SIMPLE), nChannels 2, count 262144 (nbytes 1048576), usableChannel 2, chunkCount 65536").unwrap();
        assert_eq!(
            (d.coll, d.bytes, d.algo, d.proto, d.n_channels),
            (Some(Collective::AllReduce), 1048576, Algorithm::Ring, Protocol::Simple, Some(2))
        );
        let c = coll("AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm 0xa [nranks=16] stream 0x3 task 0 globalrank 5").unwrap();
        assert_eq!((c.global_rank, c.nranks), (Some(5), Some(16)));
    }
}
