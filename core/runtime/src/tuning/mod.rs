//! The tuning model for communicators on host memory: the CPU counterpart of NCCL 2.28.9's hardware tables
//! (`hwLatencies` per link type and the per-channel bandwidths of `src/graph/tuning.cc`), measured on the
//! machine by `collscope tune calibrate` instead of read from NVIDIA's GPU tables, which stay untouched.
//!
//! ```text
//! timings (bytes, us) per link/algo/proto/channels -> fit (t = a + b * bytes) -> HostProfile -> time_us -> pick
//! ```

pub(crate) mod fit;
pub(crate) mod predict;
pub(crate) mod profile;

pub use fit::{cell_from_fits, fit_line, LineFit};
pub use predict::{choose, Candidate};
pub use profile::{CellCost, HostProfile, LinkProfile, MachineFacts, ProfileError, BUILTIN, TUNING_FILE_VAR};
