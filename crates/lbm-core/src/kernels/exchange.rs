//! `kernels/exchange.cu`: `accumulate_exchange`, the momentum exchange on
//! body links of one patch, added to the interval and window integrals of its
//! level. Launch struct and CPU reference.
//!
//! The sums do not depend on their order: each link's Fx, Fy and torque are
//! turned into fixed-point integers ([`to_fixed`], multiples of 2^-64) and
//! summed as integers, which associate; only the slot's total is rounded back
//! to f64, once ([`from_fixed`]). So a body's sums are the same bits whatever
//! else its table holds and however it is spread over blocks: a split run's
//! slab, whose table lacks the other slabs' bodies, gives each body what
//! one device gives it. Each body slot has [`blocks_per_slot`] blocks, each
//! summing its share of the links into one partial; the last block of the
//! slot to arrive adds the partials. What it does not do: zero the integrals
//! (the plan's memsets) or turn them into forces (the stepper's exchange
//! ledgers).

use crate::device::{Arg, BLOCK_THREADS, BufferRef, Kernel, Launch};
use crate::domain::geometry::{LINK_WORDS, NO_CELL};
use crate::error::{LaunchProblem, Result};
use crate::lattice::{C, OPP, Q};

use super::lbm::bouzidi;
use super::{ArgReader, BufferUse, ExactShape, HostViews, KernelArgs};

/// f64 words per body in an exchange accumulator: Fx, Fy, torque, unused.
pub const EXCHANGE_WORDS: usize = 4;

/// 64-bit words per block in the partials scratch: Fx, Fy and torque as
/// fixed-point i128 (low word first), then a word whose bit j marks a
/// component that met a contribution [`to_fixed`] refuses.
pub const PARTIAL_WORDS: usize = 7;

/// The largest magnitude a link's contribution may have, 2^40 in lattice
/// units (a population of order 1 on a lever of up to 2^24 cells gives
/// less than 2^25): anything larger is a diverged flow, summed as NaN. The
/// bound keeps 2^23 links of it inside an i128.
const FIXED_LIMIT_EXPONENT: u64 = 1023 + 40;

/// `v` in multiples of 2^-64, truncated toward zero (exact from |v| >=
/// 2^-11 on), or `None` for a non-finite `v` or one of 2^40 or more. Written
/// out in bits, as `exchange.cu`'s `to_fixed` is.
pub fn to_fixed(v: f64) -> Option<i128> {
    let bits = v.to_bits();
    let exponent = (bits >> 52) & 0x7ff;
    if exponent >= FIXED_LIMIT_EXPONENT {
        return None;
    }
    if exponent == 0 {
        // Zero or subnormal: below 2^-1022, nothing at 2^-64.
        return Some(0);
    }
    let mantissa = (bits & ((1 << 52) - 1)) | (1 << 52);
    // v 2^64 = mantissa 2^(exponent - 1075 + 64).
    let shift = exponent as i64 - 1011;
    let magnitude = match shift {
        0.. => u128::from(mantissa) << shift,
        -52..0 => u128::from(mantissa >> -shift),
        _ => 0,
    };
    Some(match bits >> 63 {
        1 => -(magnitude as i128),
        _ => magnitude as i128,
    })
}

/// The fixed-point `x` (multiples of 2^-64) as the nearest f64, ties to
/// even. Written out in bits, as `exchange.cu`'s `from_fixed` is.
pub fn from_fixed(x: i128) -> f64 {
    let magnitude = x.unsigned_abs();
    if magnitude == 0 {
        return 0.0;
    }
    let lead = 127 - magnitude.leading_zeros() as i64;
    let (mut mantissa, mut scale) = (magnitude, 0i64);
    if lead > 52 {
        let drop = lead - 52;
        let rest = magnitude & ((1u128 << drop) - 1);
        let half = 1u128 << (drop - 1);
        mantissa = magnitude >> drop;
        if rest > half || (rest == half && mantissa & 1 == 1) {
            mantissa += 1;
        }
        scale = drop;
    }
    // Both factors exact, so is their product: at most 2^54 x 2^11.
    let power = f64::from_bits(((1023 + scale - 64) as u64) << 52);
    let value = mantissa as u64 as f64 * power;
    if x < 0 { -value } else { value }
}

/// The NaN a sum that met a refused contribution gives, the same bits on
/// every backend.
const NAN_BITS: u64 = 0x7ff8_0000_0000_0000;

/// One block's (or slot's) fixed-point sums and the components that met a
/// refused contribution.
#[derive(Clone, Copy, Default)]
struct FixedSum {
    sum: [i128; 3],
    refused: u64,
}

impl FixedSum {
    fn add(&mut self, value: [f64; 3]) {
        for (j, v) in value.into_iter().enumerate() {
            match to_fixed(v) {
                Some(x) => self.sum[j] = self.sum[j].wrapping_add(x),
                None => self.refused |= 1 << j,
            }
        }
    }

    fn merge(&mut self, other: &FixedSum) {
        for j in 0..3 {
            self.sum[j] = self.sum[j].wrapping_add(other.sum[j]);
        }
        self.refused |= other.refused;
    }

    fn words(&self) -> [u64; PARTIAL_WORDS] {
        let mut words = [0u64; PARTIAL_WORDS];
        for j in 0..3 {
            words[2 * j] = self.sum[j] as u64;
            words[2 * j + 1] = (self.sum[j] >> 64) as u64;
        }
        words[6] = self.refused;
        words
    }

    fn values(&self) -> [f64; 3] {
        std::array::from_fn(|j| match self.refused >> j & 1 {
            1 => f64::from_bits(NAN_BITS),
            _ => from_fixed(self.sum[j]),
        })
    }
}

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
    /// Scratch, [`PARTIAL_WORDS`] 64-bit words per block (slot-major, block `b` of slot
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
/// Slot `s` has blocks `b = 0..B` (B = `blocks_per_slot`, T =
/// [`BLOCK_THREADS`]); block `b` takes the links of slot `s` among links
/// `b T + t + k B T` (`t < T`, `k = 0, 1, ...`), and its partial is their
/// fixed-point sum ([`to_fixed`]; a component that met a refused
/// contribution is marked). The slot's total, the sum of its blocks'
/// partials, is rounded to f64 once ([`from_fixed`]; NaN where marked) and
/// added to the slot's interval words and, while a window is observed, to its
/// window words. Integer sums associate, so the result depends on `f`, the
/// slot's own links and the accumulators alone: not on the order of the
/// table, the other slots' links or B, bit for bit on every backend and run.
/// A link naming a slot of `n_slots` or more contributes nothing.
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
    let mut sums = vec![FixedSum::default(); k.n_slots as usize * n_blocks];
    for (item, link) in links.chunks_exact(LINK_WORDS).take(k.n_links as usize).enumerate() {
        let slot = (link[1] >> 4) as usize;
        if slot < k.n_slots as usize {
            let block = (item / threads) % n_blocks;
            sums[slot * n_blocks + block].add(link_exchange(f, plane, link));
        }
    }
    for (index, sum) in sums.iter().enumerate() {
        let words = index * PARTIAL_WORDS..(index + 1) * PARTIAL_WORDS;
        for (word, value) in scratch.partials[words].iter_mut().zip(sum.words()) {
            *word = f64::from_bits(value);
        }
    }
    for (slot, blocks) in sums.chunks_exact(n_blocks).enumerate() {
        let mut total = FixedSum::default();
        for block in blocks {
            total.merge(block);
        }
        scratch.arrivals[slot] = 0;
        let words = slot * EXCHANGE_WORDS..slot * EXCHANGE_WORDS + 3;
        let values = total.values();
        for (word, value) in interval[words.clone()].iter_mut().zip(values) {
            *word += value;
        }
        if let Some(w) = window.as_deref_mut() {
            for (word, value) in w[words].iter_mut().zip(values) {
                *word += value;
            }
        }
    }
}

/// What one link gives its body: Fx, Fy and the torque, each rounded as the
/// kernel rounds it (the populations summed in f32, then widened).
///
/// The populations are the stored ones, shifted by the rest state (f − w):
/// the force is that of the pressure relative to the rest state, as the
/// `pressure` field is. Over a closed body the rest state's part, 2 w_d per
/// link, sums to zero force and torque (each pair of neighbouring solid
/// cells cancels its two links), so leaving it out changes nothing but the
/// rounding, which it lessens: it kept a link's few digits of flow under a
/// constant of 0.06 or 0.22. On a body that stands on a wall it is the rest
/// pressure on the faces in the fluid with none under it, a down force of
/// ρ0 c_s² per cell of the body's width that no flow makes.
fn link_exchange(f: &[f32], plane: usize, link: &[u32]) -> [f64; 3] {
    let cell = link[0] as usize;
    let d = (link[1] & 15) as usize;
    let (rx, ry) = (f32::from_bits(link[2]) as f64, f32::from_bits(link[3]) as f64);
    let q = f32::from_bits(link[4]);
    let behind = (link[5] != NO_CELL).then_some(link[5] as usize);
    let returned = bouzidi(f, plane, cell, behind, OPP[d], q);
    let both = (f[d * plane + cell] + returned) as f64;
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

    /// Plain f64 sums in link order.
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

    /// The links of `links` that name `slot`.
    fn own_links(links: &[u32], slot: u32) -> Vec<u32> {
        links
            .chunks_exact(LINK_WORDS)
            .filter(|l| l[1] >> 4 == slot)
            .flatten()
            .copied()
            .collect()
    }

    #[test]
    fn a_slots_sums_depend_on_its_own_links_alone() {
        let mut rng = Rng(5);
        let mut rounded = 0;
        let t = BLOCK_THREADS;
        for blocks_per_slot in [1, 2, 3, 5] {
            let b = blocks_per_slot * t;
            // Below, at and above one block's threads and all the slot's
            // threads, and several strides of them.
            for n_links in [0, 1, t - 1, t, t + 1, b - 1, b, b + 1, 3 * b + 7] {
                let (k, f, links, start) = random_case(&mut rng, n_links, blocks_per_slot);
                let (got, partials) = reference(&k, &f, &links, &start);
                let what = format!("{n_links} links, {blocks_per_slot} blocks per slot");
                let plain = link_order(&f, &links, &start);
                for (g, p) in got.iter().zip(&plain) {
                    assert!((g - p).abs() <= 1e-12 * (1.0 + p.abs()), "{what}: {g} against {p}");
                }
                rounded += (bits(&got) != bits(&plain)) as usize;
                // Every block's partial is written, none left poisoned.
                assert!(
                    partials.iter().all(|w| !w.is_nan() || w.to_bits() >> 32 != 0x7ff8_0000),
                    "{what}"
                );
                // The table reversed, over one block per slot: the same bits.
                let reversed: Vec<u32> = links.chunks_exact(LINK_WORDS).rev().flatten().copied().collect();
                let one_block = AccumulateExchange {
                    blocks_per_slot: 1,
                    ..k.clone()
                };
                assert_eq!(
                    bits(&reference(&one_block, &f, &reversed, &start).0),
                    bits(&got),
                    "{what}"
                );
                // Each slot's links alone, as a slab that holds only that
                // body has them: that slot's bits.
                for slot in 0..N_SLOTS {
                    let own = own_links(&links, slot);
                    let alone = AccumulateExchange {
                        n_links: (own.len() / LINK_WORDS) as u32,
                        blocks_per_slot: super::blocks_per_slot(own.len() as u32 / LINK_WORDS as u32),
                        ..k.clone()
                    };
                    let words = slot as usize * EXCHANGE_WORDS..(slot as usize + 1) * EXCHANGE_WORDS;
                    assert_eq!(
                        bits(&reference(&alone, &f, &own, &start).0[words.clone()]),
                        bits(&got[words]),
                        "{what}: slot {slot} alone"
                    );
                }
                // The unused fourth word of every slot stays as it was.
                for slot in 0..N_SLOTS as usize {
                    assert_eq!(
                        got[slot * EXCHANGE_WORDS + 3],
                        start[slot * EXCHANGE_WORDS + 3],
                        "{what}"
                    );
                }
            }
        }
        assert!(
            rounded > 0,
            "the fixed-point sums never differed from f64 ones: this test shows nothing"
        );
    }

    #[test]
    fn a_non_finite_or_huge_contribution_makes_its_slots_sums_nan() {
        let mut rng = Rng(9);
        let (k, mut f, links, start) = random_case(&mut rng, 600, 1);
        let first = &links[..LINK_WORDS];
        let (cell, d, slot) = (first[0] as usize, (first[1] & 15) as usize, (first[1] >> 4) as usize);
        f[d * PLANE + cell] = f32::INFINITY;
        let (got, _) = reference(&k, &f, &links, &start);
        if slot < N_SLOTS as usize {
            // Fx or Fy, whichever the direction has, and the torque.
            assert!(got[slot * EXCHANGE_WORDS + 2].is_nan(), "{got:?}");
            assert_eq!(got[slot * EXCHANGE_WORDS + 2].to_bits(), NAN_BITS);
        }
        for other in (0..N_SLOTS as usize).filter(|s| *s != slot) {
            assert!(
                got[other * EXCHANGE_WORDS..other * EXCHANGE_WORDS + 3]
                    .iter()
                    .all(|v| v.is_finite())
            );
        }
    }

    #[test]
    fn fixed_point_is_exact_where_it_can_be_and_rounds_to_nearest_even() {
        let two64 = 2f64.powi(64);
        assert_eq!(to_fixed(1.5), Some((1.5 * two64) as i128));
        assert_eq!(to_fixed(-0.25), Some(-((0.25 * two64) as i128)));
        assert_eq!(to_fixed(0.0), Some(0));
        assert_eq!(to_fixed(-0.0), Some(0));
        assert_eq!(to_fixed(f64::MIN_POSITIVE / 4.0), Some(0));
        // Below 2^-64 a value truncates to zero; 2^-64 itself is one unit.
        assert_eq!(to_fixed(2f64.powi(-65)), Some(0));
        assert_eq!(to_fixed(2f64.powi(-64)), Some(1));
        assert_eq!(to_fixed(-3.0 * 2f64.powi(-65)), Some(-1));
        for refused in [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            2f64.powi(40),
            -2f64.powi(41),
        ] {
            assert_eq!(to_fixed(refused), None, "{refused}");
        }
        assert!(to_fixed(2f64.powi(40) * (1.0 - f64::EPSILON)).is_some());
        let mut rng = Rng(3);
        for _ in 0..10_000 {
            let sign = if rng.below(2) == 0 { -1.0 } else { 1.0 };
            let v = sign * rng.range(1.0, 2.0) * 2f64.powi(rng.below(50) as i32 - 11);
            // From 2^-11 on, v is a whole number of units: both ways exact.
            assert_eq!(from_fixed(to_fixed(v).unwrap()), v, "{v:e}");
            // Any i128 rounds as Rust's own correctly rounded conversion does.
            let x = (rng.next() as i128) << rng.below(62) ^ rng.next() as i128;
            assert_eq!(from_fixed(x).to_bits(), (x as f64 / two64).to_bits(), "{x}");
        }
        // Ties go to the even mantissa: 2^53 + 1 and 2^53 + 3 units.
        assert_eq!(from_fixed((1 << 53) + 1), 2f64.powi(53) / two64);
        assert_eq!(from_fixed((1 << 53) + 3), (2f64.powi(53) + 4.0) / two64);
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
