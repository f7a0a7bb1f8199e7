#!/usr/bin/env python3
"""Reads the tables bench/compare.sh captured (collscope perf, Open MPI and Gloo anchors) and prints, per target,
collscope's figure, the reference figure, their ratio and PASS/MISS. Medians over repetitions.

    compare.py DIR      DIR holds NAME.REP.txt files (see compare.sh for the names)
"""
import functools
import glob
import os
import re
import statistics
import sys

KB, MB = 1 << 10, 1 << 20


def half_step(text):
    """Half the last printed digit of a number as a table printed it: how far its value may be from the shown."""
    decimals = len(text.partition(".")[2])
    return 0.5 * 10 ** -decimals


def call_us(size, us_text, algbw_text):
    """A row's time a call in us, from whichever column it was printed the finer in. Open MPI's and Gloo's
    anchors print the time to 0.1 us but algbw (size / time) to 0.001 GB/s: an 8 B call printed 0.2 us with
    algbw 0.032 took 0.246-0.250 us, where 0.2 alone allows 0.15-0.25, a quarter either way on a ratio."""
    us, algbw = float(us_text), float(algbw_text)
    if us > 0 and algbw > 0 and half_step(algbw_text) / algbw < half_step(us_text) / us:
        return size / algbw / 1e3
    return us


def parse_collscope(text):
    """collscope perf's nccl-tests table -> {size: {"oop_us", "oop_busbw", "ip_us", "ip_busbw"}}, plus facts
    from its own comment lines ("init_ms", "rss_mib", "peak_rss_mib")."""
    rows, facts = {}, {}
    for line in text.splitlines():
        m = re.match(r"#\s+Init ([0-9.]+) ms", line)
        if m:
            facts["init_ms"] = float(m.group(1))
            facts["rss_mib"] = line.split(":")[-1].split()
            continue
        if line.startswith("# Peak RSS"):
            facts["peak_rss_mib"] = line.split(":")[-1].split()
            continue
        f = line.split()
        if line.startswith("#") or len(f) != 13 or not f[0].isdigit():
            continue
        size = int(f[0])
        rows[size] = {"oop_us": call_us(size, f[5], f[6]), "oop_busbw": float(f[7]),
                      "ip_us": call_us(size, f[9], f[10]), "ip_busbw": float(f[11])}
    return rows, facts


def parse_anchor(text):
    """anchors.sh mpi|gloo table (size count type op time algbw busbw wrong) -> {size: {"ip_us", "ip_busbw"}}."""
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if line.startswith("#") or len(f) != 8 or not f[0].isdigit():
            continue
        size = int(f[0])
        rows[size] = {"ip_us": call_us(size, f[4], f[5]), "ip_busbw": float(f[6])}
    return rows


def parse_membw(text):
    """anchors.sh membw lines ("SIZE bytes: memcpy X GB/s ..., add-reduce Y GB/s ...") -> {size: (copy, reduce)}
    in GB/s: copy counts the bytes copied, reduce the bytes of y in y += x (read two, write one)."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\s*(\d+) bytes: memcpy ([0-9.]+) GB/s.*add-reduce ([0-9.]+) GB/s", line)
        if m:
            rows[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    return rows


# The share of the memory bound. A ring over n ranks moves, per rank, (n-1)/n of the data reduced (ReduceScatter's
# steps: read the peer's piece and one's own, write the sum, as membw's y += x) and (n-1)/n copied (AllGather's
# steps); AllReduce does both, so busbw = 2(n-1)/n * S / t. With each moved byte costing one pass at the machine's
# single-thread rate (a single-copy transport: the receiver reads the sender's memory; staging through a fifo
# costs a second pass), t >= (n-1)/n * S * (1/R + 1/C) per rank, and n ranks share min(n, cores) cores:
#   AllReduce busbw <= 2 / (1/R + 1/C) * min(n, cores) / n,  AllGather <= C * min(n, cores) / n,
#   ReduceScatter <= R * min(n, cores) / n.
# R, C are membw's add-reduce and memcpy rates at the smallest size that holds every rank's buffer (n * S bytes:
# smaller sizes run from cache), the largest size measured beyond that. Optimistic: it assumes the memory bus
# scales with the cores in use.
def mem_bound(membw, cores, coll, n, size):
    """Upper bound on busbw (GB/s) for `coll` ("all_reduce", "all_gather", "reduce_scatter") over n ranks of
    `size` bytes each on `cores` cores, from membw rates (see above); None without rates."""
    if not membw:
        return None
    fit = [s for s in sorted(membw) if s >= n * size]
    copy, red = membw[fit[0] if fit else max(membw)]
    per_core = {"all_reduce": 2 / (1 / red + 1 / copy), "all_gather": copy, "reduce_scatter": red}[coll]
    return per_core * min(n, cores) / n


def parse_xcore(text):
    """bench/crosscore.rs lines ("crosscore_gbps RATE", or "n/a" on one core) -> the rates, GB/s."""
    return [float(f[1]) for f in (line.split() for line in text.splitlines())
            if len(f) >= 2 and f[0] == "crosscore_gbps" and re.fullmatch(r"[0-9.]+", f[1])]


def probes(directory):
    """The slowest cross-core copy rate measured around each benchmark run (GB/s, None where not measured), by
    the run's NAME.REP."""
    rates = {}
    for path in glob.glob(os.path.join(directory, "*.xcore")):
        with open(path) as fh:
            rates[os.path.basename(path)[:-len(".xcore")]] = min(parse_xcore(fh.read()), default=None)
    return rates


# A benchmark ran with the cores far apart when one core's writes reached the other at less than this share of
# the run's best rate (bench/crosscore.rs on the 2-core VM measured: 13-26 GB/s, and 1.8-2.9 in such stretches).
FAR = 0.5


def best_rate(rates):
    return max((v for v in rates.values() if v is not None), default=None)


def far_ones(rates, best):
    """The runs of `rates` that ran with the cores far apart, `best` the best of them (`best_rate`)."""
    return frozenset(k for k, v in rates.items() if v is not None and v < FAR * best)


class Rep(dict):
    """One repetition's rows by size; `far_sizes`: the sizes whose run (the whole sweep, or that size alone when it
    ran size by size) had the cores far apart."""

    def __init__(self):
        super().__init__()
        self.far_sizes = set()


def run_parts(run):
    """A benchmark run's name, NAME.REP or NAME.REP@SIZE (one size of a repetition compare.sh ran size by size) ->
    (NAME.REP, SIZE or None)."""
    head, _, size = run.partition("@")
    return head, int(size) if size.isdigit() else None


def load(directory, name, far=frozenset()):
    """Every repetition of NAME, parsed: (list of Rep, list of fact dicts, one a repetition), each marked far
    apart where its run (NAME.REP, or NAME.REP@SIZE for one size of a repetition compare.sh ran size by size) is
    in `far`. Names starting with cs- are collscope's tables; the others (mpi-, gloo-, tcp-) are anchor-style."""
    runs = {}
    for path in glob.glob(os.path.join(directory, f"{name}.*.txt")):
        run = os.path.basename(path)[:-len(".txt")]
        head, size = run_parts(run)
        rep = head[len(name) + 1:]
        if rep.isdigit():
            runs.setdefault(int(rep), []).append((size or 0, run, path))
    reps, facts = [], []
    # Every name has the same repetitions (compare.sh writes each file even when a run fails), so in order, the
    # r-th of one name ran beside the r-th of another.
    for r in sorted(runs):
        rep, fa = Rep(), {}
        # By size, so the facts kept are the largest size's (its peak RSS is that of the largest buffers).
        for _, run, path in sorted(runs[r]):
            with open(path) as fh:
                text = fh.read()
            if name.startswith("cs-"):
                rows, f = parse_collscope(text)
                fa.update(f)
            else:
                rows = parse_anchor(text)
            rep.update(rows)
            if run in far:
                rep.far_sizes.update(rows)
        reps.append(rep)
        facts.append(fa)
    return reps, facts


def median_of(reps, size, key):
    vals = [r[size][key] for r in reps if size in r]
    return statistics.median(vals) if vals else None


def each_ratio(mine, ref, size, key, scale=1.0):
    """(mine / (scale x ref), whether either ran with the cores far apart) at `size` within each repetition both
    have (repetition r of one beside r of the other)."""
    return [(a[size][key] / (scale * b[size][key]), size in a.far_sizes or size in b.far_sizes)
            for a, b in zip(mine, ref) if size in a and size in b and b[size][key]]


def human(b):
    return f"{b // MB}M" if b >= MB else f"{b // KB}K" if b >= KB else f"{b}"


def runs_named(runs):
    """Benchmark runs (`run_parts`), one entry a repetition: NAME.REP, with the sizes in brackets where only those
    ran so."""
    sizes = {}
    for run in runs:
        rep, size = run_parts(run)
        sizes.setdefault(rep, []).extend([size] if size is not None else [])
    return ", ".join(rep + (f" ({' '.join(human(s) for s in sorted(v))})" if v else "")
                     for rep, v in sorted(sizes.items()))


class Report:
    def __init__(self):
        self.passed = self.missed = self.missing = 0
        # The same verdicts from the repetitions whose figures all ran with the cores near each other: the median
        # of their paired ratios; rows with no such repetition counted apart.
        self.near = {"PASS": 0, "MISS": 0, "none": 0}
        # Which rows those near-only verdicts miss, and their ratio: what is left once the host's slow stretches
        # are set aside.
        self.near_misses = []

    def row(self, target, size, mine, ref, unit, need, at_least=True, upper=None, each=()):
        """One target at one size: the medians' ratio decides; `each` (the ratio within each repetition, whose
        two figures ran minutes apart at most, and whether either ran with the cores far apart) shows whether a
        miss held in every repetition or only some, and which ran in a stretch that slows shared memory."""
        if mine is None or ref is None or ref == 0:
            self.missing += 1
            print(f"{target:<40} {human(size):>5} {'-':>10} {'-':>10} {'':>6} {'':>8}  NO DATA")
            return

        def meets(ratio):
            return (ratio >= need if at_least else ratio <= need) and (upper is None or ratio <= upper)

        ok = meets(mine / ref)
        self.passed += ok
        self.missed += not ok
        rule = (f">={need:.2f}" if at_least else f"<={need:.2f}") + (f",<={upper:.1f}" if upper else "")
        ratios = [r for r, _ in each]
        far = sum(f for _, f in each)
        near = [r for r, f in each if not f]
        near_mid = statistics.median(near) if near else None
        verdict = "none" if near_mid is None else "PASS" if meets(near_mid) else "MISS"
        self.near[verdict] += 1
        if verdict == "MISS":
            self.near_misses.append(f"{target.strip()} {human(size)} {near_mid:.2f}")
        spread = (f"  each repetition {min(ratios):.2f}-{max(ratios):.2f}, {sum(map(meets, ratios))}/{len(ratios)} "
                  f"meet" + (f", {far} with cores far apart" if far else "") if len(ratios) > 1 else "")
        print(f"{target:<40} {human(size):>5} {mine:>10.3f} {ref:>10.3f} {mine / ref:>6.2f} {rule:>8}  "
              f"{'PASS' if ok else 'MISS'}  ({unit}){spread}")


def sizes(lo, hi, *tables):
    """The sizes from lo to hi that the first repetition of every given table has (collscope's --quick steps
    by 4x where the anchors step by 2x); powers of two when no table is given."""
    if tables and all(t for t in tables):
        have = set.intersection(*(set(t[0]) for t in tables))
        return sorted(s for s in have if lo <= s <= hi)
    s, v = lo, []
    while s <= hi:
        v.append(s)
        s *= 2
    return v


def mem_shares(label, reps, membw, cores, coll, n, lo, hi):
    """One line: each size's median busbw as a share of mem_bound, so a reader sees how close to the limit it is."""
    shares = []
    for s in sizes(lo, hi, reps):
        mine, bound = median_of(reps, s, "ip_busbw"), mem_bound(membw, cores, coll, n, s)
        if mine is not None and bound:
            shares.append(f"{human(s)} {mine / bound:.0%}")
    if shares:
        print(f"# {label} as a share of the memory bound ({cores} cores, membw): {', '.join(shares)}")


def parse_steal(text):
    """Snapshots of /proc/stat's aggregate "cpu" line, one per line (compare.sh takes one before the first
    repetition and one after each) -> the share of CPU time the hypervisor gave other guests (steal) between
    consecutive snapshots. Fields: user nice system idle iowait irq softirq steal ..."""
    snaps = []
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 9 and f[0] == "cpu" and all(v.isdigit() for v in f[1:9]):
            snaps.append([int(v) for v in f[1:9]])
    shares = []
    for a, b in zip(snaps, snaps[1:]):
        total = sum(b) - sum(a)
        shares.append((b[7] - a[7]) / total if total > 0 else 0.0)
    return shares


def main(directory):
    rep = Report()
    membw, cores = {}, os.cpu_count() or 1
    if os.path.exists(os.path.join(directory, "membw.txt")):
        with open(os.path.join(directory, "membw.txt")) as fh:
            membw = parse_membw(fh.read())
    if os.path.exists(os.path.join(directory, "cores.txt")):
        with open(os.path.join(directory, "cores.txt")) as fh:
            cores = int(fh.read().split()[0])
    # The cross-core probes, read once: which benchmark runs had the cores far apart.
    rates = probes(directory)
    best = best_rate(rates)
    far = far_ones(rates, best)

    # Each run's tables parsed once: several targets divide by the same run (SHM AllReduce, Open MPI at 4 ranks).
    @functools.cache
    def load_run(name):
        return load(directory, name, far)

    print(f"{'target':<40} {'size':>5} {'collscope':>10} {'reference':>10} {'ratio':>6} {'need':>8}  result")
    for n in (2, 4):
        mpi, _ = load_run(f"mpi-{n}-large")
        # Buffers as users allocate them, then in registered windows (-R 2), where SHM moves them in place.
        for name, label in (("shm", "SHM"), ("shmreg", "SHM -R 2")):
            cs, _ = load_run(f"cs-{name}-{n}-large")
            for s in sizes(64 * KB, 64 * MB, cs, mpi):
                need = 1.5 if s >= 16 * MB else 1.2
                rep.row(f"{label} {n} ranks busbw vs Open MPI", s, median_of(cs, s, "ip_busbw"),
                        median_of(mpi, s, "ip_busbw"), "GB/s", need, each=each_ratio(cs, mpi, s, "ip_busbw"))
            mem_shares(f"{label} {n} ranks AllReduce", cs, membw, cores, "all_reduce", n, 64 * KB, 64 * MB)
    for n in (2, 4):
        cs, _ = load_run(f"cs-shm-{n}-small")
        mpi, _ = load_run(f"mpi-{n}-small")
        for s in sizes(8, 4 * KB, cs, mpi):
            rep.row(f"SHM {n} ranks time/call vs Open MPI", s, median_of(cs, s, "ip_us"),
                    median_of(mpi, s, "ip_us"), "us", 1.5, at_least=False, each=each_ratio(cs, mpi, s, "ip_us"))
    for n in (2, 4):
        cs, _ = load_run(f"cs-net-{n}")
        gloo, _ = load_run(f"gloo-{n}")
        bound, _ = load_run(f"tcp-{n}")
        # Tighter bounds of the same ring: with the reduce-scatter's additions on the receivers (where copies and
        # reduction share the cores, what an AllReduce over TCP can reach), and with each step sent only once the
        # step before arrived, as a ring's steps depend on each other; then both, the work a ring AllReduce over
        # TCP cannot avoid.
        tighter = [(load_run(f"tcp-red-{n}")[0], "with the reduction's work on the same cores (tcp_bound.rs reduce)"),
                   (load_run(f"tcp-ring-{n}")[0], "with each step sent once the step before arrived (tcp_bound.rs ring)"),
                   (load_run(f"tcp-ringred-{n}")[0],
                    "with both, each step reduced and then passed on (tcp_bound.rs reduce ring)")]
        above, shares = [], [[] for _ in tighter]
        for s in sizes(1 * MB, 64 * MB, cs, gloo):
            mine, ref = median_of(cs, s, "ip_busbw"), median_of(gloo, s, "ip_busbw")
            rep.row(f"NET/Socket {n} ranks busbw vs Gloo", s, mine, ref, "GB/s", 2.0,
                    each=each_ratio(cs, gloo, s, "ip_busbw"))
            tcp = median_of(bound, s, "ip_busbw")
            if tcp and mine is not None and ref is not None:
                above.append(f"{human(s)} {mine / tcp:.0%}" + (" (2x Gloo > bound)" if 2 * ref > tcp else ""))
            for (run, _), out in zip(tighter, shares):
                b = median_of(run, s, "ip_busbw")
                if b and mine is not None:
                    out.append(f"{human(s)} {mine / b:.0%}")
        if above:
            print(f"# NET/Socket {n} ranks as a share of the TCP loopback ring bound (tcp_bound.rs): {', '.join(above)}")
        for (_, what), out in zip(tighter, shares):
            if out:
                print(f"# ... and of that bound {what}: {', '.join(out)}")
    for n in (2, 4):
        p2p, _ = load_run(f"cs-p2p-{n}-large")
        shm, _ = load_run(f"cs-shm-{n}-large")
        for s in sizes(64 * KB, 64 * MB, p2p, shm):
            rep.row(f"P2P threads {n} ranks vs collscope SHM", s, median_of(p2p, s, "ip_busbw"),
                    median_of(shm, s, "ip_busbw"), "GB/s", 1.0, each=each_ratio(p2p, shm, s, "ip_busbw"))
    ar, _ = load_run("cs-shm-4-large")
    for coll in ("ag", "rs"):
        other, _ = load_run(f"cs-{coll}-4")
        name = "AllGather" if coll == "ag" else "ReduceScatter"
        for s in sizes(1 * MB, 64 * MB, other, ar):
            rep.row(f"{name} 4 ranks busbw vs AllReduce", s, median_of(other, s, "ip_busbw"),
                    median_of(ar, s, "ip_busbw"), "GB/s", 0.8, upper=1.2,
                    each=each_ratio(other, ar, s, "ip_busbw"))
        kind = "all_gather" if coll == "ag" else "reduce_scatter"
        mem_shares(f"SHM 4 ranks {name}", other, membw, cores, kind, 4, 1 * MB, 64 * MB)
    eight, facts8 = load_run("cs-shm-8-large")
    for s in sizes(1 * MB, 64 * MB, eight, ar):
        mine = median_of(eight, s, "ip_busbw")
        four = median_of(ar, s, "ip_busbw")
        rep.row("8 ranks busbw vs 0.5 x 4 ranks", s, mine, four * 0.5 if four else None, "GB/s", 1.0,
                each=each_ratio(eight, ar, s, "ip_busbw", 0.5))
    mem_shares("SHM 8 ranks AllReduce", eight, membw, cores, "all_reduce", 8, 1 * MB, 64 * MB)
    # References on the same oversubscribed cores: Open MPI, and bench/shm_ring.rs, a plain ring over shared memory
    # (copies, additions and hand-offs, nothing else). collscope's 8 and 4 ranks against each, and each one's own 8
    # ranks against half its 4, the target's measure applied to it.
    for ref, eight_ref, four_ref in (("Open MPI's", "mpi-8-large", "mpi-4-large"),
                                     ("the plain ring's (shm_ring.rs)", "shm-ring-8", "shm-ring-4")):
        ref8, _ = load_run(eight_ref)
        ref4, _ = load_run(four_ref)
        against, own = {8: [], 4: []}, []
        for s in sizes(1 * MB, 64 * MB, ar, eight, ref8):
            r8, r4 = median_of(ref8, s, "ip_busbw"), median_of(ref4, s, "ip_busbw")
            for n, mine, theirs in ((8, eight, r8), (4, ar, r4)):
                a = median_of(mine, s, "ip_busbw")
                if a is not None and theirs:
                    against[n].append(f"{human(s)} {a / theirs:.2f}x")
            if r8 is not None and r4:
                own.append(f"{human(s)} {r8 / (0.5 * r4):.2f}")
        for n in (8, 4):
            if against[n]:
                print(f"# {n} ranks busbw as a multiple of {ref} {n} ranks: {', '.join(against[n])}")
        if own:
            print(f"# {ref[0].upper()}{ref[1:]} 8 ranks busbw vs 0.5 x its 4 ranks: {', '.join(own)}")
    inits = [f["init_ms"] for f in facts8 if "init_ms" in f]
    if inits:
        med = statistics.median(inits)
        rep.row("Init 8 ranks (processes) vs 200 ms", 8, med, 200.0, "ms", 1.0, at_least=False)
        rss = facts8[-1].get("rss_mib", [])
        peak = facts8[-1].get("peak_rss_mib", [])
        print(f"# init of 8 ranks over repetitions (ms): {' '.join(f'{v:.1f}' for v in inits)}")
        print(f"# RSS after init per rank (MiB): {' '.join(rss)}; peak (64 MB buffers) {' '.join(peak)}")
    else:
        rep.row("Init 8 ranks (processes) vs 200 ms", 8, None, 200.0, "ms", 1.0, at_least=False)
    steal_file = os.path.join(directory, "cpustat.txt")
    if os.path.exists(steal_file):
        with open(steal_file) as fh:
            steal = parse_steal(fh.read())
        if steal:
            # A guest's figures swing with what the host runs beside it; this says how much it did in this run.
            noisy = "; figures this run are unreliable" if max(steal) > 0.05 else ""
            shares = ", ".join(f"{v:.0%}" for v in steal)
            print(f"# host steal (CPU time the hypervisor gave other guests) per repetition: {shares}{noisy}")
    if best is not None:
        print(f"# one core's writes read by another (bench/crosscore.rs, around each benchmark): best {best:.1f} GB/s; "
              f"{len(far)} of {len(rates)} benchmark runs had it under {FAR:.0%} of that, the vCPUs placed far apart: "
              f"{runs_named(far) if far else 'none'}")
    settle = os.path.join(directory, "settle.txt")
    if os.path.exists(settle):
        with open(settle) as fh:
            waited = fh.read().split()
        if waited and waited[0].isdigit():
            print(f"# benchmarks waited {waited[0]} s in all for the cores to come near each other before they ran")
        # compare.sh's second figure (absent before it ran benchmarks again): runs repeated for the cores.
        if len(waited) > 1 and waited[1].isdigit():
            print(f"# {waited[1]} benchmark runs found the cores far apart and ran again (RERUNS), the last run kept")
    if far:
        print(f"# from the repetitions with the cores near each other only (the median of their paired ratios): "
              f"{rep.near['PASS']} PASS, {rep.near['MISS']} MISS, {rep.near['none']} without one")
        for miss in rep.near_misses:
            print(f"#   near-only MISS: {miss}")
    print(f"# {rep.passed} PASS, {rep.missed} MISS, {rep.missing} without data")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
