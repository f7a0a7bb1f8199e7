//! collscope's telemetry inside NCCL's process: the plugin's events reach `collscope_telemetry::Telemetry` through
//! the [`Feed`] seam collscope's runtime feeds it through, and telemetry serves them from its own thread.
//! Calls arrive as completed-call events (telemetry counts each once), so the feed lists no communicator records.

use crate::output::Sink;
use collscope_model::observe::{CommRecords, Feed, DEFAULT_CAPACITY};
use collscope_model::Event;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

/// The events the drain thread queued for telemetry, bounded: when full, the oldest go and are counted.
pub(crate) struct EventFeed {
    on: AtomicBool,
    capacity: AtomicUsize,
    queue: Mutex<VecDeque<Event>>,
    dropped: AtomicU64,
}

/// The process's feed (telemetry takes a `&'static dyn Feed`).
pub(crate) static FEED: EventFeed = EventFeed {
    on: AtomicBool::new(false),
    capacity: AtomicUsize::new(DEFAULT_CAPACITY),
    queue: Mutex::new(VecDeque::new()),
    dropped: AtomicU64::new(0),
};

impl EventFeed {
    fn queue(&self) -> MutexGuard<'_, VecDeque<Event>> {
        // Each change to the queue is one call: a panic cannot leave it half-done.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Sink for &'static EventFeed {
    /// Called on the drain thread only; nothing is kept while no server reads.
    fn deliver(&mut self, ev: Event) {
        if !self.on.load(Relaxed) {
            return;
        }
        let mut q = self.queue();
        if q.len() >= self.capacity.load(Relaxed) {
            q.pop_front();
            self.dropped.fetch_add(1, Relaxed);
        }
        q.push_back(ev);
    }
}

impl Feed for EventFeed {
    fn enable(&self, capacity: usize) {
        self.capacity.store(capacity.max(1), Relaxed);
        self.on.store(true, Relaxed);
    }

    fn disable(&self) {
        self.on.store(false, Relaxed);
    }

    fn drain_into(&self, out: &mut VecDeque<Event>) {
        out.extend(self.queue().drain(..));
    }

    fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }

    fn sources(&self) -> Vec<Arc<dyn CommRecords>> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_feed_keeps_events_only_while_enabled_and_drops_the_oldest_when_full() {
        let feed: &'static EventFeed = Box::leak(Box::new(EventFeed {
            on: AtomicBool::new(false),
            capacity: AtomicUsize::new(DEFAULT_CAPACITY),
            queue: Mutex::new(VecDeque::new()),
            dropped: AtomicU64::new(0),
        }));
        let mut sink = feed;
        sink.deliver(Event::Snapshot);
        let mut out = VecDeque::new();
        feed.drain_into(&mut out);
        assert!(out.is_empty(), "off: nothing kept");
        feed.enable(2);
        for ev in [Event::Endpoints(vec![]), Event::Snapshot, Event::Snapshot] {
            sink.deliver(ev);
        }
        feed.drain_into(&mut out);
        assert_eq!(out, [Event::Snapshot, Event::Snapshot]);
        assert_eq!(feed.dropped(), 1);
        assert!(feed.sources().is_empty());
    }
}
