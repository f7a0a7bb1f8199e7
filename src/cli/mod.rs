pub mod demo;
pub mod perf;
pub mod ranks;
