//! Lines that say a peer process went away (NCCL 2.28.9 `src/proxy.cc`; the same wording since 2.12).

use super::scan::Scan;
use super::Event;

/// `[Service thread] Connection closed by localRank 1`: the proxy's service thread lost the process of that
/// local rank, which usually died.
pub fn service_thread(body: &str) -> Option<Event> {
    let mut s = Scan::new(body);
    s.lit("[Service thread] Connection closed by localRank ")?;
    Some(Event::PeerClosed(s.num()?))
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    #[test]
    fn a_closed_peer_and_its_local_rank() {
        assert_eq!(parse("[Service thread] Connection closed by localRank 3"), Some(Event::PeerClosed(3)));
        assert_eq!(service_thread("[Service thread] Connection closed by localRank x"), None);
    }
}
