//! Plays a recording back at the pace it was recorded.

use super::recording::RecordedEvent;
use super::stream::Decoded;
use crate::live::{LinkState, Update};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

/// Events decoded up front, so a bad recording is reported before the screen opens.
pub struct Timeline(Vec<(f64, Update)>);

impl Timeline {
    pub fn decode(events: Vec<RecordedEvent>) -> Result<Self, super::SourceError> {
        let mut timeline = Vec::new();
        for e in events {
            // A recording holds the snapshots that were fetched, so "fetch again" needs nothing here.
            if let Decoded::Update(u) = super::decode(&e.event, &e.data)? {
                timeline.push((e.t, u));
            }
        }
        Ok(Timeline(timeline))
    }
}

pub fn run(timeline: Timeline, tx: &Sender<Update>, stop: &AtomicBool) {
    let start = Instant::now();
    if tx.send(Update::Link(LinkState::Live { following: true })).is_err() {
        return;
    }
    for (t, update) in timeline.0 {
        let due = start + Duration::from_secs_f64(t.max(0.0));
        while Instant::now() < due {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep((due - Instant::now()).min(Duration::from_millis(100)));
        }
        if tx.send(update).is_err() {
            return;
        }
    }
    let _ = tx.send(Update::Link(LinkState::Ended));
}
