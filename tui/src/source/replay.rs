//! Plays a recording back at the pace it was recorded, on the recording's own clock ([`Update::Clock`] before
//! the updates of each moment, so rates are the recorded bytes over recorded seconds whatever the pace). The user
//! pauses it and seeks in it ([`ReplayCmd`]): a seek forward plays what lies between at once; a seek back starts
//! the picture over ([`Update::Restart`]) from the nearest keyframe (a whole snapshot) at or before the new moment,
//! with the job view last recorded before it, and plays the events from there at once, so the picture is the one
//! the recording showed then, with no call missing.

use super::recording::RecordedEvent;
use super::stream::{Decoded, KEYFRAME};
use crate::app::ReplayCmd;
use crate::live::{LinkState, Update};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// How often the position shown is brought up to date while nothing else happens.
const TICK: Duration = Duration::from_millis(100);

/// Events decoded up front, so a bad recording is reported before the screen opens.
pub(super) struct Timeline {
    /// What the session showed, in order.
    played: Vec<(f64, Update)>,
    /// Whole snapshots taken only to seek from (the session did not show them): each with its time and the
    /// place in `played` that follows it.
    keyframes: Vec<(f64, usize, Update)>,
}

/// Where a picture of a moment is rebuilt from: a keyframe (or none: `played[next]` is a snapshot, or the start),
/// the job view recorded last before it, and the place in `played` to go on from.
struct Rebuild<'a> {
    keyframe: Option<(f64, &'a Update)>,
    job: Option<&'a (f64, Update)>,
    next: usize,
}

impl Timeline {
    pub(super) fn decode(events: Vec<RecordedEvent>) -> Result<Self, super::SourceError> {
        let mut timeline = Timeline { played: Vec::new(), keyframes: Vec::new() };
        for e in events {
            // A recording holds the snapshots that were fetched, so "fetch again" needs nothing here.
            if let Decoded::Update(u) = super::decode(&e.event, &e.data)? {
                let t = e.t.max(0.0);
                if e.event == KEYFRAME {
                    timeline.keyframes.push((t, timeline.played.len(), u));
                } else {
                    timeline.played.push((t, u));
                }
            }
        }
        Ok(timeline)
    }

    /// The recording's length: the time of its last event.
    fn length(&self) -> f64 {
        self.played.iter().map(|(t, _)| *t).chain(self.keyframes.iter().map(|(t, ..)| *t)).fold(0.0, f64::max)
    }

    /// Where a picture of moment `to` is rebuilt from: the last whole snapshot at or before it (a keyframe or one
    /// the session fetched; else the start), after the last job view recorded before it (the strip and the
    /// job's findings, until the next one).
    fn rebuild_from(&self, to: f64) -> Rebuild<'_> {
        let end = self.played.partition_point(|(t, _)| *t <= to);
        let fetched = self.played[..end].iter().rposition(|(_, u)| matches!(u, Update::Snapshot(_)));
        let key = self.keyframes.iter().rev().find(|(t, ..)| *t <= to);
        let (keyframe, next) = match (fetched, key) {
            (Some(i), Some((_, k, _))) if *k <= i => (None, i),
            (_, Some((t, k, u))) => (Some((*t, u)), *k),
            (Some(i), None) => (None, i),
            (None, None) => (None, 0),
        };
        let job = self.played[..next].iter().rfind(|(_, u)| matches!(u, Update::Job(_)));
        Rebuild { keyframe, job, next }
    }
}

/// The replay's position in the recording: where it was when last paused, resumed or moved, and since when it
/// plays (`None` while paused).
struct Clock {
    at: f64,
    playing_since: Option<Instant>,
}

impl Clock {
    fn now(&self) -> f64 {
        self.at + self.playing_since.map_or(0.0, |t| t.elapsed().as_secs_f64())
    }

    fn set(&mut self, at: f64) {
        self.at = at;
        self.playing_since = self.playing_since.map(|_| Instant::now());
    }

    fn toggle(&mut self) {
        self.at = self.now();
        self.playing_since = match self.playing_since {
            Some(_) => None,
            None => Some(Instant::now()),
        };
    }
}

/// Plays `timeline` into `tx` until `stop` or the UI hangs up, obeying `control`. At its end the replay stays,
/// so the user can still seek back.
pub(super) fn run(timeline: Timeline, tx: &Sender<Update>, control: &Receiver<ReplayCmd>, stop: &AtomicBool) {
    let length = timeline.length();
    let mut clock = Clock { at: 0.0, playing_since: Some(Instant::now()) };
    let mut next = 0;
    let mut shown = None;
    // The recording's time last sent as the source's clock.
    let mut told = f64::NEG_INFINITY;
    let tell = |t: f64, told: &mut f64| {
        let sent = t <= *told || tx.send(Update::Clock(t)).is_ok();
        *told = told.max(t);
        sent
    };
    while !stop.load(Ordering::Relaxed) {
        let at = clock.now().min(length);
        for (t, update) in timeline.played[next..].iter().take_while(|(t, _)| *t <= at) {
            if !tell(*t, &mut told) || tx.send(update.clone()).is_err() {
                return;
            }
            next += 1;
        }
        if !tell(at, &mut told) {
            return;
        }
        // Both in whole tenths, so the end shows as at == length.
        let tenths = |s: f64| (s * 10.0).floor() / 10.0;
        let state =
            LinkState::Replay { at_s: tenths(at), length_s: tenths(length), paused: clock.playing_since.is_none() };
        if shown.as_ref() != Some(&state) {
            if tx.send(Update::Link(state.clone())).is_err() {
                return;
            }
            shown = Some(state);
        }
        let due = match (&clock.playing_since, timeline.played.get(next)) {
            (Some(_), Some((t, _))) => Duration::from_secs_f64((t - at).max(0.0)).min(TICK),
            _ => TICK,
        };
        match control.recv_timeout(due) {
            Ok(ReplayCmd::TogglePause) => clock.toggle(),
            Ok(ReplayCmd::Seek(by)) => {
                let to = (at + by).clamp(0.0, length);
                if to < at {
                    let from = timeline.rebuild_from(to);
                    if tx.send(Update::Restart).is_err() {
                        return;
                    }
                    told = f64::NEG_INFINITY;
                    let start = from.job.iter().map(|(t, u)| (*t, u)).chain(from.keyframe);
                    for (t, update) in start {
                        if !tell(t, &mut told) || tx.send(update.clone()).is_err() {
                            return;
                        }
                    }
                    next = from.next;
                }
                clock.set(to);
            }
            Err(RecvTimeoutError::Timeout) => {}
            // Nobody steers this replay: it plays on.
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(due),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::{Snapshot, Source};
    use std::sync::mpsc;

    fn snapshot(nranks: u32) -> Update {
        Update::Snapshot(Box::new(Snapshot { nranks: Some(nranks), ..Snapshot::new(Source::Runtime) }))
    }

    /// Receives until `want` arrives (within 5 s), returning what came before it but the clock.
    fn until(rx: &Receiver<Update>, want: impl Fn(&Update) -> bool) -> Vec<Update> {
        until_with_clock(rx, want).into_iter().filter(|u| !matches!(u, Update::Clock(_))).collect()
    }

    fn until_with_clock(rx: &Receiver<Update>, want: impl Fn(&Update) -> bool) -> Vec<Update> {
        let mut seen = Vec::new();
        loop {
            let u = rx.recv_timeout(Duration::from_secs(5)).expect("the replay keeps sending");
            if want(&u) {
                return seen;
            }
            seen.push(u);
        }
    }

    fn at(u: &Update) -> Option<(f64, bool)> {
        match u {
            Update::Link(LinkState::Replay { at_s, paused, .. }) => Some((*at_s, *paused)),
            _ => None,
        }
    }

    #[test]
    fn pauses_seeks_forward_at_once_and_back_by_starting_over() {
        // Three pictures 0, 60 and 120 s apart: only seeking reaches the later ones within the test.
        let played = vec![(0.0, snapshot(1)), (60.0, snapshot(2)), (120.04, snapshot(3))];
        let timeline = Timeline { played, keyframes: Vec::new() };
        let (tx, rx) = mpsc::channel();
        let (ctl, control) = mpsc::channel();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let replay = {
            let stop = stop.clone();
            std::thread::spawn(move || run(timeline, &tx, &control, &stop))
        };
        assert_eq!(until(&rx, |u| at(u).is_some()), [snapshot(1)]);
        ctl.send(ReplayCmd::TogglePause).unwrap();
        until(&rx, |u| at(u).is_some_and(|(_, paused)| paused));
        // Forward 90 s while paused: the picture of 60 s arrives at once, the position says 90 s, paused.
        ctl.send(ReplayCmd::Seek(90.0)).unwrap();
        let before = until(&rx, |u| at(u).is_some_and(|(t, paused)| (90.0..90.2).contains(&t) && paused));
        assert!(before.contains(&snapshot(2)) && !before.contains(&snapshot(3)), "{before:?}");
        // Back 80 s: the picture starts over and plays to 10 s (only the first one).
        ctl.send(ReplayCmd::Seek(-80.0)).unwrap();
        let before = until(&rx, |u| at(u).is_some_and(|(t, _)| t < 11.0));
        assert_eq!(before, [Update::Restart, snapshot(1)]);
        // Past the end: the position stops at the recording's length (in tenths, as shown).
        ctl.send(ReplayCmd::Seek(500.0)).unwrap();
        let before = until(
            &rx,
            |u| matches!(u, Update::Link(LinkState::Replay { at_s, length_s, .. }) if at_s == length_s && *at_s == 120.0),
        );
        assert_eq!(before, [snapshot(2), snapshot(3)]);
        stop.store(true, Ordering::Relaxed);
        replay.join().unwrap();
    }

    /// A recording of 60 s: a call completed and 1 MB sent on one edge every second, a keyframe every 20 s
    /// (the snapshot as it was then, not played) and a job view every 5 s. Seeking forward then back rebuilds from the
    /// keyframe before the new moment, with the job view before it, and the calls run whole; the rate is
    /// 1 MB/s, on the recording's clock, though the seek played 50 s at once.
    #[test]
    fn a_seek_back_rebuilds_from_the_nearest_keyframe_and_rates_are_on_the_recordings_clock() {
        use crate::fixture::op as record;
        use crate::live::Live;
        use crate::traffic::EdgeKey;
        use collscope_model::{
            Algorithm, ChannelTraffic, Collective, Direction, Event, JobView, OpState, Protocol, Transport,
        };
        let op = |seq| record(seq, Collective::AllReduce, 4096, Algorithm::Ring, Protocol::Simple, OpState::Completed);
        let traffic = Event::Traffic(ChannelTraffic {
            rank: 0,
            channel: 0,
            peer: 1,
            direction: Direction::Send,
            transport: Some(Transport::Shm),
            bytes: 1_000_000,
            in_place_bytes: None,
            seconds: 0.01,
        });
        let (mut played, mut keyframes) = (Vec::new(), Vec::new());
        let mut picture = Live::new("recorded");
        for second in 0..=60u64 {
            let t = second as f64;
            let whole = Update::Snapshot(Box::new(picture.snapshot.clone()));
            match second {
                // The snapshot the session started with, then keyframes taken only to seek from.
                0 => played.push((t, whole)),
                _ if second % 20 == 0 => keyframes.push((t, played.len(), whole)),
                _ => {}
            }
            if second % 5 == 0 {
                let job = JobView { not_arrived_after_s: Some(t), ..Default::default() };
                played.push((t + 0.5, Update::Job(Box::new(job))));
            }
            for event in [Event::OpCompleted(op(second)), traffic.clone()] {
                picture.apply(Update::Event(Box::new(event.clone())));
                played.push((t + 0.25, Update::Event(Box::new(event))));
            }
        }
        let (tx, rx) = mpsc::channel();
        let (ctl, control) = mpsc::channel();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let replay = {
            let stop = stop.clone();
            std::thread::spawn(move || run(Timeline { played, keyframes }, &tx, &control, &stop))
        };
        let mut live = Live::new("replay");
        let mut apply = |updates: Vec<Update>| updates.into_iter().for_each(|u| live.apply(u));
        ctl.send(ReplayCmd::TogglePause).unwrap();
        apply(until_with_clock(&rx, |u| at(u).is_some_and(|(_, paused)| paused)));
        ctl.send(ReplayCmd::Seek(50.0)).unwrap();
        let forward = until_with_clock(&rx, |u| at(u).is_some_and(|(t, _)| t >= 50.0));
        assert!(!forward.iter().any(|u| matches!(u, Update::Snapshot(_))), "keyframes are only to seek from");
        apply(forward);
        ctl.send(ReplayCmd::Seek(-15.0)).unwrap();
        let back = until_with_clock(&rx, |u| at(u).is_some_and(|(t, _)| t < 40.0));
        // From the keyframe of 20 s (not the start), after the job view of 15 s.
        let restart = back.iter().position(|u| *u == Update::Restart).expect("the picture starts over");
        let after: Vec<&Update> = back[restart..].iter().filter(|u| !matches!(u, Update::Clock(_))).collect();
        assert!(matches!(after[1], Update::Job(j) if j.not_arrived_after_s == Some(15.0)), "{:?}", after[1]);
        assert!(matches!(after[2], Update::Snapshot(s) if s.ops.len() == 20), "{:?}", after[2]);
        apply(back);
        let seqs: Vec<u64> = live.snapshot.ops.iter().map(|o| o.seq).collect();
        assert_eq!(seqs, (0..=34).collect::<Vec<_>>(), "every call up to 35 s, none missing");
        assert_eq!(live.job.as_ref().and_then(|j| j.not_arrived_after_s), Some(30.0));
        let edge = live.traffic.get(EdgeKey { channel: 0, src: 0, dst: 1 }).expect("the edge");
        assert_eq!(edge.rate, 1_000_000.0, "{edge:?}");
        stop.store(true, Ordering::Relaxed);
        replay.join().unwrap();
    }
}
