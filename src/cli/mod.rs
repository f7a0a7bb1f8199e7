pub mod log;
pub mod serve;
