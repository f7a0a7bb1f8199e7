//! A record that survives (issue 53, item 4): `demo --fault kill:rank=2` with `COLLSCOPE_DUMP_DIR` set leaves
//! each surviving rank's dump; `collscope job analyze DIR` names rank 2 as dead and not arrived and shows each
//! rank's last call (text and `--json`); `collscope tui DIR` shows the ranks from the dumps.

use crate::common;
use crate::tmux::Tmux;
use collscope_model::{Collective, RankDump};
use collscope_testkit::DEADLINE;
use std::process::Command;

#[test]
fn a_killed_ranks_survivors_leave_dumps_that_analyze_and_the_tui_name_it_by() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dumps");
    let dir_s = dir.to_str().unwrap();
    let out = collscope_testkit::output(
        Command::new(env!("CARGO_BIN_EXE_collscope"))
            .args(["demo", "--no-tui", "--nranks", "4", "--duration", "60", "--grad-mib", "1"])
            .args(["--metrics-addr", "127.0.0.1:0", "--fault", "kill:rank=2,step=3"])
            .env_remove("NCCL_DEBUG")
            .env("COLLSCOPE_DUMP_DIR", dir_s)
            .env("COLLSCOPE_TIMEOUT_S", "5")
            .env("COLLSCOPE_PEER_TIMEOUT", "5"),
        DEADLINE,
    );
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "the demo went on without rank 2:\n{said}");
    for rank in [0, 1, 3] {
        let path = dir.join(RankDump::file_name(rank));
        let d: RankDump = serde_json::from_slice(
            &std::fs::read(&path).unwrap_or_else(|e| panic!("rank {rank}'s dump {}: {e}\n{said}", path.display())),
        )
        .unwrap();
        assert_eq!((d.rank, d.nranks), (rank, Some(4)));
        assert!(!d.ops.is_empty(), "rank {rank}'s dump holds no call");
    }
    assert!(!dir.join(RankDump::file_name(2)).exists(), "the killed rank wrote a dump");

    let (ok, json, err) = common::run(&["job", "analyze", "--json", dir_s], &[]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["missing"], serde_json::json!([2]), "{json}");
    let findings = v["view"]["findings"].as_array().unwrap();
    let f = findings
        .iter()
        .find(|f| f["code"] == "rank_not_arrived" && f["rank"] == 2)
        .unwrap_or_else(|| panic!("no finding names rank 2: {json}"));
    let title = f["title"].as_str().unwrap();
    assert!(title.ends_with("(dead)"), "{title}");
    // The call rank 2 never arrived at is the one each survivor was last in.
    let ranks = v["ranks"].as_array().unwrap();
    assert_eq!(ranks.iter().map(|r| r["rank"].as_u64().unwrap()).collect::<Vec<_>>(), vec![0, 1, 3]);
    let mut calls = Vec::new();
    for r in ranks {
        let last = &r["last_calls"][0];
        let coll: Collective = serde_json::from_value(last["coll"].clone()).unwrap();
        let call = format!("{coll} #{}", last["seq"]);
        assert!(title.contains(&format!("at {call} ")), "{title} vs rank {}'s last call {call}", r["rank"]);
        calls.push((r["rank"].as_u64().unwrap(), coll, last["seq"].as_u64().unwrap()));
    }

    let (ok, text, err) = common::run(&["job", "analyze", dir_s], &[]);
    assert!(ok, "{err}");
    assert!(text.contains("ranks without a dump: 2"), "{text}");
    assert!(text.lines().any(|l| l.contains(title)), "{text}");
    let row = |rank: u64| text.lines().find(|l| l.trim_start().starts_with(&format!("{rank}  "))).unwrap_or("");
    for (rank, coll, seq) in calls {
        let line = row(rank);
        assert!(line.contains(&coll.to_string()) && line.contains(&format!(" {seq} ")), "rank {rank}: {text}");
    }
    assert!(row(2).contains("(no dump)"), "{text}");

    let tui = Tmux::start("dumps", &["tui", dir_s]);
    tui.wait_for(&["r0 ", "r1 ", "r2 ", "r3 ", "no answer", "dumps"]);
}
