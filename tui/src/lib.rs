//! `collscope tui`: a terminal view of one job, read only from the shared model (`collscope_model`).
//! Sources (a log, a live collscope process, a recording) feed [`live::Live`]; views draw it.
//! Depends on collscope-model, collscope-logreader (the log source) and collscope-debug (file reads); it never
//! builds the runtime: a live process is read over HTTP.

pub mod app;
#[cfg(test)]
mod fixture;
pub mod live;
pub mod proxy_waits;
pub mod rings;
pub mod source;
pub mod terminal;
pub mod traffic;
pub mod views;

pub use app::{App, Tab};
pub use live::{LinkState, Live, Update};
pub use source::{JobFetch, SourceSpec};
pub use terminal::{run, run_to_quit, RunError};
