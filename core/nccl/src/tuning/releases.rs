//! The per-release tuning rules on the shipped machines, each test citing the NVIDIA/nccl tag it follows.

use crate::explain::{explain, Explained};
use crate::topo::settings::VERSION_VAR;
use crate::topo::{self, TopoEnv};
use collscope_debug::env::Env;
use collscope_model::{Algorithm, Collective, Protocol};

/// `xml` built and explained with NCCL `version`'s constants and rules on `nodes` nodes.
fn explained(xml: &str, version: &str, nodes: u32, sizes: &[u64]) -> Explained {
    let env = Env::from_pairs([(VERSION_VAR, version)]);
    let xml = topo::xml::parse(xml, "test").unwrap();
    let t = topo::build(&xml, &TopoEnv::from_env(&env).unwrap()).unwrap();
    explain(&t, nodes, sizes, &env, false).unwrap()
}

fn preset(name: &str) -> &'static str {
    topo::presets::text(name).unwrap()
}

fn pick(e: &Explained, coll: Collective, bytes: u64) -> (Algorithm, Protocol) {
    let c = e.choices.iter().find(|c| c.coll == coll && c.bytes == bytes).unwrap();
    (c.algo, c.proto)
}

fn off(e: &Explained, coll: Collective, a: Algorithm, p: Protocol) -> Vec<String> {
    e.model.off_reasons(coll, a, p).iter().map(ToString::to_string).collect()
}

#[test]
fn ring_ll_takes_a_quarter_of_the_bus_up_to_2_20() {
    // v2.19.4-1 src/graph/tuning.cc: Ring/LL busBw * 1/4 for AllReduce (a third for AllGather on one node),
    // capped by llMaxBw 87.7; v2.21.5-1: busBw * .5.
    let size = 1536 << 10;
    let old = explained(preset("dgx-a100"), "2.19.4", 1, &[size]);
    let new = explained(preset("dgx-a100"), "2.21.5", 1, &[size]);
    let ring = &old.snapshot.graphs[0];
    let bus = ring.n_channels as f64 * ring.bw_intra;
    let ll = |e: &Explained, coll| e.model.bandwidth(coll, Algorithm::Ring, Protocol::Ll) as f64;
    // AllReduce: 2*(n-1) steps for n ranks, so the algorithm bandwidth is the bus's * 8/14.
    let ratio = 8.0 / 14.0;
    assert!((ll(&old, Collective::AllReduce) - (bus / 4.0).min(87.7) * ratio).abs() < 1e-3);
    assert!((ll(&new, Collective::AllReduce) - (bus / 2.0).min(87.7) * ratio).abs() < 1e-3);
    assert!((ll(&old, Collective::AllGather) - (bus / 3.0).min(87.7) * 8.0 / 7.0).abs() < 1e-3);
    // What NCCL 2.19.4 picks for a 1.5 MB AllReduce on a DGX A100: Ring/LL128 (issue 51).
    assert_eq!(pick(&old, Collective::AllReduce, size), (Algorithm::Ring, Protocol::Ll128));
    assert_eq!(pick(&new, Collective::AllReduce, size), (Algorithm::Ring, Protocol::Ll));
}

#[test]
fn hopper_ll_cap_is_amperes_up_to_2_20() {
    // v2.20.5-1 src/graph/tuning.cc: llMaxBws Hopper-N1 87.7 and Ring/LL a quarter of the bus; v2.21.5-1:
    // 141 and half.
    let old = explained(preset("dgx-h100"), "2.20.5", 1, &[1 << 20]);
    let new = explained(preset("dgx-h100"), "2.21.5", 1, &[1 << 20]);
    let bus = |e: &Explained| e.snapshot.graphs[0].n_channels as f64 * e.snapshot.graphs[0].bw_intra;
    let ring_ll = |e: &Explained| e.model.bandwidth(Collective::AllReduce, Algorithm::Ring, Protocol::Ll) as f64;
    let ratio = 8.0 / 14.0;
    assert!((ring_ll(&old) - (bus(&old) / 4.0).min(87.7) * ratio).abs() < 1e-3, "{}", ring_ll(&old));
    assert!((ring_ll(&new) - (bus(&new) / 2.0).min(141.0) * ratio).abs() < 1e-3, "{}", ring_ll(&new));
    assert!(bus(&new) / 2.0 > 87.7, "the cap binds: {}", bus(&new));
}

#[test]
fn algorithms_are_offered_from_the_release_that_brought_them() {
    // NCCL_NUM_ALGORITHMS (src/include/devcomm.h, nccl_common.h): 4 at v2.16.5-1, NVLS at v2.17.1-1, NVLSTree
    // at v2.18.1-1, PAT at v2.23.4-1.
    let absent = |e: &Explained, a| {
        off(e, Collective::AllReduce, a, Protocol::Simple).iter().any(|w| w.contains("does not have this algorithm"))
    };
    let h100 = |v| explained(preset("dgx-h100"), v, 2, &[1 << 20]);
    let (v2165, v2171, v2181) = (h100("2.16.5"), h100("2.17.1"), h100("2.18.1"));
    assert!(absent(&v2165, Algorithm::Nvls) && !absent(&v2171, Algorithm::Nvls));
    assert!(absent(&v2171, Algorithm::NvlsTree) && !absent(&v2181, Algorithm::NvlsTree));
    let why = off(&v2165, Collective::AllReduce, Algorithm::Nvls, Protocol::Simple);
    assert_eq!(why, ["NCCL 2.15-2.16 does not have this algorithm (it arrived in 2.17.1)"]);
    let pat = |v| off(&h100(v), Collective::AllGather, Algorithm::Pat, Protocol::Simple);
    assert!(pat("2.22.3")[0].contains("arrived in 2.23.4"), "{:?}", pat("2.22.3"));
    assert!(!pat("2.23.4").iter().any(|w| w.contains("arrived")), "{:?}", pat("2.23.4"));
    // Nothing the release lacks is ever chosen.
    for c in &v2165.choices {
        assert!(!matches!(c.algo, Algorithm::Nvls | Algorithm::NvlsTree | Algorithm::Pat), "{c:?}");
    }
}

#[test]
fn ll128_runs_only_on_the_generations_a_release_lists() {
    // v2.26.6-1 src/graph/tuning.cc: `switch (minCompCap)` enables LL128 on 70, 80, 90, 100 only, so an SM86
    // machine with NVLink gets none; v2.27.3-1 keeps only `minCompCap < 70`.
    let sm86 = preset("dgx-a100").replace("sm=\"80\"", "sm=\"86\"");
    let old = explained(&sm86, "2.26.6", 1, &[1 << 20]);
    let new = explained(&sm86, "2.27.3", 1, &[1 << 20]);
    let cell = |e: &Explained| e.model.bandwidth(Collective::AllReduce, Algorithm::Ring, Protocol::Ll128);
    assert_eq!(cell(&old), 0.0);
    assert!(cell(&new) > 0.0);
    let why = off(&old, Collective::AllReduce, Algorithm::Ring, Protocol::Ll128);
    assert_eq!(
        why,
        ["LL128 disabled: NCCL 2.25-2.26 enables LL128 by default only on SM70, SM80, SM90, SM100, not SM86"]
    );
    // SM80 keeps it at 2.26.6; 2.14 had no SM90 (v2.14.3-1), 2.15 did (v2.15.1-1).
    assert!(
        explained(preset("dgx-a100"), "2.26.6", 1, &[1 << 20]).model.bandwidth(
            Collective::AllReduce,
            Algorithm::Ring,
            Protocol::Ll128
        ) > 0.0
    );
    let h100_ll128 = |v| {
        explained(preset("dgx-h100"), v, 1, &[1 << 20]).model.bandwidth(
            Collective::AllReduce,
            Algorithm::Ring,
            Protocol::Ll128,
        )
    };
    assert_eq!(h100_ll128("2.14.3"), 0.0);
    assert!(h100_ll128("2.15.1") > 0.0);
}

#[test]
fn nvls_tree_network_latency_follows_the_release() {
    // hwLat[NET][NVLSTree][Simple]: 19 us at v2.18.1-1, 14 us from v2.19.1-1 to v2.28.7-1, 20.9 at v2.28.9-1.
    // NVLSTree's latency on 2 nodes is hwLat[NVLINK] + 2 * log2(2) * hwLat[NET] (no device latency here).
    let lat = |v| {
        let e = explained(preset("dgx-h100"), v, 2, &[1 << 20]);
        (e.model.latency(Collective::AllReduce, Algorithm::NvlsTree, Protocol::Simple) as f64, e)
    };
    let (l2287, e2287) = lat("2.28.7");
    let (l2289, _) = lat("2.28.9");
    let (l2283, _) = lat("2.28.3");
    assert!((l2289 - l2287 - 2.0 * (20.9 - 14.0)).abs() < 1e-3, "{l2287} {l2289}");
    assert_eq!(l2283, l2287);
    assert!(e2287.model.constants.version.starts_with("2.28.3"));
    let (l2181, _) = lat("2.18.1");
    let (l2191, _) = lat("2.19.1");
    // 2.18.1: no NVLink term (0) and 19 us; 2.19.1: 23 us over NVLink and 14 us.
    assert!((l2181 - 2.0 * 19.0).abs() < 1e-3, "{l2181}");
    assert!((l2191 - (23.0 + 2.0 * 14.0)).abs() < 1e-3, "{l2191}");
}

#[test]
fn nvls_bandwidth_follows_the_release() {
    // v2.26.6-1 src/graph/tuning.cc: NVLS min(bwIntra, bwInter) * nChannels * 5/6; v2.28.3-1: bwIntra *
    // nvlsEfficiency (0.85 on Hopper) * (nCh-1)/nCh, doubled for AllReduce, * nRanks/nsteps.
    let old = explained(preset("dgx-h100"), "2.26.6", 1, &[1 << 20]);
    let new = explained(preset("dgx-h100"), "2.28.9", 1, &[1 << 20]);
    let g = |e: &Explained| {
        e.snapshot.graphs.iter().find(|g| g.pattern == collscope_model::Pattern::Nvls).cloned().unwrap()
    };
    let nvls = |e: &Explained| e.model.bandwidth(Collective::AllReduce, Algorithm::Nvls, Protocol::Simple) as f64;
    let (go, gn) = (g(&old), g(&new));
    let expect_old = go.n_channels as f64 * go.bw_intra.min(go.bw_inter) * 5.0 / 6.0;
    assert!((nvls(&old) - expect_old).abs() < 1e-2, "{} {expect_old}", nvls(&old));
    let n = gn.n_channels as f64;
    let expect_new = n * (gn.bw_intra * 0.85 * (n - 1.0) / n * 2.0).min(gn.bw_inter) * 8.0 / 14.0;
    assert!((nvls(&new) - expect_new).abs() < 1e-2, "{} {expect_new}", nvls(&new));
}
