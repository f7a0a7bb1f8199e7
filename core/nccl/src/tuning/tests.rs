//! The worked numbers of issue 3 against hand-built graphs, checked against NCCL 2.28.9's formulas.
//!
//! Reference text 000 (sections 八.1 and 八.3) has slips where it disagrees with `src/graph/tuning.cc`; these
//! tests follow the source:
//! - it multiplies by the 24 duplicated channels, where `ncclTopoTuneModel` uses the graph's nChannels from
//!   the search (12 on a DGX A100): Ring/Simple is 12 x 20 x 8/14 = 137.1 GB/s, not 274.3;
//! - its Ring/LL latency uses the LL128 base (14.0) instead of 6.6: 6.6 + 14 x 0.6 = 15.0 us, not 22.4;
//! - its Tree/LL128 skips the 0.92 tree factor: min(240 x 0.92 x 7/9, 12 x 20) x 0.5 = 85.9, not from 240;
//! - its 2-node Ring/Simple (131.6 us) leaves out the per-step net overhead: AMD CPUs make every intra step
//!   max(3.4, 3 x 2.0) = 6.0 us, so 8.4 + 28 x 6.0 + 2 x 14 = 204.4 us;
//! - its H100 NVLS figure (408 GB/s) leaves out the `min(intraBw, interBw)` it states: a single-node NVLS graph
//!   has bwInter = bwIntra (60), so NVLS/Simple is 8 x 60 x 8/14 = 274.3 GB/s, and with Ring/LL at 15.0 us the
//!   LL/NVLS crossover is near 1 MB rather than its 260 KB;
//! - its 32-node analysis leaves out LL128, which sm90 enables across nodes up to PXN: Tree/LL128 wins up to
//!   ~128 MB, then Ring/LL128, then Ring/Simple for multi-GB messages.

use super::*;
use collscope_debug::env::Env;
use collscope_model::{Algorithm as A, Collective as C, PathType, Pattern, Protocol as P};
use proptest::prelude::*;

fn graph(pattern: Pattern, n: u32, bw: f64, intra: PathType, inter: PathType) -> AlgoGraph {
    AlgoGraph {
        pattern,
        n_channels: n,
        bw_intra: bw,
        bw_inter: bw,
        latency_inter: 0.0,
        type_intra: intra,
        type_inter: inter,
        same_channels: true,
    }
}

/// DGX A100: ring and balanced tree graphs of 12 channels at 20 GB/s over NVLink (`type NVL/PIX`).
fn dgx_a100(nodes: u32, vendor: CpuVendor) -> TuningInput {
    let inter = if nodes == 1 { PathType::PIX } else { PathType::PXB };
    let ring = graph(Pattern::Ring, 12, 20.0, PathType::NVL, inter);
    let tree = graph(Pattern::BalancedTree, 12, 20.0, PathType::NVL, inter);
    let mut i = TuningInput::new(TuningGraphs::ring_tree(ring, tree), nodes, 8, 80);
    i.cpu_vendor = vendor;
    i.nvs_count = 6;
    i
}

/// DGX H100 as reference text 000 assumes it: ring 16 x 24 GB/s, NVLS 8 channels at 60 GB/s (one node), or
/// rings and trees of 8 channels at 12 GB/s per NIC across nodes (tree pattern TREE).
fn dgx_h100(nodes: u32) -> TuningInput {
    let mut i = if nodes == 1 {
        let ring = graph(Pattern::Ring, 16, 24.0, PathType::NVL, PathType::PIX);
        let tree = graph(Pattern::BalancedTree, 16, 24.0, PathType::NVL, PathType::PIX);
        let mut g = TuningGraphs::ring_tree(ring, tree);
        g.nvls = graph(Pattern::Nvls, 8, 60.0, PathType::NVL, PathType::PIX);
        let mut i = TuningInput::new(g, 1, 8, 90);
        i.nvls_support = true;
        i.nvls_channels = 16;
        i
    } else {
        let ring = graph(Pattern::Ring, 8, 12.0, PathType::NVL, PathType::PXB);
        let tree = graph(Pattern::Tree, 8, 12.0, PathType::NVL, PathType::PXB);
        TuningInput::new(TuningGraphs::ring_tree(ring, tree), nodes, 8, 90)
    };
    i.nvs_count = 4;
    i
}

fn model(input: TuningInput) -> TuningModel {
    TuningModel::new(input, TuningParams::default(), &NCCL_2_28_9).unwrap()
}

fn model_env(input: TuningInput, env: &[(&str, &str)]) -> Result<TuningModel, TuningError> {
    let params = TuningParams::from_env(&Env::from_pairs(env.iter().copied()))?;
    TuningModel::new(input, params, &NCCL_2_28_9)
}

fn cell(m: &TuningModel, c: C, a: A, p: P) -> (String, String) {
    (format!("{:.1}", m.latency(c, a, p)), format!("{:.1}", m.bandwidth(c, a, p)))
}

#[test]
fn dgx_a100_one_node_allreduce_row() {
    let m = model(dgx_a100(1, CpuVendor::Intel));
    let row = [
        (A::Tree, P::Ll, "15.2", "29.1"),
        (A::Tree, P::Ll128, "31.5", "85.9"),
        (A::Tree, P::Simple, "64.4", "110.4"),
        (A::Ring, P::Ll, "15.0", "50.1"),
        (A::Ring, P::Ll128, "40.6", "126.2"),
        (A::Ring, P::Simple, "56.0", "137.1"),
    ];
    for (a, p, lat, bw) in row {
        assert_eq!(cell(&m, C::AllReduce, a, p), (lat.to_string(), bw.to_string()), "{a}/{p}");
    }
    assert_eq!(m.max_threads[A::Ring.id()], [512, 640, 512]);
    assert_eq!(m.thresholds_line(), "threadThresholds 8/8/64 | 64/8/64 | 512 | 512");
    // No NVLS graph, no CollNet: those cells are off with their reasons.
    assert!(m.off_reasons(C::AllReduce, A::Nvls, P::Simple).contains(&Off::NvlsChannels(0)));
    assert!(m.off_reasons(C::AllReduce, A::CollNetDirect, P::Simple).contains(&Off::CollnetDisabled));
    assert_eq!(m.off_reasons(C::Broadcast, A::Tree, P::Simple), [Off::NotServed]);
}

#[test]
fn dgx_a100_two_nodes_amd_latencies() {
    let m = model(dgx_a100(2, CpuVendor::Amd));
    // 8.4 + 28 x max(3.4, 3 x 2.0) + 2 x 14
    assert_eq!(cell(&m, C::AllReduce, A::Ring, P::Simple).0, "204.4");
    // 6.6 + 28 x max(0.6, 2.0) + 2 x 2.7
    assert_eq!(cell(&m, C::AllReduce, A::Ring, P::Ll).0, "68.0");
    // 8.4 + 2 x (7 x 4.0 + 1 x 14)
    assert_eq!(cell(&m, C::AllReduce, A::Tree, P::Simple).0, "92.4");
    // Two nodes still use bwIntra: 12 x 20 x 16/30; LL is capped by the AMD 2-node llMaxBw 22.5.
    assert_eq!(cell(&m, C::AllReduce, A::Ring, P::Simple).1, "128.0");
    assert_eq!(cell(&m, C::AllReduce, A::Ring, P::Ll).1, "12.0");
    // An Intel host pays 1 us per step (3 for Simple): 8.4 + 28 x 3.4 + 28.
    let intel = model(dgx_a100(2, CpuVendor::Intel));
    assert_eq!(cell(&intel, C::AllReduce, A::Ring, P::Simple).0, "131.6");
}

/// The Tree/Ring latency tables and rules of an older release (`src/graph/tuning.cc` at the tags named).
#[test]
fn latency_tables_and_rules_by_release() {
    let at = |v: &str, input: TuningInput| {
        let profile: crate::VersionProfile = v.parse().unwrap();
        TuningModel::new(input, TuningParams::default(), profile.tuner_constants()).unwrap()
    };
    let lat = |m: &TuningModel, a, p| cell(m, C::AllReduce, a, p).0;
    // One node, Ring/LL: 2.17.1 baseLat 3.6 + 14 x NVLink .47 = 10.2; 2.18.1 6.6 + 14 x .6 = 15.0.
    let one = |v| at(v, dgx_a100(1, CpuVendor::Intel));
    assert_eq!(
        [one("2.17.1"), one("2.18.1"), one("2.28.9")].map(|m| lat(&m, A::Ring, P::Ll)),
        ["10.2", "15.0", "15.0"]
    );
    // Tree/Simple: baseLat 0 and 28 us per NVLink hop up to 2.22 (2 x 7 x 28 = 392), 8.4 + 2 x 7 x 4 from 2.23.4.
    let tree = [one("2.16.5"), one("2.22.3"), one("2.23.4")].map(|m| lat(&m, A::Tree, P::Simple));
    assert_eq!(tree, ["392.0", "392.0", "64.4"]);
    // Two AMD nodes, Ring/LL: up to 2.17 intra x 1.8, no net overhead floor, 2 x nNodes inter steps:
    // 3.6 + 26 x (.47 x 1.8) + 4 x 2.7 = 36.4; 2.18.1: 6.6 + 26 x max(.6, 2.0) + 4 x 2.7 = 69.4;
    // 2.23.4 on: 2 x (nNodes - 1) inter steps, 6.6 + 28 x 2.0 + 2 x 2.7 = 68.0.
    let two = |v| lat(&at(v, dgx_a100(2, CpuVendor::Amd)), A::Ring, P::Ll);
    assert_eq!(["2.16.5", "2.18.1", "2.23.4"].map(two), ["36.4", "69.4", "68.0"]);
    // latencyInter 5 us, Ring/Simple on two Intel nodes: up to 2.17 it replaces the NET latency,
    // 8.4 + 26 x 3.4 + 4 x 5 = 116.8; from 2.18.1 it adds to it twice (the flush), 8.4 + 28 x 3.4 + 2 x (14 + 10).
    let with_device = |v| {
        let mut i = dgx_a100(2, CpuVendor::Intel);
        i.graphs.ring.latency_inter = 5.0;
        lat(&at(v, i), A::Ring, P::Simple)
    };
    assert_eq!(["2.17.1", "2.28.9"].map(with_device), ["116.8", "151.6"]);
    // One rank per node, Ring/LL over two nodes: Tree's NET latency from 2.23.4, 6.6 + 2 x 5.0 = 16.6; before,
    // Ring's 2.7 over 2 x nNodes = 4 inter steps of nsteps 2: 6.6 + (2 - 4) x max(.6, 1.0) + 4 x 2.7 = 15.4.
    let ppn1 = |v| {
        let ring = graph(Pattern::Ring, 2, 20.0, PathType::NVL, PathType::PXB);
        let tree = graph(Pattern::BalancedTree, 2, 20.0, PathType::NVL, PathType::PXB);
        lat(&at(v, TuningInput::new(TuningGraphs::ring_tree(ring, tree), 2, 1, 80)), A::Ring, P::Ll)
    };
    assert_eq!(["2.22.3", "2.23.4"].map(ppn1), ["15.4", "16.6"]);
    // Ring/LL128 below two ranks per node: 2 channels x 20 GB/s x 0.7 = 28.0 up to 2.22, x 0.92 = 36.8 from
    // 2.23.4 (nRanks/nsteps = 1).
    let ll128 = |v| {
        let ring = graph(Pattern::Ring, 2, 20.0, PathType::NVL, PathType::PXB);
        let tree = graph(Pattern::BalancedTree, 2, 20.0, PathType::NVL, PathType::PXB);
        let m = at(v, TuningInput::new(TuningGraphs::ring_tree(ring, tree), 2, 1, 80));
        cell(&m, C::AllReduce, A::Ring, P::Ll128).1
    };
    assert_eq!(["2.12.12", "2.22.3", "2.23.4"].map(ll128), ["28.0", "28.0", "36.8"]);
}

#[test]
fn ring_plateau_and_tree_correction_apply_per_call() {
    let m = model(dgx_a100(2, CpuVendor::Amd));
    let big = m.algo_time(C::AllReduce, A::Ring, P::Simple, 1 << 30, 1).unwrap();
    assert!((big.lat_us - 204.4 * 1.4).abs() < 0.01, "{big:?}");
    let small = m.algo_time(C::AllReduce, A::Ring, P::Simple, 1024, 1).unwrap();
    assert!((small.lat_us - 204.4).abs() < 0.01, "below 64 B per rank per channel: no plateau");
    let t = m.algo_time(C::AllReduce, A::Tree, P::Ll, 64 << 12, 1).unwrap();
    assert!((t.bw_gbps - m.bandwidth(C::AllReduce, A::Tree, P::Ll) as f64 * 0.4).abs() < 1e-3);
    // Tree pays its latency once per 10 aggregated ops, Ring once per op.
    assert_eq!(m.algo_time(C::AllReduce, A::Tree, P::Simple, 1 << 20, 11).unwrap().lat_count, 2);
    assert_eq!(m.algo_time(C::AllReduce, A::Ring, P::Simple, 1 << 20, 11).unwrap().lat_count, 11);
}

#[test]
fn dgx_h100_one_node_nvls_for_large_ll_for_small() {
    let m = model(dgx_h100(1));
    let nvls = m.bandwidth(C::AllReduce, A::Nvls, P::Simple);
    assert_eq!(format!("{:.1}/{nvls:.1}", m.latency(C::AllReduce, A::Nvls, P::Simple)), "25.0/274.3");
    let pick = |bytes| m.choose(&CallInfo::new(C::AllReduce, bytes)).unwrap();
    for bytes in [8u64, 4 << 10, 256 << 10] {
        let c = pick(bytes);
        assert_eq!((c.algo, c.proto), (A::Ring, P::Ll), "{bytes} B");
    }
    for bytes in [4u64 << 20, 256 << 20, 4 << 30] {
        let c = pick(bytes);
        assert_eq!((c.algo, c.proto), (A::Nvls, P::Simple), "{bytes} B");
        assert_eq!(c.n_channels, 16, "NVLS runs on the NVLS channels");
    }
    assert_eq!(pick(512 << 10).proto, P::Ll);
    assert_eq!(pick(2 << 20).algo, A::Nvls);
}

#[test]
fn dgx_h100_32_nodes_tree_up_to_hundreds_of_mb() {
    let m = model(dgx_h100(32));
    assert_eq!(cell(&m, C::AllReduce, A::Tree, P::Simple), ("204.4".into(), "37.5".into()));
    assert_eq!(cell(&m, C::AllReduce, A::Ring, P::Simple), ("2399.6".into(), "48.2".into()));
    let pick = |bytes| m.choose(&CallInfo::new(C::AllReduce, bytes)).unwrap();
    for (bytes, proto) in [(64u64 << 10, P::Ll), (25 << 20, P::Ll128), (128 << 20, P::Ll128)] {
        let c = pick(bytes);
        assert_eq!((c.algo, c.proto), (A::Tree, proto), "{bytes} B: {}", c.reason());
    }
    assert_eq!((pick(512 << 20).algo, pick(512 << 20).proto), (A::Ring, P::Ll128));
    assert_eq!((pick(4 << 30).algo, pick(4 << 30).proto), (A::Ring, P::Simple), "multi-GB messages: Ring/Simple");
    // Without LL128 (the text's assumption) Tree/Simple holds up to 256 MB.
    let no_ll128 = model_env(dgx_h100(32), &[("NCCL_PROTO", "^LL128")]).unwrap();
    let c = no_ll128.choose(&CallInfo::new(C::AllReduce, 256 << 20)).unwrap();
    assert_eq!((c.algo, c.proto), (A::Tree, P::Simple));
}

#[test]
fn pcie_machine_disables_ll128_with_the_reason() {
    let ring = graph(Pattern::Ring, 1, 12.0, PathType::PHB, PathType::PIX);
    let tree = graph(Pattern::BalancedTree, 1, 12.0, PathType::PHB, PathType::PIX);
    let m = model(TuningInput::new(TuningGraphs::ring_tree(ring, tree), 1, 8, 80));
    assert_eq!(m.bandwidth(C::AllReduce, A::Ring, P::Ll128), 0.0);
    let why = m.off_reasons(C::AllReduce, A::Ring, P::Ll128);
    assert_eq!(why.len(), 1);
    assert_eq!(
        why[0].to_string(),
        "LL128 disabled: intra-node path type PHB is beyond NVB (needs NVLink between GPUs)"
    );
    // PCI latencies and the 256-thread Simple default of a <= 12 GB/s ring.
    assert_eq!(cell(&m, C::AllReduce, A::Ring, P::Simple).0, "88.2");
    assert_eq!(m.max_threads[A::Ring.id()][P::Simple.id()], 256);
    // Forcing LL128 overrides the platform rule, as in NCCL (pEnable 1, not 2).
    let forced = model_env(m.input.clone(), &[("NCCL_PROTO", "LL128")]).unwrap();
    assert!(forced.bandwidth(C::AllReduce, A::Ring, P::Ll128) > 0.0);
}

#[test]
fn nvb_intra_paths_use_pci_latencies_and_hopper_c2c_allows_pxn() {
    let ring = graph(Pattern::Ring, 4, 24.0, PathType::NVB, PathType::PXN);
    let tree = graph(Pattern::BalancedTree, 4, 24.0, PathType::NVB, PathType::PXN);
    let mk = |cc| TuningInput::new(TuningGraphs::ring_tree(ring, tree), 2, 8, cc);
    let hopper = model(mk(90));
    assert!(hopper.bandwidth(C::AllReduce, A::Ring, P::Ll128) > 0.0, "sm90 + LL128_C2C allows PXN");
    let ampere = model(mk(80));
    assert!(ampere.off_reasons(C::AllReduce, A::Ring, P::Ll128)[0].to_string().contains("PXN is beyond PXB"));
    let one_node = model(TuningInput::new(TuningGraphs::ring_tree(ring, tree), 1, 8, 80));
    assert_eq!(cell(&one_node, C::AllReduce, A::Ring, P::Simple).0, "88.2", "NVB is not LINK_NVL: PCI row");
}

#[test]
fn forcing_with_env_and_the_no_algorithm_error() {
    let m = model_env(dgx_a100(1, CpuVendor::Intel), &[("NCCL_ALGO", "allreduce:tree")]).unwrap();
    assert_eq!(m.bandwidth(C::AllReduce, A::Ring, P::Simple), 0.0);
    assert!(m
        .off_reasons(C::AllReduce, A::Ring, P::Simple)
        .contains(&Off::Env { var: "NCCL_ALGO", value: "allreduce:tree".into() }));
    assert!(m.bandwidth(C::Broadcast, A::Ring, P::Simple) > 0.0);
    let c = m.choose(&CallInfo::new(C::AllReduce, 1 << 30)).unwrap();
    assert_eq!(c.algo, A::Tree);
    assert!(m.enabled_matrix().contains("AllReduce |        1         2         1   |             1              0"));

    let m = model_env(dgx_a100(1, CpuVendor::Intel), &[("NCCL_ALGO", "NVLS")]).unwrap();
    let e = m.choose(&CallInfo::new(C::AllReduce, 1 << 20)).unwrap_err().to_string();
    assert_eq!(
        e,
        "Error : no algorithm/protocol available for function AllReduce with datatype ncclFloat32. NCCL_ALGO was set to NVLS."
    );
    let e = model_env(dgx_a100(1, CpuVendor::Intel), &[("NCCL_PROTO", "Simple;allreduce:LL129")]).unwrap_err();
    assert!(e.to_string().contains("\"LL129\""), "{e}");
}

#[test]
fn channels_and_threads_shrink_for_small_messages() {
    let m = model(dgx_a100(1, CpuVendor::Intel));
    assert_eq!(m.input.coll_channels, 24);
    let c = m.choose(&CallInfo::new(C::AllReduce, 8)).unwrap();
    assert_eq!((c.algo, c.proto, c.n_channels), (A::Ring, P::Ll, 1));
    assert_eq!(c.n_threads, 96, "512 halves to 64, then the 3-warp minimum");
    let c = m.choose(&CallInfo::new(C::AllReduce, 1 << 30)).unwrap();
    assert_eq!((c.algo, c.proto, c.n_channels, c.n_threads), (A::Ring, P::Simple, 24, 544));
    // Ring LL threshold is 8 x nRanks = 64 B per thread: 24 channels x 512 threads x 64 = 768 KB.
    let c = m.choose(&CallInfo::new(C::AllReduce, 48 << 10)).unwrap();
    assert_eq!((c.proto, c.n_channels), (P::Ll, 1));
}

#[test]
fn table_prints_in_nccl_layout() {
    let m = model(dgx_a100(1, CpuVendor::Intel));
    let lines = m.table_lines();
    assert_eq!(lines.len(), 3 * (3 + 5));
    assert_eq!(
        lines[0],
        format!(
            "  Algorithm   |{:>15}   {:>14}   {:>14} |{:>15}   {:>14}   {:>14} |{:>15}   {:>14}   {:>14} |",
            "", "Tree", "", "", "Ring", "", "", "CollNetDirect", ""
        )
    );
    assert!(lines[1].starts_with("  Protocol    |             LL |          LL128 |         Simple |"));
    assert_eq!(lines[2], " Max NThreads |            512 |            640 |            512 |            512 |            640 |            512 |              0 |              0 |            640 |");
    let ar = &lines[7];
    assert!(ar.starts_with("    AllReduce |    15.2/  29.1 |    31.5/  85.9 |    64.4/ 110.4 |    15.0/  50.1 |    40.6/ 126.2 |    56.0/ 137.1 |"), "{ar}");
    assert_eq!(lines[16], format!("  Algorithm   |{:>15}   {:>14}   {:>14} |", "", "PAT", ""));
    assert_eq!(lines[17].matches('|').count(), 10, "the last block still prints nine protocol headers");
    assert_eq!(lines[18].matches('|').count(), 4);
}

#[test]
fn json_table_keeps_enabled_cells() {
    let m = model(dgx_a100(1, CpuVendor::Intel));
    let t = m.table();
    let ring = &t[&C::AllReduce][&A::Ring];
    assert_eq!(ring[&P::Simple].lat_us, 56.0);
    assert!((ring[&P::Simple].bw_gbps - 137.14286).abs() < 1e-4);
    assert!(!t[&C::AllReduce].contains_key(&A::Nvls));
    assert!(!t.contains_key(&C::Broadcast) || !t[&C::Broadcast].contains_key(&A::Tree));
}

#[test]
fn single_rank_runs_ring_simple_for_free() {
    let ring = graph(Pattern::Ring, 1, 20.0, PathType::LOC, PathType::PIX);
    let m = model(TuningInput::new(TuningGraphs::ring_tree(ring, ring), 1, 1, 80));
    let c = m.choose(&CallInfo::new(C::AllReduce, 1 << 20)).unwrap();
    assert_eq!((c.algo, c.proto, c.time.time_us), (A::Ring, P::Simple, 0.0));
    assert!(m.table().is_empty());
}

fn all_inputs() -> Vec<TuningInput> {
    vec![dgx_a100(1, CpuVendor::Intel), dgx_a100(2, CpuVendor::Amd), dgx_h100(1), dgx_h100(32)]
}

/// The time NCCL's `ncclTopoGetAlgoTime` gives, recomputed here from the printed table and the constants.
fn expected_time(m: &TuningModel, coll: C, a: A, p: P, bytes: u64, ops: u32) -> Option<f64> {
    let mut bw = m.bandwidth(coll, a, p) as f64;
    let mut lat = m.latency(coll, a, p) as f64;
    if bw == 0.0 {
        return None;
    }
    if a == A::Tree && coll == C::AllReduce && (64..64u64 << 23).contains(&bytes) {
        bw *= NCCL_2_28_9.tree_correction_factor[p.id()][(bytes / 64).ilog2() as usize];
    }
    let i = &m.input;
    if a == A::Ring
        && p == P::Simple
        && i.n_nodes > 1
        && coll == C::AllReduce
        && bytes / (i.coll_channels as u64 * i.n_ranks as u64) >= 64
    {
        lat *= 1.4;
    }
    let count = if a == A::Ring { ops } else { ops.div_ceil(10) };
    Some(lat * count as f64 + bytes as f64 / (1000.0 * bw))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn choice_is_the_table_minimum_unless_env_forces(
        which in 0usize..4,
        coll in 0usize..5,
        log_bytes in 0u32..33,
        frac in 0u64..1024,
        ops in 1u32..24,
        forced in proptest::option::of(prop_oneof![Just("Ring"), Just("Tree"), Just("^Ring"), Just("Simple"), Just("LL")]),
    ) {
        let input = all_inputs().swap_remove(which);
        let coll = C::TUNED[coll];
        let bytes = (1u64 << log_bytes) + (((1u64 << log_bytes) * frac) >> 10);
        let call = CallInfo { num_pipe_ops: ops, ..CallInfo::new(coll, bytes) };
        let free = model(input.clone());
        let best = free.choose(&call).unwrap();
        for &a in collscope_model::Algorithm::NCCL {
            for &p in collscope_model::Protocol::ALL {
                if let (Some(t), Cost::Time(_)) = (expected_time(&free, coll, a, p, bytes, ops), best.cost(a, p)) {
                    prop_assert!(best.time.time_us <= t * (1.0 + 1e-5) + 1e-3, "{a}/{p} {t} beats {:?}", best);
                }
            }
        }
        if let Some(value) = forced {
            let var = if value.contains("Ring") || value.contains("Tree") { "NCCL_ALGO" } else { "NCCL_PROTO" };
            let m = model_env(input, &[(var, value)]).unwrap();
            match m.choose(&call) {
                Ok(c) => {
                    prop_assert!(c.time.time_us >= best.time.time_us * (1.0 - 1e-6));
                    let allowed = match value {
                        "Ring" => c.algo == A::Ring,
                        "Tree" => c.algo == A::Tree,
                        "^Ring" => c.algo != A::Ring,
                        "Simple" => c.proto == P::Simple,
                        _ => c.proto == P::Ll,
                    };
                    prop_assert!(allowed, "{value} chose {}/{}", c.algo, c.proto);
                }
                Err(e) => prop_assert!(e.to_string().contains("no algorithm/protocol available"), "{e}"),
            }
        }
    }
}

/// Two H100 nodes with NVLS and CollNet graphs, worked by hand from `ncclTopoTuneModel`.
fn h100_collnet(heads: u32, collnet_ag: bool) -> TuningInput {
    let ring = graph(Pattern::Ring, 8, 20.0, PathType::NVL, PathType::PXB);
    let tree = graph(Pattern::Tree, 8, 20.0, PathType::NVL, PathType::PXB);
    let mut g = TuningGraphs::ring_tree(ring, tree);
    g.nvls = AlgoGraph { bw_inter: 20.0, ..graph(Pattern::Nvls, 4, 40.0, PathType::NVL, PathType::PXB) };
    g.collnet_chain = graph(Pattern::Tree, 4, 40.0, PathType::NVL, PathType::PXB);
    g.collnet_direct = graph(Pattern::CollnetDirect, 4, 40.0, PathType::NVL, PathType::PXB);
    let mut i = TuningInput::new(g, 2, 8, 90);
    i.nvls_support = true;
    i.nvls_channels = 16;
    i.collnet_enable = true;
    i.collnet_heads = heads;
    i.collnet_allgather = collnet_ag;
    i.nvs_count = 4;
    i
}

#[test]
fn nvls_tree_and_collnet_formulas() {
    let m = model(h100_collnet(4, false));
    // NVLSTree: min(40 x .85 x 3/4 x 2, 2 x 20, 57.7) = 40 per channel, x 4 x 16/30; 25 + 2 x 1 x 20.9.
    assert_eq!(cell(&m, C::AllReduce, A::NvlsTree, P::Simple), ("66.8".into(), "85.3".into()));
    // NVLS across nodes: min(51, 20) x 4 x 16/30; 25 + 18.
    assert_eq!(cell(&m, C::AllReduce, A::Nvls, P::Simple), ("43.0".into(), "42.7".into()));
    // CollNetChain: 4 x 40 x 0.5; 2 x 7 x 2.8 + 30.
    assert_eq!(cell(&m, C::AllReduce, A::CollNetChain, P::Simple), ("69.2".into(), "80.0".into()));
    // CollNetDirect: 160 / (2 - 0.5) x .85 x 0.5; 2 x (3.7 + 7 x 0.4) + 31.
    assert_eq!(cell(&m, C::AllReduce, A::CollNetDirect, P::Simple), ("44.0".into(), "45.3".into()));
    assert_eq!(m.bandwidth(C::AllReduce, A::CollNetDirect, P::Ll), 0.0);
    // AllGather over CollNetDirect needs the plugin's iallgather, then a head per local rank.
    let why = m.off_reasons(C::AllGather, A::CollNetDirect, P::Simple);
    assert!(why[0].to_string().contains("iallgather"), "{why:?}");
    let few_heads = model(h100_collnet(4, true));
    assert!(few_heads.off_reasons(C::AllGather, A::CollNetDirect, P::Simple)[0]
        .to_string()
        .contains("head per local rank"));
    let ok = model(h100_collnet(8, true));
    // 8 x min(40, 40 x 0.9), no algorithm-bandwidth conversion for AllGather off the ring.
    assert_eq!(cell(&ok, C::AllGather, A::CollNetDirect, P::Simple), ("44.0".into(), "288.0".into()));
    // Per call, NVLS runs on min(nvls, coll) channels across nodes.
    let c = ok.choose(&CallInfo::new(C::AllReduce, 1 << 30)).unwrap();
    assert_eq!(c.algo, A::NvlsTree, "{}", c.reason());
    assert_eq!(c.n_channels, 16);
}

#[test]
fn pat_serves_one_rank_per_node() {
    let ring = graph(Pattern::Ring, 2, 12.0, PathType::LOC, PathType::PXB);
    let tree = graph(Pattern::BalancedTree, 2, 12.0, PathType::LOC, PathType::PXB);
    let m = model(TuningInput::new(TuningGraphs::ring_tree(ring, tree), 4, 1, 80));
    // 2 x 12 x .75; 8 + 2 x 14/3.5 + 4 x 2.8 (ppn 1 uses the Tree network latency).
    assert_eq!(cell(&m, C::AllGather, A::Pat, P::Simple), ("27.2".into(), "18.0".into()));
    let eight = model(TuningInput::new(TuningGraphs::ring_tree(ring, tree), 4, 8, 80));
    assert_eq!(eight.off_reasons(C::AllGather, A::Pat, P::Simple), [Off::Pat("PAT supports only one rank per node")]);
    let off = model_env(m.input.clone(), &[("NCCL_PAT_ENABLE", "0")]).unwrap();
    assert_eq!(off.off_reasons(C::ReduceScatter, A::Pat, P::Simple), [Off::Pat("NCCL_PAT_ENABLE=0")]);
}

#[test]
fn thread_counts_and_thresholds_follow_env() {
    let m = model_env(
        dgx_a100(1, CpuVendor::Intel),
        &[("NCCL_NTHREADS", "100"), ("NCCL_LL128_NTHREADS", "64"), ("NCCL_THREAD_THRESHOLDS", "1 2 3 4")],
    )
    .unwrap();
    assert_eq!(m.max_threads[A::Ring.id()], [512, 160, 512]);
    assert!(m.notes.contains(&"Invalid NCCL_NTHREADS 100 (must be a multiple of 32)".to_string()));
    assert!(m.notes.contains(&"Invalid NCCL_LL128_NTHREADS 64 (minimum 160).".to_string()));
    assert_eq!(m.thresholds_line(), "threadThresholds 1/2/3 | 4/8/64 | 512 | 512");
}

#[test]
fn enabled_matrix_layout() {
    // "^LL" rewrites the whole row to 1 before clearing LL: LL128 becomes explicitly on (1, not the default 2),
    // which skips the platform's LL128 rules, as in NCCL.
    let m = model_env(dgx_a100(1, CpuVendor::Intel), &[("NCCL_PROTO", "^LL")]).unwrap();
    let s = m.enabled_matrix();
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines[0], "Enabled NCCL Func/Proto/Algo Matrix:");
    assert_eq!(
        lines[1],
        "     Function |       LL     LL128    Simple   |          Tree           Ring  CollNetDirect   CollNetChain           NVLS       NVLSTree            PAT  "
    );
    assert_eq!(
        lines[2],
        "    Broadcast |        0         1         1   |             1              1              1              1              1              1              1  "
    );
}

/// Real logs print `threadThresholds` with Ring/LL = 8 x nRanks: 4, 8 and 64 ranks (only nRanks matters here).
#[test]
fn thresholds_match_real_logs() {
    let Some(dir) = collscope_testkit::fixtures("threadThresholds against real logs") else { return };
    for (file, nodes, per_node) in
        [("043_nccl-1609.log", 1, 4), ("x10_nccl-tests-252.log", 2, 4), ("x02_nccl-1814.log", 8, 8)]
    {
        let text = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let logged =
            text.lines().find_map(|l| l.split("NCCL INFO ").nth(1).filter(|m| m.starts_with("threadThresholds")));
        let ring = graph(Pattern::Ring, 8, 20.0, PathType::NVL, PathType::PXB);
        let m = model(TuningInput::new(TuningGraphs::ring_tree(ring, ring), nodes, per_node, 90));
        assert_eq!(Some(m.thresholds_line().as_str()), logged, "{file}");
    }
}
