pub mod explain;
mod explain_text;
pub mod sizes;
mod trim;
