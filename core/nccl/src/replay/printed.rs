//! The model given what a log printed of NCCL's search: the printed graphs (`Pattern ...` lines) put in place
//! of the model's own search results, then NCCL 2.28.9's connect (`src/graph/connect.cc`) and tuning
//! (`src/graph/tuning.cc`) run on them, with the printed channel counts where the log has them. What the log
//! printed after the search is then compared with what NCCL computes from the search it printed, so a
//! difference in the search does not show again as differences in every tuning cell and decision.

use super::compare::pattern_name;
use crate::explain::{ExplainError, Explained};
use crate::graph::{self, connect, Graphs};
use crate::topo::TopoEnv;
use crate::tuning::from_plan::input_from_plan;
use crate::tuning::{TuningModel, TuningParams};
use collscope_debug::env::Env;
use collscope_model::{Graph, GraphChannel, Snapshot, Topology};

/// The model's replay on the log's graphs.
pub struct Given {
    /// `explain`'s result with connect, tuning and the model re-run on the printed graphs (its graphs stay the
    /// search's, so graphs are still compared with what the model searched).
    pub explained: Explained,
    /// What was taken from the log, for the notes.
    pub notes: Vec<String>,
}

/// A printed channel NCCL's connect can run on: every local rank once (a log may name GPUs by PCI id, read as
/// -1, or hold part of a node).
fn usable(c: &GraphChannel, k: usize) -> bool {
    let mut seen = vec![false; k];
    c.intra.len() == k
        && c.intra.iter().all(|&r| {
            usize::try_from(r).ok().filter(|&r| r < k).is_some_and(|r| !std::mem::replace(&mut seen[r], true))
        })
}

/// `model` with the printed graph's figures; its channel orders where they are usable, else the model's,
/// repeated to the printed count (connect reads an order per channel; only the counts are compared).
fn put(model: &mut Graph, printed: &Graph, k: usize) {
    let channels =
        if printed.channels.len() >= printed.n_channels as usize && printed.channels.iter().all(|c| usable(c, k)) {
            printed.channels.clone()
        } else if model.channels.is_empty() {
            Vec::new()
        } else {
            (0..printed.n_channels as usize).map(|i| model.channels[i % model.channels.len()].clone()).collect()
        };
    *model = Graph { channels, host: model.host.clone(), ..printed.clone() };
}

/// Re-runs connect and tuning on the graphs `log` printed (the first of each pattern, from `host` when given),
/// in place of those `ex` searched on `topology`. None when the log printed neither graphs nor channel counts.
pub fn given_graphs(
    ex: &Explained,
    log: &Snapshot,
    host: Option<&str>,
    topology: &Topology,
    env: &Env,
) -> Result<Option<Given>, ExplainError> {
    let printed: Vec<&Graph> =
        log.graphs.iter().filter(|g| host.is_none() || g.host.as_deref() == host || g.host.is_none()).collect();
    let counts = &log.channels;
    if printed.is_empty() && counts.coll.is_none() && counts.nvls.is_none() {
        return Ok(None);
    }
    let nnodes = ex.model.input.n_nodes;
    let mut plan = graph::plan(topology, nnodes, env)?;
    let k = plan.shape.ranks_per_node as usize;
    let mut notes = Vec::new();
    let mut taken = Vec::new();
    for found in [Some(&mut plan.ring), Some(&mut plan.tree), plan.nvls.as_mut(), plan.collnet_direct.as_mut()]
        .into_iter()
        .flatten()
    {
        if let Some(p) = printed.iter().find(|g| g.pattern == found.graph.pattern) {
            put(&mut found.graph, p, k);
            taken.push(found.graph.pattern);
        }
    }
    // init.cc (2.28.9) gives ring and tree the smaller channel count of the two after the ranks' AllGather.
    let n = plan.ring.graph.n_channels.min(plan.tree.graph.n_channels);
    for g in [&mut plan.ring.graph, &mut plan.tree.graph] {
        g.n_channels = n;
        g.channels.truncate(n as usize);
    }
    if !taken.is_empty() {
        let graphs = Graphs {
            ring: plan.ring.graph.clone(),
            tree: plan.tree.graph.clone(),
            nvls: plan.nvls.as_ref().map(|f| f.graph.clone()),
            collnet_direct: plan.collnet_direct.as_ref().map(|f| f.graph.clone()),
            collnet_chain: plan
                .collnet_chain
                .as_ref()
                .filter(|_| plan.connected.counts.collnet.is_some_and(|c| c > 0))
                .map(|f| f.graph.clone()),
        };
        plan.connected = connect(&graphs, &plan.shape, env)?;
        let names: Vec<&str> = taken.iter().map(|&p| pattern_name(p)).collect();
        notes.push(format!(
            "replay: connect, tuning and decisions computed from the log's own {} graph(s) (NCCL's search as \
             printed), so they are compared apart from the search",
            names.join(", ")
        ));
    }
    let mut input = input_from_plan(&plan, topology, nnodes);
    let mut used = Vec::new();
    if let Some(c) = counts.coll {
        input.coll_channels = c;
        used.push(format!("{c} coll"));
    }
    if let Some(c) = counts.nvls.filter(|_| input.nvls_support) {
        input.nvls_channels = c;
        used.push(format!("{c} nvls"));
    }
    if !used.is_empty() {
        notes.push(format!("replay: the tuning runs on the log's {} channels", used.join(", ")));
    }
    let profile = TopoEnv::from_env(env).map_err(graph::GraphError::from)?.profile;
    let model = TuningModel::new(input, TuningParams::from_env(env)?, profile.tuner_constants())?;
    let mut snapshot = ex.snapshot.clone();
    snapshot.channels = plan.connected.counts.clone();
    snapshot.tuning = model.table();
    let explained = Explained { snapshot, extras: ex.extras.clone(), model, choices: Vec::new() };
    Ok(Some(Given { explained, notes }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::testing::preset;

    #[test]
    fn the_printed_graphs_drive_connect_and_tuning() {
        let t = preset("dgx-a100");
        let env = Env::default();
        let ex = crate::explain(&t, 2, &[1 << 20], &env, false).unwrap();
        // The log's own search, as printed: the model's, so the replay changes nothing.
        let same = given_graphs(&ex, &ex.snapshot, None, &t, &env).unwrap().unwrap();
        assert_eq!(same.explained.snapshot.channels, ex.snapshot.channels);
        assert_eq!(same.explained.snapshot.tuning, ex.snapshot.tuning);
        // A search that found 4 ring channels at lower bandwidth, printed with PCI ids (ranks unknown).
        let mut log = ex.snapshot.clone();
        log.channels = Default::default();
        for g in log.graphs.iter_mut() {
            g.n_channels = 4;
            g.bw_intra /= 2.0;
            for c in g.channels.iter_mut() {
                c.intra.iter_mut().for_each(|r| *r = -1);
            }
        }
        let given = given_graphs(&ex, &log, None, &t, &env).unwrap().unwrap();
        assert_eq!(given.explained.snapshot.channels.coll, Some(8), "4 channels, doubled by connect");
        assert_eq!(given.explained.model.input.graphs.ring.n_channels, 4);
        assert_ne!(given.explained.snapshot.tuning, ex.snapshot.tuning);
        assert!(given.notes.iter().any(|n| n.contains("log's own Ring")), "{:?}", given.notes);
        // Nothing printed after the search: nothing to replay.
        let mut bare = log.clone();
        bare.graphs.clear();
        assert!(given_graphs(&ex, &bare, None, &t, &env).unwrap().is_none());
    }
}
