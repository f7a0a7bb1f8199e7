//! `collscope env` end to end: every variable of the registry with its value and where it came from, the
//! README's table held equal to the registry, and `NCCL_P2P_DISABLE` / `NCCL_SHM_DISABLE` read alike by the model
//! (`topo explain`) and a live run, as NCCL 2.28.9 does (only the value 1 disables).

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn collscope(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(args)
        .env_remove("NCCL_DEBUG")
        .env_remove("NCCL_P2P_DISABLE")
        .env_remove("NCCL_SHM_DISABLE")
        .env_remove("NCCL_ALGO")
        .envs(env.iter().copied())
        .env("COLLSCOPE_TIMEOUT_S", "60");
    let o = collscope_testkit::output(&mut cmd, collscope_testkit::DEADLINE);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn env_lists_every_variable_with_its_value_and_where_it_came_from() {
    let set = [("NCCL_P2P_DISABLE", "2"), ("COLLSCOPE_BOOTSTRAP_SECRET", "hush-123"), ("NCCL_NOT_A_THING", "7")];
    let (ok, out, err) = collscope(&["env"], &set);
    assert!(ok, "{err}");
    let line = |name: &str| -> Vec<String> {
        let l =
            out.lines().find(|l| l.split_whitespace().next() == Some(name)).unwrap_or_else(|| panic!("{name}: {out}"));
        l.split_whitespace().map(str::to_string).collect()
    };
    assert_eq!(line("NCCL_P2P_DISABLE"), ["NCCL_P2P_DISABLE", "2", "environment"]);
    assert_eq!(line("COLLSCOPE_TIMEOUT_S"), ["COLLSCOPE_TIMEOUT_S", "60", "environment"]);
    assert_eq!(line("COLLSCOPE_PEER_TIMEOUT"), ["COLLSCOPE_PEER_TIMEOUT", "600", "default"]);
    assert_eq!(line("NCCL_ALGO"), ["NCCL_ALGO", "-", "unset"]);
    assert_eq!(line("NCCL_NOT_A_THING")[1..].join(" "), "7 environment (not read by collscope)");
    assert!(!out.contains("hush-123"), "a secret is never printed: {out}");

    let (ok, out, err) = collscope(&["env", "--json"], &set);
    assert!(ok, "{err}");
    let rows: Vec<Value> = serde_json::from_str::<Value>(&out).unwrap().as_array().unwrap().clone();
    let row = |name: &str| rows.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("{name}")).clone();
    let p2p = row("NCCL_P2P_DISABLE");
    assert_eq!(
        (p2p["value"].as_str(), p2p["source"].as_str(), p2p["default"].as_str()),
        (Some("2"), Some("environment"), Some("0"))
    );
    assert!(p2p["nccl"].as_str().unwrap().contains("paths.cc"), "{p2p}");
    assert_eq!(row("NCCL_BUFFSIZE")["source"], "default");
    assert_eq!(row("NCCL_ALGO")["value"], Value::Null);
    assert_eq!(row("NCCL_NOT_A_THING")["owner"], Value::Null);
    assert!(!out.contains("hush-123"));
    let declared = rows.iter().filter(|r| !r["owner"].is_null()).count();
    assert_eq!(declared, collscope_debug::params::PARAMS.len(), "every declared variable is listed");
}

const BEGIN: &str = "<!-- collscope env --markdown: begin -->\n";
const END: &str = "<!-- collscope env --markdown: end -->";

#[test]
fn the_readmes_variable_table_is_the_registry() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme.find(BEGIN).expect("README.md has the begin marker") + BEGIN.len();
    let table = &readme[start..start + readme[start..].find(END).expect("README.md has the end marker")];
    let (ok, out, err) = collscope(&["env", "--markdown"], &[]);
    assert!(ok, "{err}");
    assert!(
        table == out,
        "README.md's variable table differs from the registry (core/debug/src/params.rs): replace the lines between \
         the two `collscope env --markdown` markers with the output of `cargo run -q -- env --markdown`"
    );
}

/// The transports (`P2P`, `SHM`, `NET`) of the `Channel ... via T/...` lines of `text`.
fn transports(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| l.contains(" NCCL INFO Channel ") && l.contains(" via "))
        .filter_map(|l| l.split(" via ").nth(1)?.split('/').next().map(str::to_string))
        .collect()
}

#[test]
fn p2p_and_shm_disable_other_than_1_choose_as_topo_explain_does() {
    for (env, want) in [
        (vec![], "P2P"),
        (vec![("NCCL_P2P_DISABLE", "2")], "P2P"),
        (vec![("NCCL_P2P_DISABLE", "1")], "SHM"),
        (vec![("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "2")], "SHM"),
    ] {
        let args =
            ["topo", "explain", "--preset", "nvlink-bridge-4", "--nranks-per-node", "2", "--sizes", "1M", "--log"];
        let (ok, model, err) = collscope(&args, &env);
        assert!(ok, "{env:?}: {err}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("nccl.%p.log").to_string_lossy().into_owned();
        let mut live_env = env.clone();
        live_env.extend([("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "ALL"), ("NCCL_DEBUG_FILE", file.as_str())]);
        let perf = ["perf", "all_reduce", "--nranks", "2", "-b", "8", "-e", "8", "-n", "1", "-w", "0"];
        let (ok, _, err) = collscope(&perf, &live_env);
        assert!(ok, "{env:?}: {err}");
        let mut live = String::new();
        for e in std::fs::read_dir(dir.path()).unwrap() {
            live.push_str(&std::fs::read_to_string(e.unwrap().path()).unwrap());
        }
        let want = BTreeSet::from([want.to_string()]);
        assert_eq!(transports(&model), want, "topo explain with {env:?}");
        assert_eq!(transports(&live), want, "a live run with {env:?}:\n{live}");
    }
}
