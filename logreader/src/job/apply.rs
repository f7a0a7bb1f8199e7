//! What each event adds to the job. [`Job::event`] says whether the line added anything: a line that parsed but
//! could not be placed (a graph channel without its graph) is reported as not understood.

use super::*;
use crate::message::{setup, GdrLine};
use collscope_model::{
    BootstrapInterface, CommState, Communicator, Connection, Direction, EnvSetting, GdrCheck, InitFacts, NetDevice,
    PeerClosed, Ring, Transport, Tree, Warning,
};

impl Job {
    pub(super) fn learn_rank(&mut self, key: &ProcKey, rank: u32) {
        self.saw_rank(rank);
        // The process that learnt its rank last, again (a line's entries, a thread's lines in a row): no lookup.
        if key.anonymous() || self.rank_known == Some((key.id, rank)) {
            return;
        }
        let full = self.procs.len() >= MAX_THREADS;
        match self.procs.get_mut(&key.id) {
            // Known already: most lines that name their rank are a known process's.
            Some(known) if *known == Some(rank) => {
                self.rank_known = Some((key.id, rank));
                return;
            }
            Some(known) => *known = Some(rank),
            // Processes and ranks past the cap are not remembered (`MAX_THREADS` says why it is enough).
            None if full => return,
            None => {
                self.procs.insert(key.id, Some(rank));
            }
        }
        self.rank_known = Some((key.id, rank));
        if self.rank_host.len() < MAX_THREADS || self.rank_host.contains_key(&rank) {
            self.rank_host.entry(rank).or_insert_with(|| key.place());
        }
    }

    /// A rank named anywhere (printing, or as a peer).
    pub(super) fn saw_rank(&mut self, rank: u32) {
        self.max_rank = Some(self.max_rank.map_or(rank, |m| m.max(rank)));
    }

    pub(super) fn warning(
        &mut self,
        at: &At,
        rank: Option<u32>,
        host: Option<&str>,
        text: &str,
        location: Option<&str>,
    ) {
        // Repeats are data: an echo of the line just before from the same thread was dropped already (the repeat
        // rule in `Job::who`); the same error again later is the job failing again. A line repeated past
        // `MAX_REPEATED_WARNINGS` times is not kept again, so that it cannot crowd later errors out of the list.
        if self.snap.warnings.len() < MAX_WARNINGS {
            let times = self.warning_times.entry(hash_of(at.text.as_bytes())).or_default();
            *times += 1;
            if *times > MAX_REPEATED_WARNINGS {
                return self.gdr_warning(at, rank, host, text);
            }
            let class = classify::classify(text, location);
            self.snap.warnings.push(Warning {
                rank,
                host: host.map(str::to_string),
                line: Some(at.line_ref(&self.files)),
                text: kept(text),
                class: class.to_string(),
                source: location.map(str::to_string),
            });
        }
        self.gdr_warning(at, rank, host, text);
    }

    /// A warning that says GPUDirect RDMA is off (a plugin's).
    fn gdr_warning(&mut self, at: &At, rank: Option<u32>, host: Option<&str>, text: &str) {
        if setup::says_gdr_off(text) {
            let gdr = GdrLine { enabled: false, reason: Some(kept(text)), ..GdrLine::default() };
            self.gdr(at, host, rank, gdr);
        }
    }

    /// A problem of the input itself, not of the job: a warning of class [`classify::INPUT`].
    pub(crate) fn input_warning(&mut self, text: String) {
        if self.snap.warnings.len() < MAX_WARNINGS {
            let class = classify::INPUT.to_string();
            self.snap.warnings.push(Warning { rank: None, host: None, line: None, text, class, source: None });
        }
    }

    pub(super) fn version(&mut self, at: &At, v: &str, who: Option<String>) {
        let set = self.versions.entry(v.to_string()).or_default();
        if set.len() < 1024 {
            set.insert(who.unwrap_or_default());
        }
        self.cite(Cite::Version(v.to_string()), at);
    }

    /// The communicator's row, added on its first line; `None` (counted) past [`MAX_COMMUNICATORS`].
    /// `comm_key`: [`Job::comm_rank_key`] of `key` and `comm`.
    fn comm_slot(&mut self, key: &ProcKey, comm: &str, comm_key: u64) -> Option<usize> {
        // By hash: a key of owned strings cost two allocations on every communicator line.
        let mut id = FastHash(comm_key);
        id.word(key.pid.unwrap_or(0).into());
        let id = id.0;
        if let Some(&i) = self.comm_index.get(&id) {
            return Some(i);
        }
        if self.snap.communicators.len() >= MAX_COMMUNICATORS {
            self.dropped.communicators += 1;
            return None;
        }
        self.snap.communicators.push(Communicator {
            comm: Some(comm.to_string()),
            host: key.host.map(str::to_string),
            pid: key.pid,
            cuda_dev: key.dev,
            ..Communicator::default()
        });
        let i = self.snap.communicators.len() - 1;
        self.comm_index.insert(id, i);
        Some(i)
    }

    /// Remembers which rank printed a communicator pointer: a COLL line names its communicator, not its rank.
    /// The communicator a line names with its rank and size (`source`: which line printed the size): the rank
    /// learnt for the process, the size for the job, and the communicator's slot with both set.
    fn comm_member(
        &mut self,
        key: &ProcKey,
        comm: &str,
        rank: u32,
        nranks: u32,
        source: &'static str,
    ) -> Option<usize> {
        self.learn_rank(key, rank);
        self.printed_nranks(nranks, source);
        let comm_key = Self::comm_rank_key(key, comm);
        let i = self.comm_slot(key, comm, comm_key)?;
        self.comm_rank.insert(comm_key, rank);
        let c = &mut self.snap.communicators[i];
        c.rank = Some(rank);
        c.nranks = Some(nranks);
        Some(i)
    }

    pub(super) fn comm_rank_key(key: &ProcKey, comm: &str) -> u64 {
        let mut h = FastHash::default();
        h.bytes(key.host.unwrap_or("").as_bytes());
        h.word(key.file as u64);
        h.bytes(comm.as_bytes());
        h.0
    }

    pub(super) fn printed_nranks(&mut self, n: u32, source: &'static str) {
        if self.size.nranks.is_none_or(|(m, _)| n > m) {
            self.size.nranks = Some((n, source));
        }
    }

    fn printed_nnodes(&mut self, n: u32, source: &'static str) {
        if self.size.nnodes.is_none_or(|(m, _)| n > m) {
            self.size.nnodes = Some((n, source));
        }
    }

    pub(super) fn local_ranks(&mut self, n: u32, source: &'static str) {
        if self.size.local.is_none_or(|(m, _)| n > m) {
            self.size.local = Some((n, source));
        }
    }

    /// A benchmark's `# Rank N ... on HOST device D` line: it lists every rank, so the job has at least N+1
    /// ranks, on as many nodes as hosts named (all on one host: one node).
    pub(super) fn bench_rank(&mut self, text: &str) {
        let Some((rank, host)) = message::bench::rank_line(text) else { return };
        const SOURCE: &str = "the benchmark's `# Rank` lines";
        self.printed_nranks(rank.saturating_add(1), SOURCE);
        if self.first_time(13, &[host.as_bytes()]) {
            self.bench_hosts += 1;
            let n = self.bench_hosts;
            self.printed_nnodes(n, SOURCE);
        }
    }

    /// Whether the fact made of `parts` (under `tag`) is new; lists the model keeps deduplicated go through it
    /// rather than comparing with every element kept.
    pub(super) fn first_time(&mut self, tag: u64, parts: &[&[u8]]) -> bool {
        let mut h = FastHash(tag);
        for p in parts {
            h.bytes(p);
        }
        self.seen.insert(h.0)
    }

    fn gdr(&mut self, at: &At, host: Option<&str>, rank: Option<u32>, g: GdrLine) {
        // The check's identity from the line's parts as they are: a check known already (most GDR lines: every
        // rank prints its own) allocates nothing.
        let mut id = FastHash(1);
        for text in [host, g.hca.as_deref(), g.hca_name.as_deref(), g.reason.as_deref(), g.net.as_deref()] {
            id.bytes(text.unwrap_or("\u{0}").as_bytes());
        }
        std::hash::Hash::hash(&g.gpu, &mut id);
        let check_rank = g.rank.or(rank);
        // A line that names its GPU is the same check whether or not its process's rank was known yet.
        let id_rank = if g.gpu.is_some() { g.rank } else { check_rank };
        for n in [id_rank, g.distance, g.level] {
            id.word(n.map_or(u64::MAX, u64::from));
        }
        id.word(g.enabled.into());
        if !self.seen.insert(id.0) || self.facts.gdr_checks.len() >= MAX_WARNINGS {
            return;
        }
        let line = (!g.enabled).then(|| at.line_ref(&self.files));
        if line.is_some() {
            self.cite(Cite::GdrOff, at);
        }
        self.facts.gdr_checks.push(GdrCheck {
            host: host.map(str::to_string),
            rank: check_rank,
            gpu: g.gpu,
            net: g.net,
            hca: g.hca,
            hca_name: g.hca_name,
            enabled: g.enabled,
            distance: g.distance,
            level: g.level,
            reason: g.reason,
            line,
        });
    }

    /// Applies one event; `false` when the line added nothing the job can use.
    pub(super) fn event(&mut self, at: &At, key: &ProcKey, rank: Option<u32>, stream: StreamKey, ev: Event) -> bool {
        if self.open_prints > 0 && !matches!(ev, Event::Table(_) | Event::GraphChannel(_) | Event::TopoLine(_)) {
            self.close_prints(stream);
        }
        match ev {
            Event::Version(v) => self.version(at, &v, rank.map(|r| format!("rank {r}"))),
            Event::RcclVersion(v) => {
                self.facts.rccl = true;
                self.version(at, &v, rank.map(|r| format!("rank {r}")));
            }
            Event::RcclLine => self.facts.rccl = true,
            Event::Rccl { comm, nranks, inner } => {
                self.facts.rccl = true;
                self.printed_nranks(nranks, "RCCL's nRanks");
                if let Some(r) = rank {
                    self.comm_rank.insert(Self::comm_rank_key(key, &comm), r);
                }
                return self.event(at, key, rank, stream, *inner);
            }
            Event::Bootstrap { name, address } => {
                let host = key.host.unwrap_or("").as_bytes();
                if self.first_time(2, &[name.as_bytes(), address.as_bytes(), host]) {
                    self.snap.bootstrap.push(BootstrapInterface {
                        name,
                        address,
                        host: key.host.map(str::to_string),
                        rank,
                    });
                }
                self.cite(Cite::Bootstrap, at);
            }
            Event::NetUsing { net, devices } => {
                for d in devices {
                    let host = key.host.unwrap_or("").as_bytes();
                    if self.first_time(3, &[d.name.as_bytes(), host, &d.index.to_le_bytes()]) {
                        self.snap.net_devices.push(NetDevice { host: key.host.map(str::to_string), ..d });
                    }
                }
                self.net_using.insert(net);
            }
            Event::NetNoDevice(_) => self.cite(Cite::NetNoDevice, at),
            Event::UsingNetwork(n) => self.using_network = Some(n),
            Event::NetPluginActive(n) => {
                self.plugin_nets.insert(n);
            }
            Event::Plugin(note) => {
                let missing = !note.loaded && (note.text.contains("No plugin") || note.text.contains("Could not find"));
                if self.first_time(4, &[note.kind.as_bytes(), note.text.as_bytes()])
                    && self.facts.plugins.len() < MAX_WARNINGS
                {
                    self.facts.plugins.push(note);
                }
                if missing {
                    self.cite(Cite::PluginMissing, at);
                }
            }
            Event::Gdr(g) => self.gdr(at, key.host, rank, g),
            Event::Graph(g) => {
                // A new graph ends the one before.
                self.close_prints(stream);
                let host = key.host.map(str::to_string);
                let s = self.streams.entry(stream).or_default();
                let was = s.is_open();
                s.graph = Some(topo::GraphBuild::new(g, host, key.file));
                self.settle(stream, was);
            }
            Event::GraphChannel(tokens) => return self.graph_channel(stream, tokens),
            Event::SearchFallback(_) => self.cite(Cite::SearchFallback, at),
            Event::Conn(c) => self.connection(at, key, stream, c),
            Event::RingOrder(r) => {
                if let Some(&m) = r.order.iter().max() {
                    self.saw_rank(m);
                }
                if r.truncated {
                    self.facts.stats.truncated_lines += 1;
                }
                if let Some(n) = r.n_channels {
                    self.ring_nchannels = Some(self.ring_nchannels.map_or(n, |m| m.max(n)));
                }
                if let Some(n) = complete_ring(&r.order, r.truncated) {
                    self.size.ring = Some(self.size.ring.map_or(n, |m| m.max(n)));
                }
                let Some(i) = self.ring(r.channel) else { return true };
                let ring = &mut self.snap.rings[i];
                if r.order.len() > ring.order.len() || (ring.truncated && !r.truncated && !r.order.is_empty()) {
                    ring.order = r.order;
                    ring.truncated = r.truncated;
                }
            }
            Event::RingNeighbours(ch, prev, me, next) => {
                self.learn_rank(key, me);
                self.saw_rank(prev.max(next));
                self.size.ring_pair |= prev == next && prev != me;
                let Some(i) = self.ring(ch) else { return true };
                // Looked up in a set: a scan of the ring's neighbours was quadratic in ranks. The four numbers
                // packed in one key.
                let seen = u128::from(ch) << 96 | u128::from(prev) << 64 | u128::from(me) << 32 | u128::from(next);
                if self.neighbours_seen.contains(&seen) {
                    return true;
                }
                if self.neighbours_seen.len() >= MAX_ROWS {
                    self.dropped.row("ring neighbour");
                    return true;
                }
                self.neighbours_seen.insert(seen);
                self.snap.rings[i].neighbours.push((prev, me, next));
            }
            Event::Trees(entries) => {
                let mut learnt = None;
                for t in entries {
                    // The entries of a line name its printer's rank, each the same: learnt once, not per entry.
                    if learnt != Some(t.rank) {
                        self.learn_rank(key, t.rank);
                        learnt = Some(t.rank);
                    }
                    if let Some(m) = t.down.iter().chain([&t.up]).filter_map(|&x| u32::try_from(x).ok()).max() {
                        self.saw_rank(m);
                    }
                    let seen = u64::from(t.channel) << 32 | u64::from(t.rank);
                    if self.tree_seen.len() >= MAX_ROWS && !self.tree_seen.contains(&seen) {
                        self.dropped.row("tree");
                    } else if self.tree_seen.insert(seen) {
                        self.snap.trees.push(Tree {
                            channel: t.channel,
                            rank: t.rank,
                            up: t.up,
                            down: t.down.to_vec(),
                        });
                    }
                }
            }
            Event::ChannelCounts(channels) => self.fold_init(InitFacts { channels, ..InitFacts::default() }),
            Event::ThreadThresholds(t) => {
                if !self.facts.thread_thresholds.contains(&t)
                    && self.facts.thread_thresholds.len() < Evidence::MAX_PER_KIND
                {
                    self.facts.thread_thresholds.push(t);
                }
            }
            Event::ConnectedRings { pxn, gdr } => {
                self.facts.ring_pxn = pxn.or(self.facts.ring_pxn);
                self.facts.ring_gdr = gdr.or(self.facts.ring_gdr);
                if gdr == Some(false) {
                    self.cite(Cite::RingNoGdr, at);
                }
            }
            Event::Known | Event::ErrorTrace => {}
            Event::Nvls(used) => self.nvls = Some(used || self.nvls == Some(true)),
            Event::NvlsComm(n) => {
                self.nvls = Some(true);
                if let Some(local) = n.nvls_ranks {
                    self.local_ranks(local, "NVLS nvlsRanks");
                }
            }
            Event::CommInit(c) => {
                let Some(i) = self.comm_member(key, &c.comm, c.rank, c.nranks, "nranks (Init line)") else {
                    return true;
                };
                let comm = &mut self.snap.communicators[i];
                comm.cuda_dev = Some(c.cuda_dev);
                comm.bus_id = c.bus_id.or(comm.bus_id.take());
                // A split communicator is named by its parent: its members share the parent's commId.
                comm.comm_id = c.comm_id.or(comm.comm_id.take()).or(c.parent.map(|p| format!("split of {p}")));
                if c.complete {
                    comm.state = CommState::Ready;
                } else if comm.state == CommState::Unknown {
                    comm.state = CommState::Initializing;
                }
                self.streams.entry(stream).or_default().comm = Some(i);
                if !c.complete {
                    self.cite(Cite::InitStart(i), at);
                }
            }
            Event::CommInfo(c) => {
                self.printed_nnodes(c.nnodes, "nNodes");
                let Some(i) = self.comm_member(key, &c.comm, c.rank, c.nranks, "nRanks") else { return true };
                let comm = &mut self.snap.communicators[i];
                comm.nnodes = Some(c.nnodes);
                comm.local_ranks = Some(c.local_ranks);
                comm.local_rank = Some(c.local_rank);
                self.streams.entry(stream).or_default().comm = Some(i);
            }
            Event::CommEnd(c) => {
                let what = "an Abort/Destroy COMPLETE line's nranks";
                let Some(i) = self.comm_member(key, &c.comm, c.rank, c.nranks, what) else { return true };
                let comm = &mut self.snap.communicators[i];
                comm.cuda_dev = Some(c.cuda_dev);
                comm.bus_id = c.bus_id.or(comm.bus_id.take());
                comm.state = CommState::Destroyed;
            }
            Event::ProxyCall { comm, rank: r } => {
                self.learn_rank(key, r);
                self.comm_rank.insert(Self::comm_rank_key(key, &comm), r);
            }
            Event::Alloc(a) => {
                let t = &mut self.facts.allocations;
                let (calls, bytes) = if a.device {
                    (&mut t.device_calls, &mut t.device_bytes)
                } else {
                    (&mut t.host_calls, &mut t.host_bytes)
                };
                *calls += 1;
                *bytes = bytes.saturating_add(a.bytes);
            }
            Event::TopologyNote(note) => {
                let notes = &mut self.facts.topology_notes;
                if notes.len() < Evidence::MAX_PER_KIND && !notes.contains(&note) {
                    notes.push(note);
                }
            }
            Event::CommSize { nranks, nnodes } => {
                self.printed_nranks(nranks, "a plugin's \"comm with N ranks\"");
                self.printed_nnodes(nnodes, "a plugin's \"and M nodes\"");
            }
            Event::InitTimings { rank: r, nranks, total, phases } => {
                self.learn_rank(key, r);
                self.printed_nranks(nranks, "nranks (Init timings)");
                if let Some(i) = self.streams.get(&stream).and_then(|s| s.comm) {
                    let init = &mut self.snap.communicators[i].init;
                    init.total = Some(total);
                    init.phases = phases;
                }
            }
            Event::Table(t) => return self.table(at, stream, t),
            Event::MatrixStart => self.matrix = Some(None),
            Event::Decision(d) => self.decision(stream, rank, d),
            Event::Coll(c) => self.coll(key, rank, stream, c),
            Event::Env { name, value } => {
                if self.first_time(5, &[name.as_bytes(), value.as_bytes()]) {
                    self.snap.env.push(EnvSetting { name: name.clone(), value, rank });
                }
                self.cite(Cite::Env(name), at);
            }
            Event::TopoSystem { max_bw, total_bw } => {
                if let Some(t) = self.topo_slot(key) {
                    self.snap.topology[t].max_bw = max_bw;
                    self.snap.topology[t].total_bw = total_bw;
                }
                self.streams.entry(stream).or_default().tree.clear();
            }
            Event::TopoLine(line) => self.tree_line(key, stream, line),
            Event::TopoEnd => self.streams.entry(stream).or_default().tree.clear(),
            Event::Path(p) => self.path(key, p),
            Event::P2pDisabled => self.cite(Cite::P2pDisabled, at),
            Event::PeerClosed(local_rank) => {
                let host = key.host.unwrap_or("").as_bytes();
                if self.first_time(12, &[host, &local_rank.to_le_bytes()]) {
                    let host = key.host.map(str::to_string);
                    self.facts.peers_closed.push(PeerClosed { host, local_rank, seen_by: rank });
                }
                self.cite(Cite::PeerClosed, at);
            }
            Event::Ll128Disabled => self.cite(Cite::Ll128Disabled, at),
            Event::ChannelsLimited => self.cite(Cite::ChannelsLimited, at),
        }
        true
    }

    /// Init facts whose rules are a live job's (graphs kept once each, channel counts the largest, tuning cells
    /// set), folded through the model's one fold.
    pub(super) fn fold_init(&mut self, facts: InitFacts) {
        self.snap.apply(&collscope_model::Event::InitFacts(Box::new(facts)));
    }

    /// The ring of `channel`; `None` (counted) past [`MAX_RINGS`] channels.
    fn ring(&mut self, channel: u32) -> Option<usize> {
        if let Some(&i) = self.ring_index.get(&channel) {
            return Some(i);
        }
        if self.snap.rings.len() >= MAX_RINGS {
            self.dropped.row("ring");
            return None;
        }
        self.snap.rings.push(Ring { channel, ..Ring::default() });
        let i = self.snap.rings.len() - 1;
        self.ring_index.insert(channel, i);
        Some(i)
    }

    fn connection(&mut self, at: &At, key: &ProcKey, stream: StreamKey, c: Connection) {
        let me = if c.direction == Direction::Recv { c.dst } else { c.src };
        self.learn_rank(key, me);
        self.saw_rank(c.src.max(c.dst));
        let comm_idx = self.streams.get(&stream).and_then(|s| s.comm);
        let ev = match (c.transport, c.gdrdma) {
            (Transport::Net, _) if c.net.as_deref() == Some("Socket") => Some(Cite::NetSocket),
            (Transport::Net, Some(true)) => None,
            (Transport::Net, _) => Some(Cite::NetNoGdr),
            (Transport::Shm, _) => Some(Cite::Shm),
            _ => None,
        };
        if c.transport == Transport::Net {
            self.size.multi_node = true;
        }
        if let Some(ev) = ev {
            self.cite(ev, at);
        }
        // Its numbers packed in three words, then its mode.
        let mut h = FastHash::default();
        h.word(comm_idx.map_or(u64::MAX, |i| i as u64));
        h.word(u64::from(c.channel) << 32 | u64::from(c.src));
        h.word(u64::from(c.dst) << 32 | (c.direction as u64) << 16 | c.transport.id() as u64);
        h.bytes(c.mode.as_deref().unwrap_or("").as_bytes());
        if self.conn_seen.contains(&h.0) {
            return;
        }
        if self.conn_seen.len() >= MAX_ROWS {
            self.dropped.row("connection");
            return;
        }
        self.conn_seen.insert(h.0);
        let comm = comm_idx.and_then(|i| self.snap.communicators[i].comm.clone());
        self.snap.connections.push(Connection { comm, ..c });
    }
}

/// The rank count a ring order shows, when it is whole: every rank 0..n-1 once, not cut short with `...`, and not
/// exactly the 20 ranks older NCCL (and RCCL) print at most (`MAXWIDTH` in `src/graph/rings.cc` before 2.19).
fn complete_ring(order: &[u32], truncated: bool) -> Option<u32> {
    let n = order.len();
    if truncated || n < 2 || n == 20 {
        return None;
    }
    let mut seen = vec![false; n];
    for &r in order {
        let slot = seen.get_mut(r as usize)?;
        if std::mem::replace(slot, true) {
            return None;
        }
    }
    u32::try_from(n).ok()
}
