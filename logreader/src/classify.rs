//! Sorting error lines into classes: what kind of failure a WARN (or a framework's error line) reports.

use aho_corasick::{AhoCorasick, AhoCorasickKind, Input, MatchKind};
use std::sync::OnceLock;

/// The class names the model's `Warning::class` uses.
pub const CLASSES: &[&str] = &["watchdog", "ib_verbs", "shm", "cuda", "socket", "proxy", "nccl_error", "other", INPUT];

/// The class of the reader's own warnings about its input (a line cut, gzip data damaged), not the job's.
pub const INPUT: &str = "input";

/// Ordered: the first class whose markers appear wins (a CUDA error on a socket path is a CUDA error).
const MARKERS: &[(&str, &[&str])] = &[
    ("watchdog", &["Watchdog caught collective operation timeout", "detected by watchdog", "watchdog thread"]),
    (
        "ib_verbs",
        &[
            "ibv_",
            "NET/IB",
            "completion with error",
            "vendor err",
            "IB : ",
            "wc status",
            "ibverbs",
            "mlx5",
            "rdma",
            "RDMA",
        ],
    ),
    ("shm", &["/dev/shm", "shared memory", "posix_fallocate", "shm_open", "shmutils", "shm.h", "shm.cc"]),
    ("cuda", &["Cuda failure", "CUDA error", "cudaError", "out of memory", "CUDA driver", "cuda"]),
    (
        "socket",
        &[
            "socket",
            "Socket",
            "Connection refused",
            "Connection reset",
            "No route to host",
            "Connection timed out",
            "Net : ",
            "Broken pipe",
            "bootstrap",
            "Bootstrap",
        ],
    ),
    ("proxy", &["Proxy Call", "proxy", "Proxy"]),
    (
        "nccl_error",
        &[
            "ncclSystemError",
            "ncclInternalError",
            "ncclRemoteError",
            "ncclInvalidUsage",
            "ncclInvalidArgument",
            "ncclUnhandledCudaError",
            "NCCL error",
        ],
    ),
];

/// Every marker in one automaton, each pattern knowing its class's rank in [`MARKERS`].
fn markers() -> &'static (AhoCorasick, Vec<usize>) {
    static A: OnceLock<(AhoCorasick, Vec<usize>)> = OnceLock::new();
    A.get_or_init(|| {
        let (patterns, ranks): (Vec<&str>, Vec<usize>) =
            MARKERS.iter().enumerate().flat_map(|(i, (_, ms))| ms.iter().map(move |m| (*m, i))).unzip();
        // Leftmost-first, searched from each match's start on (see `best_rank`): the vector prefilter skips to
        // candidates where an overlapping search stepped through every byte. An NFA: the prefilter leaves it a few
        // bytes to step after each candidate, and a DFA's build cost more than all the searches of a 4 MB log.
        (automaton(patterns, AhoCorasickKind::NoncontiguousNFA, MatchKind::LeftmostFirst), ranks)
    })
}

/// The rank in [`MARKERS`] of the first class whose markers appear in `text` or `location`: the least rank of all
/// their matches, overlapping ones included. Each search starts one byte past the last match's start, so every
/// position where a marker starts is visited; at one position all the markers that match are of one class (no
/// marker is a prefix of another class's: a test checks it), so the leftmost-first pick loses no class.
fn best_rank(text: &str, location: &str) -> Option<usize> {
    let (ac, ranks) = markers();
    let mut best: Option<usize> = None;
    for s in [text, location] {
        let mut at = 0;
        while let Some(m) = ac.find(Input::new(s).span(at..s.len())) {
            let rank = ranks[m.pattern().as_usize()];
            if rank == 0 {
                return Some(0);
            }
            best = Some(best.map_or(rank, |b| b.min(rank)));
            at = m.start() + 1;
        }
    }
    best
}

/// Classifies an error line by its text and the NCCL source location that printed it.
pub fn classify(text: &str, location: Option<&str>) -> &'static str {
    let loc = location.unwrap_or("");
    match best_rank(text, loc) {
        Some(i) => MARKERS[i].0,
        None if loc.contains("socket") => "socket",
        None => "other",
    }
}

/// Lines of other programs that report a collective failure (PyTorch's watchdog, NCCL errors raised to Python).
const FRAMEWORK_ERRORS: &[&str] = &[
    "Watchdog caught collective operation timeout",
    "detected by watchdog",
    "NCCL error",
    "ncclSystemError",
    "ncclInternalError",
    "ncclRemoteError",
    "ncclInvalidUsage",
    "ncclUnhandledCudaError",
    "CUDA out of memory",
    "DistBackendError",
];

/// What a line of another program says that matters here.
#[derive(Debug, Default, PartialEq)]
pub struct Context<'a> {
    /// It reports a collective failure.
    pub error: bool,
    /// It quotes NCCL's version (`NCCL version 2.18.1`, a framework's error message, a banner) or RCCL's
    /// (`RCCL version : 2.20.5-HEAD:...`).
    pub version: Option<&'a str>,
    pub rccl: bool,
}

const NCCL_VERSION: &str = "NCCL version ";
const RCCL_VERSION: &str = "RCCL version : ";

/// One automaton for every marker and both version phrases: this runs on the lines of other programs that hold a
/// marker's byte. Leftmost-first, which finds the same matches here (no two of these markers can overlap in a text)
/// and lets the automaton skip to candidates with a vector prefilter instead of stepping through every byte. The
/// prefilter finds the candidates, so the automaton steps only a few bytes after each: an NFA searches as fast as
/// a DFA here (measured) and costs a fifth of its one-time build.
fn context_markers() -> &'static AhoCorasick {
    static A: OnceLock<AhoCorasick> = OnceLock::new();
    A.get_or_init(|| context_automaton(AhoCorasickKind::NoncontiguousNFA, MatchKind::LeftmostFirst))
}

fn context_automaton(kind: AhoCorasickKind, match_kind: MatchKind) -> AhoCorasick {
    automaton(FRAMEWORK_ERRORS.iter().chain(&[NCCL_VERSION, RCCL_VERSION]), kind, match_kind)
}

/// An automaton of the built-in markers.
fn automaton<P: AsRef<[u8]>>(
    patterns: impl IntoIterator<Item = P>,
    kind: AhoCorasickKind,
    match_kind: MatchKind,
) -> AhoCorasick {
    AhoCorasick::builder().kind(Some(kind)).match_kind(match_kind).build(patterns).expect("built-in markers build")
}

/// Reads a line of another program in one pass.
pub fn context(text: &str) -> Context<'_> {
    let mut out = Context::default();
    // Every marker holds `C`, `E` or `g` (a test checks it): one byte search rules out most lines of other
    // programs (a benchmark's table and its `#` lines hold none of them) before the automaton runs.
    if memchr::memchr3(b'C', b'E', b'g', text.as_bytes()).is_none() {
        return out;
    }
    for m in context_markers().find_iter(text) {
        let i = m.pattern().as_usize();
        if i < FRAMEWORK_ERRORS.len() {
            out.error = true;
            continue;
        }
        let rest = &text[m.end()..];
        let end = rest.find(|c: char| c.is_whitespace() || c == ',' || c == ')' || c == '-').unwrap_or(rest.len());
        let v = &rest[..end];
        if v.starts_with(|c: char| c.is_ascii_digit()) && out.version.is_none() {
            out.version = Some(v);
            out.rccl = i == FRAMEWORK_ERRORS.len() + 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_from_real_lines() {
        assert_eq!(
            classify(
                "Net : Call to recv from my_ip<30478> failed : Connection reset by peer",
                Some("misc/socket.cc:518")
            ),
            "socket"
        );
        assert_eq!(
            classify("Call to posix_fallocate failed : No space left on device", Some("include/shm.h:28")),
            "shm"
        );
        assert_eq!(classify("Error while creating shared memory segment /dev/shm/nccl-x (size 1)", None), "shm");
        assert_eq!(
            classify(
                "NET/IB : Got completion from peer 10.0.0.2<1> with error 12, opcode 0, len 0, vendor err 129",
                None
            ),
            "ib_verbs"
        );
        assert_eq!(classify("Call to ibv_create_qp failed", Some("misc/ibvwrap.cc:1")), "ib_verbs");
        assert_eq!(classify("Cuda failure 'out of memory'", Some("enqueue.cc:1")), "cuda");
        assert_eq!(classify("Proxy Call to rank 3 failed (Setup)", Some("proxy.cc:1")), "proxy");
        assert_eq!(classify("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(...)", None), "watchdog");
        assert_eq!(classify("unhandled system error, ncclSystemError", None), "nccl_error");
        assert_eq!(classify("something odd", None), "other");
        assert!(CLASSES.iter().all(|c| *c == "other" || *c == INPUT || MARKERS.iter().any(|(m, _)| m == c)));
        let c = context("RuntimeError: NCCL error in: x.cpp:1, unhandled system error, NCCL version 2.18.1");
        assert_eq!(c, Context { error: true, version: Some("2.18.1"), rccl: false });
        assert_eq!(context("# Avg bus bandwidth"), Context::default());
        assert_eq!(context("  8  2  float  sum  145.4  0.00  0.00  2e-07"), Context::default());
        assert!(FRAMEWORK_ERRORS
            .iter()
            .chain(&[NCCL_VERSION, RCCL_VERSION])
            .all(|m| m.bytes().any(|b| b"CEg".contains(&b))));
        assert_eq!(context("NCCL version is what it is").version, None);
        assert_eq!(
            context("RCCL version : 2.20.5-HEAD:7a83a05"),
            Context { error: false, version: Some("2.20.5"), rccl: true }
        );
    }

    /// Every line of the fixture logs (`../shared` when present) and of `tests/data`.
    fn fixture_lines(why: &str) -> Vec<String> {
        let ours = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let mut lines = Vec::new();
        for dir in [collscope_testkit::fixtures(why), Some(ours)].into_iter().flatten() {
            for f in std::fs::read_dir(dir).unwrap().flatten() {
                let bytes = std::fs::read(f.path()).unwrap();
                lines.extend(String::from_utf8_lossy(&bytes).lines().map(str::to_string));
            }
        }
        lines
    }

    #[test]
    fn the_leftmost_search_classifies_as_the_overlapping_one() {
        let patterns = MARKERS.iter().enumerate().flat_map(|(i, (_, ms))| ms.iter().map(move |m| (*m, i)));
        let patterns: Vec<(&str, usize)> = patterns.collect();
        // What `best_rank` relies on: no marker starts another class's marker.
        for (a, ra) in &patterns {
            for (b, rb) in &patterns {
                assert!(ra == rb || !b.starts_with(a), "{a:?} starts {b:?}");
            }
        }
        // The search it replaced: every match, overlapping ones included.
        let overlapping = automaton(patterns.iter().map(|p| p.0), AhoCorasickKind::DFA, MatchKind::Standard);
        let reference = |text: &str, loc: &str| {
            [text, loc]
                .iter()
                .flat_map(|s| overlapping.find_overlapping_iter(*s))
                .map(|m| patterns[m.pattern()].1)
                .min()
        };
        // Texts where a marker starts inside another class's (`Connection refuse` + `detected by watchdog`).
        let mut texts = Vec::new();
        for (a, _) in &patterns {
            for (b, _) in &patterns {
                for k in 1..a.len().min(b.len()) {
                    if a.ends_with(&b[..k]) {
                        texts.push(format!("x {a}{} y", &b[k..]));
                    }
                }
            }
        }
        let glued = texts.len();
        texts.extend(patterns.iter().map(|(m, _)| format!("x {m} y")));
        texts.extend(fixture_lines("real logs for the warning classes"));
        let mut classes = std::collections::BTreeSet::new();
        for t in &texts {
            for loc in ["", "misc/socket.cc:518", "include/shm.h:28"] {
                let want = reference(t, loc);
                assert_eq!(best_rank(t, loc), want, "{t:?} at {loc:?}");
                classes.extend(want);
            }
        }
        assert!(glued > 30 && classes.len() == MARKERS.len(), "{glued} glued texts, classes {classes:?}");
    }

    #[test]
    fn the_leftmost_context_automaton_finds_what_the_standard_one_finds() {
        let standard = context_automaton(AhoCorasickKind::DFA, MatchKind::Standard);
        let spans = |ac: &AhoCorasick, t: &str| ac.find_iter(t).map(|m| (m.pattern(), m.span())).collect::<Vec<_>>();
        let mut texts = vec![
            "RuntimeError: NCCL error in: x.cpp:1, unhandled system error, NCCL version 2.18.1".to_string(),
            "[Rank 3] Watchdog caught collective operation timeout, detected by watchdog; RCCL version : 2.20.5-HEAD"
                .to_string(),
            "ncclSystemErrorncclInternalError NCCL versionNCCL error CUDA out of memoryDistBackendError".to_string(),
        ];
        texts.extend(fixture_lines("real logs for the context automaton"));
        let mut found = 0;
        for t in &texts {
            let s = spans(&standard, t);
            found += s.len();
            assert_eq!(spans(context_markers(), t), s, "{t}");
        }
        assert!(found >= 6, "{found}");
    }
}
