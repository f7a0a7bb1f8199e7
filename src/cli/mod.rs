pub mod demo;
pub mod log;
pub mod perf;
pub mod ranks;
pub mod serve;
pub mod telemetry;
