//! Overview: the job, its network and transports, GPUDirect RDMA, init timings and the top findings.

use super::style::{bold, edge_tag, fmt_rate, severity_style, wrap_line, EdgeKind};
use crate::live::Live;
use collscope_model::{Severity, Snapshot, Source, Transport};
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use std::collections::BTreeMap;

/// Width of the field names: a long value wraps under its own start, not at column 0.
const NAME: usize = 12;

fn draw(frame: &mut Frame, area: Rect, live: &Live) {
    let width = area.width.max(1) as usize;
    let wrapped: Vec<Line> = lines(live).iter().flat_map(|l| wrap_line(l, width, NAME)).collect();
    frame.render_widget(Paragraph::new(wrapped), area);
}

fn field<'a>(name: &'a str, value: String) -> Line<'a> {
    Line::from(vec![Span::styled(format!("{name:<NAME$}"), bold()), Span::raw(value)])
}

/// The files of a log source, compact however many were given: `log a.log, b.log` or `log 16 files: a.log ..
/// p.log`.
fn log_files(files: &[String]) -> String {
    match files {
        [first, .., last] if files.len() > 2 => format!("log {} files: {first} .. {last}", files.len()),
        _ => format!("log {}", files.join(", ")),
    }
}

fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn lines(live: &Live) -> Vec<Line<'_>> {
    let s = &live.snapshot;
    let source = match &s.source {
        Source::Runtime => format!("collscope runtime ({})", live.source_label),
        Source::Log { files } => log_files(files),
        Source::Model { topology } => format!("model {topology}"),
        Source::Profiler => format!("NCCL job, collscope profiler plugin ({})", live.source_label),
    };
    let mut out = vec![
        field("Job", source),
        field(
            "NCCL",
            format!(
                "{}   ranks {}   nodes {}",
                or_dash(s.nccl_version.as_deref()),
                or_dash(s.nranks),
                or_dash(s.nnodes)
            ),
        ),
        field("Hosts", if s.hosts.is_empty() { "-".into() } else { s.hosts.join(" ") }),
        field("Network", network(s)),
        field("Channels", channels(s)),
    ];
    out.push(transports(s));
    out.push(field("GDR", gdr(s)));
    out.push(field("Init", init(s)));
    if !live.traffic.is_empty() {
        out.push(field("Traffic", fmt_rate(live.traffic.total_rate())));
    }
    out.push(field("Findings", findings_summary(s)));
    let mut top: Vec<_> = s.findings.iter().collect();
    top.sort_by_key(|f| std::cmp::Reverse(f.severity));
    for f in top.into_iter().take(4) {
        out.push(Line::from(vec![
            Span::raw("  "),
            Span::styled(format!("{:<8}", f.severity.as_str()), severity_style(f.severity)),
            Span::raw(f.title.clone()),
        ]));
    }
    out
}

fn network(s: &Snapshot) -> String {
    let mut v = or_dash(s.network.as_deref());
    for d in &s.net_devices {
        v.push_str(&format!("  [{}]{}", d.index, d.name));
        if let Some(p) = d.port {
            v.push_str(&format!(":{p}"));
        }
        if let Some(l) = &d.link {
            v.push_str(&format!("/{l}"));
        }
    }
    if let Some(b) = s.bootstrap.first() {
        v.push_str(&format!("  bootstrap {}:{}", b.name, b.address));
    }
    v
}

fn channels(s: &Snapshot) -> String {
    let c = &s.channels;
    let mut v = format!("coll {}  p2p {}  per peer {}", or_dash(c.coll), or_dash(c.p2p), or_dash(c.p2p_per_peer));
    for g in &s.graphs {
        v.push_str(&format!(
            "  | {:?} {}ch {}/{} {:.0}/{:.0} GB/s",
            g.pattern, g.n_channels, g.type_intra, g.type_inter, g.bw_intra, g.bw_inter
        ));
    }
    v
}

/// Connections per edge kind, each in its colour.
fn transports(s: &Snapshot) -> Line<'static> {
    // Printed kinds first, then the inferred ones (`NET?`).
    let mut counts: BTreeMap<(bool, String), (usize, EdgeKind)> = BTreeMap::new();
    for c in &s.connections {
        counts.entry((c.inferred, edge_tag(Some(c)))).or_insert((0, EdgeKind::of(Some(c)))).0 += 1;
    }
    let mut spans = vec![Span::styled(format!("{:<12}", "Transports"), bold())];
    if counts.is_empty() {
        spans.push(Span::raw("-"));
    }
    for ((_, tag), (n, kind)) in counts {
        spans.push(Span::styled(format!("{tag} x{n}  "), kind.style()));
    }
    Line::from(spans)
}

fn gdr(s: &Snapshot) -> String {
    // An inferred connection's GDR state is unknown: the share is of the printed ones.
    let net: Vec<_> = s.connections.iter().filter(|c| c.transport == Transport::Net && !c.inferred).collect();
    if net.is_empty() {
        return if s.connections.iter().any(|c| c.inferred) {
            "unknown: NET inferred, not printed"
        } else {
            "no NET connections"
        }
        .into();
    }
    let on = net.iter().filter(|c| c.gdrdma == Some(true)).count();
    let gpus_gdr = s.topology.iter().flat_map(|t| &t.nodes).filter_map(|n| n.gpu.as_ref()).filter(|g| g.gdr).count();
    let mut v = format!("GDRDMA on {on} of {} NET connections", net.len());
    if gpus_gdr > 0 {
        v.push_str(&format!(", {gpus_gdr} GPUs GDR-capable"));
    }
    v
}

fn init(s: &Snapshot) -> String {
    let totals: Vec<f64> = s.communicators.iter().filter_map(|c| c.init.total).collect();
    let Some(max) = totals.iter().cloned().reduce(f64::max) else {
        return "-".into();
    };
    let mut v = format!("total {max:.2} s (slowest of {})", totals.len());
    if let Some(c) = s.communicators.iter().find(|c| c.init.total == Some(max)) {
        for (phase, secs) in &c.init.phases {
            v.push_str(&format!("  {phase} {secs:.2}"));
        }
    }
    v
}

fn findings_summary(s: &Snapshot) -> String {
    let count = |sev| s.findings.iter().filter(|f| f.severity == sev).count();
    format!(
        "{} errors, {} warnings, {} notes; {} WARN lines",
        count(Severity::Error),
        count(Severity::Warning),
        count(Severity::Info),
        s.warnings.len()
    )
}

pub(super) struct Overview;

impl super::View for Overview {
    fn title(&self) -> &'static str {
        "Overview"
    }

    fn draw(&self, frame: &mut Frame, area: Rect, _app: &crate::app::App, live: &Live) {
        draw(frame, area, live)
    }
}

#[cfg(test)]
mod tests {
    use crate::app::App;
    use crate::fixture;
    use crate::views::testing::*;

    #[test]
    fn overview_shows_job_network_transports_gdr_init_and_findings() {
        let lines = render(&App::default(), &fixture::live(), 80, 24);
        let text = screen(&lines);
        for want in [
            "log job.log",
            "2.28.9+cuda12.9   ranks 8   nodes 2",
            "Hosts       node-a node-b",
            "[0]mlx5_0:1/IB",
            "NET x2",
            "NET+GDR x2",
            "P2P x6",
            "SHM x1",
            "GDRDMA on 2 of 4 NET connections",
            "total 1.32 s (slowest of 8)",
            "0 errors, 1 warnings, 1 notes",
            "warning NET without GPUDirect RDMA",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert_eq!(text.matches("NET without GPUDirect RDMA").count(), 1, "{text}");
        assert!(text.find("warning NET").unwrap() < text.find("info    SHM").unwrap(), "{text}");
    }

    #[test]
    fn many_files_stay_on_one_line_and_long_values_wrap_under_themselves() {
        let mut live = fixture::live();
        let files: Vec<String> = (0..64).map(|i| format!("logs/rank{i:02}.log")).collect();
        live.snapshot.source = collscope_model::Source::Log { files };
        live.snapshot.hosts = (0..40).map(|i| format!("node-{i:02}")).collect();
        let lines = render(&App::default(), &live, 80, 24);
        let text = screen(&lines);
        assert!(text.contains("Job         log 64 files: logs/rank00.log .. logs/rank63.log"), "{text}");
        let hosts = lines.iter().position(|l| l.starts_with("Hosts")).unwrap();
        assert!(lines[hosts + 1].starts_with("            node-"), "{text}");
        assert_fits(&lines);
    }
}
