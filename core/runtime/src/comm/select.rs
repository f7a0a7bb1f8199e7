//! The one place a call's algorithm, protocol and channel count are chosen: `NCCL_ALGO` / `NCCL_PROTO`
//! restrict the candidates (the tuning model's `parseList` grammar), the runtime's implementation limits
//! remove what it cannot run, and the host tuning model (`crate::tuning`: the measured latency and bandwidth of
//! the communicator's slowest ring link) picks the fastest predicted (algorithm, protocol, channels). Besides
//! NCCL's algorithms it may pick collscope's OneShot AllReduce for small calls (an extension NCCL lacks, named
//! so in the logs and views), unless `NCCL_ALGO` restricts the algorithms or `COLLSCOPE_ONESHOT_MAX` is 0.

use crate::transport::{self, PeerInfo, Transport};
use crate::tuning::{self, HostProfile, TUNING_FILE_VAR};
use collscope_debug::env::{Env, EnvError};
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use collscope_model::{self as model, Algorithm, Collective, Protocol, TuningCell};
use collscope_nccl::tuning::grammar::{parse_algo, parse_proto, EnableMatrix, GrammarError};
use std::sync::Arc;

/// What `select` needs from the communicator: the `NCCL_ALGO` / `NCCL_PROTO` enable matrices, parsed by the
/// tuning model's grammar, the channel budget, the host profile and the link it prices.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectConfig {
    algos: EnableMatrix<7>,
    protos: EnableMatrix<3>,
    pub max_channels: u32,
    min_channels: u32,
    profile: Arc<HostProfile>,
    link: model::Transport,
    forced: Option<Choice>,
    /// Largest per-rank size OneShot may run (0: never).
    one_shot_max: u64,
}

/// The variable bounding OneShot's calls, in bytes per rank; 0 turns the extension off.
pub(crate) const ONE_SHOT_MAX_VAR: &str = "COLLSCOPE_ONESHOT_MAX";
/// Its default: a bound on the rows OneShot keeps per channel (n of them, each up to this size), past every size
/// where it measured faster than the ring (2 SHM ranks on 2 cores: up to 8 KiB; 1.2x slower at 32 KiB, 2x at
/// 512 KiB). Below it the host profile chooses.
pub(crate) const DEFAULT_ONE_SHOT_MAX: u64 = 64 << 10;

impl SelectConfig {
    /// The restrictions in `env`, `NCCL_MIN_NCHANNELS` up to `max_channels`, and the host profile
    /// (`COLLSCOPE_TUNING_FILE`, the default file, or the built-in table), pricing P2P links until
    /// [`SelectConfig::on_link`] says otherwise.
    pub fn from_env(env: &Env, max_channels: u32) -> Result<Self, EnvError> {
        let named = |name: &str, value: Option<&str>, e: GrammarError| EnvError {
            name: name.into(),
            value: value.unwrap_or_default().into(),
            expected: e.to_string(),
        };
        let algo = env.str("NCCL_ALGO");
        let proto = env.str("NCCL_PROTO");
        let min_channels = env.int("NCCL_MIN_NCHANNELS", 1)?.clamp(1, max_channels.max(1) as i64) as u32;
        // A user who names NCCL's algorithms gets only those.
        let one_shot_max = match algo {
            Some(_) => 0,
            None => env.int_in(ONE_SHOT_MAX_VAR, DEFAULT_ONE_SHOT_MAX as i64, 0..=i64::MAX)? as u64,
        };
        let profile = HostProfile::resolve(env).map_err(|e| EnvError {
            name: TUNING_FILE_VAR.into(),
            value: env.str(TUNING_FILE_VAR).map(String::from).unwrap_or_else(|| {
                HostProfile::default_path().map(|p| format!("{} (the default)", p.display())).unwrap_or_default()
            }),
            expected: format!("a tuning profile written by `collscope tune calibrate`, but {e}"),
        })?;
        nccl_info!(
            Subsys::TUNING,
            "Host tuning profile {} (measured {} on {}, {} cores, {} ranks)",
            profile.origin,
            profile.machine.date,
            profile.machine.cpu_model,
            profile.machine.cores,
            profile.machine.nranks
        );
        if one_shot_max > 0 {
            nccl_info!(
                Subsys::TUNING,
                "collscope extension: AllReduce may run OneShot (not an NCCL algorithm) up to {one_shot_max} bytes \
                 per rank; {ONE_SHOT_MAX_VAR}=0 or NCCL_ALGO turns it off"
            );
        }
        Ok(SelectConfig {
            algos: parse_algo(algo).map_err(|e| named("NCCL_ALGO", algo, e))?,
            protos: parse_proto(proto).map_err(|e| named("NCCL_PROTO", proto, e))?,
            min_channels,
            one_shot_max,
            ..Self::new(profile, max_channels)
        })
    }

    /// No restrictions, 1 to `max_channels` channels, priced by `profile` on P2P links (a calibration that was
    /// just measured, a table printed for another profile).
    pub fn new(profile: HostProfile, max_channels: u32) -> Self {
        SelectConfig {
            // Without a value the grammar has nothing to reject.
            algos: parse_algo(None).unwrap_or_default(),
            protos: parse_proto(None).unwrap_or_default(),
            max_channels: max_channels.max(1),
            min_channels: 1,
            profile: Arc::new(profile),
            link: model::Transport::P2p,
            forced: None,
            one_shot_max: DEFAULT_ONE_SHOT_MAX,
        }
    }

    /// The same configuration pricing calls on `link`.
    pub fn on_link(self, link: model::Transport) -> Self {
        SelectConfig { link, ..self }
    }

    pub fn link(&self) -> model::Transport {
        self.link
    }

    pub fn profile(&self) -> &HostProfile {
        &self.profile
    }

    /// The same configuration with every collective run as `choice` says (within the runtime's limits), as a
    /// calibration that times one cell at a time needs.
    pub fn forced(self, choice: Choice) -> Self {
        SelectConfig { forced: Some(choice), ..self }
    }

    fn row(coll: Collective) -> Option<usize> {
        Collective::TUNED.iter().position(|c| *c == coll)
    }

    /// Whether calls may run OneShot at all.
    pub fn one_shot(&self) -> bool {
        self.one_shot_max > 0
    }

    fn algo_allowed(&self, coll: Collective, a: Algorithm) -> bool {
        if a.is_extension() {
            return self.one_shot();
        }
        Self::row(coll).is_some_and(|r| self.algos[r][a.id()] != 0)
    }

    fn proto_allowed(&self, coll: Collective, p: Protocol) -> bool {
        Self::row(coll).is_some_and(|r| self.protos[r][p.id()] != 0)
    }

    /// The tuning table this configuration prices calls with, in NCCL's layout (`TuningTable`): for each
    /// collective, algorithm the runtime implements for it and protocol, the latency of a call with
    /// `max_channels` channels over `nranks` ranks and its algorithm bandwidth (bus bandwidth over the bus
    /// factor, as NCCL 2.28.9 `src/graph/tuning.cc` stores it), so `TuningCell::time_us` gives the time
    /// [`select`] predicts. A cell `NCCL_ALGO`/`NCCL_PROTO` turn off keeps its latency with bandwidth 0, as in
    /// NCCL's table.
    pub fn table(&self, nranks: u32) -> model::TuningTable {
        let mut table = model::TuningTable::new();
        let Some(link) = self.profile.link(self.link) else { return table };
        let nch = self.max_channels;
        for coll in Collective::TUNED {
            for algo in implemented(coll) {
                for &proto in Protocol::ALL {
                    let Some(cell) = link.cell(*algo, proto) else { continue };
                    let lat_us = cell.time_us(coll, 0, nranks, nch);
                    let on = self.algo_allowed(coll, *algo) && self.proto_allowed(coll, proto);
                    let bw = cell.bandwidth(nch) / tuning::predict::bus_factor(coll, *algo, nranks);
                    let bw_gbps = if on { bw } else { 0.0 };
                    table
                        .entry(coll)
                        .or_default()
                        .entry(*algo)
                        .or_default()
                        .insert(proto, TuningCell { lat_us, bw_gbps });
                }
            }
        }
        table
    }

    /// The time in us the host profile predicts for `choice` on `bytes` over `nranks` ranks.
    pub fn predict(&self, coll: Collective, bytes: u64, nranks: u32, choice: Choice) -> Option<f64> {
        let cell = self.profile.link(self.link)?.cell(choice.algo, choice.proto)?;
        Some(cell.time_us(coll, bytes, nranks, choice.nchannels))
    }

    /// What may run `coll`: the allowed algorithms the runtime implements for it (Tree only for AllReduce;
    /// Ring when nothing allowed is implemented), the allowed protocols (Simple when none), each with the
    /// fewest and the most channels.
    fn candidates(&self, coll: Collective) -> Vec<tuning::Candidate> {
        let mut algos: Vec<Algorithm> =
            implemented(coll).iter().copied().filter(|a| self.algo_allowed(coll, *a)).collect();
        if algos.is_empty() {
            algos.push(Algorithm::Ring);
        }
        let mut protos: Vec<Protocol> =
            Protocol::ALL.iter().copied().filter(|p| self.proto_allowed(coll, *p)).collect();
        if protos.is_empty() {
            protos.push(Protocol::Simple);
        }
        let mut channels = vec![self.min_channels];
        if self.max_channels != self.min_channels {
            channels.push(self.max_channels);
        }
        let mut v = Vec::new();
        for &algo in &algos {
            for &proto in &protos {
                v.extend(channels.iter().map(|&nchannels| tuning::Candidate { algo, proto, nchannels }));
            }
        }
        v
    }
}

/// The algorithms the runtime implements for `coll`: Tree and OneShot only for AllReduce.
fn implemented(coll: Collective) -> &'static [Algorithm] {
    if coll == Collective::AllReduce {
        &[Algorithm::Tree, Algorithm::Ring, Algorithm::OneShot]
    } else {
        &[Algorithm::Ring]
    }
}

/// A call's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Choice {
    pub algo: Algorithm,
    pub proto: Protocol,
    pub nchannels: u32,
}

/// Chooses how to run `coll` on `bytes` (per rank) over `nranks` ranks: the candidate with the smallest time
/// the host profile predicts for the configuration's link. Point-to-point always runs Ring/Simple on one
/// channel.
pub fn select(cfg: &SelectConfig, coll: Collective, bytes: u64, nranks: u32) -> Choice {
    if matches!(coll, Collective::Send | Collective::Recv | Collective::SendRecv | Collective::AllToAll) {
        return Choice { algo: Algorithm::Ring, proto: Protocol::Simple, nchannels: 1 };
    }
    if let Some(f) = cfg.forced {
        let algo = if coll == Collective::AllReduce { f.algo } else { Algorithm::Ring };
        return Choice { algo, nchannels: f.nchannels.clamp(1, cfg.max_channels), ..f };
    }
    let mut candidates = cfg.candidates(coll);
    candidates.retain(|c| c.algo != Algorithm::OneShot || bytes <= cfg.one_shot_max);
    let first = candidates[0];
    let best = cfg
        .profile
        .link(cfg.link)
        .and_then(|link| tuning::choose(link, coll, bytes, nranks, candidates))
        .map_or(first, |(c, _)| c);
    Choice { algo: best.algo, proto: best.proto, nchannels: best.nchannels }
}

/// The slowest link on the ring through `peers` in rank order (NET slower than SHM slower than P2P), as the
/// transports of `chain` would connect them; every rank computes the same from the same peer list.
pub(crate) fn ring_link(chain: &[Arc<dyn Transport>], peers: &[PeerInfo]) -> model::Transport {
    let rank = |t: model::Transport| match t {
        model::Transport::P2p => 0,
        model::Transport::Shm => 1,
        _ => 2,
    };
    (0..peers.len())
        .filter_map(|r| transport::select(chain, &peers[r], &peers[(r + 1) % peers.len()]).map(|t| t.kind()))
        .max_by_key(|t| rank(*t))
        .unwrap_or(model::Transport::P2p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> SelectConfig {
        SelectConfig::from_env(&Env::from_pairs(pairs.iter().copied()), 2).unwrap()
    }

    /// The largest power-of-two size up to 256 MiB at which AllReduce still picks `proto`.
    fn last_size_with(c: &SelectConfig, proto: Protocol) -> Option<u64> {
        (3..=28).map(|s| 1u64 << s).filter(|&b| select(c, Collective::AllReduce, b, 4).proto == proto).max()
    }

    #[test]
    fn env_restricts_the_candidates() {
        let c = cfg(&[("NCCL_ALGO", "ring"), ("NCCL_PROTO", "^LL,LL128;allgather:LL128")]);
        for bytes in [8, 64 << 10, 64 << 20] {
            assert_eq!(select(&c, Collective::AllReduce, bytes, 8).algo, Algorithm::Ring);
            assert_eq!(select(&c, Collective::AllReduce, bytes, 8).proto, Protocol::Simple);
            assert_eq!(select(&c, Collective::AllGather, bytes, 8).proto, Protocol::Ll128);
        }
        let c = cfg(&[("NCCL_ALGO", "allreduce:tree")]);
        assert_eq!(select(&c, Collective::AllReduce, 64 << 20, 2).algo, Algorithm::Tree);
        // Only AllReduce has a Tree; point-to-point is Simple on one channel whatever the lists say.
        let c = cfg(&[("NCCL_ALGO", "tree"), ("NCCL_PROTO", "LL")]);
        assert_eq!(select(&c, Collective::ReduceScatter, 1 << 20, 4).algo, Algorithm::Ring);
        assert_eq!(
            select(&c, Collective::SendRecv, 1 << 20, 4),
            Choice { algo: Algorithm::Ring, proto: Protocol::Simple, nchannels: 1 }
        );
        let c = cfg(&[("NCCL_MIN_NCHANNELS", "2")]);
        assert!((3..=26).all(|s| select(&c, Collective::AllGather, 1 << s, 4).nchannels == 2));
    }

    #[test]
    fn the_builtin_profile_switches_with_size_within_a_process_and_host() {
        for link in [model::Transport::P2p, model::Transport::Shm] {
            let c = cfg(&[]).on_link(link);
            let picks: std::collections::HashSet<_> =
                (3..=26).map(|s| select(&c, Collective::AllReduce, 1 << s, 4)).collect();
            assert!(picks.len() > 1, "{link}: {picks:?}");
        }
    }

    /// A profile file whose SHM link has cheap-latency LL and high-bandwidth Simple, LL's latency times `ll_lat`.
    fn shm_profile(dir: &std::path::Path, ll_lat: f64) -> SelectConfig {
        let mut p = cfg(&[]).profile().clone();
        let shm = p.links.iter_mut().find(|l| l.transport == model::Transport::Shm).unwrap();
        for c in shm.cells.iter_mut() {
            let ll = c.proto == Protocol::Ll;
            (c.lat_us, c.bw_gbps, c.max_bw_gbps) = if ll { (ll_lat, 0.2, 0.3) } else { (10.0, 2.0, 3.0) };
        }
        let path = dir.join(format!("shm-{ll_lat}.json"));
        p.save(&path).unwrap();
        let c = cfg(&[("NCCL_PROTO", "LL,Simple"), (TUNING_FILE_VAR, path.to_str().unwrap())]);
        assert_eq!(c.profile().origin, path.display().to_string());
        c.on_link(model::Transport::Shm)
    }

    #[test]
    fn a_loaded_profile_moves_the_choice() {
        let dir = tempfile::tempdir().unwrap();
        let base = shm_profile(dir.path(), 1.0);
        let ll = last_size_with(&base, Protocol::Ll).expect("cheap LL wins small sizes");
        assert_eq!(select(&base, Collective::AllReduce, 64 << 20, 4).proto, Protocol::Simple);
        // LL's steps 5x slower: Simple takes over at a smaller size.
        let slow = shm_profile(dir.path(), 5.0);
        let slow_ll = last_size_with(&slow, Protocol::Ll).expect("LL still wins the smallest sizes");
        assert!(slow_ll < ll, "LL up to {slow_ll} B with slow LL, {ll} B before");
        // Other links keep their constants.
        let p2p = |c: &SelectConfig| select(&c.clone().on_link(model::Transport::P2p), Collective::AllReduce, 8, 4);
        assert_eq!(p2p(&slow), p2p(&base));
        // A forced cell wins over the model, within the runtime's limits.
        let forced = base.forced(Choice { algo: Algorithm::Tree, proto: Protocol::Ll128, nchannels: 9 });
        assert_eq!(
            select(&forced, Collective::AllReduce, 64 << 20, 4),
            Choice { algo: Algorithm::Tree, proto: Protocol::Ll128, nchannels: 2 }
        );
        assert_eq!(select(&forced, Collective::AllGather, 8, 4).algo, Algorithm::Ring);
    }

    #[test]
    fn the_table_prices_every_cell_as_select_does() {
        let c = cfg(&[("NCCL_PROTO", "^LL128")]).on_link(model::Transport::Shm);
        let table = c.table(4);
        assert_eq!(table.len(), Collective::TUNED.len());
        assert_eq!(table[&Collective::AllReduce].len(), 3, "Tree, Ring and OneShot");
        assert_eq!(table[&Collective::AllGather].len(), 1, "Ring only");
        let off = table[&Collective::AllReduce][&Algorithm::Ring][&Protocol::Ll128];
        assert!(off.lat_us > 0.0 && off.bw_gbps == 0.0, "a cell turned off keeps its latency: {off:?}");
        for bytes in [8u64, 1 << 20, 64 << 20] {
            let pick = Choice { nchannels: c.max_channels, ..select(&c, Collective::AllReduce, bytes, 4) };
            let from_table = table[&Collective::AllReduce][&pick.algo][&pick.proto].time_us(bytes).unwrap();
            let predicted = c.predict(Collective::AllReduce, bytes, 4, pick).unwrap();
            assert!((from_table - predicted).abs() < 1e-6 * predicted, "{bytes} B: {from_table} vs {predicted}");
        }
    }

    #[test]
    fn one_shot_takes_small_allreduces_unless_turned_off() {
        let c = cfg(&[]).on_link(model::Transport::Shm);
        // Two ranks: OneShot waits on one step where the ring waits on two; its local reduction of the whole
        // vector hands large calls back to the ring.
        assert_eq!(select(&c, Collective::AllReduce, 8, 2).algo, Algorithm::OneShot);
        assert_ne!(select(&c, Collective::AllReduce, DEFAULT_ONE_SHOT_MAX, 2).algo, Algorithm::OneShot);
        // Only AllReduce has it.
        assert_eq!(select(&c, Collective::ReduceScatter, 8, 2).algo, Algorithm::Ring);
        // Naming NCCL's algorithms, or a bound of 0, turns it off; a bound holds whatever the model says.
        for env in [[("NCCL_ALGO", "ring,tree")], [(ONE_SHOT_MAX_VAR, "0")]] {
            let c = cfg(&env).on_link(model::Transport::Shm);
            assert_ne!(select(&c, Collective::AllReduce, 8, 2).algo, Algorithm::OneShot, "{env:?}");
        }
        let c = cfg(&[(ONE_SHOT_MAX_VAR, "16")]).on_link(model::Transport::Shm);
        assert_eq!(select(&c, Collective::AllReduce, 16, 2).algo, Algorithm::OneShot);
        assert_ne!(select(&c, Collective::AllReduce, 32, 2).algo, Algorithm::OneShot);
        let e = SelectConfig::from_env(&Env::from_pairs([(ONE_SHOT_MAX_VAR, "-1")]), 2).unwrap_err().to_string();
        assert!(e.contains("COLLSCOPE_ONESHOT_MAX='-1'"), "{e}");
    }

    #[test]
    fn bad_lists_and_files_name_the_variable() {
        let e = SelectConfig::from_env(&Env::from_pairs([("NCCL_PROTO", "LL,fast")]), 2).unwrap_err().to_string();
        assert!(e.contains("NCCL_PROTO='LL,fast'") && e.contains("\"fast\"") && e.contains("LL128"), "{e}");
        let e = SelectConfig::from_env(&Env::from_pairs([("NCCL_ALGO", "ring;tree")]), 2).unwrap_err().to_string();
        assert!(e.contains("NCCL_ALGO"), "{e}");
        let e = SelectConfig::from_env(&Env::from_pairs([("NCCL_ALGO", "allredux:ring")]), 2).unwrap_err().to_string();
        assert!(e.contains("\"allredux\"") && e.contains("AllReduce"), "{e}");
        let e = SelectConfig::from_env(&Env::from_pairs([(TUNING_FILE_VAR, "/nonexistent/t.json")]), 2)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("COLLSCOPE_TUNING_FILE='/nonexistent/t.json'") && e.contains("collscope tune calibrate"),
            "{e}"
        );
    }
}
