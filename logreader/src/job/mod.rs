//! Merging lines into one job: who printed each line (rank, communicator, host), and what every event adds to
//! the model. Everything kept is deduplicated or bounded, so memory grows with what the log teaches, not with its
//! length.

mod apply;
mod ops;
mod table;
mod topo;

use crate::classify;
use crate::envelope::{self, Envelope, Level, Line};
use crate::input::{Text, MAX_LINE};
use crate::message::{self, Event};
use collscope_model::{Cite, Collective, Evidence, LineRef, LogFacts, Snapshot, Source, Warning};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// Caps on the snapshot's lists, shared with the model's fold (`collscope_model::fold`, where each says why).
pub use collscope_model::fold::{LOG_MAX_COMMUNICATORS as MAX_COMMUNICATORS, LOG_MAX_HOSTS as MAX_HOSTS};
use collscope_model::fold::{
    LOG_MAX_DECISIONS as MAX_DECISIONS, LOG_MAX_ROWS as MAX_ROWS, LOG_MAX_WARNINGS as MAX_WARNINGS, MAX_RINGS,
};
/// Times one warning line (its text, prefix included) is listed: past it its repeats are not listed again.
const MAX_REPEATED_WARNINGS: u32 = 64;
const MAX_UNPARSED: usize = 10_000;
/// Printing threads (and processes, and ranks placed on a host) remembered: 16,384 ranks with 4 threads each
/// (main, proxy, proxy progress, service), at about 1 KiB each with the process and its devices. Lines of threads
/// past it are still read, without the per-thread state (repeat detection, prints in progress).
pub const MAX_THREADS: usize = 65_536;
/// The longest host name (DNS's 253 characters, with room): a longer token names no host, so matching a
/// token's end against the known hosts costs at most this many lookups.
const MAX_HOST_LEN: usize = 255;
/// Nodes, links and paths kept of the `=== System` prints, all hosts together: NCCL's largest system holds 3,456
/// nodes (`NCCL_TOPO_MAX_NODES` 576 of each of 6 types), a DGX about 40 with 640 paths, so these hold thousands of
/// hosts' prints (about 40, 20 and 120 MB at most). Past them, what is left out is counted and said.
const MAX_TOPO_NODES: usize = 1 << 18;
const MAX_TOPO_LINKS: usize = 1 << 19;
const MAX_TOPO_PATHS: usize = 1 << 21;
/// Hosts past [`MAX_HOSTS`] counted one by one (by their hashes: 16 MiB at most); past it the count says "at least".
const MAX_HOSTS_COUNTED: usize = 1 << 20;
/// Cites remembered as full: every kind, and this many versions, variables and communicators' inits (past it,
/// the evidence's own check).
const MAX_CITES_FULL: usize = 4096;
/// The stream that threads past [`MAX_THREADS`] share.
const OVERFLOW_STREAM: StreamKey = u64::MAX;

impl Dropped {
    fn row(&mut self, table: &'static str) {
        *self.rows.entry(table).or_default() += 1;
    }
}

/// What the caps left out, said in warnings at the end.
#[derive(Default, Clone)]
struct Dropped {
    /// Hashes of the hosts not listed, themselves capped at [`MAX_HOSTS_COUNTED`] (past it: "at least").
    hosts: FastSet<u64>,
    communicators: u64,
    /// Lines of threads past [`MAX_THREADS`].
    thread_lines: u64,
    /// Rows of the per-channel and per-rank tables past [`MAX_RINGS`] and [`MAX_ROWS`], by table.
    rows: BTreeMap<&'static str, u64>,
    /// Nodes, links and paths of `=== System` prints past [`MAX_TOPO_NODES`], [`MAX_TOPO_LINKS`], [`MAX_TOPO_PATHS`].
    topology: u64,
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
    /// `place` hashes the host, or the file without one.
    fn new(host: Option<&'a str>, place: u64, env: &Envelope, file: usize) -> Self {
        let file = if host.is_some() { usize::MAX } else { file };
        let mut h = FastHash(place);
        h.word(env.pid.map_or(u64::MAX, u64::from));
        h.word(env.dev.map_or(u64::MAX, |d| d as u64));
        ProcKey { id: h.0, host, file, pid: env.pid, dev: env.dev }
    }

    /// A process that printed no host, pid nor device (bare messages): nothing places it or ties it to a rank.
    fn anonymous(&self) -> bool {
        self.host.is_none() && self.pid.is_none() && self.dev.is_none()
    }

    /// The host, or the file standing in for it.
    fn place(&self) -> Place {
        match self.host {
            Some(h) => Place::Host(h.to_string()),
            None => Place::File(self.file),
        }
    }
}

/// Where a process ran: its host, or its file when the host was not printed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Place {
    Host(String),
    File(usize),
}

/// A printing thread (file, host, pid, tid), hashed.
type StreamKey = u64;

/// What a thread's first line told about it: its process and how to read its host token.
#[derive(Default, Clone, Copy)]
struct Thread {
    proc: u64,
    /// Bytes of junk glued before the host name in the host token.
    junk: usize,
    /// The host token names a host.
    host_ok: bool,
}

/// Who printed a line: the process (its host in `key.host`) and the thread.
struct Who<'a> {
    key: ProcKey<'a>,
    stream: StreamKey,
}

/// A small multiply-rotate hash (the Fx hash): SipHash costs more than parsing a line.
#[derive(Default)]
pub(crate) struct FastHash(u64);

/// Hash maps and sets keyed on the hot path.
type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<FastHash>>;
type FastSet<K> = HashSet<K, std::hash::BuildHasherDefault<FastHash>>;
/// Maps and sets keyed on a hash already (threads, processes, connections): the key is its own hash.
type HashedMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<Hashed>>;
type HashedSet = HashSet<u64, std::hash::BuildHasherDefault<Hashed>>;
/// Sets keyed on numbers packed in one or two words: one folded multiply hashes them.
type WordSet<K> = HashSet<K, std::hash::BuildHasherDefault<WordHash>>;

/// The hasher of [`HashedMap`] and [`HashedSet`]: a `u64` key passes through.
#[derive(Default)]
pub(crate) struct Hashed(u64);

impl std::hash::Hasher for Hashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = hash_of(bytes) ^ self.0.rotate_left(5);
    }
    fn write_u64(&mut self, w: u64) {
        self.0 = w;
    }
}

/// The hasher of [`WordSet`].
#[derive(Default)]
pub(crate) struct WordHash(u64);

impl std::hash::Hasher for WordHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = hash_of(bytes) ^ self.0.rotate_left(5);
    }
    fn write_u64(&mut self, w: u64) {
        self.0 = fold_mul(w ^ 0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344);
    }
    fn write_u128(&mut self, w: u128) {
        self.0 = fold_mul(w as u64 ^ 0x243f_6a88_85a3_08d3, (w >> 64) as u64 ^ 0x1319_8a2e_0370_7344);
    }
}

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
        let x = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        // The product's high bits folded down: without it, words that differ only in their last bytes (`host1234`
        // and `host1235`) differ only in the high bits, which the next word's bytes can cancel, and two hosts
        // shared one thread (hundreds of times in 300,000 host names).
        self.0 = x ^ (x >> 32);
    }
    fn bytes(&mut self, b: &[u8]) {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        self.word(tail_word(b, chunks.remainder().len()) ^ b.len() as u64);
    }
}

/// The last `n` (< 8) bytes of `whole` as a little-endian word, zero-padded: one load of the last 8 bytes shifted
/// when `whole` has them, else at most three loads (a copy into a zeroed buffer cost a `memcpy` call per hash).
fn tail_word(whole: &[u8], n: usize) -> u64 {
    if n == 0 {
        return 0;
    }
    if let Some(last) = whole.last_chunk::<8>() {
        return u64::from_le_bytes(*last) >> (64 - 8 * n);
    }
    let t = whole.get(whole.len() - n..).unwrap_or_default();
    let (mut w, mut i) = (0u64, 0);
    if n & 4 != 0 {
        w = u64::from(u32::from_le_bytes(t.first_chunk::<4>().copied().unwrap_or_default()));
        i = 4;
    }
    if n & 2 != 0 {
        let pair = t.get(i..i + 2).and_then(|p| p.first_chunk::<2>()).copied().unwrap_or_default();
        w |= u64::from(u16::from_le_bytes(pair)) << (8 * i);
        i += 2;
    }
    if n & 1 != 0 {
        w |= u64::from(t.get(i).copied().unwrap_or(0)) << (8 * i);
    }
    w
}

/// A hash of a whole line (a thread's last line, a host name, a warning's text; compared, never ordered by): 16
/// bytes per 128-bit multiply folded to 64 bits (wyhash's step), the last 16 read overlapping, so that a line costs
/// a few instructions per 16 bytes and no tail loop.
pub(crate) fn hash_of(bytes: &[u8]) -> u64 {
    const K: [u64; 3] = [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344, 0xa409_3822_299f_31d0];
    let n = bytes.len();
    let seed = K[0] ^ (n as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    let word = |i: usize| bytes.get(i..i + 8).and_then(|w| w.try_into().ok()).map_or(0, u64::from_le_bytes);
    let (a, b) = match n {
        0 => (0, 0),
        1..=3 => {
            let byte = |i: usize| u64::from(bytes.get(i).copied().unwrap_or(0));
            (byte(0) | byte(n / 2) << 8 | byte(n - 1) << 16, 0)
        }
        4..=7 => {
            let half = |i: usize| bytes.get(i..i + 4).and_then(|w| w.try_into().ok()).map_or(0, u32::from_le_bytes);
            (u64::from(half(0)), u64::from(half(n - 4)))
        }
        8..=16 => (word(0), word(n - 8)),
        _ => {
            // Every whole 16 bytes before the last byte; the last 16 then overlap them.
            let blocks = bytes.get(..n - 1).unwrap_or_default().chunks_exact(16);
            let h = blocks.fold(seed, |h, b| {
                let (lo, hi) = b.split_at(8);
                let w = |x: &[u8]| x.try_into().map_or(0, u64::from_le_bytes);
                fold_mul(w(lo) ^ K[1], w(hi) ^ h)
            });
            return fold_mul(word(n - 16) ^ K[2], word(n - 8) ^ h);
        }
    };
    fold_mul(a ^ K[1], b ^ seed)
}

/// A printing thread's key: its host (or file, without one), pid, tid and device, in two folded multiplies after
/// the host's hash.
fn stream_key(env: &Envelope, file: usize) -> StreamKey {
    const K: [u64; 3] = [0x9e37_79b9_7f4a_7c15, 0x082e_fa98_ec4e_6c89, 0x4528_21e6_38d0_1377];
    let place = env.host.map_or(file as u64 ^ K[0], |h| hash_of(h.as_bytes()));
    let id = |n: Option<u32>| n.map_or(u64::MAX, u64::from);
    let thread = fold_mul(place ^ id(env.pid), id(env.tid) ^ K[1]);
    fold_mul(thread ^ K[0], env.dev.map_or(u64::MAX, |d| d as u64) ^ K[2])
}

/// The 128-bit product of `a` and `b`, its halves xored.
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// An NCCL line no parser understood, held for one line in case the next one continues it.
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

/// Per printing thread: what a multi-line print in progress needs, and the last line (to drop its repeats).
#[derive(Default, Clone)]
struct Stream {
    /// The order the thread first printed in: prints still open at the end close in it.
    seq: usize,
    thread: Thread,
    /// Hash of the last line this thread printed.
    last_line: u64,
    table: table::Table,
    graph: Option<topo::GraphBuild>,
    /// The system tree being printed: (name column, node index) of the nodes above the current line.
    tree: Vec<(usize, usize)>,
    comm: Option<usize>,
    /// The collective of the last COLL line, for decision lines that do not name theirs.
    last_coll: Option<Collective>,
    /// The op history the last COLL line went to.
    last_op: Option<u64>,
}

impl Stream {
    /// A multi-line print is under way.
    fn is_open(&self) -> bool {
        self.graph.is_some() || self.table.is_open()
    }
}

/// What the log says about the job's size, by source, for [`crate::infer`].
#[derive(Default, Clone)]
pub(crate) struct SizeFacts {
    /// Largest rank count printed, and by what (`nranks`, `nRanks`, `[nranks=N]`, ...).
    pub nranks: Option<(u32, &'static str)>,
    pub nnodes: Option<(u32, &'static str)>,
    /// Ranks on a node, printed (`localRanks`, `nvlsRanks`) or counted in a node's prints (GPUs in its topology
    /// or in a graph channel).
    pub local: Option<(u32, &'static str)>,
    /// A complete ring order's length.
    pub ring: Option<u32>,
    /// A rank's ring neighbours are one rank (`Ring 00 : 0 -> 1 -> 0`): two ranks.
    pub ring_pair: bool,
    /// A NET connection or a graph that leaves the node: more than one node.
    pub multi_node: bool,
    /// CUDA devices printing, by host (or file), capped.
    pub devs: BTreeMap<Place, BTreeSet<i32>>,
}

/// The job being assembled.
#[derive(Clone)]
pub(crate) struct Job {
    pub strict: bool,
    pub files: Vec<String>,
    pub snap: Snapshot,
    pub facts: LogFacts,
    pub evidence: Evidence,
    /// Ranks whose host is known.
    pub rank_host: BTreeMap<u32, Place>,
    /// The highest rank seen anywhere (printing or named as a peer).
    pub max_rank: Option<u32>,
    pub size: SizeFacts,
    /// `Using network X`.
    pub using_network: Option<String>,
    /// Networks that printed `NET/X : Using ...`, plugin networks that printed lines, and `No device found`.
    pub net_using: BTreeSet<String>,
    pub plugin_nets: BTreeSet<String>,
    /// NVLS set up (true) or reported unavailable (false).
    pub nvls: Option<bool>,
    /// Largest `Channel xx/NN` channel count of the ring prints.
    pub ring_nchannels: Option<u32>,
    procs: HashedMap<Option<u32>>,
    /// A process and the rank `procs` holds for it: the last one `learn_rank` saw.
    rank_known: Option<(u64, u32)>,
    /// Hashes of the hosts in `snap.hosts`.
    host_hashes: FastSet<u64>,
    /// Hashes of the facts kept in deduplicated lists (see `first_time`).
    seen: FastSet<u64>,
    /// Cites whose quotes are full (see `cite`), at most [`MAX_CITES_FULL`].
    cites_full: FastSet<Cite>,
    streams: HashedMap<Stream>,
    /// Threads that printed so far (see `Stream::seq`).
    streams_seen: usize,
    /// Threads with a multi-line print under way (a table, a graph).
    open_prints: usize,
    /// The communicator rows by (place, pid, comm pointer), hashed.
    comm_index: FastMap<u64, usize>,
    /// (place, comm pointer) to the rank that printed it.
    comm_rank: FastMap<u64, u32>,
    conn_seen: HashedSet,
    ring_index: HashMap<u32, usize>,
    /// (channel, rank) of the tree entries kept, packed in a word.
    tree_seen: WordSet<u64>,
    /// (channel, prev, rank, next) of the ring neighbour lines kept, packed in two words.
    neighbours_seen: WordSet<u128>,
    decision_index: FastMap<(Collective, u64, u8, u8, Option<u32>), usize>,
    unnamed_seen: FastSet<(u64, u8, u8, Option<u32>)>,
    ops: ops::OpHistories,
    pub versions: BTreeMap<String, BTreeSet<String>>,
    topo: topo::TopoIndex,
    /// The last non-NCCL line of each file, to drop its repeats.
    last_context: FastMap<usize, u64>,
    pending: Option<Pending>,
    /// The enabled matrix prints its rows without a prefix after its INFO line: its columns, once its header
    /// row named them.
    matrix: Option<Option<table::MatrixColumns>>,
    /// Files that had a line cut (each is warned about once).
    cut_files: FastSet<usize>,
    dropped: Dropped,
    /// Hosts a benchmark's `# Rank` lines named.
    bench_hosts: u32,
    /// Bare messages: the anonymous process of the current stretch (counted), the file it is open in, and the
    /// last bare message's place (file, line), which weak messages must follow (see `message::parse_bare`).
    bare_proc: u64,
    bare_open: Option<usize>,
    bare_last: Option<(usize, u64)>,
    /// Times each warning line was kept (while the list is under its cap).
    warning_times: FastMap<u64, u32>,
}

impl Job {
    pub(crate) fn new(strict: bool) -> Self {
        Job {
            strict,
            files: Vec::new(),
            snap: Snapshot::new(Source::Log { files: Vec::new() }),
            facts: LogFacts::default(),
            evidence: Evidence::default(),
            rank_host: BTreeMap::new(),
            max_rank: None,
            size: SizeFacts::default(),
            using_network: None,
            net_using: BTreeSet::new(),
            plugin_nets: BTreeSet::new(),
            nvls: None,
            ring_nchannels: None,
            procs: HashedMap::default(),
            rank_known: None,
            host_hashes: FastSet::default(),
            seen: FastSet::default(),
            cites_full: FastSet::default(),
            streams: HashedMap::default(),
            streams_seen: 0,
            open_prints: 0,
            comm_index: FastMap::default(),
            comm_rank: FastMap::default(),
            conn_seen: HashedSet::default(),
            ring_index: HashMap::new(),
            tree_seen: WordSet::default(),
            neighbours_seen: WordSet::default(),
            decision_index: FastMap::default(),
            unnamed_seen: FastSet::default(),
            ops: ops::OpHistories::default(),
            versions: BTreeMap::new(),
            topo: topo::TopoIndex::default(),
            last_context: FastMap::default(),
            pending: None,
            matrix: None,
            cut_files: FastSet::default(),
            dropped: Dropped::default(),
            bench_hosts: 0,
            bare_proc: 0,
            bare_open: None,
            bare_last: None,
            warning_times: FastMap::default(),
        }
    }

    pub(crate) fn add_file(&mut self, name: &str) -> usize {
        self.flush_pending();
        self.matrix = None;
        self.files.push(name.to_string());
        self.files.len() - 1
    }

    fn cite(&mut self, cite: Cite, at: &At) {
        // Most cited lines come after their kind's first few quotes: one hash lookup says so, where the evidence's
        // ordered map compared the cite at every level.
        if self.cites_full.contains(&cite) {
            return;
        }
        if self.evidence.get(&cite).len() + 1 >= Evidence::MAX_PER_KIND && self.cites_full.len() < MAX_CITES_FULL {
            self.cites_full.insert(cite.clone());
        }
        self.evidence.add(cite, || at.line_ref(&self.files));
    }

    /// Feeds one raw line. `cut` says the input reader truncated it.
    pub(crate) fn line(&mut self, file: usize, lineno: u64, line: Text, cut: bool) {
        let raw = line.bytes();
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
        let text = match line {
            Text::Utf8(s) => std::borrow::Cow::Borrowed(s),
            Text::Bytes(b) => match std::str::from_utf8(b) {
                Ok(s) => std::borrow::Cow::Borrowed(s),
                Err(_) => {
                    stats.invalid_utf8_lines += 1;
                    String::from_utf8_lossy(raw)
                }
            },
        };
        if envelope::any_byte(raw, |b| (b < 0x20) & (b != b'\t')) {
            stats.garbled_lines += 1;
        }
        let at = At { file, line: lineno, text: &text };
        self.dispatch(&at, &text);
    }

    fn dispatch(&mut self, at: &At, text: &str) {
        match envelope::split(text) {
            Line::Other { text } => self.context(at, text),
            Line::Nccl(env) => {
                self.matrix = None;
                self.facts.stats.nccl_lines += 1;
                if env.host.is_some() || env.dev.is_some() || env.pid.is_some() {
                    // A prefixed line ends the stretch of bare messages before it.
                    if self.bare_open == Some(at.file) {
                        self.end_bare(at.file);
                    }
                } else {
                    // `NCCL WARN ...`, `NCCL version ...` alone: bare too.
                    self.open_bare(at);
                }
                if self.pending.is_some() {
                    self.flush_pending();
                }
                // Two processes writing into one line: each record on its own, where the first can be told apart.
                if let Some(Line::Nccl(second)) = envelope::has_marker(env.msg).then(|| envelope::split(env.msg)) {
                    if second.level != Level::Version {
                        self.facts.stats.garbled_lines += 1;
                        let cut = second.start + self.glued_junk(&second);
                        if cut > 0 {
                            let first = Envelope { msg: &env.msg[..cut], ..env };
                            if let Some(ev) = message::parse(first.msg) {
                                self.nccl_event(at, &first, ev);
                            }
                        }
                        self.dispatch(at, &env.msg[cut..]);
                        return;
                    }
                }
                self.nccl(at, &env);
            }
        }
    }

    /// How many bytes of `env`'s host token belong to whatever was glued before the host: the part in front of a
    /// known host name it ends with.
    /// The known hosts are looked up by hash, one lookup for each end of the token up to [`MAX_HOST_LEN`] bytes, so
    /// the cost does not grow with the hosts known (a scan of them was quadratic in hosts).
    fn glued_junk(&self, env: &Envelope) -> usize {
        let Some(raw) = env.host else { return 0 };
        (raw.len().saturating_sub(MAX_HOST_LEN)..raw.len())
            .filter(|&i| raw.is_char_boundary(i))
            .find(|&i| self.host_hashes.contains(&hash_of(&raw.as_bytes()[i..])))
            .unwrap_or(0)
    }

    /// The host of a line: as printed, or the known host its token ends with when something was glued before it
    /// (a progress bar, another record). A token that cannot be a host name and matches no known host is no host.
    fn host<'a>(&mut self, env: &Envelope<'a>) -> Option<(&'a str, u64)> {
        let raw = env.host?;
        let h = hash_of(raw.as_bytes());
        if self.host_hashes.contains(&h) {
            return Some((raw, h));
        }
        let clean = raw.len() <= MAX_HOST_LEN
            && raw.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'<' | b'>'));
        let junk = self.glued_junk(env);
        if junk > 0 || !clean {
            self.facts.stats.garbled_lines += 1;
            return (junk > 0).then(|| (&raw[junk..], hash_of(&raw.as_bytes()[junk..])));
        }
        Some((raw, h))
    }

    /// Who printed a line, through its thread's cached answer; `None` for a line its thread printed just before,
    /// which is dropped.
    ///
    /// The rule for repeats: a line is an echo (output captured twice, a log copied into itself) only when one
    /// process printed it twice in a row from one thread, its host, pid and tid printed, and it is no per-call
    /// line (`repeatable`: each call prints its decision again, the same for calls of one size). Every other
    /// repeat is data: without a thread (bare messages, a stripped prefix) identical lines are as likely different
    /// ranks' or calls'. Both are counted: `duplicate_lines` dropped, `repeated_lines` kept.
    // Inlined into its two callers: the answer is built in place rather than returned through memory.
    #[inline(always)]
    fn who<'a>(&mut self, env: &Envelope<'a>, file: usize, repeatable: bool) -> Option<Who<'a>> {
        let stream = if env.host.is_none() && env.pid.is_none() && env.dev.is_none() {
            self.bare_stream(file)
        } else {
            stream_key(env, file)
        };
        // The thread is known from the prefix: its message alone tells a repeat.
        let line = hash_of(env.msg.as_bytes());
        let full = self.streams.len() >= MAX_THREADS;
        let echo = !repeatable && env.pid.is_some() && env.tid.is_some();
        let thread = match self.streams.get_mut(&stream) {
            Some(s) if s.last_line == line && echo => {
                self.facts.stats.duplicate_lines += 1;
                return None;
            }
            Some(s) if s.last_line == line => {
                self.facts.stats.repeated_lines += 1;
                s.thread
            }
            Some(s) => {
                s.last_line = line;
                s.thread
            }
            None if full => {
                self.dropped.thread_lines += 1;
                let thread = self.new_thread(env, file);
                return Some(self.who_is(env, file, thread, OVERFLOW_STREAM));
            }
            None => {
                let thread = self.new_thread(env, file);
                let seq = self.streams_seen;
                self.streams_seen += 1;
                self.streams.insert(stream, Stream { seq, thread, last_line: line, ..Stream::default() });
                thread
            }
        };
        Some(self.who_is(env, file, thread, stream))
    }

    fn who_is<'a>(&self, env: &Envelope<'a>, file: usize, thread: Thread, stream: StreamKey) -> Who<'a> {
        let host = env.host.filter(|_| thread.host_ok).map(|raw| &raw[thread.junk..]);
        let key = ProcKey {
            id: thread.proc,
            host,
            file: if host.is_some() { usize::MAX } else { file },
            pid: env.pid,
            dev: env.dev,
        };
        Who { key, stream }
    }

    /// A thread printing for the first time: its host (junk glued before it left out) and process, counted.
    fn new_thread(&mut self, env: &Envelope, file: usize) -> Thread {
        let resolved = self.host(env);
        let junk = match (env.host, resolved) {
            (Some(raw), Some((h, _))) => raw.len() - h.len(),
            _ => 0,
        };
        let (host, place) = match resolved {
            Some((h, hash)) => (Some(h), hash),
            None if env.pid.is_none() && env.dev.is_none() => {
                (None, (file as u64 ^ 0x9e37_79b9_7f4a_7c15).rotate_left(17) ^ self.bare_proc)
            }
            None => (None, file as u64 ^ 0x9e37_79b9_7f4a_7c15),
        };
        let key = ProcKey::new(host, place, env, file);
        if let Some(h) = host.filter(|_| !self.host_hashes.contains(&place)) {
            if self.snap.hosts.len() < MAX_HOSTS {
                self.host_hashes.insert(place);
                self.snap.hosts.push(h.to_string());
            } else if self.dropped.hosts.len() < MAX_HOSTS_COUNTED {
                self.dropped.hosts.insert(place);
            }
        }
        if !self.procs.contains_key(&key.id) && self.procs.len() < MAX_THREADS {
            if let Some(d) = key.dev.filter(|&d| (0..1024).contains(&d)) {
                self.size.devs.entry(key.place()).or_default().insert(d);
            }
            self.procs.insert(key.id, None);
        }
        Thread { proc: key.id, junk, host_ok: host.is_some() }
    }

    fn context(&mut self, at: &At, text: &str) {
        if let Some(columns) = self.matrix.take() {
            if let Some((coll, flags)) = message::tuning::matrix_row(text) {
                self.matrix_row(columns.as_ref(), coll, &flags);
                self.matrix = Some(columns);
                return;
            }
            if let Some(header) = message::tuning::matrix_header(text) {
                self.matrix = Some(Some(header));
                return;
            }
        }
        if let Some(p) = self.pending.take() {
            let rest = text.trim_start();
            for joined in [format!("{}{rest}", p.msg), format!("{} {rest}", p.msg)] {
                if let Some(ev) = message::parse(&joined) {
                    self.facts.stats.wrapped_lines += 1;
                    let text = format!("{}\n{}", p.line.text, text);
                    let at2 = At { file: at.file, line: p.line.line, text: &text };
                    let key = ProcKey { id: p.id, host: p.host.as_deref(), file: p.file, pid: p.pid, dev: p.dev };
                    if !self.event(&at2, &key, p.rank, p.stream, ev) {
                        self.not_understood(p.line);
                    }
                    return;
                }
            }
            self.pending = Some(p);
            self.flush_pending();
        }
        if self.bare(at, text) {
            return;
        }
        self.facts.stats.context_lines += 1;
        let hash = hash_of(text.as_bytes());
        if self.last_context.insert(at.file, hash) == Some(hash) && !text.is_empty() {
            self.facts.stats.duplicate_lines += 1;
            return;
        }
        if starts_with_hash(text) {
            self.bench_rank(text);
        }
        let said = classify::context(text);
        if said.error {
            let rank = envelope::launcher_rank(text).or_else(|| bracket_rank(text));
            self.warning(at, rank, None, text.trim(), None);
        }
        if let Some(v) = said.version {
            self.facts.rccl |= said.rccl;
            self.version(at, v, envelope::launcher_rank(text).map(|r| format!("rank {r}")));
        }
    }

    /// A line without NCCL's prefix that is an NCCL message (`message::parse_bare` says which are). Each stretch of
    /// them between prefixed NCCL lines of a file is read as one anonymous process: with no host, pid or thread
    /// printed nothing says which process printed which line, so none is split off, joined to a known process,
    /// tied to one rank or placed on a host.
    fn bare(&mut self, at: &At, text: &str) -> bool {
        let env = envelope::bare(text);
        let in_run = at.line > 0 && self.bare_last == Some((at.file, at.line - 1));
        let Some(ev) = message::parse_bare(env.msg, in_run) else { return false };
        self.facts.stats.nccl_lines += 1;
        self.open_bare(at);
        self.nccl_event(at, &env, ev);
        true
    }

    /// The thread of the current stretch's anonymous process in `file`.
    fn bare_stream(&self, file: usize) -> StreamKey {
        let mut h = FastHash(0x6261_7265);
        h.word(file as u64);
        h.word(self.bare_proc);
        h.0
    }

    /// Ends the open stretch of bare lines: its anonymous process prints no more, so its thread's state goes (a
    /// log with a bare line between every two prefixed ones must not fill the thread table).
    fn end_bare(&mut self, file: usize) {
        self.bare_open = None;
        let stream = self.bare_stream(file);
        self.close_prints(stream);
        if let Some(s) = self.streams.remove(&stream) {
            self.procs.remove(&s.thread.proc);
            self.rank_known = None;
        }
    }

    /// Counts a bare NCCL line, in the stretch open in its file or a new one.
    fn open_bare(&mut self, at: &At) {
        if let Some(other) = self.bare_open.filter(|&f| f != at.file) {
            self.end_bare(other);
        }
        if self.bare_open != Some(at.file) {
            self.bare_proc += 1;
            self.bare_open = Some(at.file);
            self.facts.stats.bare_processes += 1;
        }
        self.bare_last = Some((at.file, at.line));
        self.facts.stats.bare_lines += 1;
    }

    /// Called at the end of the input.
    pub(crate) fn finish_lines(&mut self) {
        self.flush_pending();
        self.say_dropped();
        let mut streams: Vec<(usize, StreamKey)> = self.streams.iter().map(|(&k, s)| (s.seq, k)).collect();
        streams.sort_unstable();
        for (_, s) in streams {
            self.close_prints(s);
        }
        self.snap.ops = self.ops.records().into();
    }

    /// Says what the caps left out, as warnings of class `input` (past the warnings' own cap: there are five at
    /// most).
    fn say_dropped(&mut self) {
        let d = &self.dropped;
        let hosts = match d.hosts.len() {
            0 => None,
            n if n >= MAX_HOSTS_COUNTED => Some(format!("at least {n}")),
            n => Some(n.to_string()),
        };
        let said = [
            hosts.map(|n| {
                format!(
                    "more than {MAX_HOSTS} hosts (collscope's cap on the host list): {n} more are not listed; their \
                     lines are read"
                )
            }),
            (d.communicators > 0).then(|| {
                format!(
                    "more than {MAX_COMMUNICATORS} communicator rows (collscope's cap, one row per rank printing a \
                     communicator): {} more communicator lines were not kept",
                    d.communicators
                )
            }),
            (d.thread_lines > 0).then(|| {
                format!(
                    "more than {MAX_THREADS} printing threads (collscope's cap): {} lines of the threads past it were \
                     read without per-thread state (repeats not dropped, multi-line prints not joined)",
                    d.thread_lines
                )
            }),
            (d.topology > 0).then(|| {
                format!(
                    "the `=== System` prints hold more than collscope keeps of them ({MAX_TOPO_NODES} nodes, \
                     {MAX_TOPO_LINKS} links, {MAX_TOPO_PATHS} paths, all hosts together): {} more were not kept",
                    d.topology
                )
            }),
            (!d.rows.is_empty()).then(|| {
                let rows: Vec<String> = d.rows.iter().map(|(t, n)| format!("{n} {t} rows")).collect();
                format!(
                    "more than collscope keeps of the rings ({MAX_RINGS} channels) and the per-rank tables ({MAX_ROWS} \
                     rows each): {} not kept",
                    rows.join(", ")
                )
            }),
        ];
        for text in said.into_iter().flatten() {
            let class = classify::INPUT.to_string();
            self.snap.warnings.push(Warning { rank: None, host: None, line: None, text, class, source: None });
        }
    }

    fn flush_pending(&mut self) {
        if let Some(p) = self.pending.take() {
            self.not_understood(p.line);
        }
    }

    /// An NCCL line that said nothing the reader could use.
    fn not_understood(&mut self, line: LineRef) {
        self.facts.stats.unparsed_nccl_lines += 1;
        if self.strict && self.snap.unparsed_nccl_lines.len() < MAX_UNPARSED {
            self.snap.unparsed_nccl_lines.push(line);
        }
    }

    fn nccl(&mut self, at: &At, env: &Envelope) {
        if env.level == Level::Call {
            return;
        }
        if matches!(env.level, Level::Info | Level::Trace) {
            match message::parse(env.msg) {
                Some(ev) => self.nccl_event(at, env, ev),
                None => {
                    let Some(who) = self.who(env, at.file, false) else { return };
                    let key = who.key;
                    let rank = env.launcher_rank.or_else(|| self.rank_of(key.id));
                    self.pending = Some(Pending {
                        line: at.line_ref(&self.files),
                        msg: env.msg.to_string(),
                        host: who.key.host.map(str::to_string),
                        file: key.file,
                        pid: key.pid,
                        dev: key.dev,
                        id: key.id,
                        rank,
                        stream: who.stream,
                    })
                }
            }
            return;
        }
        let Some(who) = self.who(env, at.file, false) else { return };
        let rank = env.launcher_rank.or_else(|| self.rank_of(who.key.id));
        if let Some(r) = env.launcher_rank {
            self.learn_rank(&who.key, r);
        }
        match env.level {
            Level::Warn => self.warning(at, rank, who.key.host, env.msg.trim_end(), env.location),
            Level::Version => {
                if let Some(v) = message::setup::version(env.msg) {
                    self.version(at, &v, printer(who.key.host, env, rank));
                }
            }
            _ => {}
        }
    }

    /// The rank `procs` holds for a process.
    fn rank_of(&self, proc: u64) -> Option<u32> {
        match self.rank_known {
            Some((known, rank)) if known == proc => Some(rank),
            _ => self.procs.get(&proc).copied().flatten(),
        }
    }

    /// Keeps `open_prints` right after `stream`'s prints opened or closed (`was`: open before).
    fn settle(&mut self, stream: StreamKey, was: bool) {
        let now = self.streams.get(&stream).is_some_and(Stream::is_open);
        match (was, now) {
            (false, true) => self.open_prints += 1,
            (true, false) => self.open_prints -= 1,
            _ => {}
        }
    }

    // Inlined: the parsed event goes to `event` without another copy of it.
    #[inline(always)]
    fn nccl_event(&mut self, at: &At, env: &Envelope, ev: Event) {
        let Some(who) = self.who(env, at.file, matches!(ev, Event::Decision(_))) else { return };
        let key = who.key;
        let rank = env.launcher_rank.or_else(|| self.rank_of(key.id));
        if let Some(r) = env.launcher_rank {
            self.learn_rank(&key, r);
        }
        if let Event::Version(v) = &ev {
            self.version(at, v, printer(who.key.host, env, rank));
        } else if !self.event(at, &key, rank, who.stream, ev) {
            self.not_understood(at.line_ref(&self.files));
        }
    }
}

/// A line being handled: where it is, what it says, and its hash.
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    pub file: usize,
    pub line: u64,
    pub text: &'a str,
}

impl At<'_> {
    pub(crate) fn line_ref(&self, files: &[String]) -> LineRef {
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

fn printer(host: Option<&str>, env: &Envelope, rank: Option<u32>) -> Option<String> {
    rank.map(|r| format!("rank {r}")).or_else(|| host.map(|h| format!("{h}:{}", env.pid.unwrap_or(0))))
}

/// `text.trim_start().starts_with('#')`, without the Unicode trim on the lines that do not need it: spaces and
/// tabs are skipped bytewise, and any other ASCII byte decides (the table rows of a benchmark start with spaces).
fn starts_with_hash(text: &str) -> bool {
    match text.bytes().find(|&b| b != b' ' && b != b'\t') {
        Some(b'#') => true,
        Some(b) if b.is_ascii() && !b.is_ascii_whitespace() && b != 0x0b => false,
        None => false,
        // Other whitespace (a line end, a vertical tab, a Unicode space): the full trim.
        Some(_) => text.trim_start().starts_with('#'),
    }
}

/// `[Rank 7]` / `[PG 0 (default_pg) Rank 7]` in PyTorch lines.
fn bracket_rank(text: &str) -> Option<u32> {
    let i = text.find(" Rank ").map(|i| i + 6).or_else(|| text.find("[Rank ").map(|i| i + 6))?;
    let digits: String = text[i..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_with_hash_is_the_unicode_trim() {
        let texts = [
            "",
            "   ",
            "#",
            "# Rank 0",
            "  \t # x",
            "x #",
            "  8  2  float",
            "\u{a0}#",
            " \u{3000}#",
            "\x0b#",
            "\x0c#",
            "\r#",
            "\n#",
            " \u{85}#",
            "é#",
            " \x1f#",
            "\t\t",
        ];
        for t in texts {
            assert_eq!(starts_with_hash(t), t.trim_start().starts_with('#'), "{t:?}");
        }
        assert!(starts_with_hash("\u{a0} \t#") && !starts_with_hash(" \x1f#"));
    }

    /// The hash as it was written first: the tail copied into a zeroed word. The faster tail read keeps every
    /// value (process ids, communicator keys, facts seen) as it was.
    fn reference(b: &[u8]) -> u64 {
        let mut h = FastHash::default();
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            h.word(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        h.word(u64::from_le_bytes(tail) ^ b.len() as u64);
        h.0
    }

    #[test]
    fn the_tail_read_in_one_load_hashes_as_the_copied_tail() {
        let text: Vec<u8> = (0..48u8).map(|i| i.wrapping_mul(37).wrapping_add(11)).collect();
        for start in 0..text.len() {
            for end in start..=text.len() {
                let mut h = FastHash::default();
                h.bytes(&text[start..end]);
                assert_eq!(h.0, reference(&text[start..end]), "bytes {start}..{end}");
            }
        }
    }

    #[test]
    fn line_hashes_tell_apart_lines_that_differ_in_one_byte_or_their_length() {
        let line = b"Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read comm 0x55d3 nRanks 16 busId 1b000".to_vec();
        let mut seen = HashSet::new();
        for end in 0..=line.len() {
            assert!(seen.insert(hash_of(&line[..end])), "prefix of {end} bytes");
        }
        for i in 0..line.len() {
            let mut other = line.clone();
            other[i] ^= 1;
            assert!(seen.insert(hash_of(&other)), "byte {i} flipped");
        }
        // Host names that differ only in their last digits (a hash that lost them joined hosts' threads).
        let hosts: HashSet<u64> = (0..300_000).map(|i| hash_of(format!("gpu-node-{i}").as_bytes())).collect();
        assert_eq!(hosts.len(), 300_000);
    }
}
