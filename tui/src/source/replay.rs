//! Plays a recording back at the pace it was recorded.

use super::recording::RecordedEvent;
use crate::live::{LinkState, Update};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

/// Events decoded up front, so a bad recording is reported before the screen opens.
pub struct Timeline(Vec<(f64, Vec<Update>)>);

impl Timeline {
    pub fn decode(events: Vec<RecordedEvent>) -> Result<Self, super::SourceError> {
        events.into_iter().map(|e| Ok((e.t, super::decode(&e.event, &e.data)?))).collect::<Result<_, _>>().map(Timeline)
    }
}

pub fn run(timeline: Timeline, tx: &Sender<Update>, stop: &AtomicBool) {
    let start = Instant::now();
    if tx.send(Update::Link(LinkState::Live { following: true })).is_err() {
        return;
    }
    for (t, updates) in timeline.0 {
        let due = start + Duration::from_secs_f64(t.max(0.0));
        while Instant::now() < due {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep((due - Instant::now()).min(Duration::from_millis(100)));
        }
        for u in updates {
            if tx.send(u).is_err() {
                return;
            }
        }
    }
    let _ = tx.send(Update::Link(LinkState::Ended));
}
