//! The threads that run a communicator's channels past the first: started at first need and parked between
//! calls. Spawning a scoped thread per channel per call cost about 40 us (`clone3`, then the join) on every
//! call that used more than one channel; waking a parked thread costs a futex wake. Each channel keeps its
//! own thread, so a channel's buffers stay warm in the cache of the core that last ran it, and channels that
//! wait on each other (across ranks in one process) never wait behind one another for a thread.

use crate::error::{Result, RuntimeError};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Worker {
    jobs: Sender<Job>,
    thread: JoinHandle<()>,
}

/// One job's outcome: `None` when it panicked.
type Done = Option<Result<()>>;

pub(crate) struct Workers {
    workers: Vec<Worker>,
    done_tx: Sender<Done>,
    done_rx: Receiver<Done>,
}

impl Default for Workers {
    fn default() -> Self {
        let (done_tx, done_rx) = channel();
        Workers { workers: Vec::new(), done_tx, done_rx }
    }
}

/// Waits for every job handed out, also when the caller's own item panics, so no worker outlives the
/// borrows its job holds.
struct Outstanding<'w> {
    rx: &'w Receiver<Done>,
    left: usize,
    first_err: Option<RuntimeError>,
}

impl Outstanding<'_> {
    fn note(&mut self, r: Result<()>) {
        if let (Err(e), None) = (r, &self.first_err) {
            self.first_err = Some(e);
        }
    }

    fn wait_all(&mut self) {
        while self.left > 0 {
            // A worker's sender lives as long as `Workers`, so this cannot fail while a job is out.
            let done = self.rx.recv().ok().flatten();
            self.left -= 1;
            self.note(done.unwrap_or_else(|| Err(panicked())));
        }
    }
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        self.wait_all();
    }
}

fn panicked() -> RuntimeError {
    RuntimeError::Transport { transport: "channel", msg: "a channel thread panicked".into() }
}

impl Workers {
    /// Runs `f` on every item: the first on the calling thread, item `i` on worker `i - 1`. Returns when all
    /// are done: the caller's own error if it had one, else the first a worker reported.
    pub(crate) fn run<T: Send>(&mut self, items: &mut [T], f: &(dyn Fn(&mut T) -> Result<()> + Sync)) -> Result<()> {
        let Some((first, rest)) = items.split_first_mut() else { return Ok(()) };
        if rest.is_empty() {
            return f(first);
        }
        self.grow(rest.len())?;
        let mut out = Outstanding { rx: &self.done_rx, left: 0, first_err: None };
        for (item, w) in rest.iter_mut().zip(&self.workers) {
            let done = self.done_tx.clone();
            let job: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
                let r = catch_unwind(AssertUnwindSafe(|| f(item))).ok();
                let _ = done.send(r);
            });
            // SAFETY: the job borrows `item` and `f` only until it reports on `done`, and `out` waits for
            // every report before this function returns or unwinds, so the borrows outlive the job.
            let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(job) };
            if w.jobs.send(job).is_err() {
                out.note(Err(panicked()));
                continue;
            }
            out.left += 1;
        }
        let mine = f(first);
        out.wait_all();
        match out.first_err.take() {
            Some(e) if mine.is_ok() => Err(e),
            _ => mine,
        }
    }

    fn grow(&mut self, n: usize) -> Result<()> {
        while self.workers.len() < n {
            let (jobs, rx) = channel::<Job>();
            let name = format!("collscope-ch{}", self.workers.len() + 1);
            let thread = std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    for job in rx {
                        job();
                    }
                })
                .map_err(|source| RuntimeError::TransportIo {
                    transport: "channel",
                    what: "cannot start a channel thread",
                    source,
                })?;
            self.workers.push(Worker { jobs, thread });
        }
        Ok(())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for w in self.workers.drain(..) {
            drop(w.jobs);
            let _ = w.thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    #[test]
    fn every_item_runs_once_on_its_own_thread_and_threads_are_reused() {
        let mut w = Workers::default();
        for round in 0..3 {
            let mut items: Vec<(u32, Option<String>)> = (0..4).map(|i| (i, None)).collect();
            // All four must run at once to pass the barrier: no item waits behind another for a thread.
            let barrier = Barrier::new(4);
            w.run(&mut items, &|it: &mut (u32, Option<String>)| {
                barrier.wait();
                it.1 = std::thread::current().name().map(str::to_string);
                Ok(())
            })
            .unwrap();
            let names: Vec<_> = items.iter().map(|(_, n)| n.clone().unwrap_or_default()).collect();
            assert_eq!(names[1..], ["collscope-ch1", "collscope-ch2", "collscope-ch3"], "round {round}");
            assert_eq!(w.workers.len(), 3, "threads are kept, not respawned");
        }
    }

    #[test]
    fn a_worker_error_or_panic_comes_back_after_all_items_finished() {
        let mut w = Workers::default();
        let mut items = [0u32, 1, 2];
        let err = w
            .run(&mut items, &|i: &mut u32| match *i {
                1 => Err(RuntimeError::Transport { transport: "t", msg: "boom".into() }),
                _ => {
                    *i += 10;
                    Ok(())
                }
            })
            .unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
        assert_eq!(items, [10, 1, 12], "the other items still ran to the end");
        let err = w
            .run(&mut items, &|i: &mut u32| {
                if *i == 12 {
                    panic!("channel bug");
                }
                Ok(())
            })
            .unwrap_err();
        assert!(err.to_string().contains("panicked"), "{err}");
        // The worker that panicked is still there for the next call.
        w.run(&mut items, &|i: &mut u32| {
            *i = 7;
            Ok(())
        })
        .unwrap();
        assert_eq!(items, [7, 7, 7]);
    }
}
