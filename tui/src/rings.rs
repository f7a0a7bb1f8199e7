//! The rings to draw: the orders the log or runtime printed, or, where a log printed none, the chains its
//! connection lines form on each channel (only where they are consistent with a ring: one way in and one way
//! out per rank).

use collscope_model::{Ring, Snapshot};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, PartialEq)]
pub struct RingPath {
    pub channel: u32,
    pub order: Vec<u32>,
    /// The last rank sends back to the first.
    pub closed: bool,
    /// Rebuilt from connection lines, not printed as a ring.
    pub from_connections: bool,
}

pub fn ring_paths(s: &Snapshot) -> Vec<RingPath> {
    if !s.rings.is_empty() {
        return s
            .rings
            .iter()
            .map(|r| {
                let order = ring_order(r);
                // A ring rebuilt from neighbour lines is closed only by a line that leads back to its start: a
                // log cut short leaves a partial ring, drawn open rather than closed with an edge nobody printed.
                let back =
                    r.order.is_empty() && !r.neighbours.iter().any(|n| Some(&n.1) == order.last() && n.2 == order[0]);
                let closed = !r.truncated && !back && order.len() > 1;
                RingPath { channel: r.channel, closed, order, from_connections: false }
            })
            .collect();
    }
    let mut edges: BTreeMap<u32, BTreeSet<(u32, u32)>> = BTreeMap::new();
    for c in &s.connections {
        edges.entry(c.channel).or_default().insert((c.src, c.dst));
    }
    edges.into_iter().flat_map(|(channel, e)| chains(channel, &e)).collect()
}

/// The rank order of a printed ring, or one rebuilt from the (prev, rank, next) lines ranks printed.
pub fn ring_order(r: &Ring) -> Vec<u32> {
    if !r.order.is_empty() || r.neighbours.is_empty() {
        return r.order.clone();
    }
    let start = r.neighbours.iter().map(|n| n.1).min().unwrap_or(0);
    let mut order = vec![start];
    let mut at = start;
    while let Some(&(_, _, next)) = r.neighbours.iter().find(|n| n.1 == at) {
        if next == start || order.contains(&next) || order.len() > r.neighbours.len() {
            break;
        }
        order.push(next);
        at = next;
    }
    order
}

/// Chains of one channel's edges, or nothing when a rank has two ways out or in (trees share the channel).
fn chains(channel: u32, edges: &BTreeSet<(u32, u32)>) -> Vec<RingPath> {
    let mut next: BTreeMap<u32, u32> = BTreeMap::new();
    let mut has_prev: BTreeSet<u32> = BTreeSet::new();
    for &(a, b) in edges {
        if next.insert(a, b).is_some() || !has_prev.insert(b) {
            return Vec::new();
        }
    }
    let mut out = Vec::new();
    let mut used: BTreeSet<u32> = BTreeSet::new();
    // Open chains start where nothing comes in; what is left are closed cycles.
    let starts: Vec<u32> = next.keys().copied().filter(|a| !has_prev.contains(a)).chain(next.keys().copied()).collect();
    for start in starts {
        if used.contains(&start) {
            continue;
        }
        let mut order = vec![start];
        used.insert(start);
        let mut at = start;
        let mut closed = false;
        while let Some(&n) = next.get(&at) {
            if n == start {
                closed = true;
                break;
            }
            if !used.insert(n) {
                break;
            }
            order.push(n);
            at = n;
        }
        out.push(RingPath { channel, order, closed, from_connections: true });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn printed_rings_come_first_and_neighbour_lines_rebuild_the_order() {
        let r = Ring { channel: 0, order: vec![], truncated: false, neighbours: vec![(2, 0, 1), (0, 1, 2), (1, 2, 0)] };
        assert_eq!(ring_order(&r), vec![0, 1, 2]);
        let paths = ring_paths(&fixture::snapshot());
        assert_eq!(paths.len(), 2);
        assert!(paths.iter().all(|p| p.closed && !p.from_connections));
        // A log cut before rank 2's line: 0 -> 1 -> 2 is all that is known, and nothing closes it.
        let r = Ring { channel: 0, order: vec![], truncated: false, neighbours: vec![(2, 0, 1), (0, 1, 2)] };
        let mut s = fixture::snapshot();
        s.rings = vec![r];
        assert_eq!(
            ring_paths(&s)[0],
            RingPath { channel: 0, order: vec![0, 1, 2], closed: false, from_connections: false }
        );
    }

    #[test]
    fn connection_lines_give_chains_and_cycles_but_not_trees() {
        let mut s = fixture::snapshot();
        s.rings.clear();
        let paths = ring_paths(&s);
        // Channel 0 has the whole ring 0..7 as connections; channel 1 three separate edges.
        assert_eq!(paths[0], RingPath { channel: 0, order: (0..8).collect(), closed: true, from_connections: true });
        let ch1: Vec<_> = paths.iter().filter(|p| p.channel == 1).map(|p| (p.order.clone(), p.closed)).collect();
        assert_eq!(ch1, vec![(vec![0, 7, 6], false), (vec![4, 3], false)]);
        // A rank with two ways out (a tree shares the channel): no ring is made up.
        let mut c = s.connections[0].clone();
        c.dst = 5;
        s.connections.push(c);
        assert!(ring_paths(&s).iter().all(|p| p.channel != 0));
    }
}
