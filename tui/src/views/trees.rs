//! Trees: per channel, the tree(s) as indented parent -> children, each edge tagged with its transport.
//! NCCL's double binary tree is two such trees on alternate channels with the roles of the ranks swapped.

use super::style::{bold, dim, rank_host, transport_label, EdgeKind};
use crate::app::{tree_channels, App, Key};
use crate::live::Live;
use collscope_model::{RankState, Snapshot, Tree};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

fn draw(frame: &mut Frame, area: Rect, app: &App, live: &Live) {
    let s = &live.snapshot;
    let channels = tree_channels(s);
    if channels.is_empty() {
        frame.render_widget(Paragraph::new(format!("No trees in {} yet.", s.source.describe())), area);
        return;
    }
    let [list, main] = Layout::horizontal([Constraint::Length(9), Constraint::Min(20)]).areas(area);
    let current = app.channel.min(channels.len() - 1);
    super::channel_list(frame, list, &channels, current);

    let channel = channels[current];
    let nodes: Vec<&Tree> = s.trees.iter().filter(|t| t.channel == channel).collect();
    let mut lines = vec![Line::styled(format!("Channel {channel:02} tree: parent -> children"), bold())];
    // Roots: ranks whose parent is -1 or did not print a tree line of its own.
    let known = |r: i32| nodes.iter().any(|t| t.rank as i32 == r);
    for root in nodes.iter().filter(|t| t.up < 0 || !known(t.up)) {
        if root.up >= 0 {
            lines.push(Line::styled(parent_note(live, root.up as u32), dim()));
        }
        subtree(s, &nodes, root, "", true, true, &mut lines);
    }
    let skip = app.row.min(lines.len().saturating_sub(main.height as usize));
    frame.render_widget(Paragraph::new(lines.into_iter().skip(skip).collect::<Vec<_>>()), main);
}

/// Where a parent whose tree line the shown snapshot lacks is: a live snapshot is one process's, so a parent in
/// another rank of the job is there, and only a parent the job does not list is missing.
fn parent_note(live: &Live, up: u32) -> String {
    let summary = live.job.as_ref().and_then(|j| j.ranks.iter().find(|r| r.rank == up));
    let listed = summary.is_some() || live.snapshot.endpoints.iter().any(|e| e.rank == up);
    match summary.map(|r| r.state) {
        Some(RankState::Unreachable) => format!("(parent {up}: a rank of the job that does not answer)"),
        _ if listed => format!("(parent {up}: another rank of the job; its tree line is in its own snapshot, < >)"),
        _ => format!("(parent {up} not in {})", live.snapshot.source.describe()),
    }
}

fn subtree(
    s: &Snapshot,
    nodes: &[&Tree],
    t: &Tree,
    prefix: &str,
    last: bool,
    root: bool,
    out: &mut Vec<Line<'static>>,
) {
    let mut spans = Vec::new();
    if root {
        spans.push(Span::styled(format!("{}", t.rank), bold()));
    } else {
        spans.push(Span::raw(format!("{prefix}{}", if last { "└─" } else { "├─" })));
        let conn = s.edge(t.channel, t.up as u32, t.rank).connection();
        let kind = EdgeKind::of(conn);
        spans.push(Span::styled(
            format!("{}▶ ", conn.map(transport_label).unwrap_or_else(|| kind.tag().into())),
            kind.style(),
        ));
        spans.push(Span::styled(format!("{}", t.rank), bold()));
    }
    if let Some(h) = rank_host(s, t.rank) {
        spans.push(Span::styled(format!(" {h}"), dim()));
    }
    out.push(Line::from(spans));
    let children: Vec<&Tree> = t
        .down
        .iter()
        .filter(|d| **d >= 0)
        .filter_map(|d| nodes.iter().find(|n| n.rank as i32 == *d).copied())
        .collect();
    let missing: Vec<i32> =
        t.down.iter().copied().filter(|d| *d >= 0 && !nodes.iter().any(|n| n.rank as i32 == *d)).collect();
    let child_prefix = if root { String::new() } else { format!("{prefix}{}", if last { "  " } else { "│ " }) };
    for (i, c) in children.iter().enumerate() {
        subtree(s, nodes, c, &child_prefix, i + 1 == children.len() && missing.is_empty(), false, out);
    }
    for (i, d) in missing.iter().enumerate() {
        let branch = if i + 1 == missing.len() { "└─" } else { "├─" };
        out.push(Line::styled(format!("{child_prefix}{branch}▶ {d} (no tree line)"), dim()));
    }
}

pub(super) struct Trees;

impl super::View for Trees {
    fn title(&self) -> &'static str {
        "Trees"
    }

    fn hint(&self) -> &'static str {
        "[ ] channel  "
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, live: &Live) {
        draw(frame, area, app, live)
    }

    fn rows(&self, app: &App, s: &Snapshot) -> usize {
        tree_channels(s).get(app.channel).map_or(0, |ch| s.trees.iter().filter(|t| t.channel == *ch).count())
    }

    fn key(&self, app: &mut App, key: Key, s: &Snapshot) -> bool {
        super::step_channel(app, key, tree_channels(s).len())
    }
}

#[cfg(test)]
mod tests {
    use crate::app::{App, Tab};
    use crate::fixture;
    use crate::views::testing::*;
    use collscope_model::{JobView, RankEndpoint, RankState, RankSummary};

    #[test]
    fn trees_show_parents_children_and_edge_transports() {
        let app = App { tab: Tab::Trees, ..App::default() };
        let lines = render(&app, &fixture::live(), 80, 24);
        let text = screen(&lines);
        assert!(text.contains("│0 node-a"), "{text}");
        assert!(text.contains("├─P2P/IPC/read▶ 1 node-a"), "{text}");
        assert!(text.contains("│ └─P2P/IPC/read▶ 2 node-a"), "{text}");
        assert!(text.contains("└─?▶ 4 node-b"), "{text}");
        let app = App { tab: Tab::Trees, channel: 1, ..App::default() };
        let text = screen(&render(&app, &fixture::live(), 80, 24));
        assert!(text.contains("│4 node-b"), "{text}");
        assert!(text.contains("││ └─▶ 6 (no tree line)"), "{text}");
    }

    /// A live snapshot is one process's: a parent that is another rank of the job is not missing (issue 49).
    #[test]
    fn a_parent_in_another_rank_of_the_live_job_is_not_said_missing() {
        let mut live = fixture::live();
        live.snapshot.trees.retain(|t| t.channel == 0 && t.rank == 2);
        let parent = live.snapshot.trees[0].up;
        let app = App { tab: Tab::Trees, ..App::default() };
        let missing = format!("(parent {parent} not in {})", live.snapshot.source.describe());
        assert!(screen(&render(&app, &live, 100, 24)).contains(&missing), "no job view: nothing says it exists");
        let endpoint = RankEndpoint {
            rank: parent as u32,
            host: "node-a".into(),
            url: "http://127.0.0.1:1".into(),
            pid: None,
            started: None,
        };
        let mut rank = RankSummary::unreachable(&endpoint, String::new());
        rank.state = RankState::Idle;
        live.job = Some(JobView { ranks: vec![rank.clone()], findings: Vec::new(), ..Default::default() });
        let text = screen(&render(&app, &live, 100, 24));
        assert!(!text.contains(&missing), "{text}");
        assert!(text.contains(&format!("(parent {parent}: another rank of the job")), "{text}");
        rank.state = RankState::Unreachable;
        live.job = Some(JobView { ranks: vec![rank], findings: Vec::new(), ..Default::default() });
        let text = screen(&render(&app, &live, 100, 24));
        assert!(text.contains(&format!("(parent {parent}: a rank of the job that does not answer)")), "{text}");
    }
}
