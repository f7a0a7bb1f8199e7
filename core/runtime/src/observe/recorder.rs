//! The runtime's side of telemetry: the list of every communicator's records (call totals, recent operations,
//! traffic), which telemetry reads when it likes, and a bounded queue for the rare events that are not calls
//! (connections, communicators, proxy operations, warnings). The per-call hooks cost one relaxed load while
//! telemetry is off. When the queue is full the oldest event goes and the drop counter rises, so memory stays
//! bounded however slowly telemetry drains.

use collscope_model::events::Event;
use collscope_model::observe::{CommRecords, Feed, DEFAULT_CAPACITY};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The process's [`Feed`]: telemetry reads it through the trait, the runtime reports to it.
pub struct Recorder {
    on: AtomicBool,
    capacity: AtomicUsize,
    queue: Mutex<VecDeque<Event>>,
    dropped: AtomicU64,
    sources: Mutex<Vec<Arc<dyn CommRecords>>>,
    /// Where this process serves its telemetry, shared with the other ranks at bootstrap.
    endpoint: Mutex<Option<String>>,
}

static GLOBAL: Recorder = Recorder::new();

/// The process's recorder, the one the runtime reports to.
pub fn global() -> &'static Recorder {
    &GLOBAL
}

/// Reports an event to the process's recorder; `make` runs only while telemetry is on.
#[inline]
pub fn record(make: impl FnOnce() -> Event) {
    if GLOBAL.is_enabled() {
        GLOBAL.push(make());
    }
}

/// Whether the process's recorder keeps events (to skip work that only telemetry needs).
#[inline]
pub fn enabled() -> bool {
    GLOBAL.is_enabled()
}

impl Recorder {
    pub const fn new() -> Self {
        Recorder {
            on: AtomicBool::new(false),
            capacity: AtomicUsize::new(DEFAULT_CAPACITY),
            queue: Mutex::new(VecDeque::new()),
            dropped: AtomicU64::new(0),
            sources: Mutex::new(Vec::new()),
            endpoint: Mutex::new(None),
        }
    }

    /// Sets where this process serves its telemetry (`http://HOST:PORT`); ranks that join a communicator
    /// afterwards tell the other ranks.
    pub fn set_endpoint(&self, url: String) {
        *self.endpoint.lock().unwrap_or_else(|p| p.into_inner()) = Some(url);
    }

    pub fn endpoint(&self) -> Option<String> {
        self.endpoint.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Queues one event, evicting the oldest when full.
    pub fn push(&self, ev: Event) {
        let capacity = self.capacity.load(Ordering::Relaxed);
        let mut q = self.lock();
        if q.len() >= capacity {
            q.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        q.push_back(ev);
    }

    /// Lists a communicator's records for telemetry to read. While nobody reads, records only the list still
    /// holds (their communicator is gone) are let go here, so the list does not grow with communicators.
    pub fn register(&self, records: Arc<dyn CommRecords>) {
        let mut s = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        if !self.is_enabled() {
            s.retain(|r| Arc::strong_count(r) > 1);
        }
        s.push(records);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Event>> {
        // A panic while holding the lock cannot leave the queue half-updated: keep using it.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Feed for Recorder {
    fn enable(&self, capacity: usize) {
        let capacity = capacity.max(1);
        self.capacity.store(capacity, Ordering::Relaxed);
        let mut q = self.lock();
        let want = capacity.min(DEFAULT_CAPACITY).saturating_sub(q.len());
        q.reserve(want);
        drop(q);
        self.on.store(true, Ordering::Release);
    }

    fn disable(&self) {
        self.on.store(false, Ordering::Release);
    }

    /// The queue and `out` trade places, so the lock is held for a swap, not a copy, and `out`'s capacity (once
    /// emptied by the caller) serves the next round.
    fn drain_into(&self, out: &mut VecDeque<Event>) {
        let mut q = self.lock();
        if out.is_empty() {
            std::mem::swap(&mut *q, out);
        } else {
            out.extend(q.drain(..));
        }
    }

    fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Those of communicators already gone are handed out one last time and then forgotten, so what they did in
    /// their last moments is still counted.
    fn sources(&self) -> Vec<Arc<dyn CommRecords>> {
        let mut s = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        let all = s.clone();
        s.retain(|r| Arc::strong_count(r) > 2);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_is_off_until_enabled_and_off_again_after_disable() {
        let r = Recorder::new();
        assert!(!r.is_enabled());
        r.enable(4);
        assert!(r.is_enabled());
        r.push(Event::Snapshot);
        r.disable();
        assert!(!r.is_enabled());
        let mut out = VecDeque::new();
        r.drain_into(&mut out);
        assert_eq!(out, [Event::Snapshot], "events queued before disable stay until drained");
    }

    #[test]
    fn full_queue_evicts_oldest_and_counts_drops() {
        let r = Recorder::new();
        r.enable(2);
        for w in ["a", "b", "c"] {
            r.push(Event::Warning(collscope_model::Warning {
                rank: None,
                host: None,
                line: None,
                text: w.into(),
                class: "other".into(),
                source: None,
            }));
        }
        let mut out = VecDeque::new();
        r.drain_into(&mut out);
        let texts: Vec<_> = out
            .iter()
            .map(|e| match e {
                Event::Warning(w) => w.text.clone(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(texts, ["b", "c"]);
        assert_eq!(r.dropped(), 1);
        r.drain_into(&mut out);
        assert_eq!(out.len(), 2, "a drain empties the queue");
    }
}
