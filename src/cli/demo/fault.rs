//! Failures on demand (`collscope demo --fault KIND[:key=value,...]`), so a user sees what each looks like in the
//! TUI, the job view, `/metrics` and the findings before meeting it in a real job, and tests can cause them:
//! - `mismatch[:rank=R,step=S]`: rank R broadcasts where the others all-reduce (PyTorch's classic hang);
//! - `slow:rank=R,factor=F`: rank R takes F times as long to reach each of its collectives (a straggler);
//! - `stop:rank=R,secs=N[,step=S]`: rank R's process is stopped (SIGSTOP) for N seconds, then resumes;
//! - `kill:rank=R[,step=S]`: rank R's process is killed (SIGKILL) mid-training.
//!
//! Step S (default 3) is when it happens; rank R defaults to 1.

use std::str::FromStr;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fault {
    Mismatch { rank: u32, step: u64 },
    Slow { rank: u32, factor: f64 },
    Stop { rank: u32, step: u64, secs: f64 },
    Kill { rank: u32, step: u64 },
}

const GRAMMAR: &str =
    "mismatch[:rank=R,step=S], slow:rank=R,factor=F, stop:rank=R,secs=N[,step=S] or kill:rank=R[,step=S]";

impl FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, params) = s.split_once(':').unwrap_or((s, ""));
        let (mut rank, mut step, mut factor, mut secs) = (1u32, 3u64, None, None);
        for kv in params.split(',').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| format!("'{kv}' is not key=value; expected {GRAMMAR}"))?;
            let bad = |what: &str| format!("{k}={v}: expected {what}");
            match k {
                "rank" => rank = v.parse().map_err(|_| bad("a rank number"))?,
                "step" => step = v.parse().map_err(|_| bad("a step number"))?,
                "factor" => {
                    factor = Some(
                        v.parse::<f64>()
                            .ok()
                            .filter(|f| *f >= 1.0 && *f <= 100.0)
                            .ok_or_else(|| bad("a factor from 1 to 100"))?,
                    )
                }
                "secs" => {
                    secs = Some(
                        v.parse::<f64>()
                            .ok()
                            .filter(|s| *s > 0.0 && *s <= 3600.0)
                            .ok_or_else(|| bad("seconds, up to 3600"))?,
                    )
                }
                _ => return Err(format!("unknown key '{k}' in --fault {s}; expected {GRAMMAR}")),
            }
        }
        let need =
            |v: Option<f64>, key: &str| v.ok_or_else(|| format!("--fault {kind} needs {key}=...; expected {GRAMMAR}"));
        match kind {
            "mismatch" => Ok(Fault::Mismatch { rank, step }),
            "slow" => Ok(Fault::Slow { rank, factor: need(factor, "factor")? }),
            "stop" => Ok(Fault::Stop { rank, step, secs: need(secs, "secs")? }),
            "kill" => Ok(Fault::Kill { rank, step }),
            _ => Err(format!("unknown fault '{kind}'; expected {GRAMMAR}")),
        }
    }
}

impl Fault {
    pub(crate) fn rank(&self) -> u32 {
        match *self {
            Fault::Mismatch { rank, .. }
            | Fault::Slow { rank, .. }
            | Fault::Stop { rank, .. }
            | Fault::Kill { rank, .. } => rank,
        }
    }

    /// Whether the fault acts on a whole process (so ranks must be processes, not threads of one).
    pub(crate) fn needs_processes(&self) -> bool {
        matches!(self, Fault::Stop { .. } | Fault::Kill { .. })
    }

    /// Before `step`'s collectives on `rank`: stops or kills this process. A fault that cannot be caused is said,
    /// and training goes on.
    pub(crate) fn before_step(&self, rank: u32, step: u64) {
        if rank != self.rank() {
            return;
        }
        if let Err(e) = self.cause(rank, step) {
            eprintln!("collscope demo: --fault on rank {rank} could not be caused: {e}");
        }
    }

    fn cause(&self, rank: u32, step: u64) -> std::io::Result<()> {
        match *self {
            Fault::Stop { step: s, secs, .. } if s == step => {
                // A stopped process cannot wake itself: a child resumes it.
                let pid = std::process::id();
                std::process::Command::new("sh")
                    .args(["-c", &format!("sleep {secs}; kill -CONT {pid}")])
                    .stdin(std::process::Stdio::null())
                    .spawn()?;
                eprintln!("collscope demo: --fault: rank {rank} stops (SIGSTOP) for {secs} s at step {step}");
                nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP).map_err(std::io::Error::from)?;
            }
            Fault::Kill { step: s, .. } if s == step => {
                eprintln!("collscope demo: --fault: rank {rank} is killed (SIGKILL) at step {step}");
                nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL).map_err(std::io::Error::from)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether `rank` calls the wrong collective at `step`.
    pub(crate) fn mismatches(&self, rank: u32, step: u64) -> bool {
        matches!(*self, Fault::Mismatch { rank: r, step: s } if r == rank && s == step)
    }
}

/// The pace of one rank's collectives: a rank slowed by `slow:factor=F` waits, before each call, F - 1 times as
/// long as it worked since its last wait (its own compute and its previous call, which is not inflated by waiting
/// for others, since it arrives last), so it reaches every call F times as late as it would, not only a step's
/// first (a straggler at every call, as a slower device or a busier host makes one).
pub(crate) struct Pace {
    /// F - 1; zero for a rank that is not slowed.
    extra: f64,
    /// When this rank last resumed work.
    resumed: Instant,
}

impl Pace {
    pub(crate) fn new(fault: Option<&Fault>, rank: u32) -> Pace {
        let extra = match fault {
            Some(&Fault::Slow { rank: r, factor }) if r == rank => factor - 1.0,
            _ => 0.0,
        };
        Pace { extra, resumed: Instant::now() }
    }

    /// Runs `call` (one collective) at this rank's pace.
    pub(crate) fn call<T>(&mut self, call: impl FnOnce() -> T) -> T {
        if self.extra > 0.0 {
            std::thread::sleep(self.resumed.elapsed().mul_f64(self.extra));
            self.resumed = Instant::now();
        }
        call()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn faults_are_read_with_defaults_and_bad_ones_name_the_grammar() {
        assert_eq!("mismatch".parse(), Ok(Fault::Mismatch { rank: 1, step: 3 }));
        assert_eq!("mismatch:rank=2,step=5".parse(), Ok(Fault::Mismatch { rank: 2, step: 5 }));
        assert_eq!("slow:rank=3,factor=2".parse(), Ok(Fault::Slow { rank: 3, factor: 2.0 }));
        assert_eq!("stop:rank=2,secs=7".parse(), Ok(Fault::Stop { rank: 2, step: 3, secs: 7.0 }));
        assert_eq!("kill:rank=0,step=1".parse(), Ok(Fault::Kill { rank: 0, step: 1 }));
        for bad in ["slow:rank=1", "stop:rank=1,secs=0", "nap", "mismatch:rank", "kill:when=now", "slow:factor=1e9"] {
            let e = bad.parse::<Fault>().unwrap_err();
            assert!(e.contains("expected"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_slowed_rank_waits_before_every_call_as_long_as_it_worked_times_the_factor_less_one() {
        let slow = Fault::Slow { rank: 1, factor: 3.0 };
        let work = Duration::from_millis(20);
        let mut pace = Pace::new(Some(&slow), 1);
        for _ in 0..3 {
            std::thread::sleep(work);
            let t = Instant::now();
            pace.call(|| ());
            // It worked at least 20 ms since it last resumed: it waits at least twice that.
            assert!(t.elapsed() >= work * 2, "{:?}", t.elapsed());
        }
        // Another rank, no fault or another fault: no wait.
        for other in
            [Pace::new(Some(&slow), 0), Pace::new(None, 1), Pace::new(Some(&Fault::Kill { rank: 1, step: 3 }), 1)]
        {
            assert_eq!(other.extra, 0.0);
        }
    }
}
