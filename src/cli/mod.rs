pub mod log;
pub mod serve;
pub mod tui;
