//! What telemetry costs the data path: AllReduce time per call on 2 ranks (threads, this process) with
//! telemetry on (recorder enabled, server draining it) against off (what `COLLSCOPE_TELEMETRY=0` gives: the
//! recorder is never enabled). On and off alternate in rounds so machine noise hits both alike; the times are
//! median rounds and the overhead is the median of the rounds' on/off ratios.
//! Run: `cargo bench --bench telemetry_overhead`.

mod common;

use collscope_debug::env::Env;
use collscope_model::Source;
use collscope_runtime::comm::affinity;
use collscope_runtime::comm::{Comm, CommOptions};
use collscope_runtime::observe::recorder;
use collscope_telemetry::{Telemetry, TelemetryConfig};
use common::{quantile, run};
use std::time::Duration;

const ROUNDS: usize = 9;

fn main() {
    let opts = CommOptions { env: Env::from_process(), net: None, name: Some("bench".into()) };
    let mut comms = Comm::init_threads(2, opts).expect("communicators");
    let cpus = affinity::plan(&Env::from_process(), 2).expect("COLLSCOPE_BIND");
    let cfg = TelemetryConfig::new("127.0.0.1:0".parse().expect("address"));
    for (label, elems, budget) in [("8 B", 2usize, 0.4f64), ("1 MiB", 1 << 18, 0.6)] {
        // Warm up (connections, caches) and size the rounds to about `budget` seconds each.
        let per_call = run(&mut comms, &cpus, elems, 50);
        let iters = ((budget / per_call) as usize).clamp(20, 200_000);
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            off.push(run(&mut comms, &cpus, elems, iters));
            let t = Telemetry::start(&cfg, Source::Runtime, Some(recorder::global())).expect("telemetry");
            on.push(run(&mut comms, &cpus, elems, iters));
            t.shutdown().expect("telemetry shutdown");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut ratios: Vec<f64> = on.iter().zip(&off).map(|(a, b)| a / b).collect();
        let ratio = quantile(&mut ratios, 0.5);
        let (off, on) = (quantile(&mut off, 0.5), quantile(&mut on, 0.5));
        println!(
            "AllReduce {label:>6}: off {:>9.2} us/call, on {:>9.2} us/call, overhead {:+.2} % ({iters} calls x {ROUNDS} rounds)",
            off * 1e6,
            on * 1e6,
            (ratio - 1.0) * 100.0
        );
    }
}
