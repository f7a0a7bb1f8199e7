//! Shared look: transport colours and labels, number formats, sparklines.

use collscope_model::{Connection, Severity, Snapshot, Transport};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use std::collections::VecDeque;

/// What an edge is, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeKind {
    P2p,
    Shm,
    NetGdr,
    Net,
    Other,
    Unknown,
}

impl EdgeKind {
    pub fn of(conn: Option<&Connection>) -> Self {
        match conn {
            None => EdgeKind::Unknown,
            Some(c) => match c.transport {
                Transport::P2p => EdgeKind::P2p,
                Transport::Shm => EdgeKind::Shm,
                Transport::Net if c.gdrdma == Some(true) => EdgeKind::NetGdr,
                Transport::Net => EdgeKind::Net,
                _ => EdgeKind::Other,
            },
        }
    }

    pub fn color(self) -> Color {
        match self {
            EdgeKind::P2p => Color::Green,
            EdgeKind::Shm => Color::Yellow,
            EdgeKind::NetGdr => Color::Cyan,
            EdgeKind::Net => Color::Red,
            EdgeKind::Other => Color::Magenta,
            EdgeKind::Unknown => Color::DarkGray,
        }
    }

    /// The short tag drawn on a ring edge.
    pub fn tag(self) -> &'static str {
        match self {
            EdgeKind::P2p => "P2P",
            EdgeKind::Shm => "SHM",
            EdgeKind::NetGdr => "NET+GDR",
            EdgeKind::Net => "NET",
            EdgeKind::Other => "OTHER",
            EdgeKind::Unknown => "?",
        }
    }

    pub fn style(self) -> Style {
        Style::default().fg(self.color())
    }
}

/// The transport as NCCL prints it after `via`: `P2P/IPC/read`, `NET/IB/0/GDRDMA`, `SHM/direct/direct`. The log
/// reader keeps NCCL's whole text in `mode`; the runtime sets the flags, which are added when the text lacks them.
pub fn transport_label(c: &Connection) -> String {
    let mut s = c.transport.as_str().to_string();
    let mode = c.mode.as_deref().unwrap_or("");
    if !mode.is_empty() {
        s.push('/');
        s.push_str(mode);
    }
    if let Some(p) = c.proxy_rank.filter(|_| !mode.contains('(')) {
        s.push_str(&format!("({p})"));
    }
    if c.gdrdma == Some(true) && !mode.contains("GDRDMA") {
        s.push_str("/GDRDMA");
    }
    if c.shared && !mode.contains("Shared") {
        s.push_str("/Shared");
    }
    if let Some(nic) = &c.nic {
        s.push_str(&format!(" {nic}"));
    }
    if c.inferred {
        s.push_str(" (inferred)");
    }
    s
}

/// The short tag drawn on a ring edge, `?` after it when the connection was inferred, not printed (`NET?`).
pub fn edge_tag(conn: Option<&Connection>) -> String {
    let tag = EdgeKind::of(conn).tag();
    if conn.is_some_and(|c| c.inferred) {
        format!("{tag}?")
    } else {
        tag.to_string()
    }
}

/// The host a rank runs on, from the communicators, else from where the job's ranks serve (a live rank's
/// snapshot has its own communicator only, and every rank's endpoint).
pub fn rank_host(s: &Snapshot, rank: u32) -> Option<&str> {
    s.communicators
        .iter()
        .find(|c| c.rank == Some(rank))
        .and_then(|c| c.host.as_deref())
        .or_else(|| s.endpoints.iter().find(|e| e.rank == rank).map(|e| e.host.as_str()))
}

pub fn severity_style(sev: Severity) -> Style {
    match sev {
        Severity::Error => Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
        Severity::Warning => Style::default().fg(Color::Yellow),
        Severity::Info => Style::default().fg(Color::Blue),
    }
}

pub fn bold() -> Style {
    Style::default().add_modifier(Modifier::BOLD)
}

pub fn dim() -> Style {
    Style::default().fg(Color::DarkGray)
}

pub fn selected() -> Style {
    Style::default().add_modifier(Modifier::REVERSED)
}

/// Bytes in binary units: `512 B`, `4.0 KiB`, `64.0 MiB`.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A rate in decimal units, as bandwidths are quoted: `1.0 GB/s`.
pub fn fmt_rate(bps: f64) -> String {
    const UNITS: [&str; 5] = ["B/s", "kB/s", "MB/s", "GB/s", "TB/s"];
    let mut v = bps;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < UNITS.len() {
        v /= 1000.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// Seconds as `1.25 s` or `490 us`.
pub fn fmt_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{us:.0} us")
    }
}

/// The last `width` values as block characters scaled to their maximum.
pub fn sparkline(values: &VecDeque<f64>, width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let skip = values.len().saturating_sub(width);
    let max = values.iter().skip(skip).cloned().fold(0.0, f64::max);
    values
        .iter()
        .skip(skip)
        .map(|v| if max <= 0.0 { BARS[0] } else { BARS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize] })
        .collect()
}

/// `text` broken at spaces into lines of at most `width` characters, the lines after the first indented by
/// `indent` spaces (a word longer than a line is cut).
pub fn wrap_indent(text: &str, width: usize, indent: usize) -> Vec<String> {
    let mut lines: Vec<String> = vec![String::new()];
    for word in text.split(' ') {
        let room = if lines.len() == 1 { width } else { width.saturating_sub(indent) };
        let used = lines.last().map_or(0, |l| l.chars().count());
        if used > 0 && used + 1 + word.chars().count() > room {
            lines.push(String::new());
        } else if used > 0 {
            lines.last_mut().expect("one line").push(' ');
        }
        let room = if lines.len() == 1 { width } else { width.saturating_sub(indent) }.max(1);
        lines.last_mut().expect("one line").extend(word.chars().take(room));
    }
    let pad = " ".repeat(indent);
    lines.iter().enumerate().map(|(i, l)| if i == 0 { l.clone() } else { format!("{pad}{l}") }).collect()
}

/// A styled line broken at spaces into lines of at most `width` characters, the lines after the first indented
/// by `indent` spaces, each character keeping its style.
pub fn wrap_line(line: &Line<'_>, width: usize, indent: usize) -> Vec<Line<'static>> {
    let chars: Vec<(char, Style)> =
        line.spans.iter().flat_map(|s| s.content.chars().map(move |c| (c, line.style.patch(s.style)))).collect();
    let text: String = chars.iter().map(|(c, _)| c).collect();
    let mut at = 0;
    let mut out = Vec::new();
    for (i, piece) in wrap_indent(&text, width, indent).into_iter().enumerate() {
        let body = if i == 0 { piece.as_str() } else { &piece[indent.min(piece.len())..] };
        // Find the piece in the original text (wrapping drops the spaces it broke at).
        while chars.get(at).is_some_and(|(c, _)| *c == ' ') && !body.starts_with(' ') {
            at += 1;
        }
        let n = body.chars().count();
        let mut spans = if i == 0 { vec![] } else { vec![Span::raw(" ".repeat(indent))] };
        let (from, to) = (at.min(chars.len()), (at + n).min(chars.len()));
        spans.extend(chars[from..to].iter().map(|(c, st)| Span::styled(c.to_string(), *st)));
        at += n;
        out.push(Line::from(spans));
    }
    out
}

/// A text progress bar `[####....]` of `width` cells.
pub fn bar(fraction: f64, width: usize) -> String {
    let filled = ((fraction.clamp(0.0, 1.0)) * width as f64).round() as usize;
    format!("{}{}", "█".repeat(filled), "·".repeat(width - filled))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(64 << 20), "64.0 MiB");
        assert_eq!(fmt_rate(1e9), "1.0 GB/s");
        assert_eq!(fmt_us(490.0), "490 us");
        assert_eq!(fmt_us(1.25e6), "1.25 s");
        assert_eq!(sparkline(&VecDeque::from(vec![0.0, 1.0, 2.0]), 2), "▅█");
        assert_eq!(bar(0.5, 4), "██··");
        assert_eq!(wrap_indent("aa bb cc dd", 6, 2), ["aa bb", "  cc", "  dd"]);
        assert_eq!(wrap_indent("abcdefgh", 4, 0), ["abcd"]);
        let line = Line::from(vec![Span::styled("Init  ", bold()), Span::raw("one two three")]);
        let wrapped: Vec<String> = wrap_line(&line, 12, 6).iter().map(|l| l.to_string()).collect();
        assert_eq!(wrapped, ["Init  one", "      two", "      three"]);
        assert_eq!(wrap_line(&line, 12, 6)[0].spans[0].style, bold());
    }

    #[test]
    fn labels_do_not_repeat_what_the_log_text_already_says() {
        let mut c = crate::fixture::snapshot().connections[3].clone();
        assert_eq!(transport_label(&c), "NET/IB/0/GDRDMA");
        c.mode = Some("IB/0/GDRDMA".into());
        assert_eq!(transport_label(&c), "NET/IB/0/GDRDMA");
        c.mode = Some("IB/0".into());
        c.proxy_rank = Some(1);
        c.shared = true;
        assert_eq!(transport_label(&c), "NET/IB/0(1)/GDRDMA/Shared");
        c.inferred = true;
        assert_eq!(transport_label(&c), "NET/IB/0(1)/GDRDMA/Shared (inferred)");
        assert_eq!(edge_tag(Some(&c)), "NET+GDR?");
        assert_eq!(edge_tag(None), "?");
    }
}
