//! The structure of a real NCCL job: its rings, trees and connections. The profiler ABI does not carry them, but
//! NCCL prints them to its debug file, and the plugin follows that file (`NCCL_DEBUG_FILE`, with NCCL's `%h`/`%p`)
//! with collscope's log reader. In NCCL 2.28.9 (`src/init.cc`, `initTransportsRank`) the ring orders
//! (`Channel 00/02 : 0 1 2 3`, rank 0 only, `src/graph/rings.cc`), each rank's `Ring 00 : 3 -> 0 -> 1` (GRAPH) and
//! `Trees [0] ...` lines come before `ncclProfilerPluginInit`; the connection lines (`Channel 00/0 : 0[0] -> 1[1]
//! via P2P/...`, `src/transport/{p2p,shm,net}.cc`) come after it, from `ncclTransportRingConnect` or, with runtime
//! connection, at the first call. So the file is read at the first drain after `init` and followed after it.
//!
//! Everything about the file is untrusted: it is opened without blocking (a FIFO is refused, `collscope_debug::
//! file`), read on the drain thread (never NCCL's), at most [`CHUNK`] bytes a drain and [`MAX_BYTES`] in all, and
//! each problem is one warning, after which the plugin stops following and NCCL carries on.

use collscope_debug::file::open_regular;
use collscope_debug::Level;
use collscope_logreader::{Incoming, Options, Reader};
use collscope_model::{Connection, Event, InitFacts, Snapshot};
use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The most of the debug file read in all: far more than the init lines of the largest job (a 4096-rank job's
/// connection lines are a few MiB per process), and a bound on the drain thread's work when NCCL logs every call.
pub(crate) const MAX_BYTES: u64 = 64 << 20;
/// The most read in one drain, so the drain thread goes back to NCCL's events soon.
pub(crate) const CHUNK: usize = 1 << 20;
/// How often what was read is turned into events at most (the log reader's snapshot copies what it knows).
const CONCLUDE_EVERY: Duration = Duration::from_millis(250);

/// One communicator of this process: `init`'s hash (NCCL prints it as `commId 0x..` in its Init lines) and the
/// name the plugin gives it.
pub(crate) struct Known<'a> {
    pub comm_id: u64,
    pub name: &'a str,
}

/// What one poll found.
#[derive(Default)]
pub(crate) struct Found {
    pub events: Vec<Event>,
    /// A problem with the file, said once: the plugin stops following it.
    pub warning: Option<String>,
}

enum Stage {
    Closed,
    Open(File),
    /// Stopped: the file could not be read, or [`MAX_BYTES`] were.
    Done,
}

/// NCCL's debug file, followed.
pub(crate) struct DebugLog {
    path: PathBuf,
    stage: Stage,
    reader: Reader,
    input: Incoming,
    read: u64,
    /// Bytes fed since the last conclusion.
    fresh: bool,
    /// Among them a connection line: concluded at once, so the traffic drained next carries its transport.
    urgent: bool,
    concluded: Option<Instant>,
    /// Connections the log reader has that were handed on (it only appends them).
    conns_sent: usize,
    facts_sent: Option<InitFacts>,
}

impl DebugLog {
    /// The file NCCL writes its log to, as NCCL 2.28.9 names it (`src/debug.cc`, `ncclDebugInit`): only at
    /// `NCCL_DEBUG=INFO` or above does it hold the lines read here (NCCL creates it above VERSION), `%h` is the
    /// short host name, `%p` the pid. None when NCCL writes no such file.
    pub(crate) fn from_env(get: impl Fn(&str) -> Option<String>, host: &str, pid: u32) -> Option<DebugLog> {
        let level = get("NCCL_DEBUG")?.parse::<Level>().ok()?;
        let pattern = get("NCCL_DEBUG_FILE").filter(|f| !f.is_empty() && level >= Level::Info)?;
        Some(DebugLog::new(PathBuf::from(collscope_debug::expand_file_name(&pattern, host, pid))))
    }

    fn new(path: PathBuf) -> DebugLog {
        let mut reader = Reader::new(Options::default());
        let input = reader.incoming(&path.display().to_string());
        DebugLog {
            path,
            stage: Stage::Closed,
            reader,
            input,
            read: 0,
            fresh: false,
            urgent: false,
            concluded: None,
            conns_sent: 0,
            facts_sent: None,
        }
    }

    /// Reads what the file gained (at most [`CHUNK`] bytes) and, when due, when it holds a connection line or
    /// when `now_all` (the last drain), hands on the rings, trees and connections not handed on yet. `rank` is this process's rank (of its first
    /// communicator); `comms` name the log's communicators as the plugin does.
    pub(crate) fn poll(&mut self, rank: u32, comms: &[Known], now_all: bool) -> Found {
        let mut found = Found { warning: self.read_more(), events: Vec::new() };
        let due = self.concluded.is_none_or(|at| at.elapsed() >= CONCLUDE_EVERY);
        if self.fresh && (due || now_all || self.urgent || found.warning.is_some()) {
            (self.fresh, self.urgent) = (false, false);
            self.concluded = Some(Instant::now());
            found.events = self.events(&self.reader.snapshot(), rank, comms);
        }
        found
    }

    fn read_more(&mut self) -> Option<String> {
        if let Stage::Closed = self.stage {
            match open_regular(&self.path) {
                Ok(f) => self.stage = Stage::Open(f),
                Err(e) => {
                    self.stage = Stage::Done;
                    return Some(format!(
                        "collscope profiler: cannot read NCCL's debug file '{}' (NCCL_DEBUG_FILE): {e}; the rings, \
                         trees and connections stay unknown",
                        self.path.display()
                    ));
                }
            }
        }
        let Stage::Open(file) = &mut self.stage else { return None };
        let want = CHUNK.min((MAX_BYTES - self.read) as usize);
        let mut buf = vec![0; want];
        let mut got = 0;
        let mut failed = None;
        while got < want {
            match file.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        self.feed(&buf[..got]);
        let shown = self.path.display();
        if let Some(e) = failed {
            self.stage = Stage::Done;
            return Some(format!(
                "collscope profiler: reading NCCL's debug file '{shown}' failed after {} bytes: {e}; it is no longer \
                 followed",
                self.read
            ));
        }
        if self.read >= MAX_BYTES {
            self.stage = Stage::Done;
            return Some(format!(
                "collscope profiler: NCCL's debug file '{shown}' reached {MAX_BYTES} bytes, the most the plugin reads \
                 of it; it is no longer followed (connections set up later stay unknown)"
            ));
        }
        None
    }

    fn feed(&mut self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.reader.feed(&mut self.input, bytes);
            self.read += bytes.len() as u64;
            self.fresh = true;
            // Every connection line says `via` (`src/transport/{p2p,shm,net}.cc`); one cut between two reads waits
            // for the next conclusion.
            self.urgent |= bytes.windows(5).any(|w| w == b" via ");
        }
    }

    /// The model events of what `snap` (the log read so far) has that were not handed on yet: its connections
    /// past those sent, and the init facts when they changed.
    fn events(&mut self, snap: &Snapshot, rank: u32, comms: &[Known]) -> Vec<Event> {
        // The log names a communicator by its address (`comm 0x55..`); the plugin by its name or hash. The hash is
        // the `commId` NCCL printed for it (absent for a split communicator, which keeps the log's name).
        let name_of = |log_name: &Option<String>| -> Option<String> {
            let c = snap.communicators.iter().find(|c| c.comm.is_some() && c.comm == *log_name)?;
            let id = c.comm_id.as_deref()?;
            comms.iter().find(|k| format!("{:#x}", k.comm_id) == id).map(|k| k.name.to_string())
        };
        let fresh = snap.connections.get(self.conns_sent..).unwrap_or_default();
        let mut events: Vec<Event> = fresh
            .iter()
            .map(|c| Event::Connection(Connection { comm: name_of(&c.comm).or_else(|| c.comm.clone()), ..c.clone() }))
            .collect();
        self.conns_sent = snap.connections.len();
        let facts = InitFacts {
            comm: None,
            rank,
            collscope_version: None,
            network: snap.network.clone(),
            topology: snap.topology.first().cloned(),
            graphs: snap.graphs.clone(),
            channels: snap.channels.clone(),
            rings: snap.rings.clone(),
            trees: snap.trees.clone(),
            tuning: snap.tuning.clone(),
        };
        let empty = facts.rings.is_empty() && facts.trees.is_empty() && facts.graphs.is_empty();
        if !empty && self.facts_sent.as_ref() != Some(&facts) {
            // Before the connections: a reader sees the rings their edges belong to first.
            events.insert(0, Event::InitFacts(Box::new(facts.clone())));
            self.facts_sent = Some(facts);
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::{Direction, Transport};
    use std::io::Write;

    const HEAD: &str = "\
nodeA:7:7 [0] NCCL INFO ncclCommInitRank comm 0x55d0c0 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 commId 0x4e1d - Init START
nodeA:7:9 [0] NCCL INFO comm 0x55d0c0 rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0
nodeA:7:9 [0] NCCL INFO Channel 00/02 : 0 1 2 3
nodeA:7:9 [0] NCCL INFO Trees [0] 1/2/-1->0->-1 [1] 1/-1/-1->0->2
";
    const CONN: &str = "nodeA:7:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n";

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn the_file_is_named_as_nccl_names_it_and_only_at_info() {
        let get = env(&[("NCCL_DEBUG", "info"), ("NCCL_DEBUG_FILE", "/tmp/nccl.%h.%p.log")]);
        let log = DebugLog::from_env(get, "nodeA", 42).unwrap();
        assert_eq!(log.path, PathBuf::from("/tmp/nccl.nodeA.42.log"));
        for vars in [
            &[("NCCL_DEBUG", "WARN"), ("NCCL_DEBUG_FILE", "/tmp/x.log")][..],
            &[("NCCL_DEBUG", "INFO")][..],
            &[("NCCL_DEBUG_FILE", "/tmp/x.log")][..],
            &[("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_FILE", "")][..],
        ] {
            let get = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
            assert!(DebugLog::from_env(get, "h", 1).is_none(), "{vars:?}");
        }
    }

    #[test]
    fn followed_it_hands_on_the_structure_once_and_the_connections_as_they_come() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nccl.log");
        std::fs::write(&path, HEAD).unwrap();
        let mut log = DebugLog::new(path.clone());
        let comms = [Known { comm_id: 0x4e1d, name: "world" }];
        let found = log.poll(0, &comms, true);
        assert!(found.warning.is_none());
        let [Event::InitFacts(f)] = &found.events[..] else { panic!("{:?}", found.events) };
        assert_eq!(f.rings[0].order, [0, 1, 2, 3]);
        let trees: Vec<_> = f.trees.iter().map(|t| (t.channel, t.rank, t.up, t.down.clone())).collect();
        assert_eq!(trees, [(0, 0, -1, vec![1, 2, -1]), (1, 0, 2, vec![1, -1, -1])]);
        assert!(log.poll(0, &comms, true).events.is_empty(), "nothing new, nothing handed on");

        let append = |line: &str| {
            std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(line.as_bytes()).unwrap()
        };
        append("nodeA:7:9 [0] NCCL INFO P2P Chunksize set to 131072\n");
        assert!(log.poll(0, &comms, false).events.is_empty(), "read, and concluded when due");
        append(CONN);
        // Just concluded, but a connection line is handed on at once (`now_all` false).
        let found = log.poll(0, &comms, false);
        let [Event::Connection(c)] = &found.events[..] else { panic!("{:?}", found.events) };
        assert_eq!((c.channel, c.src, c.dst, c.direction, c.transport), (0, 0, 1, Direction::Both, Transport::P2p));
        assert_eq!(c.comm.as_deref(), Some("world"), "the log's communicator by its commId");
    }

    #[test]
    fn a_fifo_a_missing_file_and_a_huge_one_are_one_warning_each() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let mut log = DebugLog::new(fifo);
        let w = log.poll(0, &[], true).warning.unwrap();
        assert!(w.contains("fifo' (NCCL_DEBUG_FILE): it is a FIFO, not a regular file"), "{w}");
        assert!(log.poll(0, &[], true).warning.is_none(), "said once");
        let w = DebugLog::new(dir.path().join("absent")).poll(0, &[], true).warning.unwrap();
        assert!(w.contains("No such file"), "{w}");

        let huge = dir.path().join("huge.log");
        let f = File::create(&huge).unwrap();
        f.set_len(MAX_BYTES * 4).unwrap();
        let mut log = DebugLog::new(huge);
        let mut polls = 0;
        let warning = loop {
            polls += 1;
            if let Some(w) = log.poll(0, &[], false).warning {
                break w;
            }
        };
        assert_eq!(polls as u64, MAX_BYTES / CHUNK as u64, "a chunk a poll, up to the cap");
        assert!(warning.contains("reached 67108864 bytes"), "{warning}");
        assert_eq!(log.read, MAX_BYTES);
        assert!(log.poll(0, &[], true).events.is_empty() && log.read == MAX_BYTES, "no longer read");
    }
}
