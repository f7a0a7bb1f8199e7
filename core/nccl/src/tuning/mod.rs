//! The tuning model (NCCL 2.28.9 `src/graph/tuning.cc` and the per-call choice of `src/enqueue.cc`): constants
//! as data, the `NCCL_ALGO`/`NCCL_PROTO` grammar, the latency/bandwidth table with its enable matrix and the
//! reasons cells are off, and the per-call decision with channel and thread counts.
//!
//! ```text
//! TuningInput (graphs, shape) + TuningParams (env) + TunerConstants -> TuningModel -> choose(CallInfo) -> Choice
//! ```

pub mod choose;
pub mod constants;
mod enables;
mod formulas;
pub mod from_plan;
pub mod grammar;
pub mod input;
pub mod model;
pub mod params;
pub mod plan;
pub mod print;

pub use choose::{AlgoTime, CallInfo, Choice, Cost, Skip};
pub use constants::{TunerConstants, NCCL_2_28_9};
pub use input::{AlgoGraph, CpuArch, CpuVendor, TuningGraphs, TuningInput};
pub use model::{Off, TuningModel};
pub use params::{TuningError, TuningParams};

#[cfg(test)]
mod releases;
#[cfg(test)]
mod tests;
