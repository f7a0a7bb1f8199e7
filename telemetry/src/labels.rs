//! Label values shared by the Prometheus and OpenTelemetry exports. Every label here has a small, closed set
//! of values (or one value per rank, channel or peer), so no series explodes with traffic.

use collscope_model::observe::{self, SIZE_BOUNDS};
use collscope_model::{Algorithm, Collective, Connection, Direction, Protocol, ProxyWait, Source, Transport};
use std::sync::Arc;

/// Labels of the runtime's message-size buckets (`observe::SIZE_BOUNDS`), then the open-ended one.
const SIZE_LABELS: [&str; SIZE_BOUNDS.len() + 1] = [
    "0-1KiB",
    "1KiB-16KiB",
    "16KiB-256KiB",
    "256KiB-1MiB",
    "1MiB-4MiB",
    "4MiB-16MiB",
    "16MiB-64MiB",
    "64MiB-256MiB",
    "256MiB-1GiB",
    "1GiB+",
];

/// Every size-bucket label, smallest first.
pub fn size_buckets() -> impl Iterator<Item = &'static str> {
    SIZE_LABELS.into_iter()
}

/// The label of bucket `i` of `observe::SIZE_BOUNDS`.
pub fn size_bucket_label(i: usize) -> &'static str {
    SIZE_LABELS[i.min(SIZE_LABELS.len() - 1)]
}

pub fn size_bucket(bytes: u64) -> &'static str {
    size_bucket_label(observe::size_bucket(bytes))
}

/// Where the data came from, as a label.
pub fn source(s: &Source) -> &'static str {
    match s {
        Source::Runtime => "runtime",
        Source::Log { .. } => "log",
        Source::Model { .. } => "model",
        Source::Profiler => "profiler",
    }
}

/// Names of communicators that keep their own `comm_name` label value; later ones share [`OTHER_COMM`], so a job
/// that makes a communicator per step cannot grow the series without bound.
pub const MAX_COMM_NAMES: usize = 16;
/// The `comm_name` of communicators past [`MAX_COMM_NAMES`].
pub const OTHER_COMM: &str = "other";
/// The `comm_name` of calls whose communicator the source does not name (a log's).
pub const UNNAMED_COMM: &str = "unnamed";

/// The `comm_name` values handed out so far: the first [`MAX_COMM_NAMES`] names seen, in order.
#[derive(Debug, Default)]
pub struct CommNames {
    seen: Vec<Arc<str>>,
}

impl CommNames {
    /// The label value of the communicator called `name`.
    pub fn label(&mut self, name: Option<&str>) -> Arc<str> {
        let Some(name) = name else { return Arc::from(UNNAMED_COMM) };
        if let Some(n) = self.seen.iter().find(|n| ***n == *name) {
            return n.clone();
        }
        if self.seen.len() >= MAX_COMM_NAMES {
            return Arc::from(OTHER_COMM);
        }
        let n: Arc<str> = Arc::from(name);
        self.seen.push(n.clone());
        n
    }
}

/// The labels of one completed call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CollLabels {
    pub collective: &'static str,
    pub algorithm: &'static str,
    pub protocol: &'static str,
    pub size_bucket: &'static str,
    pub rank: String,
}

impl CollLabels {
    pub fn new(
        coll: Collective,
        algo: Option<Algorithm>,
        proto: Option<Protocol>,
        size_bucket: &'static str,
        rank: u32,
    ) -> Self {
        CollLabels {
            collective: coll.as_str(),
            algorithm: algo.map_or("none", |a| a.as_str()),
            protocol: proto.map_or("none", |p| p.as_str()),
            size_bucket,
            rank: rank.to_string(),
        }
    }
}

pub fn direction(d: Direction) -> &'static str {
    match d {
        Direction::Send => "send",
        Direction::Recv => "recv",
        Direction::Both => "both",
    }
}

/// A channel's transport, `unknown` until a connection record names it.
pub fn transport(t: Option<Transport>) -> &'static str {
    t.map_or("unknown", Transport::as_str)
}

pub fn send_or_recv(send: bool) -> &'static str {
    if send {
        "send"
    } else {
        "recv"
    }
}

pub fn wait_state(w: ProxyWait) -> &'static str {
    match w {
        ProxyWait::WaitingForData => "waiting_for_data",
        ProxyWait::WaitingForPeer => "waiting_for_peer",
        ProxyWait::WaitingForSendCompletion => "waiting_for_send_completion",
        ProxyWait::WaitingForRecv => "waiting_for_recv",
        ProxyWait::WaitingForFlush => "waiting_for_flush",
        ProxyWait::RecvGpuWait => "recv_gpu_wait",
    }
}

/// GPUDirect RDMA as a label: `enabled`/`disabled` where a NET line says, `host_memory` for collscope's own
/// NET connections (its buffers are host memory, so GDR does not apply rather than being off), `n/a` for
/// transports where it never applies.
pub fn gdrdma(c: &Connection, source: &Source) -> &'static str {
    match c.gdrdma {
        Some(true) => "enabled",
        Some(false) => "disabled",
        None if c.transport == Transport::Net && *source == Source::Runtime => "host_memory",
        None => "n/a",
    }
}

/// The rank that reports a connection line and the peer it names: the receiver for `[receive]` lines, the
/// sender otherwise (NCCL prints both kinds from the rank that owns the connector).
pub fn connection_ends(c: &Connection) -> (u32, u32) {
    match c.direction {
        Direction::Recv => (c.dst, c.src),
        Direction::Send | Direction::Both => (c.src, c.dst),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_land_in_the_first_bucket_that_holds_them() {
        assert_eq!(size_bucket(0), "0-1KiB");
        assert_eq!(size_bucket(8), "0-1KiB");
        assert_eq!(size_bucket(1024), "0-1KiB");
        assert_eq!(size_bucket(1025), "1KiB-16KiB");
        assert_eq!(size_bucket(1 << 20), "256KiB-1MiB");
        assert_eq!(size_bucket((1 << 20) + 1), "1MiB-4MiB");
        assert_eq!(size_bucket(u64::MAX), "1GiB+");
        assert_eq!(size_buckets().count(), 10);
    }

    #[test]
    fn comm_names_past_the_cap_share_one_value() {
        let mut names = CommNames::default();
        assert_eq!(&*names.label(None), UNNAMED_COMM);
        for i in 0..MAX_COMM_NAMES {
            assert_eq!(&*names.label(Some(&format!("pg{i}"))), format!("pg{i}"));
        }
        assert_eq!(&*names.label(Some("late")), OTHER_COMM);
        assert_eq!(&*names.label(Some("pg3")), "pg3", "a name seen keeps its value");
    }

    #[test]
    fn gdr_label_distinguishes_host_memory_from_off() {
        let mut c = Connection::net(0, 1, 0, Direction::Recv, "Socket", 0);
        assert_eq!(gdrdma(&c, &Source::Runtime), "host_memory");
        assert_eq!(gdrdma(&c, &Source::Log { files: vec![] }), "n/a");
        c.gdrdma = Some(false);
        assert_eq!(gdrdma(&c, &Source::Runtime), "disabled");
        assert_eq!(connection_ends(&c), (0, 1));
        c.transport = Transport::P2p;
        c.gdrdma = None;
        assert_eq!(gdrdma(&c, &Source::Runtime), "n/a");
    }
}
