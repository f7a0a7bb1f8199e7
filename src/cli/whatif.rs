//! The what-if flags `topo explain` and `log explain` share, and the before/after report.

use crate::cli::sizes::human;
use anyhow::{bail, Result};
use clap::Args;
use collscope_model::Collective;
use collscope_nccl::whatif::{Edit, WhatIf};
use std::fmt::Write as _;

#[derive(Args, Debug, Default)]
pub(crate) struct WhatIfArgs {
    /// What if this NCCL variable were set (repeatable): NCCL_NET_GDR_LEVEL=SYS, NCCL_ALGO=ring, ...
    #[arg(long = "set", value_name = "VAR=VALUE")]
    pub set: Vec<String>,
    /// What if each node had N NICs (the first N in NCCL's order kept, or more added beside GPUs without one).
    #[arg(long, value_name = "N")]
    pub nics: Option<u32>,
    /// What if every NIC ran at this speed, Gb/s (200 for HDR InfiniBand, 400 for NDR).
    #[arg(long, value_name = "GBPS")]
    pub nic_speed: Option<f64>,
    /// What if GPUs and NICs supported GPUDirect RDMA (on) or not (off).
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    pub gdr: Option<bool>,
    /// What if P2P worked between every pair of GPUs (on: NCCL_P2P_LEVEL=SYS) or not at all (off).
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    pub p2p: Option<bool>,
}

fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "1" | "yes" => Ok(true),
        "off" | "0" | "no" => Ok(false),
        _ => Err(format!("'{s}': expected on or off")),
    }
}

impl WhatIfArgs {
    /// The edits in the order given by kind: variables, then the machine.
    pub(crate) fn edits(&self) -> Result<Vec<Edit>> {
        let mut out = Vec::new();
        for s in &self.set {
            let Some((name, value)) = s.split_once('=') else {
                bail!("--set '{s}': expected VAR=VALUE, e.g. NCCL_NET_GDR_LEVEL=SYS")
            };
            if !name.starts_with("NCCL_") {
                bail!("--set '{s}': '{name}' is not an NCCL variable (NCCL_...)");
            }
            out.push(Edit::Set { name: name.to_string(), value: value.to_string() });
        }
        out.extend(self.nics.map(Edit::Nics));
        out.extend(self.nic_speed.map(Edit::NicSpeed));
        out.extend(self.gdr.map(Edit::Gdr));
        out.extend(self.p2p.map(Edit::P2p));
        Ok(out)
    }
}

/// The before/after table, led by the sentence for the largest AllReduce ("your" only for a call the log
/// printed), then what the edits did, the graphs they changed and the sizes where a choice switches.
pub(crate) fn render(w: &WhatIf) -> String {
    let edits: Vec<String> = w.edits.iter().map(ToString::to_string).collect();
    let edits = edits.join(", ");
    let mut out = format!("\nWhat if: {edits}\n");
    for n in &w.notes {
        let _ = writeln!(out, "  - {n}");
    }
    if !w.graphs.is_empty() {
        let _ = writeln!(out, "  graphs changed (before -> after):");
        for g in &w.graphs {
            let _ = writeln!(out, "    {:?} {}: {} -> {}", g.pattern, g.field, g.before, g.after);
        }
    }
    let big = w.rows.iter().filter(|r| r.coll == Collective::AllReduce).max_by_key(|r| r.bytes);
    if let Some((r, (b, a))) = big.and_then(|r| Some((r, (r.before.as_ref()?, r.after.as_ref()?)))) {
        let whose = if w.sizes_from_log { "your" } else { "a" };
        let _ = writeln!(
            out,
            "  with {edits}, {whose} {} AllReduce would be predicted at {:.1} us instead of {:.1} us ({}/{} -> {}/{})",
            human(r.bytes),
            a.time_us,
            b.time_us,
            b.algo,
            b.proto,
            a.algo,
            a.proto
        );
    }
    let _ = writeln!(out, "  {:<13} {:>9}  {:<27} {:<27} {:>8}", "collective", "size", "before", "after", "speedup");
    let pick = |p: &Option<collscope_nccl::explain::Pick>| {
        p.as_ref()
            .map_or("refused".to_string(), |p| format!("{}/{} {}ch {:.1} us", p.algo, p.proto, p.n_channels, p.time_us))
    };
    for r in &w.rows {
        let _ = writeln!(
            out,
            "  {:<13} {:>9}  {:<27} {:<27} {:>8}",
            r.coll.as_str(),
            human(r.bytes),
            pick(&r.before),
            pick(&r.after),
            r.speedup.map_or("-".into(), |s| format!("x{s:.2}"))
        );
    }
    if !w.switches.is_empty() {
        let _ = writeln!(out, "  where the choice switches (the smallest size that picks the second):");
        let at = |s: Option<u64>| s.map_or("none".to_string(), human);
        for s in &w.switches {
            let moved = if s.moved.is_empty() { String::new() } else { format!(": {}", s.moved.join(", ")) };
            let _ = writeln!(
                out,
                "    {:<13} {} -> {} at {} before, {} after{moved}",
                s.coll.as_str(),
                s.from,
                s.to,
                at(s.before),
                at(s.after)
            );
        }
    }
    out
}
