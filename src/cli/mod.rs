pub mod log;
pub mod tui;
