//! Tuning: the algorithm x protocol table of one collective as a heatmap of bandwidth, the cells recent calls
//! got, and the message sizes where the best cell changes.

use super::style::{bold, dim, fmt_bytes, fmt_us};
use crate::app::{tuned_collectives, App, Key};
use crate::live::Live;
use collscope_model::{Algorithm, Collective, Protocol, Snapshot, TuningCell};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use std::collections::BTreeMap;

fn draw(frame: &mut Frame, area: Rect, app: &App, s: &Snapshot) {
    let coll = app.collective;
    let empty = BTreeMap::new();
    let table = s.tuning.get(&coll).unwrap_or(&empty);
    let mut lines =
        vec![Line::styled(format!("{coll}: latency us/bandwidth GB/s per cell, * = chosen recently"), bold())];
    if table.is_empty() {
        lines.push(Line::raw(format!("No tuning table for {coll} in {}.", s.source.describe())));
    } else {
        let max_bw = table.values().flat_map(|p| p.values()).map(|c| c.bw_gbps).fold(0.0, f64::max);
        let chosen: Vec<(Algorithm, Protocol)> = s
            .decisions
            .iter()
            .filter(|d| d.coll == coll)
            .map(|d| (d.algo, d.proto))
            .chain(s.ops.iter().rev().take(200).filter(|o| o.coll == coll).filter_map(|o| Some((o.algo?, o.proto?))))
            .collect();
        let mut header = vec![Span::styled(format!("{:<14}", "algorithm"), bold())];
        header.extend(Protocol::ALL.iter().map(|p| Span::styled(format!("{:^17}", p.as_str()), bold())));
        lines.push(Line::from(header));
        for (algo, protos) in table {
            let mut row = vec![Span::raw(format!("{:<14}", algo.as_str()))];
            for proto in Protocol::ALL {
                row.push(match protos.get(proto) {
                    Some(c) => {
                        let mark = if chosen.contains(&(*algo, *proto)) { "*" } else { " " };
                        let mut style = Style::default().fg(Color::Black).bg(heat(c.bw_gbps / max_bw));
                        if mark == "*" {
                            style = style.add_modifier(Modifier::BOLD);
                        }
                        // NCCL 2.28.9 `src/graph/tuning.cc` prints each cell as latency/bandwidth.
                        Span::styled(format!("{mark}{:>7.1}/{:<7.1} ", c.lat_us, c.bw_gbps), style)
                    }
                    None => Span::styled(format!("{:^17}", "-"), dim()),
                });
            }
            lines.push(Line::from(row));
        }
        for algo in table.keys().filter(|a| a.is_extension()) {
            lines.push(Line::styled(format!("{algo}: a collscope extension, not an NCCL algorithm"), dim()));
        }
        lines.push(Line::raw(""));
        lines.push(Line::styled("Best cell by size (lat + bytes/bw, NCCL's first-order model)", bold()));
        for (from, to, algo, proto) in crossovers(table) {
            let upto = match to {
                Some(to) => format!("{:>9} .. {:<9}", fmt_bytes(from), fmt_bytes(to)),
                None => format!("{:>9} and up     ", fmt_bytes(from)),
            };
            lines.push(Line::raw(format!("  {upto} {}/{}", algo.as_str(), proto.as_str())));
        }
        // The runtime chooses its extension on its own terms (a size bound, its channel counts), which this
        // first-order model does not price: where it ran, say so beside the model's best cells.
        for ((algo, proto), (from, to)) in extension_runs(s, coll) {
            lines.push(Line::styled(
                format!(
                    "  {:>9} .. {:<9} {}/{} ran: collscope's extension",
                    fmt_bytes(from),
                    fmt_bytes(to),
                    algo.as_str(),
                    proto.as_str()
                ),
                Style::default().add_modifier(Modifier::BOLD),
            ));
        }
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled("Recent calls", bold()));
    let recent: Vec<String> = s
        .decisions
        .iter()
        .rev()
        .filter(|d| d.coll == coll)
        .take(6)
        .map(|d| {
            let time = d.time_us.map(|t| format!(" predicted {}", fmt_us(t))).unwrap_or_default();
            format!("  {:>10} -> {}/{} on {} channels{time}", fmt_bytes(d.bytes), d.algo, d.proto, d.n_channels)
        })
        .collect();
    if recent.is_empty() {
        lines.push(Line::styled(format!("  none in {}", s.source.describe()), dim()));
    }
    lines.extend(recent.into_iter().map(Line::raw));
    frame.render_widget(Paragraph::new(lines), area);
}

/// The sizes (smallest, largest) at which the runtime's decisions chose an extension algorithm for `coll`, by
/// (algorithm, protocol).
fn extension_runs(s: &Snapshot, coll: Collective) -> BTreeMap<(Algorithm, Protocol), (u64, u64)> {
    let mut out: BTreeMap<(Algorithm, Protocol), (u64, u64)> = BTreeMap::new();
    for d in s.decisions.iter().filter(|d| d.coll == coll && d.algo.is_extension()) {
        let range = out.entry((d.algo, d.proto)).or_insert((d.bytes, d.bytes));
        *range = (range.0.min(d.bytes), range.1.max(d.bytes));
    }
    out
}

/// Blue (slow) to red (fast).
fn heat(frac: f64) -> Color {
    const RAMP: [Color; 5] = [Color::Blue, Color::Cyan, Color::Green, Color::Yellow, Color::Red];
    RAMP[((frac.clamp(0.0, 1.0)) * (RAMP.len() - 1) as f64).round() as usize]
}

/// Size ranges (powers of two from 1 KiB to 16 GiB) over which one cell is fastest: (from, to, algo, proto).
fn crossovers(
    table: &BTreeMap<Algorithm, BTreeMap<Protocol, TuningCell>>,
) -> Vec<(u64, Option<u64>, Algorithm, Protocol)> {
    let mut out: Vec<(u64, Option<u64>, Algorithm, Protocol)> = Vec::new();
    for shift in 10..=34u32 {
        let bytes = 1u64 << shift;
        let best = table
            .iter()
            .flat_map(|(a, ps)| ps.iter().map(move |(p, c)| (*a, *p, c)))
            .filter_map(|(a, p, c)| c.time_us(bytes).map(|t| (t, a, p)))
            .min_by(|x, y| x.0.total_cmp(&y.0));
        let Some((_, algo, proto)) = best else { continue };
        match out.last_mut() {
            Some(last) if (last.2, last.3) == (algo, proto) => {}
            _ => {
                if let Some(last) = out.last_mut() {
                    last.1 = Some(bytes / 2);
                }
                out.push((bytes, None, algo, proto));
            }
        }
    }
    out
}

pub(super) struct Tuning;

impl super::View for Tuning {
    fn title(&self) -> &'static str {
        "Tuning"
    }

    fn hint(&self) -> &'static str {
        "[ ] collective  "
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, live: &Live) {
        draw(frame, area, app, &live.snapshot)
    }

    /// `[`/`]`: the previous/next collective.
    fn key(&self, app: &mut App, key: Key, s: &Snapshot) -> bool {
        let Some(step) = super::bracket(key) else { return false };
        let colls = tuned_collectives(s);
        if !colls.is_empty() {
            let at = colls.iter().position(|c| *c == app.collective).unwrap_or(0) as i64;
            app.collective = colls[(at + step).rem_euclid(colls.len() as i64) as usize];
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{App, Tab};
    use crate::fixture;
    use crate::views::testing::*;
    use collscope_model::Decision;

    #[test]
    fn crossovers_follow_lat_plus_bytes_over_bw() {
        let s = fixture::snapshot();
        let table = &s.tuning[&Collective::AllReduce];
        let x = crossovers(table);
        // Tree/LL (12 us, 4 GB/s) wins small sizes; Ring/Simple (56 us, 80 GB/s) wins the largest.
        assert_eq!((x[0].0, x[0].2, x[0].3), (1024, Algorithm::Tree, Protocol::Ll));
        let last = x.last().unwrap();
        assert_eq!((last.1, last.2, last.3), (None, Algorithm::Ring, Protocol::Simple));
        // Each boundary is where the next cell becomes faster.
        for w in x.windows(2) {
            let at = w[1].0;
            let cell = |a: Algorithm, p: Protocol| table[&a][&p];
            assert!(cell(w[1].2, w[1].3).time_us(at).unwrap() < cell(w[0].2, w[0].3).time_us(at).unwrap());
            assert_eq!(w[0].1, Some(at / 2));
        }
    }

    #[test]
    fn heatmap_marks_chosen_cells_and_lists_recent_calls() {
        let app = App { tab: Tab::Tuning, ..App::default() };
        let text = screen(&render(&app, &fixture::live(), 80, 24));
        assert!(text.contains("AllReduce: latency us/bandwidth GB/s"), "{text}");
        assert!(text.contains("Tree          *   12.0/4.0         20.0/30.0        50.0/60.0"), "{text}");
        assert!(text.contains("Ring              16.0/9.0         26.0/36.0    *   56.0/80.0"), "{text}");
        assert!(text.contains("64.0 MiB -> Ring/Simple on 2 channels predicted 900 us"), "{text}");
        assert!(text.contains("Tree/LL"), "{text}");
        assert!(!text.contains("extension"), "{text}");

        // The runtime's own algorithm is named as collscope's, not NCCL's.
        let snap = with_one_shot(TuningCell { lat_us: 8.0, bw_gbps: 5.0 });
        let live = crate::Live::with_snapshot("fixture", snap);
        let text = screen(&render(&app, &live, 80, 24));
        assert!(text.contains("OneShot            8.0/5.0"), "{text}");
        assert!(text.contains("OneShot: a collscope extension, not an NCCL algorithm"), "{text}");
    }

    /// The fixture with the runtime's OneShot priced for AllReduce over LL at `cell`.
    fn with_one_shot(cell: TuningCell) -> Snapshot {
        let mut snap = fixture::snapshot();
        snap.tuning
            .entry(Collective::AllReduce)
            .or_default()
            .entry(Algorithm::OneShot)
            .or_default()
            .insert(Protocol::Ll, cell);
        snap
    }

    #[test]
    fn best_cells_by_size_include_the_extension_where_the_runtime_chose_it() {
        let app = App { tab: Tab::Tuning, ..App::default() };
        // Slower than Tree/LL at every size in the first-order model, yet what the runtime ran.
        let mut snap = with_one_shot(TuningCell { lat_us: 30.0, bw_gbps: 1.0 });
        let text = screen(&render(&app, &crate::Live::with_snapshot("fixture", snap.clone()), 80, 40));
        assert!(!text.contains("ran: collscope's extension"), "not chosen, not listed: {text}");
        let decision = |bytes, algo| Decision {
            coll: Collective::AllReduce,
            bytes,
            algo,
            proto: Protocol::Ll,
            n_channels: 1,
            time_us: None,
            runner_up: None,
            reason: None,
            datatype: None,
            rank: Some(0),
        };
        snap.decisions.extend([
            decision(8, Algorithm::OneShot),
            decision(16 << 10, Algorithm::OneShot),
            decision(1 << 20, Algorithm::Tree),
        ]);
        snap.decisions.push(Decision { coll: Collective::AllGather, ..decision(1 << 30, Algorithm::OneShot) });
        let text = screen(&render(&app, &crate::Live::with_snapshot("fixture", snap), 80, 40));
        let best = text.split("Best cell by size").nth(1).unwrap_or_default();
        assert!(best.contains("        8 B .. 16.0 KiB  OneShot/LL ran: collscope's extension"), "{text}");
        assert!(!best.contains("1.0 GiB"), "another collective's decision: {text}");
    }
}
