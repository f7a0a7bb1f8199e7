//! What moving from one NCCL release to another changes for the same communicator (`--vs VERSION`): each
//! side is the machine built with its release's constants and explained with its release's search and tuning
//! rules; the report holds the graphs and channel counts that differ, the table cells one release offers and
//! the other does not, and per collective and size the choice and predicted time on both sides.

use crate::explain::{explain, ExplainError, Explained};
use crate::topo::{paths, TopoEnv, TopoError};
use crate::version::{NcclVersion, VersionProfile};
use crate::whatif::{rows, Row};
use collscope_debug::env::Env;
use collscope_model::{
    Algorithm, ChannelCounts, Collective, Graph, LinkType, NodeType, PathType, Pattern, Protocol, Topology,
};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error(transparent)]
    Explain(#[from] ExplainError),
    #[error(transparent)]
    Env(#[from] collscope_debug::env::EnvError),
    #[error(transparent)]
    Topo(#[from] TopoError),
}

/// One release's side: the machine as that release builds it (link bandwidths differ by release) and the
/// environment that names the release (`COLLSCOPE_NCCL_VERSION` through `topo::settings::VERSION_VAR`).
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    pub topology: &'a Topology,
    pub env: &'a Env,
}

/// What a graph search found, without its channels' GPU orders.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphShape {
    pub n_channels: u32,
    pub bw_intra: f64,
    pub bw_inter: f64,
    pub type_intra: PathType,
    pub type_inter: PathType,
}

impl From<&Graph> for GraphShape {
    fn from(g: &Graph) -> Self {
        GraphShape {
            n_channels: g.n_channels,
            bw_intra: g.bw_intra,
            bw_inter: g.bw_inter,
            type_intra: g.type_intra,
            type_inter: g.type_inter,
        }
    }
}

/// A graph whose search result differs between the releases.
#[derive(Debug, Clone, Serialize)]
pub struct GraphChange {
    pub pattern: Pattern,
    pub before: GraphShape,
    pub after: GraphShape,
}

/// A table cell one release runs and the other does not, with why it is off where it is.
#[derive(Debug, Clone, Serialize)]
pub struct CellChange {
    pub coll: Collective,
    pub algo: Algorithm,
    pub proto: Protocol,
    /// Why the cell is off before (None: on).
    pub before_off: Option<String>,
    pub after_off: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Upgrade {
    pub from: NcclVersion,
    pub to: NcclVersion,
    /// Each release's constants and rules in words (`VersionProfile::describe`).
    pub from_rules: String,
    pub to_rules: String,
    pub graphs: Vec<GraphChange>,
    /// The channel counts, when they differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channels: Option<(ChannelCounts, ChannelCounts)>,
    pub cells: Vec<CellChange>,
    pub rows: Vec<Row>,
}

/// A machine whose NVLinks carry release `from`'s per-link figure (as a log of that release prints them),
/// with release `to`'s instead (`ncclTopoNVLinkBw`, by the GPU's compute capability), and its paths
/// recomputed under `env`. Other links keep their figures.
pub fn with_release_nvlinks(
    t: &Topology,
    from: &VersionProfile,
    to: &VersionProfile,
    env: &TopoEnv,
) -> Result<Topology, TopoError> {
    let mut out = t.clone();
    let sm = |i: usize| t.nodes[i].gpu.as_ref().map(|g| g.sm);
    for l in out.links.iter_mut().filter(|l| l.kind == LinkType::NVL) {
        let gpu = sm(l.from)
            .or_else(|| sm(l.to))
            .filter(|_| t.nodes[l.from].kind == NodeType::GPU || t.nodes[l.to].kind == NodeType::GPU);
        if let Some(sm) = gpu {
            l.bw *= to.nvlink_bw(sm) / from.nvlink_bw(sm);
        }
    }
    paths::compute(&mut out, env)?;
    Ok(out)
}

/// Why a cell is off, or None when the model runs it.
fn off(ex: &Explained, coll: Collective, a: Algorithm, p: Protocol) -> Option<String> {
    let why = ex.model.off_reasons(coll, a, p);
    (ex.model.bandwidth(coll, a, p) <= 0.0).then(|| {
        let why: Vec<String> = why.iter().map(ToString::to_string).collect();
        if why.is_empty() {
            "no bandwidth".to_string()
        } else {
            why.join("; ")
        }
    })
}

/// `nnodes` copies of each side's machine, explained for float32 calls at `sizes`, compared.
pub fn upgrade(before: Side, after: Side, nnodes: u32, sizes: &[u64]) -> Result<Upgrade, UpgradeError> {
    let (from, to) = (TopoEnv::from_env(before.env)?.profile, TopoEnv::from_env(after.env)?.profile);
    let b = explain(before.topology, nnodes, sizes, before.env, false)?;
    let a = explain(after.topology, nnodes, sizes, after.env, false)?;
    let graphs = b
        .snapshot
        .graphs
        .iter()
        .zip(&a.snapshot.graphs)
        .map(|(gb, ga)| GraphChange { pattern: gb.pattern, before: gb.into(), after: ga.into() })
        .filter(|g| g.before != g.after)
        .collect();
    let channels = (b.snapshot.channels != a.snapshot.channels)
        .then(|| (b.snapshot.channels.clone(), a.snapshot.channels.clone()));
    let mut cells = Vec::new();
    for coll in Collective::TUNED {
        for &algo in Algorithm::NCCL {
            for &proto in Protocol::ALL {
                let (before_off, after_off) = (off(&b, coll, algo, proto), off(&a, coll, algo, proto));
                if before_off.is_some() != after_off.is_some() {
                    cells.push(CellChange { coll, algo, proto, before_off, after_off });
                }
            }
        }
    }
    Ok(Upgrade {
        from: from.version,
        to: to.version,
        from_rules: from.describe(),
        to_rules: to.describe(),
        graphs,
        channels,
        cells,
        rows: rows(&b, &a),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topo::settings::VERSION_VAR;
    use crate::topo::{self, TopoSource};

    fn side(preset: &str, version: &str) -> (Topology, Env) {
        let env = Env::from_pairs([(VERSION_VAR, version)]);
        let xml = topo::load(&TopoSource::Preset(preset.into())).unwrap();
        (topo::build(&xml, &TopoEnv::from_env(&env).unwrap()).unwrap(), env)
    }

    #[test]
    fn from_2_28_9_to_2_18_1_on_a_dgx_a100() {
        let ((tb, eb), (ta, ea)) = (side("dgx-a100", "2.28.9"), side("dgx-a100", "2.18.1"));
        let sizes = [8, 1536 << 10, 1 << 30];
        let u = upgrade(Side { topology: &tb, env: &eb }, Side { topology: &ta, env: &ea }, 2, &sizes).unwrap();
        assert_eq!((u.from.to_string(), u.to.to_string()), ("2.28.9".into(), "2.18.1".into()));
        assert!(u.to_rules.contains("tuning tables and rules of NCCL 2.18.1"), "{}", u.to_rules);
        // 2.18.1's NVLink figure (20 GB/s) and intra-node speeds (v2.18.1-1 src/graph/search.cc) are 2.28.9's:
        // the same graphs and channels; only the tuning moves.
        assert!(u.graphs.is_empty() && u.channels.is_none(), "{:?} {:?}", u.graphs, u.channels);
        // Every size of every tuned collective has a row on both sides, and some predicted time moves.
        assert_eq!(u.rows.len(), Collective::TUNED.len() * sizes.len());
        assert!(u.rows.iter().any(|r| r.speedup.is_some_and(|s| (s - 1.0).abs() > 1e-6)), "{:?}", u.rows);
        // 2.17.1: 22 GB/s NVLinks and speeds 44/30/22 inside a node (v2.17.1-1 src/graph/topo.h, search.cc):
        // one node's rings at 22.
        let (to, eo) = side("dgx-a100", "2.17.1");
        let old = upgrade(Side { topology: &tb, env: &eb }, Side { topology: &to, env: &eo }, 1, &sizes).unwrap();
        let ring = old.graphs.iter().find(|g| g.pattern == Pattern::Ring).unwrap();
        assert_eq!((ring.before.bw_intra, ring.after.bw_intra), (20.0, 22.0));
        // The same release on both sides changes nothing.
        let same = upgrade(Side { topology: &tb, env: &eb }, Side { topology: &tb, env: &eb }, 2, &sizes).unwrap();
        assert!(same.graphs.is_empty() && same.channels.is_none() && same.cells.is_empty());
        assert!(same.rows.iter().all(|r| r.speedup == Some(1.0)));
    }

    #[test]
    fn nvlinks_take_the_other_releases_figure() {
        // SM80: 20 GB/s per NVLink from v2.18.1-1, 22 before (src/graph/topo.h).
        let (t, env) = side("dgx-a100", "2.28.9");
        let (from, to) = (VersionProfile::default(), "2.17.1".parse::<VersionProfile>().unwrap());
        let old = with_release_nvlinks(&t, &from, &to, &TopoEnv::from_env(&env).unwrap()).unwrap();
        let (built, _) = side("dgx-a100", "2.17.1");
        let nvl = |t: &Topology| t.links.iter().filter(|l| l.kind == LinkType::NVL).map(|l| l.bw).collect::<Vec<_>>();
        assert_eq!(nvl(&old), nvl(&built));
        assert_ne!(nvl(&old), nvl(&t));
    }

    #[test]
    fn a_release_without_nvls_loses_its_cells() {
        // NVLS arrived in v2.17.1-1 (NCCL_NUM_ALGORITHMS 5): on one DGX H100 node 2.28.9 runs NVLS AllReduce,
        // 2.16.5 cannot.
        let ((tb, eb), (ta, ea)) = (side("dgx-h100", "2.28.9"), side("dgx-h100", "2.16.5"));
        let u = upgrade(Side { topology: &tb, env: &eb }, Side { topology: &ta, env: &ea }, 1, &[1 << 30]).unwrap();
        let nvls = u
            .cells
            .iter()
            .find(|c| (c.coll, c.algo, c.proto) == (Collective::AllReduce, Algorithm::Nvls, Protocol::Simple))
            .unwrap();
        assert_eq!(nvls.before_off, None);
        assert!(nvls.after_off.as_deref().unwrap().contains("arrived in 2.17.1"), "{nvls:?}");
        // 2.16.5's search starts Hopper at 66 GB/s (sm90SpeedArrayIntra, v2.16.5-1 src/graph/search.cc).
        assert!(!u.graphs.is_empty());
    }
}
