//! `collscope env`: every variable collscope reads, from the one registry (`collscope_debug::params`), with its
//! value and where it came from: the environment, or the default. collscope reads the environment only: unlike
//! NCCL 2.28.9, which first loads `NCCL_CONF_FILE` (else `~/.nccl.conf`) and `/etc/nccl.conf` into it
//! (`src/misc/param.cc` initEnvFunc, v2.28.9-1), it reads no configuration file. `--markdown` prints the
//! README's variable table.

use clap::Args;
use collscope_debug::params::{self, Setting, Source};

#[derive(Args)]
pub(crate) struct EnvArgs {
    /// Print JSON: one object per variable (name, owner, type, value, source, default, values, meaning, nccl)
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Print the README's table of the NCCL_* and COLLSCOPE_* variables (Markdown)
    #[arg(long)]
    markdown: bool,
}

pub(crate) fn run(args: &EnvArgs) -> anyhow::Result<()> {
    if args.markdown {
        print!("{}", params::markdown_table());
        return Ok(());
    }
    let rows = params::settings(&params::process_vars());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json(&rows))?);
    } else {
        print!("{}", text(&rows));
    }
    Ok(())
}

/// One line a variable: name, value (`-` when unset) and source.
fn text(rows: &[Setting]) -> String {
    let name_w = rows.iter().map(|r| r.name.len()).max().unwrap_or(0);
    let value_w = rows.iter().map(|r| r.value.as_deref().map_or(1, str::len)).max().unwrap_or(0).min(40);
    let mut out = String::new();
    for r in rows {
        let source = match (r.source, r.param) {
            (Source::Environment, None) => "environment (not read by collscope)",
            (s, _) => s.as_str(),
        };
        let value = r.value.as_deref().unwrap_or("-");
        out.push_str(&format!("{:<name_w$}  {value:<value_w$}  {source}\n", r.name));
    }
    out
}

fn json(rows: &[Setting]) -> serde_json::Value {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    rows.iter()
        .map(|r| {
            let p = r.param;
            serde_json::json!({
                "name": r.name,
                "owner": p.map(|p| p.owner.as_str()),
                "type": p.map(|p| p.ty.as_str()),
                "value": r.value,
                "source": r.source.as_str(),
                "default": p.and_then(|p| non_empty(p.default)),
                "values": p.and_then(|p| non_empty(p.values)),
                "meaning": p.map(|p| p.meaning),
                "nccl": p.and_then(|p| non_empty(p.nccl)),
            })
        })
        .collect()
}
