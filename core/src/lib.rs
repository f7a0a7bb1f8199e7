//! collscope's core: the shared model, NCCL-format logging, environment parameters, and (in later modules)
//! topology, graph search, tuning and the runtime. Data flows one way: detect -> model -> search -> tune ->
//! run -> observe.

pub mod cuda;
pub mod recorder;
pub mod runtime;
pub mod tuning;
