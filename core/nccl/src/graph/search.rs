//! The depth-first graph search: NCCL 2.28.9 `src/graph/search.cc` (`ncclTopoSearchRec*`,
//! `ncclTopoFollowPath`, `ncclTopoSearchNextGpuSort`, `ncclTopoSelectNets`, `ncclTopoCompareGraphs`).
//! A channel is a walk NET -> GPU .. GPU -> NET (or GPU .. GPU -> first GPU inside one node); each hop
//! deducts the graph's bandwidth from every link on its path and gives it back when the search backtracks.

use super::system::System;
use super::{GraphError, MAX_CHANNELS};
use collscope_model::{NodeType, PathType, Pattern};

/// A node the search can stand on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    Gpu(usize),
    Net(usize),
    Nvs(usize),
}

/// How the next GPU is chosen: freely, in PCI order, or replaying the previous channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Free,
    Pci,
    Replay,
}

/// The search's working graph (`struct ncclTopoGraph`).
#[derive(Debug, Clone, PartialEq)]
pub struct SearchGraph {
    pub id: u32,
    pub pattern: Pattern,
    pub coll_net: bool,
    pub cross_nic: u32,
    pub min_channels: usize,
    pub max_channels: usize,
    pub n_channels: usize,
    pub bw_intra: f64,
    pub bw_inter: f64,
    pub latency_inter: f64,
    pub type_intra: PathType,
    pub type_inter: PathType,
    pub same_channels: bool,
    pub n_hops: f64,
    /// `MAX_CHANNELS * ngpus` GPU ranks.
    pub intra: Vec<i32>,
    /// `MAX_CHANNELS * 2` NET ids.
    pub inter: Vec<u64>,
}

impl SearchGraph {
    pub fn new(id: u32, pattern: Pattern, ngpus: usize) -> Self {
        SearchGraph {
            id,
            pattern,
            coll_net: false,
            cross_nic: 0,
            min_channels: 1,
            max_channels: MAX_CHANNELS,
            n_channels: 0,
            bw_intra: 0.0,
            bw_inter: 0.0,
            latency_inter: 0.0,
            type_intra: PathType::LOC,
            type_inter: PathType::LOC,
            same_channels: false,
            n_hops: 0.0,
            intra: vec![0; MAX_CHANNELS * ngpus],
            inter: vec![0; MAX_CHANNELS * 2],
        }
    }

    fn is_tree(&self) -> bool {
        matches!(self.pattern, Pattern::BalancedTree | Pattern::Tree | Pattern::SplitTree)
    }
}

/// NCCL's `SUB_ROUND`: bandwidth arithmetic rounded to 1/1000 so that repeated deductions do not drift.
fn sub_round(a: f64, b: f64) -> f64 {
    ((a - b) * 1000.0).round() / 1000.0
}

/// The recursive search over one system; `time` is the remaining step budget (-1 once a perfect graph is
/// found, 0 when exhausted).
pub struct Searcher<'a> {
    pub sys: &'a mut System,
    pub time: i64,
}

impl Searcher<'_> {
    fn node(&self, at: At) -> usize {
        match at {
            At::Gpu(i) => self.sys.gpus[i],
            At::Net(i) => self.sys.nets[i],
            At::Nvs(i) => self.sys.nvs[i],
        }
    }

    /// `followPath`: deducts `bw` along the first `max_steps` links; returns how many steps fit.
    fn follow_links(&mut self, links: &[usize], kind: PathType, start: usize, max_steps: usize, bw: f64) -> usize {
        let start_is_gpu = self.sys.kinds[start] == NodeType::GPU;
        let mut pci_bw = bw;
        if kind == PathType::PHB && start_is_gpu && links.iter().any(|&l| self.sys.cpu_x86_intel[self.sys.links[l].to])
        {
            // P2P through an Intel root complex costs 6/5 of the bandwidth on PCI links.
            pci_bw = crate::topo::bandwidth::intel_p2p_overhead(bw);
        }
        let mut node = start;
        for (step, &l) in links.iter().take(max_steps).enumerate() {
            let (to, lkind, lbw) = (self.sys.links[l].to, self.sys.links[l].kind, self.sys.links[l].bw);
            let fw = if lkind == collscope_model::LinkType::PCI { pci_bw } else { bw };
            let mut rev_bw = 0.0;
            if !start_is_gpu && self.sys.gpu_index[to].is_some_and(|g| self.sys.comp_caps[g] < 80) {
                // Pre-Ampere GPUs pay an eighth of the traffic they receive in the other direction.
                rev_bw += fw / 8.0;
            }
            if self.sys.cpu_power[to] && lkind == collscope_model::LinkType::NVL {
                rev_bw += fw;
            }
            let rev = if rev_bw != 0.0 {
                self.sys.adj[to]
                    .iter()
                    .copied()
                    .find(|&r| self.sys.links[r].to == node && self.sys.links[r].kind == lkind)
            } else {
                None
            };
            if lbw < fw || rev.is_some_and(|r| self.sys.links[r].bw < rev_bw) {
                return step;
            }
            self.sys.links[l].bw = sub_round(lbw, fw);
            if let Some(r) = rev {
                self.sys.links[r].bw = sub_round(self.sys.links[r].bw, rev_bw);
            }
            node = to;
        }
        max_steps
    }

    /// `ncclTopoFollowPath`: moves from `from` to `to` if the path's type and bandwidth allow it, deducting
    /// (mult > 0) or giving back (mult < 0) the graph's bandwidth times `mult`.
    pub fn follow(&mut self, g: &mut SearchGraph, from: Option<At>, to: At, mult: f64) -> bool {
        let Some(from) = from else { return true };
        let (a, b) = (self.node(from), self.node(to));
        let Some(path) = self.sys.paths.get(&(a, b)) else { return false };
        let (kind, links) = (path.kind, path.links.clone());
        let rev_kind = self.sys.paths.get(&(b, a)).map(|p| p.kind).unwrap_or(PathType::DIS);
        let is_intra = |x: At| matches!(x, At::Gpu(_) | At::Nvs(_));
        let intra = is_intra(from) && is_intra(to);
        let (bw, limit) = if intra { (g.bw_intra, g.type_intra) } else { (g.bw_inter, g.type_inter) };
        // A GPU's path to itself (LOC, no links) is free, as NCCL's zero-step walk is.
        if kind >= PathType::DIS || (links.is_empty() && a != b) {
            return false;
        }
        if mult > 0.0 && kind > limit {
            return false;
        }
        if mult > 0.0 && g.is_tree() && rev_kind > limit {
            return false;
        }
        let bw = bw * mult;
        let steps = self.follow_links(&links, kind, a, links.len(), bw);
        if steps < links.len() {
            self.follow_links(&links, kind, a, steps, -bw);
            return false;
        }
        g.n_hops += mult * links.len() as f64;
        true
    }

    /// `gpuPciBw`: the narrower direction of a GPU's PCI attachment, -1 without one.
    fn gpu_pci_bw(&self, gpu: usize) -> i64 {
        let n = self.sys.gpus[gpu];
        for &l in &self.sys.adj[n] {
            if self.sys.links[l].kind != collscope_model::LinkType::PCI {
                continue;
            }
            let pci = self.sys.links[l].to;
            if let Some(&r) = self.sys.adj[pci].iter().find(|&&r| self.sys.links[r].to == n) {
                return self.sys.links[l].bw.min(self.sys.links[r].bw) as i64;
            }
        }
        -1
    }

    /// `ncclTopoSearchNextGpuSort`: candidate next GPUs, best first; on NVSwitch systems only the ring
    /// neighbours are tried.
    fn next_gpus(&self, g: &SearchGraph, gpu: usize, sort_net: i32) -> Vec<usize> {
        let flag = 1u64 << g.n_channels;
        let ngpus = self.sys.ngpus();
        let net_paths_from = if sort_net != 0 {
            let id = g.inter[g.n_channels * 2];
            self.sys.net_info.iter().position(|n| n.id == id).map(|n| self.sys.nets[n])
        } else {
            None
        };
        // (interBw, interPciBw, interNhops, intraBw, intraNhops, startIndex, g), compared as NCCL's cmpScore.
        let mut scores = Vec::new();
        for i in 1..ngpus {
            let o = (gpu + i) % ngpus;
            let Some(p) = self.sys.path(self.sys.gpus[gpu], self.sys.gpus[o]) else { continue };
            if self.sys.used[o] & flag != 0 {
                continue;
            }
            let (mut inter_bw, mut inter_pci, mut inter_hops) = (0i64, 0i64, 0i64);
            if let Some(net) = net_paths_from {
                if let Some(np) = self.sys.paths.get(&(net, self.sys.gpus[o])) {
                    inter_hops = np.links.len() as i64;
                    inter_bw = np.bw as i64;
                }
                inter_pci = self.gpu_pci_bw(o);
            }
            scores.push((inter_bw, inter_pci, inter_hops, p.bw as i64, p.links.len() as i64, i, o));
        }
        scores.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then(b.1.cmp(&a.1))
                .then(a.2.cmp(&b.2))
                .then(b.3.cmp(&a.3))
                .then(a.4.cmp(&b.4))
                .then(a.5.cmp(&b.5))
        });
        let same_intra = scores.windows(2).all(|w| w[0].3 == w[1].3 && w[0].4 == w[1].4);
        let mut next: Vec<usize> = if sort_net == -1 && same_intra {
            scores.iter().rev().map(|s| s.6).collect()
        } else {
            scores.iter().map(|s| s.6).collect()
        };
        if !self.sys.nvs.is_empty() {
            let prev = (gpu + ngpus - 1) % ngpus;
            let nxt = (gpu + 1) % ngpus;
            let mut first = match g.pattern {
                Pattern::Ring => vec![nxt, prev],
                Pattern::SplitTree | Pattern::BalancedTree => vec![prev, nxt],
                _ => vec![nxt],
            };
            if nxt == prev {
                first.truncate(1);
            }
            let mut real = 0;
            for f in first {
                if let Some(i) = next.iter().position(|&x| x == f) {
                    next.remove(i);
                    next.insert(0, f);
                    real += 1;
                }
            }
            next.truncate(real);
        }
        next
    }

    /// `ncclTopoSearchCheckNet`: whether a channel may leave through NET `n` having entered through `start`.
    fn check_net(&self, g: &SearchGraph, start: usize, n: usize, step: usize) -> bool {
        let (net, first) = (&self.sys.net_info[n], &self.sys.net_info[start]);
        if g.pattern == Pattern::Tree && net.id != first.id {
            return false;
        }
        if g.pattern == Pattern::Ring && g.cross_nic == 2 {
            if g.n_channels & 1 == 1 && net.id != g.inter[(g.n_channels - 1) * 2] {
                return false;
            }
        } else if g.cross_nic == 0 && (net.asic != first.asic || net.port != first.port) {
            return false;
        }
        if g.pattern == Pattern::BalancedTree && step != 0 && net.id != g.inter[g.n_channels * 2 + 1] {
            return false;
        }
        true
    }

    /// `ncclTopoCompareGraphs`: whether `g` beats the saved graph.
    fn better(&self, g: &SearchGraph, save: &SearchGraph) -> bool {
        if g.n_channels < g.min_channels {
            return false;
        }
        if g.pattern == Pattern::Nvls {
            return (g.n_channels > save.n_channels && g.n_channels <= self.sys.ngpus())
                || g.n_channels as f64 * g.bw_inter > save.n_channels as f64 * save.bw_inter;
        }
        let (a, b) = (g.n_channels as f64 * g.bw_intra, save.n_channels as f64 * save.bw_intra);
        if a > b {
            return true;
        }
        if a < b {
            return false;
        }
        g.pattern == save.pattern && g.cross_nic == save.cross_nic && g.n_hops < save.n_hops
    }

    fn replay_gpu(&self, g: &SearchGraph, step: i64) -> Result<usize, GraphError> {
        let ngpus = self.sys.ngpus() as i64;
        if g.n_channels == 0 {
            return Err(GraphError::Internal("replay without a previous channel".into()));
        }
        let rank = g.intra[((g.n_channels as i64 - 1) * ngpus + step + 1) as usize];
        self.sys
            .ranks
            .iter()
            .position(|&r| r == rank)
            .ok_or_else(|| GraphError::Internal(format!("no GPU for rank {rank}")))
    }

    fn gpu_of_rank(&self, rank: i32) -> Result<usize, GraphError> {
        self.sys
            .ranks
            .iter()
            .position(|&r| r == rank)
            .ok_or_else(|| GraphError::Internal(format!("Could not find gpu rank {rank}")))
    }

    #[allow(clippy::too_many_arguments)]
    fn try_gpu(
        &mut self,
        g: &mut SearchGraph,
        save: &mut SearchGraph,
        step: usize,
        back_to_net: i64,
        back_to_first: i64,
        order: Order,
        from: Option<At>,
        gpu: usize,
    ) -> Result<(), GraphError> {
        let flag = 1u64 << g.n_channels;
        if self.follow(g, from, At::Gpu(gpu), 1.0) {
            self.sys.used[gpu] ^= flag;
            self.rec_gpu(g, save, Some(gpu), step, back_to_net, back_to_first, order)?;
            self.sys.used[gpu] ^= flag;
            self.follow(g, from, At::Gpu(gpu), -1.0);
        }
        Ok(())
    }

    fn try_collnet_direct(
        &mut self,
        g: &mut SearchGraph,
        save: &mut SearchGraph,
        head: usize,
    ) -> Result<(), GraphError> {
        let ngpus = self.sys.ngpus();
        let mul = 1.0 / (ngpus as f64 - 1.0);
        let mut fwd = 0;
        let mut ok = true;
        while ok && fwd < ngpus {
            ok = self.follow(g, Some(At::Gpu(head)), At::Gpu(fwd), mul);
            if ok {
                fwd += 1;
            }
        }
        if ok {
            let mut bwd = 0;
            while ok && bwd < ngpus {
                ok = self.follow(g, Some(At::Gpu(bwd)), At::Gpu(head), mul);
                if ok {
                    bwd += 1;
                }
            }
            if ok {
                // The head is in place; the other GPUs follow in index order.
                for (step, i) in (1..).zip((0..ngpus).filter(|&i| i != head)) {
                    g.intra[g.n_channels * ngpus + step] = self.sys.ranks[i];
                }
                self.rec_gpu(g, save, None, ngpus, -1, -1, Order::Free)?;
            }
            while bwd > 0 {
                bwd -= 1;
                self.follow(g, Some(At::Gpu(bwd)), At::Gpu(head), -mul);
            }
        }
        while fwd > 0 {
            fwd -= 1;
            self.follow(g, Some(At::Gpu(head)), At::Gpu(fwd), -mul);
        }
        Ok(())
    }

    fn try_nvls(&mut self, g: &mut SearchGraph, save: &mut SearchGraph, head: usize) -> Result<(), GraphError> {
        let ngpus = self.sys.ngpus();
        let m = |d: usize| if d == head { 2.0 } else { 1.0 };
        let mut d0 = 0;
        let mut ok = true;
        while ok && d0 < ngpus {
            ok = self.follow(g, Some(At::Nvs(0)), At::Gpu(d0), m(d0));
            if ok {
                d0 += 1;
            }
        }
        if ok {
            let mut d1 = 0;
            while ok && d1 < ngpus {
                ok = self.follow(g, Some(At::Gpu(d1)), At::Nvs(0), m(d1));
                if ok {
                    d1 += 1;
                }
            }
            if ok {
                self.rec_gpu(g, save, None, ngpus, -1, -1, Order::Free)?;
            }
            while d1 > 0 {
                d1 -= 1;
                self.follow(g, Some(At::Gpu(d1)), At::Nvs(0), -m(d1));
            }
        }
        while d0 > 0 {
            d0 -= 1;
            self.follow(g, Some(At::Nvs(0)), At::Gpu(d0), -m(d0));
        }
        Ok(())
    }

    /// `ncclTopoSearchRecGpu`: standing on `gpu` at `step` of the current channel.
    #[allow(clippy::too_many_arguments)]
    fn rec_gpu(
        &mut self,
        g: &mut SearchGraph,
        save: &mut SearchGraph,
        gpu: Option<usize>,
        step: usize,
        back_to_net: i64,
        back_to_first: i64,
        order: Order,
    ) -> Result<(), GraphError> {
        if self.time <= 0 {
            return Ok(());
        }
        self.time -= 1;
        let ngpus = self.sys.ngpus();
        if step == ngpus {
            g.n_channels += 1;
            if self.better(g, save) {
                *save = g.clone();
                if g.n_channels == g.max_channels {
                    self.time = -1;
                }
            }
            if g.n_channels < g.max_channels {
                self.rec(g, save)?;
            }
            g.n_channels -= 1;
            return Ok(());
        }
        let gi = gpu.ok_or_else(|| GraphError::Internal("search step without a GPU".into()))?;
        g.intra[g.n_channels * ngpus + step] = self.sys.ranks[gi];
        if step as i64 == back_to_net {
            if self.sys.inter {
                let start_id = g.inter[g.n_channels * 2];
                let start = self
                    .sys
                    .net_info
                    .iter()
                    .position(|n| n.id == start_id)
                    .ok_or_else(|| GraphError::Internal(format!("Could not find net id {start_id:x}")))?;
                for n in self.sys.select_nets(g.type_inter, Some(gi)).to_vec() {
                    if !self.check_net(g, start, n, step) {
                        continue;
                    }
                    let mut next_back = -1;
                    let saved = g.bw_inter;
                    if g.pattern == Pattern::BalancedTree {
                        // Half the inter-node bandwidth on each of the first two GPUs.
                        if step == 0 {
                            next_back = 1;
                        }
                        g.bw_inter /= 2.0;
                    }
                    let ok = self.follow(g, Some(At::Gpu(gi)), At::Net(n), 1.0);
                    g.bw_inter = saved;
                    if ok {
                        g.inter[g.n_channels * 2 + 1] = self.sys.net_info[n].id;
                        self.rec_gpu(g, save, gpu, step, next_back, back_to_first, order)?;
                        if g.pattern == Pattern::BalancedTree {
                            g.bw_inter /= 2.0;
                        }
                        self.follow(g, Some(At::Gpu(gi)), At::Net(n), -1.0);
                        g.bw_inter = saved;
                    }
                }
            }
        } else if g.pattern == Pattern::Nvls {
            self.try_nvls(g, save, gi)?;
        } else if g.pattern == Pattern::CollnetDirect {
            self.try_collnet_direct(g, save, gi)?;
        } else if step < ngpus - 1 {
            let next = match order {
                Order::Pci => vec![step + 1],
                Order::Replay => vec![self.replay_gpu(g, step as i64)?],
                Order::Free => {
                    let sort_net = if back_to_net == -1 {
                        0
                    } else if back_to_net == step as i64 + 1 {
                        1
                    } else {
                        -1
                    };
                    self.next_gpus(g, gi, sort_net)
                }
            };
            for n in next {
                self.try_gpu(g, save, step + 1, back_to_net, back_to_first, order, Some(At::Gpu(gi)), n)?;
            }
        } else if step as i64 == back_to_first {
            let p = self.gpu_of_rank(g.intra[g.n_channels * ngpus])?;
            if self.follow(g, Some(At::Gpu(gi)), At::Gpu(p), 1.0) {
                self.rec_gpu(g, save, Some(p), step + 1, back_to_net, -1, order)?;
                self.follow(g, Some(At::Gpu(gi)), At::Gpu(p), -1.0);
            }
        } else {
            self.rec_gpu(g, save, gpu, ngpus, -1, -1, order)?;
        }
        Ok(())
    }

    /// `ncclTopoSearchRecNet`: starts a channel at each candidate NET.
    fn rec_net(
        &mut self,
        g: &mut SearchGraph,
        save: &mut SearchGraph,
        back_to_net: i64,
        back_to_first: i64,
    ) -> Result<(), GraphError> {
        // NCCL keeps this bandwidth in an int.
        let bw = g.bw_inter.trunc();
        let nets = self.sys.select_nets(g.type_inter, None).to_vec();
        let mut found = false;
        let direct = matches!(g.pattern, Pattern::Nvls | Pattern::CollnetDirect);
        for i in 0..nets.len() {
            if direct && found {
                break;
            }
            let n = nets[(g.n_channels + i) % nets.len()];
            let info = self.sys.net_info[n].clone();
            if g.coll_net && !info.coll {
                continue;
            }
            if info.bw < bw {
                continue;
            }
            if g.pattern == Pattern::Ring
                && g.cross_nic == 2
                && g.n_channels & 1 == 1
                && info.id != g.inter[(g.n_channels - 1) * 2 + 1]
            {
                continue;
            }
            g.inter[g.n_channels * 2] = info.id;
            g.latency_inter = info.latency;
            self.share_net_bw(&info, -bw);
            if direct {
                let local = info.local_gpu;
                if g.n_channels < nets.len() && local >= 0 {
                    let rank = self.sys.ranks[local as usize];
                    let ngpus = self.sys.ngpus();
                    let dup = (0..g.n_channels).any(|c| g.intra[c * ngpus] == rank);
                    if !dup {
                        self.try_gpu(
                            g,
                            save,
                            0,
                            back_to_net,
                            back_to_first,
                            Order::Free,
                            Some(At::Net(n)),
                            local as usize,
                        )?;
                        found = true;
                    }
                }
            } else if g.n_channels > 0 && g.same_channels {
                let first = self.replay_gpu(g, -1)?;
                self.try_gpu(g, save, 0, back_to_net, back_to_first, Order::Replay, Some(At::Net(n)), first)?;
            } else {
                if g.n_channels == 0 && self.sys.nvs.is_empty() {
                    // The PCI order first, as a reference, on a small budget of its own.
                    let saved = self.time;
                    self.time = 1 << 10;
                    self.try_gpu(g, save, 0, back_to_net, back_to_first, Order::Pci, Some(At::Net(n)), 0)?;
                    self.time = if self.time == -1 { -1 } else { saved };
                }
                let local = info.local_gpu;
                if local >= 0 {
                    self.try_gpu(
                        g,
                        save,
                        0,
                        back_to_net,
                        back_to_first,
                        Order::Free,
                        Some(At::Net(n)),
                        local as usize,
                    )?;
                }
                if info.local_gpus.is_empty() {
                    // NCCL skips the NIC here without giving its bandwidth back (search.cc does the same).
                    continue;
                }
                for &lg in info.local_gpus.iter().filter(|&&x| x as i32 != local) {
                    self.try_gpu(g, save, 0, back_to_net, back_to_first, Order::Free, Some(At::Net(n)), lg)?;
                }
            }
            self.share_net_bw(&info, bw);
        }
        Ok(())
    }

    /// NICs on the same ASIC and port share their bandwidth.
    fn share_net_bw(&mut self, net: &super::system::NetInfo, delta: f64) {
        for other in self.sys.net_info.iter_mut() {
            if other.asic == net.asic && other.port == net.port {
                other.bw += delta;
            }
        }
    }

    /// `ncclTopoSearchRec`: starts the next channel.
    pub fn rec(&mut self, g: &mut SearchGraph, save: &mut SearchGraph) -> Result<(), GraphError> {
        let ngpus = self.sys.ngpus() as i64;
        let (back_to_net, back_to_first) = if self.sys.inter {
            let b = match g.pattern {
                Pattern::Ring => ngpus - 1,
                Pattern::SplitTree => 1,
                _ => 0,
            };
            (b, -1)
        } else {
            (-1, if g.pattern == Pattern::Ring { ngpus - 1 } else { -1 })
        };
        if self.sys.inter {
            return self.rec_net(g, save, back_to_net, back_to_first);
        }
        if g.pattern == Pattern::Nvls {
            let head = g.n_channels;
            if head < self.sys.ngpus() {
                self.try_gpu(g, save, 0, back_to_net, back_to_first, Order::Free, None, head)?;
            }
            return Ok(());
        }
        if g.n_channels == 0 {
            self.try_gpu(g, save, 0, back_to_net, back_to_first, Order::Pci, None, 0)?;
        } else {
            let first = self.replay_gpu(g, -1)?;
            self.try_gpu(g, save, 0, back_to_net, back_to_first, Order::Replay, None, first)?;
        }
        if !g.same_channels || g.n_channels == 0 {
            for gpu in 0..self.sys.ngpus() {
                self.try_gpu(g, save, 0, back_to_net, back_to_first, Order::Free, None, gpu)?;
            }
        }
        Ok(())
    }
}
