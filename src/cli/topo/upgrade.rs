//! `--vs VERSION` on `topo explain` and `log explain`: what moving from the release modelled to another
//! changes (`collscope_nccl::upgrade`), as text.

use crate::cli::sizes::human;
use collscope_nccl::explain::Pick;
use collscope_nccl::upgrade::Upgrade;
use std::fmt::Write as _;

/// The report: each release's rules, the graphs and channels that move, the cells offered on one side only,
/// and per call the choice and predicted time on both sides.
pub(crate) fn render(u: &Upgrade) -> String {
    let (from, to) = (u.from, u.to);
    let mut o = format!("\nFrom NCCL {from} to NCCL {to}\n");
    let _ = writeln!(o, "  {from}: {}", u.from_rules);
    let _ = writeln!(o, "  {to}: {}", u.to_rules);
    if u.graphs.is_empty() {
        let _ = writeln!(o, "  graphs: the same search results");
    }
    for g in &u.graphs {
        let (b, a) = (&g.before, &g.after);
        let _ = writeln!(
            o,
            "  graph {:?}: {} channels {}/{} GB/s {}/{} -> {} channels {}/{} GB/s {}/{}",
            g.pattern,
            b.n_channels,
            b.bw_intra,
            b.bw_inter,
            b.type_intra,
            b.type_inter,
            a.n_channels,
            a.bw_intra,
            a.bw_inter,
            a.type_intra,
            a.type_inter
        );
    }
    match &u.channels {
        Some((b, a)) => {
            let n = |v: Option<u32>| v.map_or("?".to_string(), |v| v.to_string());
            let _ = writeln!(
                o,
                "  channels: coll {} -> {}, nvls {} -> {}, collnet {} -> {}",
                n(b.coll),
                n(a.coll),
                n(b.nvls),
                n(a.nvls),
                n(b.collnet),
                n(a.collnet)
            );
        }
        None => {
            let _ = writeln!(o, "  channels: the same counts");
        }
    }
    for c in &u.cells {
        let side = |off: &Option<String>| off.as_ref().map_or("on".to_string(), |w| format!("off ({w})"));
        let _ = writeln!(
            o,
            "  {} {}/{}: {} -> {}",
            c.coll.as_str(),
            c.algo,
            c.proto,
            side(&c.before_off),
            side(&c.after_off)
        );
    }
    let (hb, ha) = (format!("NCCL {from}"), format!("NCCL {to}"));
    let _ = writeln!(o, "  {:<13} {:>9}  {:<27} {:<27} {:>8}", "collective", "size", hb, ha, "speedup");
    let pick = |p: &Option<Pick>| {
        p.as_ref()
            .map_or("refused".to_string(), |p| format!("{}/{} {}ch {:.1} us", p.algo, p.proto, p.n_channels, p.time_us))
    };
    for r in &u.rows {
        let changed = match (&r.before, &r.after) {
            (Some(b), Some(a)) if (b.algo, b.proto, b.n_channels) != (a.algo, a.proto, a.n_channels) => " *",
            (Some(_), Some(_)) => "",
            _ => " *",
        };
        let _ = writeln!(
            o,
            "  {:<13} {:>9}  {:<27} {:<27} {:>8}{changed}",
            r.coll.as_str(),
            human(r.bytes),
            pick(&r.before),
            pick(&r.after),
            r.speedup.map_or("-".into(), |s| format!("x{s:.2}"))
        );
    }
    let _ = writeln!(o, "  (* the choice changes; speedup above 1: NCCL {to} is predicted faster)");
    o
}
