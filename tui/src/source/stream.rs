//! Turns one event of collscope's events stream (live or recorded) into TUI updates.

use super::SourceError;
use crate::live::Update;
use collscope_model::routes::{ERROR_EVENT, LAGGED_EVENT};
use collscope_model::{Event, JobView, Snapshot};
use serde::Deserialize;

/// The name a recording gives to a snapshot the source fetched (`/api/v1/snapshot`), as opposed to the stream's
/// data-less `snapshot` event that says "fetch it again".
pub(super) const FETCHED_SNAPSHOT: &str = "fetched_snapshot";
/// The name a recording gives to a snapshot it took only to seek from (the session did not show it).
pub(super) const KEYFRAME: &str = "keyframe";
/// The name a recording gives to a job view the source fetched (`/api/v1/job`).
pub(super) const FETCHED_JOB: &str = "fetched_job";

/// What one event means to the TUI.
#[derive(Debug, PartialEq)]
pub enum Decoded {
    Update(Update),
    /// The server's facts changed: the snapshot must be fetched again.
    Refetch,
    /// Errors the server reports in-band, kinds this version does not know (the SSE convention).
    Skip,
}

pub fn decode(event: &str, data: &serde_json::Value) -> Result<Decoded, SourceError> {
    let bad = |e: serde_json::Error| SourceError::Event { event: event.to_string(), reason: e.to_string() };
    Ok(match event {
        FETCHED_SNAPSHOT | KEYFRAME => {
            Decoded::Update(Update::Snapshot(Box::new(Snapshot::deserialize(data).map_err(bad)?)))
        }
        FETCHED_JOB => Decoded::Update(Update::Job(Box::new(JobView::deserialize(data).map_err(bad)?))),
        // The stream left events out for a slow reader: the picture (and a recording) is whole again only from a
        // fresh snapshot, or the calls left out would show as a gap.
        LAGGED_EVENT => Decoded::Refetch,
        ERROR_EVENT => Decoded::Skip,
        _ => match Event::deserialize(data) {
            Ok(Event::Snapshot) => Decoded::Refetch,
            Ok(e) => Decoded::Update(Update::Event(Box::new(e))),
            // A kind added after this build: skip it; a known kind that does not parse is an error.
            Err(_) if !Event::KINDS.contains(&event) => Decoded::Skip,
            Err(e) => return Err(bad(e)),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::{ChannelTraffic, Direction, Transport};

    #[test]
    fn stream_events_decode_and_unknown_kinds_are_skipped() {
        let ev = Event::Traffic(ChannelTraffic {
            rank: 0,
            channel: 1,
            peer: 2,
            direction: Direction::Send,
            transport: Some(Transport::P2p),
            bytes: 8,
            in_place_bytes: None,
            seconds: 0.5,
        });
        let json = serde_json::to_value(&ev).unwrap();
        assert_eq!(decode("traffic", &json).unwrap(), Decoded::Update(Update::Event(Box::new(ev))));
        assert_eq!(decode("snapshot", &serde_json::json!({"kind": "snapshot"})).unwrap(), Decoded::Refetch);
        assert_eq!(decode("lagged", &serde_json::json!(12)).unwrap(), Decoded::Refetch);
        assert_eq!(decode("error", &serde_json::json!("x")).unwrap(), Decoded::Skip);
        let job = JobView { not_arrived_after_s: Some(3.0), ..Default::default() };
        let data = serde_json::to_value(&job).unwrap();
        assert_eq!(decode(FETCHED_JOB, &data).unwrap(), Decoded::Update(Update::Job(Box::new(job))));
        assert_eq!(decode("new_kind", &serde_json::json!({"kind": "new_kind", "data": 1})).unwrap(), Decoded::Skip);
        let err = decode("traffic", &serde_json::json!({"kind": "traffic", "data": {"rank": "x"}})).unwrap_err();
        assert!(err.to_string().contains("event 'traffic' from the source is not valid"), "{err}");
    }
}
