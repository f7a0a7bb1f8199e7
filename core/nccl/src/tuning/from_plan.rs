//! The tuning model's input from what init computed: the graphs and channel counts of `graph::plan` and the
//! machine of the topology (NCCL 2.28.9 `initTransportsRank` hands the same values to `ncclTopoTuneModel`).

use super::input::{AlgoGraph, CpuArch, CpuVendor, TuningGraphs, TuningInput};
use crate::graph::Plan;
use collscope_model::{NodeType, Topology};

/// The CPU architecture and vendor NCCL keeps for the communicator: mixed when the CPUs differ.
fn cpu_of(topo: &Topology) -> (CpuArch, CpuVendor) {
    let cpus: Vec<_> = topo.nodes_of(NodeType::CPU).filter_map(|(_, n)| n.cpu.as_ref()).collect();
    let arch = cpus.first().map_or(CpuArch::X86, |c| CpuArch::from_name(&c.arch));
    let vendor = cpus.first().map_or(CpuVendor::Other, |c| CpuVendor::from_name(&c.vendor));
    let arch = if cpus.iter().all(|c| CpuArch::from_name(&c.arch) == arch) { arch } else { CpuArch::Mixed };
    let vendor = if cpus.iter().all(|c| CpuVendor::from_name(&c.vendor) == vendor) { vendor } else { CpuVendor::Mixed };
    (arch, vendor)
}

/// A communicator of `nnodes` copies of `topo`, one rank per GPU, after `plan`.
pub fn input_from_plan(plan: &Plan, topo: &Topology, nnodes: u32) -> TuningInput {
    let sms: Vec<u32> = topo.nodes_of(NodeType::GPU).filter_map(|(_, n)| n.gpu.as_ref().map(|g| g.sm)).collect();
    let ranks_per_node = sms.len().max(1) as u32;
    // The plan's ring and tree are already aligned (shared, smaller channel count), as init.cc tunes them.
    let mut graphs = TuningGraphs::ring_tree(AlgoGraph::from(&plan.ring), AlgoGraph::from(&plan.tree));
    for (found, graph) in [
        (&plan.collnet_direct, &mut graphs.collnet_direct),
        (&plan.collnet_chain, &mut graphs.collnet_chain),
        (&plan.nvls, &mut graphs.nvls),
    ] {
        if let Some(f) = found {
            *graph = AlgoGraph::from(f);
        }
    }
    let min_cc = sms.iter().copied().min().unwrap_or(0);
    let mut input = TuningInput::new(graphs, nnodes, ranks_per_node, min_cc);
    input.max_comp_cap = sms.iter().copied().max().unwrap_or(0);
    (input.cpu_arch, input.cpu_vendor) = cpu_of(topo);
    let counts = &plan.connected.counts;
    input.coll_channels = counts.coll.unwrap_or(input.coll_channels);
    input.nvls_support = plan.nvls.is_some();
    input.nvls_channels = counts.nvls.unwrap_or(0);
    input.collnet_enable = plan.collnet_chain.is_some();
    input.collnet_heads = plan.collnet_direct.as_ref().map_or(0, |f| f.graph.n_channels);
    input.nvs_count = topo.nodes_of(NodeType::NVS).count() as u32;
    input
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topo::{self, TopoEnv, TopoSource};
    use crate::tuning::input::CpuVendor;
    use collscope_debug::env::Env;

    fn preset(name: &str) -> Topology {
        let xml = topo::load(&TopoSource::Preset(name.into())).unwrap();
        topo::build(&xml, &TopoEnv::default()).unwrap()
    }

    #[test]
    fn dgx_a100_two_nodes_input() {
        let t = preset("dgx-a100");
        let plan = crate::graph::plan(&t, 2, &Env::default()).unwrap();
        let i = input_from_plan(&plan, &t, 2);
        assert_eq!((i.n_ranks, i.n_nodes, i.local_ranks), (16, 2, 8));
        assert_eq!((i.min_comp_cap, i.max_comp_cap), (80, 80));
        assert_eq!(i.cpu_vendor, CpuVendor::Amd);
        assert_eq!(i.graphs.ring.n_channels, i.graphs.tree.n_channels);
        assert_eq!(Some(i.coll_channels), plan.connected.counts.coll);
        assert!(!i.nvls_support && i.nvs_count > 0);
    }

    #[test]
    fn dgx_h100_has_nvls() {
        let t = preset("dgx-h100");
        let plan = crate::graph::plan(&t, 1, &Env::default()).unwrap();
        let i = input_from_plan(&plan, &t, 1);
        assert!(i.nvls_support);
        assert_eq!(i.nvls_channels, 16);
        assert!(i.graphs.nvls.n_channels >= 2);
    }
}
