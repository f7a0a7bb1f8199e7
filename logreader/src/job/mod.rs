//! Merging lines into one job: who printed each line (rank, communicator, host), and what every event adds to
//! the model. Everything kept is deduplicated, so memory grows with what the log teaches, not with its length.

mod apply;

use crate::classify;
use crate::envelope::{self, Envelope, Level, Line};
use crate::input::MAX_LINE;
use crate::message::{self, Event, TableLine};
use collscope_model::{
    Algorithm, BootstrapInterface, Collective, CommState, Communicator, Connection, DataType, Decision, Direction,
    EnvSetting, GdrCheck, LineRef, LogFacts, NetDevice, Node, NodeId, NodeType, OpRecord, OpState, Path, Protocol,
    RedOp, Ring, Snapshot, Source, Topology, Transport, Tree, TuningCell, Warning,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// Caps on lists that could otherwise grow with the input.
const MAX_WARNINGS: usize = 10_000;
const MAX_UNPARSED: usize = 10_000;
const MAX_DECISIONS: usize = 100_000;
const MAX_EVIDENCE: usize = 5;
const RECENT: usize = 8;

/// Kinds of evidence the diagnosis rules cite.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ev {
    NetNoGdr,
    NetGdr,
    NetSocket,
    Shm,
    P2p,
    GdrDistance,
    GdrHcaOff,
    Bootstrap,
    NetNoDevice,
    NetUsing,
    PluginMissing,
    P2pDisabled,
    Ll128Disabled,
    ChannelsLimited,
    SearchFallback,
    Table,
    Env(String),
    Version(String),
    InitStart(usize),
    InitComplete(usize),
    Warning(&'static str),
}

/// Who printed a line, for attributing ranks: the file stands in for the host when the prefix was stripped.
/// `id` hashes the rest, so lookups need no allocation.
#[derive(Debug, Clone, Copy)]
struct ProcKey<'a> {
    id: u64,
    host: Option<&'a str>,
    file: usize,
    pid: Option<u32>,
    dev: Option<i32>,
}

impl<'a> ProcKey<'a> {
    fn new(env: &Envelope<'a>, file: usize) -> Self {
        let file = if env.host.is_some() { usize::MAX } else { file };
        let mut h = FastHash::default();
        h.bytes(env.host.unwrap_or("").as_bytes());
        h.word(file as u64);
        h.word(env.pid.map_or(u64::MAX, u64::from));
        h.word(env.dev.map_or(u64::MAX, |d| d as u64));
        ProcKey { id: h.0, host: env.host, file, pid: env.pid, dev: env.dev }
    }
}

/// What makes a connection line new: (communicator, channel, src, dst, direction, transport, mode).
type ConnKey = (Option<usize>, u32, u32, u32, Direction, Transport, Option<String>);

/// A printing thread (file, host, pid, tid), hashed.
type StreamKey = u64;

fn stream_key(env: &Envelope, file: usize) -> StreamKey {
    let mut h = FastHash::default();
    h.bytes(env.host.unwrap_or("").as_bytes());
    h.word(file as u64);
    h.word(env.pid.map_or(u64::MAX, u64::from));
    h.word(env.tid.map_or(u64::MAX, u64::from));
    h.0
}

/// A small multiply-rotate hash (the Fx hash): SipHash costs more than parsing a line.
#[derive(Default)]
pub(crate) struct FastHash(u64);

/// Hash maps and sets keyed on the hot path.
type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<FastHash>>;
type FastSet<K> = HashSet<K, std::hash::BuildHasherDefault<FastHash>>;

impl std::hash::Hasher for FastHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.bytes(bytes);
    }
    fn write_u64(&mut self, w: u64) {
        self.word(w);
    }
    fn write_u32(&mut self, w: u32) {
        self.word(w.into());
    }
    fn write_usize(&mut self, w: usize) {
        self.word(w as u64);
    }
}

impl FastHash {
    fn word(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn bytes(&mut self, b: &[u8]) {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.word(u64::from_le_bytes(tail) ^ b.len() as u64);
    }
}

pub(crate) fn hash_of(bytes: &[u8]) -> u64 {
    let mut h = FastHash::default();
    h.bytes(bytes);
    h.0
}

#[derive(Clone)]
struct Pending {
    line: LineRef,
    msg: String,
    host: Option<String>,
    file: usize,
    pid: Option<u32>,
    dev: Option<i32>,
    id: u64,
    rank: Option<u32>,
    stream: StreamKey,
}

/// Per printing thread: the tuning table columns and the graph being printed.
#[derive(Default, Clone)]
struct Stream {
    table_cols: Vec<(Algorithm, Protocol)>,
    graph: Option<usize>,
    comm: Option<usize>,
    /// The collective of the last COLL line, for TRACE decision lines that do not name theirs.
    last_coll: Option<Collective>,
}

/// The job being assembled.
#[derive(Clone)]
pub struct Job {
    pub strict: bool,
    pub files: Vec<String>,
    pub snap: Snapshot,
    pub facts: LogFacts,
    pub evidence: BTreeMap<Ev, Vec<LineRef>>,
    /// Ranks whose host is known, and their CUDA devices.
    pub rank_host: BTreeMap<u32, String>,
    pub rank_dev: BTreeMap<u32, i32>,
    /// Ranks seen anywhere (printing or named as peers).
    pub ranks_seen: BTreeSet<u32>,
    /// Printing processes seen (host or file, pid, device).
    pub procs_seen: usize,
    /// Highest CUDA device printed in a `[dev]` prefix.
    pub max_dev: Option<i32>,
    /// Largest nranks / nNodes printed.
    pub nranks_printed: Option<u32>,
    pub nnodes_printed: Option<u32>,
    /// The last value each env variable was set to.
    pub env_values: BTreeMap<String, String>,
    /// `Using network X`.
    pub using_network: Option<String>,
    /// Networks that printed `NET/X : Using ...`, plugin networks that printed lines, and `No device found`.
    pub net_using: BTreeSet<String>,
    pub plugin_nets: BTreeSet<String>,
    pub net_no_device: BTreeSet<String>,
    /// NVLS set up (true) or reported unavailable (false).
    pub nvls: Option<bool>,
    /// Largest `Channel xx/NN` channel count of the ring prints.
    pub ring_nchannels: Option<u32>,
    procs: FastMap<u64, Option<u32>>,
    streams: FastMap<StreamKey, Stream>,
    comm_index: HashMap<String, usize>,
    conn_seen: FastSet<ConnKey>,
    ring_index: HashMap<u32, usize>,
    tree_seen: FastSet<(u32, u32)>,
    decision_index: FastMap<(Collective, u64, Algorithm, Protocol, Option<u32>), usize>,
    op_index: FastMap<(u64, u32), usize>,
    pub versions: BTreeMap<String, BTreeSet<String>>,
    topo_index: HashMap<String, usize>,
    /// (topology, node name) to node index.
    node_index: HashMap<(usize, String), usize>,
    recent: [u64; RECENT],
    recent_pos: usize,
    /// An NCCL line no parser understood, held for one line in case the next one continues it.
    pending: Option<Pending>,
    /// The enabled matrix prints its rows without a prefix after its INFO line.
    in_matrix: bool,
    /// Files that had a line cut (each is warned about once).
    cut_files: FastSet<usize>,
}

impl Job {
    pub fn new(strict: bool) -> Self {
        Job {
            strict,
            files: Vec::new(),
            snap: Snapshot::new(Source::Log { files: Vec::new() }),
            facts: LogFacts::default(),
            evidence: BTreeMap::new(),
            rank_host: BTreeMap::new(),
            rank_dev: BTreeMap::new(),
            ranks_seen: BTreeSet::new(),
            procs_seen: 0,
            max_dev: None,
            nranks_printed: None,
            nnodes_printed: None,
            env_values: BTreeMap::new(),
            using_network: None,
            net_using: BTreeSet::new(),
            plugin_nets: BTreeSet::new(),
            net_no_device: BTreeSet::new(),
            nvls: None,
            ring_nchannels: None,
            procs: FastMap::default(),
            streams: FastMap::default(),
            comm_index: HashMap::new(),
            conn_seen: FastSet::default(),
            ring_index: HashMap::new(),
            tree_seen: FastSet::default(),
            decision_index: FastMap::default(),
            op_index: FastMap::default(),
            versions: BTreeMap::new(),
            topo_index: HashMap::new(),
            node_index: HashMap::new(),
            recent: [0; RECENT],
            recent_pos: 0,
            pending: None,
            in_matrix: false,
            cut_files: FastSet::default(),
        }
    }

    pub fn add_file(&mut self, name: &str) -> usize {
        self.flush_pending();
        self.in_matrix = false;
        self.files.push(name.to_string());
        self.files.len() - 1
    }

    pub fn evidence(&self, ev: &Ev) -> &[LineRef] {
        self.evidence.get(ev).map_or(&[], Vec::as_slice)
    }

    fn cite(&mut self, ev: Ev, at: &At) {
        let list = self.evidence.entry(ev).or_default();
        if list.len() < MAX_EVIDENCE {
            list.push(at.line_ref(&self.files));
        }
    }

    /// Feeds one raw line. `cut` says the input reader truncated it.
    pub fn line(&mut self, file: usize, lineno: u64, raw: &[u8], cut: bool) {
        if cut && self.cut_files.insert(file) {
            let name = self.files.get(file).map_or("", String::as_str);
            self.input_warning(format!(
                "{name}:{lineno}: a line longer than {MAX_LINE} bytes: only its start is read (lines cut so far are \
                 counted in log.stats.truncated_lines)"
            ));
        }
        let stats = &mut self.facts.stats;
        stats.lines += 1;
        stats.bytes += raw.len() as u64 + 1;
        if cut {
            stats.truncated_lines += 1;
        }
        let text = match std::str::from_utf8(raw) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            Err(_) => {
                stats.invalid_utf8_lines += 1;
                String::from_utf8_lossy(raw)
            }
        };
        // A fold rather than `any`, so the compiler can vectorise it.
        if raw.iter().fold(false, |acc, &b| acc | ((b < 0x20) & (b != b'\t'))) {
            stats.garbled_lines += 1;
        }
        if !raw.is_empty() {
            let h = hash_of(raw);
            if self.recent.contains(&h) {
                stats.duplicate_lines += 1;
                return;
            }
            self.recent[self.recent_pos] = h;
            self.recent_pos = (self.recent_pos + 1) % RECENT;
        }
        let at = At { file, line: lineno, text: &text };
        self.dispatch(&at, &text);
    }

    fn dispatch(&mut self, at: &At, text: &str) {
        match envelope::split(text) {
            Line::Other { launcher_rank, text } => self.context(at, launcher_rank, text),
            Line::Nccl(env) => {
                self.in_matrix = false;
                self.facts.stats.nccl_lines += 1;
                self.flush_pending();
                // Two processes writing into one line: handle the second line on its own.
                if let Some(second) = second_line(env.msg) {
                    self.facts.stats.garbled_lines += 1;
                    self.dispatch(at, second);
                    return;
                }
                self.nccl(at, &env);
            }
        }
    }

    fn context(&mut self, at: &At, launcher_rank: Option<u32>, text: &str) {
        if self.in_matrix {
            if let Some((coll, flags)) = message::tuning::matrix_row(text) {
                self.matrix_row(coll, &flags);
                return;
            }
            if text.contains("Function |") {
                return;
            }
            self.in_matrix = false;
        }
        if let Some(p) = self.pending.take() {
            let rest = text.trim_start();
            for joined in [format!("{}{rest}", p.msg), format!("{} {rest}", p.msg)] {
                if let Some(ev) = message::parse(&joined) {
                    self.facts.stats.wrapped_lines += 1;
                    let text = format!("{}\n{}", p.line.text, text);
                    let at2 = At { file: at.file, line: p.line.line, text: &text };
                    let key = ProcKey { id: p.id, host: p.host.as_deref(), file: p.file, pid: p.pid, dev: p.dev };
                    self.event(&at2, &key, p.rank, &p.stream, ev);
                    return;
                }
            }
            self.pending = Some(p);
            self.flush_pending();
        }
        self.facts.stats.context_lines += 1;
        if classify::is_framework_error(text) {
            let rank = launcher_rank.or_else(|| bracket_rank(text));
            self.warning(at, rank, None, text.trim(), None);
        }
        if let Some(v) = text.split("NCCL version ").nth(1) {
            let v: String = v.chars().take_while(|c| !c.is_whitespace() && *c != ',' && *c != ')').collect();
            if v.starts_with(|c: char| c.is_ascii_digit()) {
                self.version(at, &v, launcher_rank.map(|r| format!("rank {r}")));
            }
        }
    }

    /// Called at the end of the input.
    pub fn finish_lines(&mut self) {
        self.flush_pending();
    }

    fn flush_pending(&mut self) {
        if let Some(p) = self.pending.take() {
            self.facts.stats.unparsed_nccl_lines += 1;
            if self.strict && self.snap.unparsed_nccl_lines.len() < MAX_UNPARSED {
                self.snap.unparsed_nccl_lines.push(p.line);
            }
        }
    }

    fn nccl(&mut self, at: &At, env: &Envelope) {
        let key = ProcKey::new(env, at.file);
        if !self.procs.contains_key(&key.id) {
            self.procs_seen += 1;
            if let Some(h) = env.host {
                if !self.snap.hosts.iter().any(|x| x == h) {
                    self.snap.hosts.push(h.to_string());
                }
            }
            if let Some(d) = key.dev.filter(|&d| d >= 0) {
                self.max_dev = Some(self.max_dev.map_or(d, |m| m.max(d)));
            }
            self.procs.insert(key.id, None);
        }
        let rank = env.launcher_rank.or_else(|| self.procs.get(&key.id).copied().flatten());
        if let Some(r) = env.launcher_rank {
            self.learn_rank(&key, r);
        }
        match env.level {
            Level::Warn => {
                let loc = env.location;
                self.warning(at, rank, env.host, env.msg.trim_end(), loc);
            }
            Level::Version => {
                if let Some(v) = message::setup::version(env.msg) {
                    self.version(at, &v, who(env, rank));
                }
            }
            Level::Info | Level::Trace => match message::parse(env.msg) {
                Some(ev) => {
                    let stream = stream_key(env, at.file);
                    if let Event::Version(v) = &ev {
                        self.version(at, v, who(env, rank));
                    } else {
                        self.event(at, &key, rank, &stream, ev);
                    }
                }
                None => {
                    self.pending = Some(Pending {
                        line: at.line_ref(&self.files),
                        msg: env.msg.to_string(),
                        host: key.host.map(str::to_string),
                        file: key.file,
                        pid: key.pid,
                        dev: key.dev,
                        id: key.id,
                        rank,
                        stream: stream_key(env, at.file),
                    })
                }
            },
        }
    }
}

/// A line being handled: where it is and what it says.
pub struct At<'a> {
    pub file: usize,
    pub line: u64,
    pub text: &'a str,
}

impl At<'_> {
    pub fn line_ref(&self, files: &[String]) -> LineRef {
        LineRef { file: files.get(self.file).cloned().unwrap_or_default(), line: self.line, text: kept(self.text) }
    }
}

/// The most of a line the model keeps as text (evidence, warnings). NCCL's lines are far shorter; whole
/// [`MAX_LINE`] lines in every kept warning would hold over a GiB.
const MAX_KEPT_TEXT: usize = 2048;

/// `text`, cut to [`MAX_KEPT_TEXT`] bytes on a character boundary with `...` to show the cut.
pub(crate) fn kept(text: &str) -> String {
    if text.len() <= MAX_KEPT_TEXT {
        return text.to_string();
    }
    let mut end = MAX_KEPT_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

fn who(env: &Envelope, rank: Option<u32>) -> Option<String> {
    rank.map(|r| format!("rank {r}")).or_else(|| env.host.map(|h| format!("{h}:{}", env.pid.unwrap_or(0))))
}

/// `[Rank 7]` / `[PG 0 (default_pg) Rank 7]` in PyTorch lines.
fn bracket_rank(text: &str) -> Option<u32> {
    let i = text.find(" Rank ").map(|i| i + 6).or_else(|| text.find("[Rank ").map(|i| i + 6))?;
    let digits: String = text[i..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A second NCCL line glued into this message (two processes writing at once), to be split on its own.
fn second_line(msg: &str) -> Option<&str> {
    matches!(envelope::split(msg), Line::Nccl(e) if e.level != Level::Version).then_some(msg)
}
