//! The HTTP contract between collscope's telemetry server and its readers (the TUI's `--connect` and job view,
//! other ranks fetching summaries and metrics, the banners that say where to look): every route, and the event
//! stream's own event names, defined once. The stream's other events are named by [`crate::Event::kind`].

use serde::{Deserialize, Serialize};

/// The Prometheus exposition of this process's ranks.
pub const METRICS: &str = "/metrics";
/// Local rank 0's merge of every local rank's [`METRICS`] (when aggregating).
pub const METRICS_AGGREGATE: &str = "/metrics/aggregate";
/// The model as known now ([`crate::Snapshot`], JSON).
pub const SNAPSHOT: &str = "/api/v1/snapshot";
/// This process's ranks, summarised ([`crate::RankSummary`]s).
pub const SUMMARY: &str = "/api/v1/summary";
/// Every rank's summary, fetched from the endpoints the ranks exchanged, and the job-level findings.
pub const JOB: &str = "/api/v1/job";
/// Server-sent events: each live [`crate::Event`] under its kind, then [`END_EVENT`].
pub const EVENTS: &str = "/api/v1/events";
pub const HEALTHZ: &str = "/healthz";
/// POST: this process's ranks write their dumps to `COLLSCOPE_DUMP_DIR` now ([`crate::RankDump`]); the answer
/// lists the files.
pub const DUMP: &str = "/api/v1/dump";

/// Every route, in the order a "not found" answer lists them.
pub const ALL: [&str; 8] = [METRICS, METRICS_AGGREGATE, SNAPSHOT, SUMMARY, JOB, EVENTS, HEALTHZ, DUMP];

/// The stream's last event before the server stops; its data is a [`StreamEnd`].
pub const END_EVENT: &str = "end";
/// Events a slow reader missed; its data is how many.
pub const LAGGED_EVENT: &str = "lagged";
/// An event the server could not encode; its data is why.
pub const ERROR_EVENT: &str = "error";

/// The data of [`END_EVENT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamEnd {
    /// The server stopped on purpose; `false` when it was dropped without a shutdown.
    pub clean: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Event;

    #[test]
    fn the_streams_own_events_are_no_model_events_kind() {
        for own in [END_EVENT, LAGGED_EVENT, ERROR_EVENT] {
            assert!(!Event::KINDS.contains(&own), "{own} is also a model event's kind");
        }
    }

    #[test]
    fn the_end_of_a_stream_reads_back() {
        let text = serde_json::to_string(&StreamEnd { clean: true }).unwrap();
        assert_eq!(text, r#"{"clean":true}"#);
        assert_eq!(serde_json::from_str::<StreamEnd>(&text).unwrap(), StreamEnd { clean: true });
    }
}
