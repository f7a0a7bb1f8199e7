pub mod perf;
pub mod ranks;
