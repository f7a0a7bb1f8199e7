//! What bench/tcp_bound.rs and bench/shm_ring.rs share: their `NRANKS MINBYTES MAXBYTES [ITERS]` arguments, a
//! page-aligned buffer, and the anchor-style table (size count type op time_us algbw busbw wrong) they print for
//! bench/compare.py.

/// The ranks, the sizes (MINBYTES doubled up to MAXBYTES) and the timed rounds at each size.
pub(crate) struct Sweep {
    pub nranks: usize,
    pub sizes: Vec<usize>,
    pub iters: usize,
}

impl Sweep {
    /// `NRANKS MINBYTES MAXBYTES [ITERS]` (ITERS 5 when absent), or an error naming `prog`, the bad value and
    /// what was expected, with `usage`. NRANKS is at least 2 and at most `most_ranks` where that is given.
    pub(crate) fn parse(prog: &str, usage: &str, args: &[String], most_ranks: Option<usize>) -> Result<Sweep, String> {
        if !(3..=4).contains(&args.len()) {
            return Err(usage.into());
        }
        let num = |i: usize, what: &str| -> Result<usize, String> {
            args[i].parse().map_err(|_| format!("{prog}: {what} must be a whole number, got '{}'", args[i]))
        };
        let (n, lo, hi) = (num(0, "NRANKS")?, num(1, "MINBYTES")?, num(2, "MAXBYTES")?);
        let iters = if args.len() == 4 { num(3, "ITERS")? } else { 5 };
        let ranks = match most_ranks {
            Some(most) => format!("2 <= NRANKS <= {most}"),
            None => "NRANKS >= 2".into(),
        };
        if n < 2 || most_ranks.is_some_and(|most| n > most) || lo == 0 || !lo.is_multiple_of(4) || hi < lo || iters == 0
        {
            return Err(format!(
                "{prog}: expected {ranks}, MINBYTES a positive multiple of 4 up to MAXBYTES, ITERS >= 1; {usage}"
            ));
        }
        let sizes = std::iter::successors(Some(lo), |s| Some(s * 2)).take_while(|&s| s <= hi).collect();
        Ok(Sweep { nranks: n, sizes, iters })
    }

    /// Prints the table under `# {title}, median of ITERS`: a row a size, whose rounds are its warm-up and then
    /// the ITERS timed ones, all sizes' in turn. `seconds(round)` is how long a round lasted, from the first
    /// rank's start to the last one's end; busbw is that of a ring AllReduce of NRANKS; `wrong(i)` counts the
    /// elements found wrong at the `i`-th size.
    pub(crate) fn print(&self, title: &str, seconds: impl Fn(usize) -> f64, wrong: impl Fn(usize) -> u64) {
        let (n, iters) = (self.nranks, self.iters);
        println!("# {title}, median of {iters}");
        println!("#       size    count  type  op    time_us        algbw        busbw  wrong");
        for (i, &size) in self.sizes.iter().enumerate() {
            let mut times: Vec<f64> = (1..=iters).map(|k| seconds(i * (iters + 1) + k)).collect();
            times.sort_by(f64::total_cmp);
            let t = times[times.len() / 2];
            let algbw = size as f64 / t / 1e9;
            let busbw = algbw * 2.0 * (n - 1) as f64 / n as f64;
            let wrong = wrong(i);
            println!("{size:>12} {:>8} float sum {:>10.1} {algbw:>12.3} {busbw:>12.3} {wrong:>6}", size / 4, t * 1e6);
        }
    }
}

/// `floats` of `fill` in `store`, starting on a page boundary, as the runtime's slots (mmap) do: from `malloc`,
/// 16 bytes into a page, a copy between such a buffer and a slot runs 16 bytes off modulo 4 KiB, where `rep
/// movsb` crawls on AMD EPYC (4x slower rounds of shm_ring here; the kernel's copies out of a socket alike).
pub(crate) fn page_aligned(store: &mut Vec<f32>, floats: usize, fill: f32) -> &mut [f32] {
    *store = vec![fill; floats + 4096 / 4];
    let skip = (store.as_ptr() as usize).wrapping_neg() % 4096 / 4;
    &mut store[skip..skip + floats]
}
