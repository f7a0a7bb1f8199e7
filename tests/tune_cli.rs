//! End-to-end: `collscope tune calibrate` measures and writes a profile that `tune show` and communicators load;
//! a bad profile stops a run naming the file.

use crate::common;

use common::run as collscope;

#[test]
fn calibrate_writes_a_profile_that_runs_load() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tuning.json");
    let f = file.to_str().unwrap();
    let (ok, out, err) =
        collscope(&["tune", "calibrate", "--quick", "--nranks", "2", "--max-bytes", "4K", "--out", f], &[]);
    assert!(ok, "{out}\n{err}");
    for want in
        ["SHM   Ring/LL128", "NET   Tree/Simple", "AllReduce choices on 2 ranks", "AllGather choices", "# wrote "]
    {
        assert!(out.contains(want), "{want}: {out}");
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(v["machine"]["nranks"], 2);
    assert_eq!(v["links"].as_array().unwrap().len(), 3);
    assert!(v["links"].as_array().unwrap().iter().all(|l| l["cells"].as_array().unwrap().len() == 6));

    let (ok, out, err) = collscope(&["tune", "show", "--nranks", "8"], &[("COLLSCOPE_TUNING_FILE", f)]);
    assert!(ok && out.contains(&format!("# profile: {f}")) && out.contains("choices on 8 ranks"), "{out}\n{err}");
    let env = [("COLLSCOPE_TUNING_FILE", f)];
    let (ok, out, err) = collscope(&["perf", "all_reduce", "--nranks", "2", "-b", "8", "-e", "64K", "-f", "64"], &env);
    assert!(ok && out.contains("#  Init ") && out.contains("# Peak RSS (VmHWM) per rank (MiB): "), "{out}\n{err}");

    std::fs::write(&file, "{\"format\": 1}").unwrap();
    let (ok, _, err) = collscope(&["perf", "all_reduce", "--nranks", "2", "-b", "8", "-e", "8"], &env);
    assert!(!ok && err.contains(&format!("COLLSCOPE_TUNING_FILE='{f}'")) && err.contains("missing field"), "{err}");
    let (ok, _, err) = collscope(&["tune", "calibrate", "--nranks", "1", "--out", f], &[]);
    assert!(!ok && err.contains("--nranks 1"), "{err}");
}
