//! Sorting error lines into classes: what kind of failure a WARN (or a framework's error line) reports.

use aho_corasick::AhoCorasick;
use memchr::memmem;
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

/// Classifies an error line by its text and the NCCL source location that printed it.
pub fn classify(text: &str, location: Option<&str>) -> &'static str {
    let loc = location.unwrap_or("");
    for (class, markers) in MARKERS {
        if markers.iter().any(|m| text.contains(m) || loc.contains(m)) {
            return class;
        }
    }
    if loc.contains("socket") {
        return "socket";
    }
    "other"
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

/// One automaton for every marker: this runs on every line of other programs.
fn framework_errors() -> &'static AhoCorasick {
    static A: OnceLock<AhoCorasick> = OnceLock::new();
    A.get_or_init(|| AhoCorasick::new(FRAMEWORK_ERRORS).expect("built-in markers build"))
}

pub fn is_framework_error(text: &str) -> bool {
    framework_errors().is_match(text)
}

/// `NCCL version 2.18.1` quoted in another program's line (a framework's error message, a banner).
pub fn version_in(text: &str) -> Option<String> {
    static F: OnceLock<memmem::Finder<'static>> = OnceLock::new();
    let at = F.get_or_init(|| memmem::Finder::new(b"NCCL version ")).find(text.as_bytes())?;
    let v: String = text[at + 13..].chars().take_while(|c| !c.is_whitespace() && *c != ',' && *c != ')').collect();
    v.starts_with(|c: char| c.is_ascii_digit()).then_some(v)
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
        assert!(is_framework_error("RuntimeError: NCCL error in: x.cpp:1, unhandled system error"));
        assert!(!is_framework_error("# Avg bus bandwidth"));
        assert_eq!(version_in("RuntimeError: NCCL error ..., NCCL version 2.18.1"), Some("2.18.1".into()));
        assert_eq!(version_in("NCCL version is what it is"), None);
    }
}
