//! NCCL 2.28.9 `ncclTopoTuneModel` (`src/graph/tuning.cc`): from the graphs and the communicator's shape, the
//! latency (us) and bandwidth (GB/s, algorithm bandwidth) of every collective x algorithm x protocol
//! (`formulas`), which of them are enabled and why not (`enables`), the threads per block and the per-thread
//! work thresholds. NCCL keeps the tables as `float`; so does this, so printed values round as NCCL's do.

use super::constants::{CompCapIdx, TunerConstants};
use super::grammar::EnableMatrix;
use super::input::TuningInput;
use super::params::{TuningError, TuningParams};
use collscope_model::{Algorithm, Collective, Pattern, Protocol, TuningCell, TuningTable};
use std::fmt;

/// `[collective][algorithm][protocol]` in NCCL's orders (`Collective::TUNED`, `Algorithm::NCCL`, `Protocol::ALL`).
pub type CellTable<T> = [[[T; 3]; 7]; 5];

/// Why a cell of the table is 0 (never chosen).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Off {
    /// The algorithm does not implement this collective.
    NotServed,
    /// The release modelled does not have the algorithm: the release and the one that brought it.
    NotInRelease {
        release: &'static str,
        since: &'static str,
    },
    /// The algorithm runs only with Simple.
    SimpleOnly,
    /// PAT is off: the reason.
    Pat(&'static str),
    /// NVLS needs at least two NVLS channels; the search found this many.
    NvlsChannels(u32),
    /// The graph for this algorithm has no channels (the search did not run or found nothing).
    NoGraph(Pattern),
    /// AllGather/ReduceScatter over NVLS or CollNetDirect across nodes: the reason.
    CollnetAgRs(&'static str),
    /// LL128 is not enabled by default here: the rule that failed.
    Ll128(String),
    /// Excluded by `NCCL_ALGO`/`NCCL_PROTO`.
    Env {
        var: &'static str,
        value: String,
    },
    NvlsTreeOneNode,
    CollnetDisabled,
    NvlsNeedsCollnet,
    NoNvSwitch,
    SingleRank,
}

impl fmt::Display for Off {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Off::NotServed => write!(f, "the algorithm does not implement this collective"),
            Off::NotInRelease { release, since } => {
                write!(f, "NCCL {release} does not have this algorithm (it arrived in {since})")
            }
            Off::SimpleOnly => write!(f, "the algorithm runs only with the Simple protocol"),
            Off::Pat(why) => write!(f, "PAT disabled: {why}"),
            Off::NvlsChannels(n) => write!(f, "NVLS needs at least 2 NVLS channels, the search found {n}"),
            Off::NoGraph(p) => write!(f, "no channels for pattern {} ({p:?})", p.id()),
            Off::CollnetAgRs(why) => write!(f, "{why}"),
            Off::Ll128(why) => write!(f, "LL128 disabled: {why}"),
            Off::Env { var, value } => write!(f, "excluded by {var}={value}"),
            Off::NvlsTreeOneNode => write!(f, "NVLSTree is disabled on a single node"),
            Off::CollnetDisabled => write!(f, "CollNet is not enabled (no CollNet plugin or NCCL_COLLNET_ENABLE=0)"),
            Off::NvlsNeedsCollnet => write!(f, "NVLS across nodes needs CollNet"),
            Off::NoNvSwitch => write!(f, "CollNetDirect needs an NVSwitch"),
            Off::SingleRank => write!(f, "a single rank has nothing to communicate"),
        }
    }
}

/// The tuning model of one communicator.
#[derive(Debug, Clone)]
pub struct TuningModel {
    pub input: TuningInput,
    pub params: TuningParams,
    pub constants: &'static TunerConstants,
    pub latencies: CellTable<f32>,
    pub bandwidths: CellTable<f32>,
    /// Why each zero-bandwidth cell is zero (empty for cells that are on).
    pub off: Vec<Vec<Vec<Vec<Off>>>>,
    /// `maxThreads[algo][proto]`.
    pub max_threads: [[u32; 3]; 7],
    /// `threadThresholds[algo][proto]`, bytes per thread.
    pub thread_thresholds: [[i64; 3]; 7],
    /// The matrices as the user's `NCCL_PROTO`/`NCCL_ALGO` left them (NCCL prints these).
    pub proto_enable: EnableMatrix<3>,
    pub algo_enable: EnableMatrix<7>,
    /// `nvlsSupport` / `collnetEnable` after NCCL's graph checks.
    pub nvls_support: bool,
    pub collnet_enable: bool,
    /// INFO messages NCCL prints while tuning (invalid thread counts, the LL128 C2C note).
    pub notes: Vec<String>,
}

fn getn_threads(name: &str, env: i64, min: u32, max: u32, def: u32, warp: u32, notes: &mut Vec<String>) -> u32 {
    if env <= 0 {
        return def;
    }
    let nt = env;
    if nt % warp as i64 != 0 {
        notes.push(format!("Invalid {name} {nt} (must be a multiple of {warp})"));
        max
    } else if nt > max as i64 {
        notes.push(format!("Invalid {name} {nt} (maximum {max})."));
        max
    } else if nt < min as i64 {
        notes.push(format!("Invalid {name} {nt} (minimum {min})."));
        min
    } else {
        nt as u32
    }
}

impl TuningModel {
    pub fn new(
        input: TuningInput,
        params: TuningParams,
        constants: &'static TunerConstants,
    ) -> Result<TuningModel, TuningError> {
        if input.n_nodes == 0 || input.n_ranks < input.n_nodes {
            return Err(TuningError::Input(format!(
                "{} ranks on {} nodes: need at least one node and one rank per node",
                input.n_ranks, input.n_nodes
            )));
        }
        let t = constants.threads;
        let mut notes = Vec::new();
        let mut max_threads = [[0u32; 3]; 7];
        let (tree, ring) = (Algorithm::Tree.id(), Algorithm::Ring.id());
        let (ll, ll128, simple) = (Protocol::Ll.id(), Protocol::Ll128.id(), Protocol::Simple.id());
        let ring_total = input.graphs.ring.bw_intra as f32 * input.graphs.ring.n_channels as f32;
        let simple_default = if ring_total <= t.pci_bw as f32 { t.simple_pci_nthreads } else { t.simple_max_nthreads };
        let nthreads = |notes: &mut Vec<String>, max, def| {
            getn_threads("NCCL_NTHREADS", params.nthreads, 2 * t.warp_size, max, def, t.warp_size, notes)
        };
        max_threads[ring][simple] = nthreads(&mut notes, t.simple_max_nthreads, simple_default);
        max_threads[tree][simple] = nthreads(&mut notes, t.simple_max_nthreads, t.simple_max_nthreads);
        for a in [Algorithm::CollNetDirect, Algorithm::CollNetChain, Algorithm::Nvls, Algorithm::NvlsTree] {
            max_threads[a.id()][simple] = t.max_nthreads;
        }
        let ll_threads = nthreads(&mut notes, t.ll_max_nthreads, t.ll_max_nthreads);
        max_threads[ring][ll] = ll_threads;
        max_threads[tree][ll] = ll_threads;
        let ll128_threads = getn_threads(
            "NCCL_LL128_NTHREADS",
            params.ll128_nthreads,
            t.ll128_max_nthreads / 4,
            t.ll128_max_nthreads,
            t.ll128_max_nthreads,
            t.warp_size,
            &mut notes,
        );
        max_threads[ring][ll128] = ll128_threads;
        max_threads[tree][ll128] = ll128_threads;

        let nvls_support = input.nvls_support && input.graphs.nvls.n_channels > 0;
        let collnet_enable = input.collnet_enable && input.graphs.collnet_chain.n_channels > 0;
        let mut m = TuningModel {
            input,
            params,
            constants,
            latencies: [[[0.0; 3]; 7]; 5],
            bandwidths: [[[0.0; 3]; 7]; 5],
            off: vec![vec![vec![Vec::new(); 3]; 7]; 5],
            max_threads,
            thread_thresholds: [[0; 3]; 7],
            proto_enable: [[1, 2, 1]; 5],
            algo_enable: [[1; 7]; 5],
            nvls_support,
            collnet_enable,
            notes,
        };
        if m.input.n_ranks <= 1 {
            for cell in m.off.iter_mut().flatten().flatten() {
                cell.push(Off::SingleRank);
            }
            return Ok(m);
        }
        m.compute_table();
        m.apply_enables()?;
        m.set_thread_thresholds()?;
        Ok(m)
    }

    /// The generation column of the tables; a GPU newer than the release knows takes the newest column.
    pub fn comp_cap_idx(&self) -> CompCapIdx {
        CompCapIdx::of(self.input.min_comp_cap).min(self.constants.newest_comp_cap_idx)
    }

    pub fn latency(&self, coll: Collective, a: Algorithm, p: Protocol) -> f32 {
        Collective::TUNED.iter().position(|c| *c == coll).map_or(0.0, |ci| self.latencies[ci][a.id()][p.id()])
    }

    pub fn bandwidth(&self, coll: Collective, a: Algorithm, p: Protocol) -> f32 {
        Collective::TUNED.iter().position(|c| *c == coll).map_or(0.0, |ci| self.bandwidths[ci][a.id()][p.id()])
    }

    /// Why a cell is off (empty when it is on).
    pub fn off_reasons(&self, coll: Collective, a: Algorithm, p: Protocol) -> &[Off] {
        match Collective::TUNED.iter().position(|c| *c == coll) {
            Some(ci) => &self.off[ci][a.id()][p.id()],
            None => &[],
        }
    }

    /// The enabled cells (bandwidth > 0) in the shared model's layout.
    pub fn table(&self) -> TuningTable {
        let mut t = TuningTable::new();
        for (ci, &coll) in Collective::TUNED.iter().enumerate() {
            for &a in Algorithm::NCCL {
                for &p in Protocol::ALL {
                    let bw = self.bandwidths[ci][a.id()][p.id()];
                    if bw > 0.0 {
                        let lat = self.latencies[ci][a.id()][p.id()];
                        t.entry(coll)
                            .or_default()
                            .entry(a)
                            .or_default()
                            .insert(p, TuningCell { lat_us: tidy(lat as f64), bw_gbps: tidy(bw as f64) });
                    }
                }
            }
        }
        t
    }
}

/// f32 values widened for JSON without float noise (137.14285 not 137.14285278320312).
pub(crate) fn tidy(v: f64) -> f64 {
    (v * 1e5).round() / 1e5
}
