//! What each event adds to the job.

use super::*;

const PROTOCOLS: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];

impl Job {
    pub(super) fn learn_rank(&mut self, key: &ProcKey, rank: u32) {
        self.procs.insert(key.id, Some(rank));
        self.ranks_seen.insert(rank);
        if let Some(h) = key.host {
            self.rank_host.entry(rank).or_insert_with(|| h.to_string());
        }
        if let Some(d) = key.dev {
            self.rank_dev.entry(rank).or_insert(d);
        }
    }

    pub(super) fn warning(
        &mut self,
        at: &At,
        rank: Option<u32>,
        host: Option<&str>,
        text: &str,
        location: Option<&str>,
    ) {
        let class = classify::classify(text, location);
        if self.snap.warnings.len() < MAX_WARNINGS {
            self.snap.warnings.push(Warning {
                rank,
                host: host.map(str::to_string),
                line: Some(at.line_ref(&self.files)),
                text: kept(text),
                class: class.to_string(),
                source: location.map(str::to_string),
            });
        }
        self.cite(Ev::Warning(class), at);
    }

    /// A problem of the input itself, not of the job: a warning of class [`classify::INPUT`].
    pub fn input_warning(&mut self, text: String) {
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
        self.cite(Ev::Version(v.to_string()), at);
    }

    pub(super) fn matrix_row(&mut self, coll: Collective, flags: &[bool]) {
        let names = PROTOCOLS.iter().map(|p| p.as_str()).chain(Algorithm::ALL.iter().map(|a| a.as_str()));
        for (name, on) in names.zip(flags) {
            let entry = format!("{coll}/{name}");
            if !on && !self.facts.disabled.contains(&entry) {
                self.facts.disabled.push(entry);
            }
        }
    }

    fn comm_slot(&mut self, key: &ProcKey, comm: &str) -> usize {
        let id = format!("{}:{}:{}:{comm}", key.host.unwrap_or(""), key.file, key.pid.unwrap_or(0));
        if let Some(&i) = self.comm_index.get(&id) {
            return i;
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
        i
    }

    fn topo_slot(&mut self, key: &ProcKey) -> usize {
        let id = key.host.map(str::to_string).unwrap_or_else(|| format!("file {}", key.file));
        if let Some(&i) = self.topo_index.get(&id) {
            return i;
        }
        self.snap.topology.push(Topology {
            host: key.host.map(str::to_string),
            source: "log".into(),
            ..Topology::default()
        });
        let i = self.snap.topology.len() - 1;
        self.topo_index.insert(id, i);
        i
    }

    fn topo_node(&mut self, topo: usize, name: &str) -> Option<usize> {
        if let Some(&i) = self.node_index.get(&(topo, name.to_string())) {
            return Some(i);
        }
        let t = &mut self.snap.topology[topo];
        let (kind, id) = name.split_once('/')?;
        let kind: NodeType = kind.parse().ok()?;
        let (system, local) = id.split_once('-').unwrap_or(("0", id));
        let id = NodeId { system: u64::from_str_radix(system, 16).ok()?, local: u64::from_str_radix(local, 16).ok()? };
        t.nodes.push(Node { kind, id, cpu: None, pci: None, gpu: None, net: None });
        self.node_index.insert((topo, name.to_string()), t.nodes.len() - 1);
        Some(t.nodes.len() - 1)
    }

    pub(super) fn event(&mut self, at: &At, key: &ProcKey, rank: Option<u32>, stream: &StreamKey, ev: Event) {
        match ev {
            Event::Version(v) => self.version(at, &v, rank.map(|r| format!("rank {r}"))),
            Event::Bootstrap { name, address } => {
                let b = BootstrapInterface { name, address, host: key.host.map(str::to_string), rank };
                if !self.snap.bootstrap.iter().any(|x| x.name == b.name && x.address == b.address && x.host == b.host) {
                    self.snap.bootstrap.push(b);
                }
                self.cite(Ev::Bootstrap, at);
            }
            Event::NetUsing { net, devices } => {
                for d in devices {
                    let d = NetDevice { host: key.host.map(str::to_string), ..d };
                    if !self.snap.net_devices.iter().any(|x| x.name == d.name && x.host == d.host && x.index == d.index)
                    {
                        self.snap.net_devices.push(d);
                    }
                }
                self.net_using.insert(net);
                self.cite(Ev::NetUsing, at);
            }
            Event::NetNoDevice(net) => {
                self.net_no_device.insert(net);
                self.cite(Ev::NetNoDevice, at);
            }
            Event::UsingNetwork(n) => self.using_network = Some(n),
            Event::NetPluginActive(n) => {
                self.plugin_nets.insert(n);
            }
            Event::Plugin(note) => {
                let missing = !note.loaded && (note.text.contains("No plugin") || note.text.contains("Failed"));
                if !self.facts.plugins.contains(&note) {
                    self.facts.plugins.push(note);
                }
                if missing {
                    self.cite(Ev::PluginMissing, at);
                }
            }
            Event::Gdr(g) => {
                let check = GdrCheck {
                    host: key.host.map(str::to_string),
                    rank: g.rank.or(rank),
                    hca: g.hca,
                    hca_name: g.hca_name,
                    enabled: g.enabled,
                    distance: g.distance,
                    level: g.level,
                    reason: g.reason,
                };
                if !g.enabled {
                    let ev = if check.distance.is_some() { Ev::GdrDistance } else { Ev::GdrHcaOff };
                    self.cite(ev, at);
                }
                if !self.facts.gdr_checks.contains(&check) {
                    self.facts.gdr_checks.push(check);
                }
            }
            Event::Graph(g) => {
                let same = |x: &collscope_model::Graph| {
                    x.pattern == g.pattern
                        && x.n_channels == g.n_channels
                        && x.bw_intra == g.bw_intra
                        && x.bw_inter == g.bw_inter
                        && x.type_intra == g.type_intra
                        && x.type_inter == g.type_inter
                };
                let s = self.streams.entry(*stream).or_default();
                if self.snap.graphs.iter().any(same) {
                    s.graph = None;
                } else {
                    self.snap.graphs.push(g);
                    s.graph = Some(self.snap.graphs.len() - 1);
                }
            }
            Event::GraphChannel(c) => {
                if let Some(g) = self.streams.get(stream).and_then(|s| s.graph) {
                    self.snap.graphs[g].channels.push(c);
                }
            }
            Event::SearchFallback(_) => self.cite(Ev::SearchFallback, at),
            Event::Conn(c) => self.connection(at, key, stream, c),
            Event::RingOrder(r) => {
                self.ranks_seen.extend(r.order.iter().copied());
                if r.truncated {
                    self.facts.stats.truncated_lines += 1;
                }
                if let Some(n) = r.n_channels {
                    self.ring_nchannels = Some(self.ring_nchannels.map_or(n, |m| m.max(n)));
                }
                let i = self.ring(r.channel);
                let ring = &mut self.snap.rings[i];
                if r.order.len() > ring.order.len() || (ring.truncated && !r.truncated && !r.order.is_empty()) {
                    ring.order = r.order;
                    ring.truncated = r.truncated;
                }
            }
            Event::RingNeighbours(ch, prev, me, next) => {
                self.learn_rank(key, me);
                self.ranks_seen.extend([prev, next]);
                let i = self.ring(ch);
                let n = &mut self.snap.rings[i].neighbours;
                if !n.contains(&(prev, me, next)) {
                    n.push((prev, me, next));
                }
            }
            Event::Trees(entries) => {
                for (channel, r, up, down) in entries {
                    self.learn_rank(key, r);
                    self.ranks_seen.extend(down.iter().chain([&up]).filter(|&&x| x >= 0).map(|&x| x as u32));
                    if self.tree_seen.insert((channel, r)) {
                        self.snap.trees.push(Tree { channel, rank: r, up, down });
                    }
                }
            }
            Event::ChannelCounts(cc) => {
                let c = &mut self.snap.channels;
                let max = |a: Option<u32>, b: Option<u32>| match (a, b) {
                    (Some(x), Some(y)) => Some(x.max(y)),
                    (x, y) => x.or(y),
                };
                c.coll = max(c.coll, cc.coll);
                c.collnet = max(c.collnet, cc.collnet);
                c.nvls = max(c.nvls, cc.nvls);
                c.p2p = max(c.p2p, cc.p2p);
                c.p2p_per_peer = max(c.p2p_per_peer, cc.p2p_per_peer);
            }
            Event::ThreadThresholds(t) => {
                if !self.facts.thread_thresholds.contains(&t) {
                    self.facts.thread_thresholds.push(t);
                }
            }
            Event::ConnectedRings { pxn, gdr } => {
                self.facts.ring_pxn = pxn.or(self.facts.ring_pxn);
                self.facts.ring_gdr = gdr.or(self.facts.ring_gdr);
            }
            Event::ConnectedTrees | Event::Known | Event::ErrorTrace { .. } => {}
            Event::Nvls(used) => self.nvls = Some(used || self.nvls == Some(true)),
            Event::CommInit(c) => {
                self.learn_rank(key, c.rank);
                let i = self.comm_slot(key, &c.comm);
                let comm = &mut self.snap.communicators[i];
                comm.rank = Some(c.rank);
                comm.nranks = Some(c.nranks);
                comm.cuda_dev = Some(c.cuda_dev);
                comm.bus_id = c.bus_id.or(comm.bus_id.take());
                comm.comm_id = c.comm_id.or(comm.comm_id.take());
                if c.complete {
                    comm.state = CommState::Ready;
                } else if comm.state == CommState::Unknown {
                    comm.state = CommState::Initializing;
                }
                self.nranks_printed = Some(self.nranks_printed.map_or(c.nranks, |n| n.max(c.nranks)));
                self.streams.entry(*stream).or_default().comm = Some(i);
                self.cite(if c.complete { Ev::InitComplete(i) } else { Ev::InitStart(i) }, at);
            }
            Event::CommInfo(c) => {
                self.learn_rank(key, c.rank);
                let i = self.comm_slot(key, &c.comm);
                let comm = &mut self.snap.communicators[i];
                comm.rank = Some(c.rank);
                comm.nranks = Some(c.nranks);
                comm.nnodes = Some(c.nnodes);
                comm.local_ranks = Some(c.local_ranks);
                comm.local_rank = Some(c.local_rank);
                self.nranks_printed = Some(self.nranks_printed.map_or(c.nranks, |n| n.max(c.nranks)));
                self.nnodes_printed = Some(self.nnodes_printed.map_or(c.nnodes, |n| n.max(c.nnodes)));
                self.streams.entry(*stream).or_default().comm = Some(i);
            }
            Event::InitTimings { rank: r, nranks, total, phases } => {
                self.learn_rank(key, r);
                self.nranks_printed = Some(self.nranks_printed.map_or(nranks, |n| n.max(nranks)));
                if let Some(i) = self.streams.get(stream).and_then(|s| s.comm) {
                    let init = &mut self.snap.communicators[i].init;
                    init.total = Some(total);
                    init.phases = phases;
                }
            }
            Event::Table(t) => self.table(at, stream, t),
            Event::MatrixStart => self.in_matrix = true,
            Event::Decision(d) => {
                let s = self.streams.entry(*stream).or_default();
                let Some(coll) = d.coll.or(s.last_coll) else { return };
                let key = (coll, d.bytes, d.algo, d.proto, rank);
                if let Some(&i) = self.decision_index.get(&key) {
                    // The same choice printed again (INFO and TRACE): keep what each adds.
                    let known = &mut self.snap.decisions[i];
                    known.time_us = known.time_us.or(d.time_us);
                    if known.n_channels == 0 {
                        known.n_channels = d.n_channels.unwrap_or(0);
                    }
                } else if self.snap.decisions.len() < MAX_DECISIONS {
                    self.decision_index.insert(key, self.snap.decisions.len());
                    self.snap.decisions.push(Decision {
                        coll,
                        bytes: d.bytes,
                        algo: d.algo,
                        proto: d.proto,
                        n_channels: d.n_channels.unwrap_or(0),
                        time_us: d.time_us,
                        runner_up: None,
                        reason: None,
                        datatype: None,
                        rank,
                    });
                }
            }
            Event::Coll(c) => self.coll(rank, stream, c),
            Event::Env { name, value } => {
                let e = EnvSetting { name: name.clone(), value: value.clone(), rank };
                if !self.snap.env.iter().any(|x| x.name == e.name && x.value == e.value) {
                    self.snap.env.push(e);
                }
                self.env_values.insert(name.clone(), value);
                self.cite(Ev::Env(name), at);
            }
            Event::TopoSystem { max_bw, total_bw } => {
                let t = self.topo_slot(key);
                self.snap.topology[t].max_bw = max_bw;
                self.snap.topology[t].total_bw = total_bw;
            }
            Event::TopoNode(name) => {
                let t = self.topo_slot(key);
                self.topo_node(t, &name);
            }
            Event::Path(p) => {
                let t = self.topo_slot(key);
                let Some(from) = self.topo_node(t, &p.from) else { return };
                for (to, hops, bw, kind) in p.to {
                    let Some(to) = self.topo_node(t, &to) else { continue };
                    let paths = &mut self.snap.topology[t].paths;
                    if !paths.iter().any(|x| x.from == from && x.to == to) {
                        paths.push(Path { from, to, kind, bw, hops, links: vec![] });
                    }
                }
            }
            Event::P2pDisabled(_) => self.cite(Ev::P2pDisabled, at),
            Event::Ll128Disabled(_) => self.cite(Ev::Ll128Disabled, at),
            Event::ChannelsLimited(_) => self.cite(Ev::ChannelsLimited, at),
        }
    }

    fn ring(&mut self, channel: u32) -> usize {
        if let Some(&i) = self.ring_index.get(&channel) {
            return i;
        }
        self.snap.rings.push(Ring { channel, ..Ring::default() });
        let i = self.snap.rings.len() - 1;
        self.ring_index.insert(channel, i);
        i
    }

    fn connection(&mut self, at: &At, key: &ProcKey, stream: &StreamKey, c: Connection) {
        let me = if c.direction == Direction::Recv { c.dst } else { c.src };
        self.learn_rank(key, me);
        self.ranks_seen.extend([c.src, c.dst]);
        let comm_idx = self.streams.get(stream).and_then(|s| s.comm);
        let dedupe = (comm_idx, c.channel, c.src, c.dst, c.direction, c.transport, c.mode.clone());
        let ev = match (c.transport, c.gdrdma) {
            (Transport::Net, _) if c.net.as_deref() == Some("Socket") => Some(Ev::NetSocket),
            (Transport::Net, Some(true)) => Some(Ev::NetGdr),
            (Transport::Net, _) => Some(Ev::NetNoGdr),
            (Transport::Shm, _) => Some(Ev::Shm),
            (Transport::P2p, _) => Some(Ev::P2p),
            _ => None,
        };
        if let Some(ev) = ev {
            self.cite(ev, at);
        }
        if !self.conn_seen.insert(dedupe) {
            return;
        }
        let comm = comm_idx.and_then(|i| self.snap.communicators[i].comm.clone());
        self.snap.connections.push(Connection { comm, ..c });
    }

    fn table(&mut self, at: &At, stream: &StreamKey, t: TableLine) {
        let s = self.streams.entry(*stream).or_default();
        match t {
            TableLine::Columns(cols) => s.table_cols = cols,
            TableLine::Algorithms(algos) => {
                s.table_cols = algos.iter().flat_map(|&a| PROTOCOLS.iter().map(move |&p| (a, p))).collect();
            }
            TableLine::Ignored => {}
            TableLine::Row(coll, cells) => {
                let cols = s.table_cols.clone();
                for (&(algo, proto), &(lat_us, bw_gbps)) in cols.iter().zip(&cells) {
                    if bw_gbps > 0.0 {
                        self.snap
                            .tuning
                            .entry(coll)
                            .or_default()
                            .entry(algo)
                            .or_default()
                            .insert(proto, TuningCell { lat_us, bw_gbps });
                    }
                }
                self.cite(Ev::Table, at);
            }
        }
    }

    fn coll(&mut self, rank: Option<u32>, stream: &StreamKey, c: message::CollLine) {
        if let Some(n) = c.nranks {
            self.nranks_printed = Some(self.nranks_printed.map_or(n, |m| m.max(n)));
        }
        self.streams.entry(*stream).or_default().last_coll = Some(c.coll);
        let (Some(rank), Some(datatype)) = (rank, c.datatype.and_then(DataType::from_id)) else { return };
        let slot = (hash_of(c.comm.as_deref().unwrap_or("").as_bytes()), rank);
        let bytes = c.count.saturating_mul(datatype.size() as u64);
        // The last call of each rank on each communicator: where a hung job stopped.
        if let Some(&i) = self.op_index.get(&slot) {
            let op = &mut self.snap.ops[i];
            op.seq = c.op_count;
            op.coll = c.coll;
            op.count = c.count;
            op.datatype = datatype;
            op.op = c.op.and_then(RedOp::from_id);
            op.root = c.root;
            op.bytes = bytes;
            return;
        }
        self.snap.ops.push(OpRecord {
            comm: c.comm,
            rank,
            seq: c.op_count,
            coll: c.coll,
            count: c.count,
            datatype,
            op: c.op.and_then(RedOp::from_id),
            root: c.root,
            peer: None,
            bytes,
            algo: None,
            proto: None,
            n_channels: None,
            state: OpState::Enqueued,
            enqueued_us: None,
            started_us: None,
            completed_us: None,
            duration_us: None,
            algbw_gbps: None,
            busbw_gbps: None,
        });
        self.op_index.insert(slot, self.snap.ops.len() - 1);
    }
}
