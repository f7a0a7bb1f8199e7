//! End-to-end tests of `collscope topo`, running the built binary.

use std::process::{Command, Output};
use std::time::Duration;

fn collscope(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(args).env_remove("NCCL_TOPO_FILE").env_remove("NCCL_DEBUG").env_remove("RUST_BACKTRACE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    collscope_testkit::output(&mut cmd, Duration::from_secs(60))
}

fn ok(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = collscope(args, env);
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn fails(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = collscope(args, env);
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8(out.stderr).unwrap()
}

fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l.trim_end() == line)
}

#[test]
fn show_dgx_a100() {
    let out = ok(&["topo", "show", "--preset", "dgx-a100"], &[]);
    assert!(has_line(&out, "=== System : maxBw 240.0 totalBw 240.0 ==="), "{out}");
    assert!(out.contains("+ NVL[240.0] - NVS/0-0"), "{out}");
    assert!(out.contains("+ PCI[24.0] - GPU/0-7000 (0)"), "{out}");
    assert!(out.contains("+ NET[25.0] - NET/0-0 (0/"), "{out}");
    assert!(out.contains("GPU/0-7000 :GPU/0-7000 (0/5000.0/LOC) GPU/0-f000 (2/240.0/NVL)"), "{out}");
    let row: Vec<&str> = out.lines().find(|l| l.starts_with("GPU0 ")).unwrap().split_whitespace().collect();
    assert_eq!(row[2], "NVL/240.0");
    assert_eq!(row[9], "PIX/24.0", "GPU0-NIC0");
    assert!(
        has_line(&out, "GPU Direct RDMA Enabled for GPU 0 / HCA 0 (distance 4 <= 5), read 0 mode Default"),
        "{out}"
    );
    assert!(has_line(&out, "GPU0 -> GPU1: P2P enabled (path NVL <= PXB), P2P read"), "{out}");
}

#[test]
fn show_hgx_pcie_and_gdr_level_override() {
    let out = ok(&["topo", "show", "--preset", "hgx-pcie"], &[]);
    assert!(has_line(&out, "GPU0 -> GPU4: P2P refused (path SYS > PXB), traffic goes through host memory"), "{out}");
    assert!(has_line(&out, "GPU Direct RDMA Disabled for GPU 4 / HCA 0 (distance 9 > 5)"), "{out}");
    let sys = ok(&["topo", "show", "--preset", "hgx-pcie"], &[("NCCL_NET_GDR_LEVEL", "SYS")]);
    assert!(
        has_line(&sys, "GPU Direct RDMA Enabled for GPU 4 / HCA 0 (distance 9 <= 9), read 0 mode Default"),
        "{sys}"
    );
    let p2p = ok(&["topo", "show", "--preset", "hgx-pcie"], &[("NCCL_P2P_LEVEL", "SYS")]);
    assert!(has_line(&p2p, "GPU0 -> GPU4: P2P enabled (path SYS <= SYS)"), "{p2p}");
}

#[test]
fn json_is_the_topology_model() {
    let out = ok(&["topo", "show", "--preset", "nvlink-bridge-4", "--json"], &[]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["source"], "preset:nvlink-bridge-4");
    assert_eq!(v["max_bw"], 48.0);
    let gpus = v["nodes"].as_array().unwrap().iter().filter(|n| n["kind"] == "GPU").count();
    assert_eq!(gpus, 4);
    assert!(v["paths"].as_array().unwrap().iter().any(|p| p["kind"] == "NVL" && p["bw"] == 48.0));
}

#[test]
fn dump_then_show_file_is_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a100.xml");
    let f = file.to_str().unwrap();
    ok(&["topo", "dump", "--preset", "dgx-a100", "--output", f], &[]);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("<system version=\"1\" name=\"dgx-a100\">\n  <cpu host_hash="), "{text}");
    let stdout = ok(&["topo", "dump", "--preset", "dgx-a100"], &[]);
    assert_eq!(stdout, text);
    let from_preset = ok(&["topo", "show", "--preset", "dgx-a100", "--json"], &[]);
    let from_file = ok(&["topo", "show", "--topo-file", f, "--json"], &[]);
    let from_env = ok(&["topo", "show", "--json"], &[("NCCL_TOPO_FILE", f)]);
    let mut a: serde_json::Value = serde_json::from_str(&from_preset).unwrap();
    let b: serde_json::Value = serde_json::from_str(&from_file).unwrap();
    let c: serde_json::Value = serde_json::from_str(&from_env).unwrap();
    assert_eq!(b["source"], format!("file:{f}"));
    assert_eq!(b, c);
    a["source"] = b["source"].clone();
    assert_eq!(a, b);
    // NCCL_TOPO_DUMP_FILE writes what was loaded.
    let dumped = dir.path().join("dumped.xml");
    ok(&["topo", "show", "--preset", "cpu-host"], &[("NCCL_TOPO_DUMP_FILE", dumped.to_str().unwrap())]);
    assert_eq!(std::fs::read_to_string(&dumped).unwrap(), ok(&["topo", "dump", "--preset", "cpu-host"], &[]));
}

#[test]
fn detects_this_host() {
    let out = ok(&["topo", "show"], &[]);
    assert!(out.starts_with("Topology: detected ("), "{out}");
    assert!(out.lines().any(|l| l.starts_with("CPU/0-") && l.contains(": NUMA ") && l.contains(" arch ")), "{out}");
    assert!(out.contains("=== System : maxBw "), "{out}");
    let xml = ok(&["topo", "dump"], &[]);
    assert!(xml.starts_with("<system version=\"1\">\n  <cpu host_hash=\"0x"), "{xml}");
}

#[test]
fn bad_input_is_reported() {
    let e = fails(&["topo", "show", "--preset", "dgx-z"], &[]);
    assert!(
        e.contains("unknown preset 'dgx-z', expected one of: dgx-a100, dgx-h100, hgx-pcie, nvlink-bridge-4, cpu-host"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.xml");
    std::fs::write(&bad, "<system version=\"1\">\n  <cpu arch=\"arm64\">\n  </cpu>\n</system>\n").unwrap();
    let e = fails(&["topo", "show", "--topo-file", bad.to_str().unwrap()], &[]);
    assert!(e.contains(&format!("{}:2: <cpu> is missing the attribute 'numaid'", bad.display())), "{e}");
    let e = fails(&["topo", "show", "--preset", "hgx-pcie"], &[("NCCL_NET_GDR_LEVEL", "FAR")]);
    assert!(e.contains("NCCL_NET_GDR_LEVEL='FAR' is not valid"), "{e}");
    let e = fails(&["topo", "show", "--preset", "hgx-pcie", "--topo-file", "x.xml"], &[]);
    assert!(e.contains("cannot be used with"), "{e}");
}

#[test]
fn overlay_files_load_with_a_note_and_rccl_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let overlay = dir.path().join("overlay.xml");
    std::fs::write(
        &overlay,
        r#"<system version="1"><cpu numaid="0" affinity="ff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
<pci busid="0000:10:00.0"><pci busid="0000:11:00.0"><nic><net name="efa0" dev="0" speed="100000" port="1" gdr="1"/></nic></pci></pci>
</cpu></system>"#,
    )
    .unwrap();
    let out = collscope(&["topo", "show", "--topo-file", overlay.to_str().unwrap()], &[]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("NET/0-0"), "{stdout}");
    assert!(stderr.contains("is an overlay") && stderr.contains("without class"), "{stderr}");
    let rccl = dir.path().join("rccl.xml");
    std::fs::write(&rccl, r#"<system version="2"><cpu numaid="0" arch="x86_64" vendor="AuthenticAMD"/></system>"#)
        .unwrap();
    let err = fails(&["topo", "show", "--topo-file", rccl.to_str().unwrap()], &[]);
    assert!(err.contains("RCCL") && err.contains("rccl.xml"), "{err}");
}
