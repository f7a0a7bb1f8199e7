//! collscope's log reader: real `NCCL_DEBUG=INFO` logs (NCCL 2.4 to 2.29, any launcher, one file per rank or all
//! ranks interleaved, plain or gzip) into [`collscope_model::Snapshot`], with a diagnosis.
//!
//! Depends on collscope-model (the snapshot it fills and the line grammar it shares with the runtime,
//! `collscope_model::lines`) and collscope-debug (bounded file reads); never on the runtime or the NCCL model.
//!
//! ```no_run
//! let snap = collscope_logreader::read_paths(&["nccl.log".into()], collscope_logreader::Options::default())?;
//! println!("{:?} on {:?} nodes", snap.nccl_version, snap.nnodes);
//! # Ok::<(), collscope_logreader::ReadError>(())
//! ```

pub mod classify;
pub mod envelope;
mod infer;
pub mod input;
mod job;
pub mod message;
mod summary;

pub use job::{MAX_COMMUNICATORS, MAX_HOSTS, MAX_THREADS};
pub use summary::{gdrdma, transports_seen};

use collscope_debug::file::FileKind;
use collscope_model::{Snapshot, Source};
use std::io::Read;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot open log '{path}': {source}")]
    Open { path: String, source: std::io::Error },
    #[error("cannot read log '{path}' (line {line}): {source}")]
    Read { path: String, line: u64, source: std::io::Error },
    #[error("'{path}' is {kind}: expected a log file, a directory of them, a FIFO or - for stdin")]
    NotALog { path: String, kind: FileKind },
    #[error("no log files in {inputs}: expected NCCL_DEBUG=INFO logs (files, or directories holding them)")]
    NoFiles { inputs: String },
    #[error(
        "no NCCL line in {inputs} ({files} file(s), {lines} lines read): expected the output of a job run with \
         NCCL_DEBUG=INFO, lines like 'host:pid:tid [dev] NCCL INFO ...'"
    )]
    NoNcclLines { inputs: String, files: usize, lines: u64 },
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Keep every NCCL line that no parser understood in `unparsed_nccl_lines` (otherwise only counted).
    pub strict: bool,
}

/// A streaming reader: feed it inputs one after the other, or piece by piece as they grow, then take the
/// snapshot. What it keeps is the model, not the text: memory grows with what the logs teach.
pub struct Reader {
    job: job::Job,
}

/// An input read in pieces as they arrive (a followed file): where it is and the line not ended yet.
pub struct Incoming {
    file: usize,
    lineno: u64,
    lines: input::Lines,
}

impl Reader {
    pub fn new(opts: Options) -> Self {
        Reader { job: job::Job::new(opts.strict) }
    }

    /// Reads one input to its end, line by line.
    pub fn read(&mut self, name: &str, input: impl Read) -> Result<(), ReadError> {
        let file = self.job.add_file(name);
        let mut lineno = 0;
        let job = &mut self.job;
        input::for_each_line(input, |line, cut| {
            lineno += 1;
            job.line(file, lineno, line, cut);
        })
        .map_err(|source| ReadError::Read { path: name.to_string(), line: lineno, source })
    }

    /// Reads an in-memory input.
    pub fn read_bytes(&mut self, name: &str, bytes: &[u8]) {
        // Reading from a slice cannot fail.
        let _ = self.read(name, bytes);
    }

    /// Reads an opened input to its end; a gzip input cut short is read up to the damage, which becomes a
    /// warning naming the input and where it broke.
    pub fn read_input(&mut self, name: &str, mut input: input::Input) -> Result<(), ReadError> {
        self.read(name, &mut input)?;
        if let Some(d) = input.take_damage() {
            self.job.input_warning(format!("{name}: {d}"));
        }
        if let Some((opened, now)) = input.grown() {
            self.job.input_warning(format!(
                "{name}: grew from {opened} to {now} bytes while read: the {opened} bytes it had when opened were \
                 read (`serve --log {name} --follow` follows a log being written)"
            ));
        }
        Ok(())
    }

    /// Starts an input that arrives in pieces ([`Reader::feed`]), named `name` in the model.
    /// Notes something about the input itself (a followed path that names no log file now): a warning of class
    /// `input`.
    pub fn input_warning(&mut self, text: String) {
        self.job.input_warning(text);
    }

    pub fn incoming(&mut self, name: &str) -> Incoming {
        Incoming { file: self.job.add_file(name), lineno: 0, lines: input::Lines::default() }
    }

    /// Reads the lines `bytes` ends; the start of a line not ended yet waits for the next piece.
    pub fn feed(&mut self, input: &mut Incoming, bytes: &[u8]) {
        let (job, file, lineno) = (&mut self.job, input.file, &mut input.lineno);
        input.lines.push(bytes, &mut |line, cut| {
            *lineno += 1;
            job.line(file, *lineno, line, cut);
        });
    }

    /// Ends an input: a last line without a newline is read too.
    pub fn end(&mut self, mut input: Incoming) {
        let (job, file, lineno) = (&mut self.job, input.file, &mut input.lineno);
        input.lines.finish(&mut |line, cut| {
            *lineno += 1;
            job.line(file, *lineno, line, cut);
        });
    }

    /// The snapshot of what was read so far; reading can go on. Without inferred connections: a follower takes
    /// the connections as a list that only grows, and an inferred one goes when its line is read.
    pub fn snapshot(&self) -> Snapshot {
        Reader { job: self.job.clone() }.conclude(false)
    }

    /// Concludes: inferred facts, findings, and the snapshot.
    pub fn finish(self) -> Snapshot {
        self.conclude(true)
    }

    fn conclude(mut self, edges: bool) -> Snapshot {
        self.job.finish_lines();
        infer::infer(&mut self.job);
        let mut job = self.job;
        let inferred = if edges { infer::ring_edges(&mut job) } else { Vec::new() };
        job.evidence.multi_node = job.size.multi_node;
        job.snap.source = Source::Log { files: job.files.clone() };
        job.snap.log = Some(job.facts);
        job.snap.findings = collscope_diagnose::diagnose(&job.snap, &job.evidence);
        job.snap.connections.extend(inferred);
        job.snap
    }
}

/// Reads files, directories (the log files under them) and `-` (stdin) as one job; what a directory held that
/// is no log becomes an input warning naming it.
pub fn read_paths(paths: &[PathBuf], opts: Options) -> Result<Snapshot, ReadError> {
    let mut reader = Reader::new(opts);
    let inputs = input::expand(paths)?;
    if !inputs.skipped.is_empty() {
        let names: Vec<String> = inputs.skipped.iter().take(8).map(|p| p.display().to_string()).collect();
        let more = inputs.skipped.len().saturating_sub(names.len());
        reader.job.input_warning(format!(
            "skipped {} file(s) that are not logs (plain text or gzip): {}{}",
            inputs.skipped.len(),
            names.join(", "),
            if more > 0 { format!(" (+{more} more)") } else { String::new() }
        ));
    }
    for p in inputs.logs {
        reader.read_input(&p.display().to_string(), input::open(&p)?)?;
    }
    Ok(reader.finish())
}

/// Fails unless `snap`, read from `paths`, holds at least one NCCL line or another program's report of a
/// collective's failure (PyTorch's watchdog, an NCCL error raised to Python: kept as warnings): a binary file, an
/// empty directory or an unrelated log reads as an empty job, which is no diagnosis.
pub fn expect_nccl_lines(snap: &Snapshot, paths: &[PathBuf]) -> Result<(), ReadError> {
    let reported = snap.warnings.iter().any(|w| w.class != classify::INPUT);
    let Some(log) = snap.log.as_ref().filter(|l| l.stats.nccl_lines == 0 && !reported) else {
        return Ok(());
    };
    let inputs = paths.iter().map(|p| format!("'{}'", p.display())).collect::<Vec<_>>().join(", ");
    let files = match &snap.source {
        Source::Log { files } => files.len(),
        _ => 0,
    };
    Err(if files == 0 {
        ReadError::NoFiles { inputs }
    } else {
        ReadError::NoNcclLines { inputs, files, lines: log.stats.lines }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "node0:1:2 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n\
node0:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n\
node0:1:2 [0] NCCL INFO Ring 00 : 1 -> 0 -> 1\n\
node0:1:2 [0] misc/socket.cc:50 NCCL WARN Net : Connection closed by remote peer\n\
node0:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/IPC\n\
node0:1:3 [1] NCCL INFO AllReduce: opCount 2 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm 0x9 [nranks=2] stream 0x3\n";

    fn json(s: &Snapshot) -> String {
        serde_json::to_string(s).unwrap()
    }

    #[test]
    fn fed_in_pieces_it_reads_what_it_reads_whole() {
        let mut whole = Reader::new(Options::default());
        whole.read_bytes("t.log", LOG.as_bytes());
        let whole = whole.finish();
        assert_eq!(whole.connections.len(), 2);
        let mut r = Reader::new(Options::default());
        let mut input = r.incoming("t.log");
        for piece in LOG.as_bytes().chunks(5) {
            r.feed(&mut input, piece);
            // A snapshot on the way neither ends a line nor changes what follows.
            r.snapshot();
        }
        r.end(input);
        assert_eq!(json(&r.snapshot()), json(&whole));
        assert_eq!(json(&r.finish()), json(&whole));
    }

    #[test]
    fn no_nccl_line_is_an_error_naming_the_input() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("core.bin");
        std::fs::write(&bin, (0..=255u8).cycle().take(100_000).collect::<Vec<u8>>()).unwrap();
        let paths = [bin.clone()];
        let e = expect_nccl_lines(&read_paths(&paths, Options::default()).unwrap(), &paths).unwrap_err();
        assert!(matches!(e, ReadError::NoNcclLines { files: 1, .. }), "{e}");
        assert!(e.to_string().starts_with(&format!("no NCCL line in '{}' (1 file(s), ", bin.display())), "{e}");
        let empty = [dir.path().join("empty")];
        std::fs::create_dir(&empty[0]).unwrap();
        let e = expect_nccl_lines(&read_paths(&empty, Options::default()).unwrap(), &empty).unwrap_err();
        assert!(e.to_string().starts_with(&format!("no log files in '{}'", empty[0].display())), "{e}");
        let log = [dir.path().join("nccl.log")];
        std::fs::write(&log[0], LOG).unwrap();
        expect_nccl_lines(&read_paths(&log, Options::default()).unwrap(), &log).unwrap();
        // PyTorch's watchdog alone (no NCCL_DEBUG): no NCCL line, but a failure to diagnose.
        let watchdog = [dir.path().join("watchdog.log")];
        std::fs::write(
            &watchdog[0],
            "[rank3]:[E816 01:45:40.212150935 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective \
             operation timeout: WorkNCCL(SeqNum=80078, OpType=ALLREDUCE, NumelIn=2106881, NumelOut=2106881, \
             Timeout(ms)=600000) ran for 600013 milliseconds before timing out.\n",
        )
        .unwrap();
        let s = read_paths(&watchdog, Options::default()).unwrap();
        expect_nccl_lines(&s, &watchdog).unwrap();
        assert!(s.findings.iter().any(|f| f.code == "watchdog_timeout"), "{:?}", s.findings);
        // A line longer than the reader keeps is an input warning, not a report: still no diagnosis.
        let long = [dir.path().join("long.log")];
        std::fs::write(&long[0], "x".repeat(3 * input::MAX_LINE)).unwrap();
        let e = expect_nccl_lines(&read_paths(&long, Options::default()).unwrap(), &long).unwrap_err();
        assert!(matches!(e, ReadError::NoNcclLines { files: 1, .. }), "{e}");
    }

    #[test]
    fn a_cut_line_is_warned_about_once_per_file_and_kept_text_is_bounded() {
        let long = format!("node0:1:2 [0] misc/socket.cc:50 NCCL WARN {}\n", "z".repeat(3 * input::MAX_LINE));
        let mut r = Reader::new(Options::default());
        r.read_bytes("a.log", format!("{long}{long}").as_bytes());
        r.read_bytes("b.log", long.as_bytes());
        let s = r.finish();
        assert_eq!(s.log.as_ref().unwrap().stats.truncated_lines, 3);
        let input: Vec<&str> =
            s.warnings.iter().filter(|w| w.class == classify::INPUT).map(|w| w.text.as_str()).collect();
        assert_eq!(input.len(), 2, "{input:?}");
        assert!(input[0].starts_with("a.log:1: a line longer than 65536 bytes"), "{}", input[0]);
        assert!(input[1].starts_with("b.log:1: "), "{}", input[1]);
        for w in s.warnings.iter().filter(|w| w.class != classify::INPUT) {
            assert!(w.text.len() <= 2048 + 3 && w.text.ends_with("..."), "{}", w.text.len());
            assert!(w.line.as_ref().unwrap().text.len() <= 2048 + 3);
        }
    }
}
