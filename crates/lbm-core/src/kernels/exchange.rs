//! `kernels/exchange.cu`: `accumulate_exchange`, the momentum exchange on
//! body links of one patch, added to the interval and window integrals of its
//! level. Launch struct and CPU reference.
//!
//! The sums are deterministic and the kernel's bit for bit: each body slot has
//! [`blocks_per_slot`] blocks, each summing its share of the links in the fixed
//! order of `kernels::reduce` into one partial, and the last block of the slot
//! to arrive sums the partials in block order; the reference mirrors both
//! steps. What it does not do: zero the integrals (the plan's memsets) or turn
//! them into forces (the stepper's exchange ledgers).

use crate::device::{Arg, BLOCK_THREADS, BufferRef, Kernel, Launch};
use crate::domain::geometry::{LINK_WORDS, NO_CELL};
use crate::error::{LaunchProblem, Result};
use crate::lattice::{C, OPP, Q, W};

use super::lbm::bouzidi;
use super::reduce::BlockSum;
use super::{ArgReader, BufferUse, ExactShape, HostViews, KernelArgs};

/// f64 words per body in an exchange accumulator: Fx, Fy, torque, unused.
pub const EXCHANGE_WORDS: usize = 4;

/// f64 words per block in the partials scratch: Fx, Fy, torque.
pub const PARTIAL_WORDS: usize = 3;

/// Body slots one level may have: a link names its slot in the 28 bits of its
/// second word above the direction.
pub const MAX_BODY_SLOTS: u32 = 1 << 28;

/// The most blocks one body slot is summed by; the partials scratch is sized
/// for it, so its size depends on the number of slots alone.
pub const MAX_BLOCKS_PER_SLOT: u32 = 64;

/// Links each thread of a slot's blocks takes, about, before another block is
/// worth its launch: enough work per thread to hide the table's load latency,
/// few enough that a 10k-link table is spread over several SMs.
pub const LINKS_PER_THREAD: u32 = 8;

/// Blocks per body slot for a table of `n_links` links: one block per
/// `BLOCK_THREADS x LINKS_PER_THREAD` links, rounded up, at least 1 and at most
/// [`MAX_BLOCKS_PER_SLOT`] (2048 links a block; 10k links take 5 blocks, 131k
/// links or more take 64). Any value in that range gives a deterministic sum;
/// this one is what the plan launches, so it fixes the bits of a run.
pub fn blocks_per_slot(n_links: u32) -> u32 {
    n_links
        .div_ceil(BLOCK_THREADS * LINKS_PER_THREAD)
        .clamp(1, MAX_BLOCKS_PER_SLOT)
}

/// Bytes of the partials scratch of a level with `n_slots` body slots, sized
/// for [`MAX_BLOCKS_PER_SLOT`] so that it does not depend on the link count.
pub fn partials_bytes(n_slots: usize) -> usize {
    n_slots * MAX_BLOCKS_PER_SLOT as usize * PARTIAL_WORDS * 8
}

/// Bytes of the arrival counters of a level with `n_slots` body slots: a u32
/// per slot.
pub fn arrivals_bytes(n_slots: usize) -> usize {
    n_slots * 4
}

/// `accumulate_exchange`: `blocks_per_slot` blocks of [`BLOCK_THREADS`]
/// threads per body slot, each block striding over its share of the links and
/// summing those of its slot, the slot's last block to arrive adding the
/// slot's total. The exchange of the streaming that leaves `f`: each link
/// gives the body `c_d (f*_d + f_in)` (real populations), `f_in` being the
/// population the wall rule returns.
#[derive(Clone, Debug, PartialEq)]
pub struct AccumulateExchange {
    /// Post-collision populations of the body's patch before the hop's streaming.
    pub f: BufferRef,
    pub plane_cells: u32,
    /// [`LINK_WORDS`] u32 per link, from [`crate::domain::geometry::wall_tables`].
    pub links: BufferRef,
    pub n_links: u32,
    /// Body slots of the level: the accumulators' length in [`EXCHANGE_WORDS`].
    pub n_slots: u32,
    /// Blocks per slot, 1 to [`MAX_BLOCKS_PER_SLOT`]; the plan takes
    /// [`blocks_per_slot`] of `n_links`.
    pub blocks_per_slot: u32,
    /// Scratch, [`PARTIAL_WORDS`] f64 per block (slot-major, block `b` of slot
    /// `s` at `s * blocks_per_slot + b`); written before it is read, so its
    /// contents on entry do not matter.
    pub partials: BufferRef,
    /// A u32 arrival counter per slot, 0 on entry and left 0 by the slot's
    /// last block (zeroed at allocation).
    pub arrivals: BufferRef,
    /// [`EXCHANGE_WORDS`] f64 per body slot of the level.
    pub interval: BufferRef,
    /// The window accumulator, present while a window is observed.
    pub window: Option<BufferRef>,
}

impl KernelArgs for AccumulateExchange {
    const KERNEL: Kernel = Kernel::AccumulateExchange;
    const PARAMS: &'static [&'static str] = &[
        "f",
        "plane_cells",
        "links",
        "n_links",
        "n_slots",
        "blocks_per_slot",
        "partials",
        "arrivals",
        "interval",
        "window",
        "window_on",
    ];

    fn launch(&self) -> Launch {
        let args = vec![
            self.f.into(),
            Arg::U32(self.plane_cells),
            self.links.into(),
            Arg::U32(self.n_links),
            Arg::U32(self.n_slots),
            Arg::U32(self.blocks_per_slot),
            self.partials.into(),
            self.arrivals.into(),
            self.interval.into(),
            self.window.into(),
            Arg::U32(self.window.is_some() as u32),
        ];
        self.shape().launch(Kernel::AccumulateExchange, args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        let decoded = AccumulateExchange {
            f: r.buffer()?,
            plane_cells: r.u32()?,
            links: r.buffer()?,
            n_links: r.u32()?,
            n_slots: r.u32()?,
            blocks_per_slot: r.u32()?,
            partials: r.buffer()?,
            arrivals: r.buffer()?,
            interval: r.buffer()?,
            window: r.optional_buffer()?,
        };
        r.presence("window_on", decoded.window.is_some())?;
        Ok(decoded)
    }

    fn work_items(&self) -> usize {
        self.n_slots as usize * self.blocks_per_slot as usize * BLOCK_THREADS as usize
    }

    /// Each block sums its share of one slot in shared memory sized for its
    /// block, and the slot's last block counts `blocks_per_slot` arrivals.
    fn required_shape(&self) -> Option<ExactShape> {
        Some(self.shape())
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        if self.n_slots > MAX_BODY_SLOTS {
            return Err(LaunchProblem::Shape(format!(
                "{} body slots on one level, more than the {MAX_BODY_SLOTS} a link can name",
                self.n_slots
            )));
        }
        if !(1..=MAX_BLOCKS_PER_SLOT).contains(&self.blocks_per_slot) {
            return Err(LaunchProblem::Shape(format!(
                "{} blocks per body slot, outside 1 to {MAX_BLOCKS_PER_SLOT}",
                self.blocks_per_slot
            )));
        }
        let blocks = u64::from(self.n_slots) * u64::from(self.blocks_per_slot);
        if blocks > i32::MAX as u64 {
            return Err(LaunchProblem::Shape(format!(
                "{blocks} blocks for {} body slots, more than the {} a grid may have",
                self.n_slots,
                i32::MAX
            )));
        }
        Ok(())
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        // Every block writes its partial and every slot's last block adds the
        // slot's total, links or none.
        let slots = self.n_slots as usize * EXCHANGE_WORDS * 8;
        let blocks = self.n_slots as usize * self.blocks_per_slot as usize;
        let mut uses = vec![
            BufferUse::read("f", self.f, Q * self.plane_cells as usize * 4, 4),
            BufferUse::read("links", self.links, LINK_WORDS * self.n_links as usize * 4, 4),
            BufferUse::write("partials", self.partials, blocks * PARTIAL_WORDS * 8, 8),
            BufferUse::read_write("arrivals", self.arrivals, arrivals_bytes(self.n_slots as usize), 4),
            BufferUse::read_write("interval", self.interval, slots, 8),
        ];
        if let Some(window) = self.window {
            uses.push(BufferUse::read_write("window", window, slots, 8));
        }
        uses
    }

    fn run_on_host(&self, views: &mut HostViews) {
        let r = &views.reads;
        let (f, links) = (r.get("f"), r.get("links"));
        let w = &mut views.writes;
        let mut scratch = Scratch {
            partials: w.take("partials"),
            arrivals: w.take("arrivals"),
        };
        match self.window {
            Some(_) => {
                let (interval, window) = w.get2("interval", "window");
                accumulate_exchange(self, f, links, &mut scratch, interval, Some(window));
            }
            None => accumulate_exchange(self, f, links, &mut scratch, w.get("interval"), None),
        }
    }
}

impl AccumulateExchange {
    /// `blocks_per_slot` blocks per body slot.
    fn shape(&self) -> ExactShape {
        ExactShape::blocks(self.n_slots.saturating_mul(self.blocks_per_slot))
    }
}

/// The kernel's scratch as the reference leaves it: every block's partial in
/// `partials`, every slot's arrival counter back at 0.
pub struct Scratch<'a> {
    pub partials: &'a mut [f64],
    pub arrivals: &'a mut [u32],
}

/// Momentum exchange on body links for the streaming that leaves `f`: a link
/// from a fluid cell along `d` into the body gives it `c_d (f*_d + f_in)` in
/// real populations, `f_in` being what [`bouzidi`] returns along `-d` (the
/// stationary-wall form of the Galilean-invariant exchange). Torque is taken
/// about the body centre with the lever arm in the table.
///
/// The sums follow the kernel: slot `s` has blocks `b = 0..B`
/// (B = `blocks_per_slot`, T = [`BLOCK_THREADS`]); thread `t` of block `b`
/// sums the contributions of the links of slot `s` among links
/// `b T + t + k B T` for `k = 0, 1, ...` in that order, and the block's tree of
/// `kernels::reduce` combines its threads' sums into the block's partial. The
/// slot's total is the partial of block 0, plus that of block 1, ..., plus
/// that of block B - 1, in that order whichever block arrived last, added once
/// to the slot's interval words and, while a window is observed, to its window
/// words. So the result depends on nothing but `f`, the link table, B and the
/// accumulators, bit for bit on every backend and run. A link naming a slot
/// of `n_slots` or more contributes nothing, as no block takes it.
pub fn accumulate_exchange(
    k: &AccumulateExchange,
    f: &[f32],
    links: &[u32],
    scratch: &mut Scratch,
    interval: &mut [f64],
    mut window: Option<&mut [f64]>,
) {
    let plane = k.plane_cells as usize;
    let n_blocks = k.blocks_per_slot as usize;
    let threads = BLOCK_THREADS as usize;
    let mut sums: Vec<BlockSum<3>> = (0..k.n_slots as usize * n_blocks).map(|_| BlockSum::new()).collect();
    for (item, link) in links.chunks_exact(LINK_WORDS).take(k.n_links as usize).enumerate() {
        let slot = (link[1] >> 4) as usize;
        if slot < k.n_slots as usize {
            // Block `b` takes the runs of T links b, b + B, b + 2B, ...; within
            // a thread the links come in increasing order, as BlockSum needs.
            let block = (item / threads) % n_blocks;
            sums[slot * n_blocks + block].add(item, link_exchange(f, plane, link));
        }
    }
    for (index, sum) in sums.into_iter().enumerate() {
        let words = index * PARTIAL_WORDS..(index + 1) * PARTIAL_WORDS;
        scratch.partials[words].copy_from_slice(&sum.total());
    }
    for slot in 0..k.n_slots as usize {
        let blocks = &scratch.partials[slot * n_blocks * PARTIAL_WORDS..(slot + 1) * n_blocks * PARTIAL_WORDS];
        let mut total = [0.0f64; 3];
        total.copy_from_slice(&blocks[..PARTIAL_WORDS]);
        for partial in blocks.chunks_exact(PARTIAL_WORDS).skip(1) {
            for (sum, value) in total.iter_mut().zip(partial) {
                *sum += value;
            }
        }
        scratch.arrivals[slot] = 0;
        let words = slot * EXCHANGE_WORDS..slot * EXCHANGE_WORDS + 3;
        for (word, value) in interval[words.clone()].iter_mut().zip(total) {
            *word += value;
        }
        if let Some(w) = window.as_deref_mut() {
            for (word, value) in w[words].iter_mut().zip(total) {
                *word += value;
            }
        }
    }
}

/// What one link gives its body: Fx, Fy and the torque, each rounded as the
/// kernel rounds it (the populations summed in f32, then widened).
fn link_exchange(f: &[f32], plane: usize, link: &[u32]) -> [f64; 3] {
    let cell = link[0] as usize;
    let d = (link[1] & 15) as usize;
    let (rx, ry) = (f32::from_bits(link[2]) as f64, f32::from_bits(link[3]) as f64);
    let q = f32::from_bits(link[4]);
    let behind = (link[5] != NO_CELL).then_some(link[5] as usize);
    let returned = bouzidi(f, plane, cell, behind, OPP[d], q);
    let both = (f[d * plane + cell] + returned + 2.0 * W[d]) as f64;
    let fx = C[d][0] as f64 * both;
    let fy = C[d][1] as f64 * both;
    [fx, fy, rx * fy - ry * fx]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::BufferId;

    /// splitmix64: small, seeded, good enough for test data.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u32) -> u32 {
            (self.next() % u64::from(n)) as u32
        }
        fn range(&mut self, lo: f64, hi: f64) -> f64 {
            lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    const PLANE: usize = 300;
    const N_SLOTS: u32 = 3;

    /// A random table of `n_links` links over slots `0..=N_SLOTS` (the last
    /// one beyond the level's slots), random populations and accumulators.
    fn random_case(
        rng: &mut Rng,
        n_links: u32,
        blocks_per_slot: u32,
    ) -> (AccumulateExchange, Vec<f32>, Vec<u32>, Vec<f64>) {
        let f: Vec<f32> = (0..Q * PLANE).map(|_| rng.range(-0.05, 0.05) as f32).collect();
        let links = (0..n_links)
            .flat_map(|_| {
                let behind = match rng.below(4) {
                    0 => NO_CELL,
                    _ => rng.below(PLANE as u32),
                };
                [
                    rng.below(PLANE as u32),
                    (1 + rng.below(8)) | (rng.below(N_SLOTS + 1) << 4),
                    (rng.range(-6.0, 6.0) as f32).to_bits(),
                    (rng.range(-6.0, 6.0) as f32).to_bits(),
                    (1.0 - rng.range(0.0, 1.0) as f32).to_bits(),
                    behind,
                ]
            })
            .collect();
        let start = (0..N_SLOTS as usize * EXCHANGE_WORDS)
            .map(|_| rng.range(-1.0, 1.0))
            .collect();
        let k = AccumulateExchange {
            f: BufferId(0).into(),
            plane_cells: PLANE as u32,
            links: BufferId(1).into(),
            n_links,
            n_slots: N_SLOTS,
            blocks_per_slot,
            partials: BufferId(2).into(),
            arrivals: BufferId(3).into(),
            interval: BufferId(4).into(),
            window: Some(BufferId(5).into()),
        };
        (k, f, links, start)
    }

    /// The reference on `start` for both accumulators, which must agree, from
    /// partials poisoned with NaN: (the accumulator, the partials).
    fn reference(k: &AccumulateExchange, f: &[f32], links: &[u32], start: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (mut interval, mut window) = (start.to_vec(), start.to_vec());
        let blocks = (k.n_slots * k.blocks_per_slot) as usize;
        let mut partials = vec![f64::NAN; blocks * PARTIAL_WORDS];
        let mut arrivals = vec![0u32; k.n_slots as usize];
        let mut scratch = Scratch {
            partials: &mut partials,
            arrivals: &mut arrivals,
        };
        accumulate_exchange(k, f, links, &mut scratch, &mut interval, Some(&mut window));
        assert_eq!(bits(&interval), bits(&window), "the window gets what the interval gets");
        assert!(arrivals.iter().all(|a| *a == 0), "the arrival counters are left at 0");
        (interval, partials)
    }

    fn bits(words: &[f64]) -> Vec<u64> {
        words.iter().map(|w| w.to_bits()).collect()
    }

    /// The kernel's order written out as the kernel runs it: block `b` of slot
    /// `slot`, thread `t` summing links `b T + t + k B T` of its slot, then the
    /// tree, each block's total into its partial; then the partials of the
    /// slot in block order. (The accumulators, the partials.)
    fn kernel_order(f: &[f32], links: &[u32], start: &[f64], n_blocks: usize) -> (Vec<f64>, Vec<f64>) {
        let threads = BLOCK_THREADS as usize;
        let n_links = links.len() / LINK_WORDS;
        let mut out = start.to_vec();
        let mut partials = Vec::new();
        for slot in 0..N_SLOTS as usize {
            let mut block_totals = Vec::new();
            for block in 0..n_blocks {
                // Fx, Fy and torque of every thread, as in the kernel's shared memory.
                let mut partial = [vec![0.0f64; threads], vec![0.0f64; threads], vec![0.0f64; threads]];
                for t in 0..threads {
                    let mut link = block * threads + t;
                    while link < n_links {
                        let words = &links[link * LINK_WORDS..(link + 1) * LINK_WORDS];
                        if (words[1] >> 4) as usize == slot {
                            for (p, value) in partial.iter_mut().zip(link_exchange(f, PLANE, words)) {
                                p[t] += value;
                            }
                        }
                        link += threads * n_blocks;
                    }
                }
                let mut stride = threads / 2;
                while stride > 0 {
                    for p in partial.iter_mut() {
                        for i in 0..stride {
                            p[i] += p[i + stride];
                        }
                    }
                    stride /= 2;
                }
                block_totals.push([partial[0][0], partial[1][0], partial[2][0]]);
            }
            let mut total = block_totals[0];
            for block in &block_totals[1..] {
                for j in 0..3 {
                    total[j] += block[j];
                }
            }
            for (j, value) in total.iter().enumerate() {
                out[slot * EXCHANGE_WORDS + j] += value;
            }
            partials.extend(block_totals.into_iter().flatten());
        }
        (out, partials)
    }

    /// Plain sums in link order, what the reference did before it took the
    /// kernel's order.
    fn link_order(f: &[f32], links: &[u32], start: &[f64]) -> Vec<f64> {
        let mut out = start.to_vec();
        for words in links.chunks_exact(LINK_WORDS) {
            let slot = (words[1] >> 4) as usize;
            if slot < N_SLOTS as usize {
                for (j, c) in link_exchange(f, PLANE, words).into_iter().enumerate() {
                    out[slot * EXCHANGE_WORDS + j] += c;
                }
            }
        }
        out
    }

    #[test]
    fn sums_take_the_kernels_order_and_nothing_else() {
        let mut rng = Rng(5);
        let mut reordered = 0;
        let mut by_blocks = 0;
        let t = BLOCK_THREADS;
        for blocks_per_slot in [1, 2, 3, 5] {
            let b = blocks_per_slot * t;
            // Below, at and above one block's threads and all the slot's
            // threads, and several strides of them.
            for n_links in [0, 1, t - 1, t, t + 1, b - 1, b, b + 1, 3 * b + 7] {
                let (k, f, links, start) = random_case(&mut rng, n_links, blocks_per_slot);
                let (got, partials) = reference(&k, &f, &links, &start);
                let what = format!("{n_links} links, {blocks_per_slot} blocks per slot");
                let (expected, expected_partials) = kernel_order(&f, &links, &start, blocks_per_slot as usize);
                assert_eq!(bits(&got), bits(&expected), "{what}");
                assert_eq!(bits(&partials), bits(&expected_partials), "{what}: partials");
                let plain = link_order(&f, &links, &start);
                for (g, p) in got.iter().zip(&plain) {
                    assert!((g - p).abs() <= 1e-12 * (1.0 + p.abs()), "{what}: {g} against {p}");
                }
                reordered += (bits(&got) != bits(&plain)) as usize;
                if blocks_per_slot > 1 {
                    let (one, _) = kernel_order(&f, &links, &start, 1);
                    by_blocks += (bits(&got) != bits(&one)) as usize;
                }
                // The unused fourth word of every slot stays as it was.
                for slot in 0..N_SLOTS as usize {
                    assert_eq!(
                        got[slot * EXCHANGE_WORDS + 3],
                        start[slot * EXCHANGE_WORDS + 3],
                        "{what}"
                    );
                }
                // The table alone decides: the same inputs give the same bits again.
                assert_eq!(bits(&got), bits(&reference(&k, &f, &links, &start).0), "{what}");
            }
        }
        assert!(reordered > 0, "the order never mattered, so this test shows nothing");
        assert!(
            by_blocks > 0,
            "splitting a slot over blocks never mattered, so this test shows nothing"
        );
    }

    #[test]
    fn blocks_per_slot_follow_the_link_count() {
        let per_block = BLOCK_THREADS * LINKS_PER_THREAD;
        for (n_links, blocks) in [
            (0, 1),
            (1, 1),
            (per_block, 1),
            (per_block + 1, 2),
            (10_000, 5),
            (64 * per_block, 64),
            (u32::MAX, 64),
        ] {
            assert_eq!(blocks_per_slot(n_links), blocks, "{n_links} links");
        }
    }
}
