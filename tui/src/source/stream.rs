//! Turns one event of collscope's events stream (live or recorded) into TUI updates.

use super::SourceError;
use crate::live::Update;
use collscope_core::model::Snapshot;
use serde::Deserialize;

/// Decodes one event. Events this version does not know are skipped, as the SSE convention asks.
pub fn decode(event: &str, data: &serde_json::Value) -> Result<Vec<Update>, SourceError> {
    let bad = |e: serde_json::Error| SourceError::Event { event: event.to_string(), reason: e.to_string() };
    Ok(match event {
        "snapshot" => vec![Update::Snapshot(Box::new(Snapshot::deserialize(data).map_err(bad)?))],
        _ => Vec::new(),
    })
}
