//! Which cells NCCL 2.28.9 turns off after computing them (`ncclTopoTuneModel`, `src/graph/tuning.cc`): the
//! user's `NCCL_ALGO`/`NCCL_PROTO`, the hardware rules (NVLSTree on one node, CollNet, NVSwitch), LL128's default
//! conditions; and the per-thread work thresholds with `NCCL_THREAD_THRESHOLDS`.

use super::constants::Ll128MixedCompCap;
use super::grammar::{parse_algo, parse_proto};
use super::model::{Off, TuningModel};
use super::params::TuningError;
use collscope_model::{Algorithm, Collective, PathType, Protocol};

impl TuningModel {
    /// The LL128 default rules; `None` when LL128 may run.
    fn ll128_off(&self, coll: Collective, a: Algorithm) -> Option<String> {
        let inp = &self.input;
        let g = inp.graphs.for_algo(a);
        let (min_cc, max_cc) = (inp.min_comp_cap, inp.max_comp_cap);
        let inter_limit = if self.params.ll128_c2c && min_cc >= 90 { PathType::PXN } else { PathType::PXB };
        if g.type_inter > inter_limit {
            return Some(format!("inter-node path type {} is beyond {inter_limit}", g.type_inter));
        }
        if g.type_intra > PathType::NVB {
            return Some(format!("intra-node path type {} is beyond NVB (needs NVLink between GPUs)", g.type_intra));
        }
        let mixed_ok = match self.constants.ll128_mixed_comp_cap {
            Ll128MixedCompCap::Never => min_cc == max_cc,
            Ll128MixedCompCap::From(cc) => min_cc == max_cc || min_cc >= cc,
        };
        if !mixed_ok {
            return Some(format!("mixed compute capabilities {min_cc} and {max_cc}"));
        }
        if min_cc < 70 {
            return Some(format!("compute capability {min_cc} is below 70"));
        }
        // Up to 2.26 a list of generations (`switch (minCompCap)`, v2.26.6-1 src/graph/tuning.cc): SM86 and
        // SM89 get no LL128.
        if !self.constants.ll128_comp_caps.allows(min_cc) {
            return Some(format!(
                "NCCL {} enables LL128 by default only on {}, not SM{min_cc}",
                self.constants.version, self.constants.ll128_comp_caps
            ));
        }
        if min_cc == 90
            && inp.cudart_version == 11080
            && coll == Collective::AllReduce
            && a == Algorithm::Ring
            && inp.n_ranks == 2
        {
            return Some("sm90 with CUDA 11.8 on a 2-rank ring AllReduce".into());
        }
        None
    }

    pub(super) fn apply_enables(&mut self) -> Result<(), TuningError> {
        self.proto_enable = parse_proto(self.params.proto.as_deref())?;
        self.algo_enable = parse_algo(self.params.algo.as_deref())?;
        if !self.params.ll128_c2c && self.input.min_comp_cap >= 90 {
            self.notes.push(
                "Disabling LL128 over all PxN connections (PXB and C2C). This ensures that no C2C link will be used by LL128."
                    .into(),
            );
        }
        let inp = &self.input;
        for (ci, &coll) in Collective::TUNED.iter().enumerate() {
            for &a in Algorithm::NCCL {
                let hw_off = if inp.n_nodes == 1 && a == Algorithm::NvlsTree {
                    Some(Off::NvlsTreeOneNode)
                } else if !self.collnet_enable
                    && (matches!(a, Algorithm::CollNetDirect | Algorithm::CollNetChain)
                        || (a == Algorithm::Nvls && inp.n_nodes > 1))
                {
                    Some(if a == Algorithm::Nvls { Off::NvlsNeedsCollnet } else { Off::CollnetDisabled })
                } else if inp.nvs_count == 0 && a == Algorithm::CollNetDirect {
                    Some(Off::NoNvSwitch)
                } else {
                    None
                };
                for &p in Protocol::ALL {
                    let mut reasons = Vec::new();
                    let mut p_enable = self.proto_enable[ci][p.id()];
                    if p_enable == 2 && p == Protocol::Ll128 {
                        p_enable = 1;
                        if let Some(why) = self.ll128_off(coll, a) {
                            p_enable = 0;
                            reasons.push(Off::Ll128(why));
                        }
                    }
                    if p_enable == 0 && reasons.is_empty() {
                        reasons
                            .push(Off::Env { var: "NCCL_PROTO", value: self.params.proto.clone().unwrap_or_default() });
                    }
                    if self.algo_enable[ci][a.id()] == 0 {
                        reasons
                            .push(Off::Env { var: "NCCL_ALGO", value: self.params.algo.clone().unwrap_or_default() });
                    }
                    if let Some(o) = &hw_off {
                        reasons.push(o.clone());
                    }
                    if !reasons.is_empty() {
                        self.bandwidths[ci][a.id()][p.id()] = 0.0;
                        let cell = &mut self.off[ci][a.id()][p.id()];
                        // Cells that never exist for this collective/protocol/release keep only that reason.
                        if cell.iter().any(|o| matches!(o, Off::NotServed | Off::SimpleOnly | Off::NotInRelease { .. }))
                        {
                            continue;
                        }
                        for r in reasons {
                            if !cell.contains(&r) {
                                cell.push(r);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn set_thread_thresholds(&mut self) -> Result<(), TuningError> {
        let t = self.constants.threads;
        for a in 0..7 {
            self.thread_thresholds[a] = [t.ll_thread_threshold, t.ll128_thread_threshold, t.simple_thread_threshold];
        }
        let ring = Algorithm::Ring.id();
        self.thread_thresholds[ring][Protocol::Ll.id()] *= self.input.n_ranks as i64;
        for a in [Algorithm::CollNetDirect, Algorithm::CollNetChain] {
            self.thread_thresholds[a.id()][Protocol::Simple.id()] = t.collnet_thread_threshold;
        }
        let user = self.params.parsed_thread_thresholds()?;
        for (a, row) in [Algorithm::Tree, Algorithm::Ring].into_iter().zip(user) {
            for (p, v) in row.into_iter().enumerate() {
                if v >= 0 {
                    self.thread_thresholds[a.id()][p] = v;
                }
            }
        }
        Ok(())
    }
}
