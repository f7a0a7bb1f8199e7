//! Every view drawn from snapshots the log reader makes of real NCCL logs (`../shared/fixtures/nccl-logs`, skipped
//! with a line where absent; `tests/tui.rs` draws the views from collscope's own logs).

use super::testing::*;
use crate::app::{App, Tab};
use crate::live::Live;

/// The views of the real log `name`, or `None` (after a line naming `what` as skipped) without the real logs.
fn live(name: &str, what: &str) -> Option<Live> {
    let path = collscope_testkit::fixtures(what)?.join(name);
    let snapshot =
        collscope_logreader::read_paths(std::slice::from_ref(&path), collscope_logreader::Options::default())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(Live::with_snapshot(name, snapshot))
}

fn view(live: &Live, app: App) -> String {
    let lines = render(&app, live, 80, 24);
    assert_fits(&lines);
    screen(&lines)
}

#[test]
fn nccl_2_5_log_with_p2p_shm_and_net() {
    let Some(live) = live("007_nccl-392.log", "views of a real NCCL 2.5 log") else { return };
    let at = |tab| App { tab, ..App::default() };
    let text = view(&live, at(Tab::Overview));
    assert!(text.contains("2.5.7+cuda10.0   ranks 16   nodes 2"), "{text}");
    assert!(text.contains("[0]mlx5_0:1/RoCE"), "{text}");
    assert!(text.contains("GDRDMA on 0 of 2 NET connections"), "{text}");
    assert!(text.contains("warning No GPUDirect RDMA on NET connections"), "{text}");
    let text = view(&live, at(Tab::Rings));
    assert!(text.contains(" 0 ─P2P▶ 1 ─?▶ 2"), "{text}");
    assert!(text.contains("15 ─NET▶ ↺ 0"), "{text}");
    assert!(text.contains("15 -> 0    NET/IB/0"), "{text}");
    let text = view(&live, at(Tab::Trees));
    assert!(text.contains("(parent 7 not in the log)") && text.contains("└─▶ 1 (no tree line)"), "{text}");
    let text = view(&live, at(Tab::Channels));
    assert!(text.contains("00  0 -> 7         SHM/direct shared m…"), "{text}");
    let text = view(&live, at(Tab::Findings));
    assert!(text.contains("warning GPUs on one node talk through host shared memory  p2p_refused_shm"), "{text}");
    let text = view(&live, App { tab: Tab::Findings, row: 1, detail: true, ..App::default() });
    assert!(text.contains("007_nccl-392.log:17  [0] NCCL INFO Ring 00 : 0[1b000] -> 7[41000] via direct"), "{text}");
    assert!(text.contains("Fix: Unset NCCL_P2P_DISABLE"), "{text}");
    // Logs carry no proxy progress or operations; the views say so instead of drawing empty tables.
    let text = view(&live, at(Tab::Proxy));
    assert!(text.contains("No proxy progress in this source"), "{text}");
    let text = view(&live, at(Tab::Ops));
    assert!(text.contains("0 operations"), "{text}");
}

#[test]
fn gdrdma_log_colours_net_edges_as_gdr() {
    let Some(live) = live("x11_nccl-834.log", "GDRDMA edges of a real log") else { return };
    let text = view(&live, App::default());
    assert!(text.contains("NET+GDR x2  P2P x11") && text.contains("GDRDMA on 2 of 2 NET connections"), "{text}");
    let text = view(&live, App { tab: Tab::Channels, ..App::default() });
    assert!(text.contains("01  11 -> 0   recv NET/IB/0/GDRDMA      yes"), "{text}");
    assert!(!text.contains("GDRDMA/GDRDMA"), "{text}");
}

#[test]
fn many_channels_scroll_in_the_channel_list() {
    let Some(live) = live("047_nccl-tests-185.log", "the channel list of a real log with many channels") else {
        return;
    };
    let app = App { tab: Tab::Rings, channel: 3, ..App::default() };
    let text = view(&live, app);
    assert!(text.contains(">ch 03") && text.contains("Channel 03: 2 ranks"), "{text}");
    // Two nodes and no connection line: each edge is inferred NET, and marked so.
    assert!(text.contains(" 0 ─NET?▶ 1 ─NET?▶ ↺ 0"), "{text}");
    assert!(text.contains("0 -> 1     NET (inferred)"), "{text}");
}

#[test]
fn without_ring_lines_the_rings_come_from_connection_lines() {
    let Some(live) = live("x11_nccl-834.log", "rings from the connection lines of a real log") else { return };
    let text = view(&live, App { tab: Tab::Rings, channel: 1, ..App::default() });
    assert!(text.contains("Channel 01: no ring order in the log; 3 part(s) from connection lines"), "{text}");
    assert!(text.contains(" 2 ─P2P▶ 1 ─NET+GDR▶ 10 ─P2P▶ 15"), "{text}");
    assert!(text.contains("1 -> 10    NET/IB/0/GDRDMA"), "{text}");
}
