//! The tuning model's INFO lines in NCCL 2.28.9's exact layout (`src/graph/tuning.cc`): the TUNING table
//! (`Algorithm |`, `Protocol |`, `Max NThreads |`, one row of `lat/bw` cells per collective, three algorithms
//! per block), the `Enabled NCCL Func/Proto/Algo Matrix` printed when `NCCL_ALGO`/`NCCL_PROTO` are set, and the
//! `threadThresholds` line; and the per-call `Bytes -> Algo` line of `src/enqueue.cc`.

use super::choose::Choice;
use super::model::TuningModel;
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use collscope_model::{Algorithm, Collective, Protocol};

impl TuningModel {
    /// The TUNING table, one string per INFO line.
    pub fn table_lines(&self) -> Vec<String> {
        collscope_model::lines::tuning_table_lines(
            |a, p| self.max_threads[a.id()][p.id()],
            |ci, a, p| (self.latencies[ci][a.id()][p.id()] as f64, self.bandwidths[ci][a.id()][p.id()] as f64),
        )
    }

    /// `Enabled NCCL Func/Proto/Algo Matrix:` followed by the matrix NCCL embeds in the same message.
    pub fn enabled_matrix(&self) -> String {
        let mut s = String::from("\n     Function | ");
        for p in Protocol::ALL {
            s.push_str(&format!("{:>8}  ", p.as_str()));
        }
        s.push_str(" | ");
        for a in Algorithm::NCCL {
            s.push_str(&format!("{:>13}  ", a.as_str()));
        }
        s.push('\n');
        for (ci, coll) in Collective::TUNED.iter().enumerate() {
            s.push_str(&format!("{:>13} | ", coll.as_str()));
            for v in self.proto_enable[ci] {
                s.push_str(&format!("{v:>8}  "));
            }
            s.push_str(" | ");
            for v in self.algo_enable[ci] {
                s.push_str(&format!("{v:>13}  "));
            }
            s.push('\n');
        }
        format!("Enabled NCCL Func/Proto/Algo Matrix:{s}")
    }

    /// `threadThresholds %ld/%ld/%ld | %ld/%ld/%ld | %ld | %ld`.
    pub fn thresholds_line(&self) -> String {
        let t = &self.thread_thresholds;
        let (tr, ri) = (t[Algorithm::Tree.id()], t[Algorithm::Ring.id()]);
        format!(
            "threadThresholds {}/{}/{} | {}/{}/{} | {} | {}",
            tr[0],
            tr[1],
            tr[2],
            ri[0],
            ri[1],
            ri[2],
            t[Algorithm::CollNetDirect.id()][2],
            t[Algorithm::CollNetChain.id()][2]
        )
    }

    /// Logs what NCCL's rank 0 logs while tuning, in NCCL's order.
    pub fn log(&self) {
        for note in &self.notes {
            nccl_info!(Subsys::GRAPH | Subsys::ENV, "{note}");
        }
        if self.input.n_ranks <= 1 {
            return;
        }
        if self.params.forced() {
            nccl_info!(Subsys::ENV, "{}", self.enabled_matrix());
        }
        for line in self.table_lines() {
            nccl_info!(Subsys::TUNING, "{line}");
        }
        nccl_info!(Subsys::INIT, "{}", self.thresholds_line());
    }
}

impl Choice {
    /// `%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}` for a call of `call_bytes` (count x type
    /// size, as NCCL prints it) on channels `lo..=hi` (see `plan::channel_range`).
    pub fn tuning_line(&self, call_bytes: u64, channels: (u32, u32)) -> String {
        collscope_model::lines::decision_line(self.coll, call_bytes, self.algo, self.proto, channels)
    }
}
