//! `kernels/exchange.cu`: `accumulate_exchange`, the momentum exchange on
//! body links of one patch, added to the interval and window integrals of its
//! level. Launch struct and CPU reference.
//!
//! The sums are deterministic and the kernel's bit for bit: one block per body
//! slot sums that slot's links in the fixed order of `kernels::reduce`, and
//! the reference mirrors it. What it does not do: zero the integrals (the
//! plan's memsets) or turn them into forces (the stepper's exchange ledgers).

use crate::device::{Arg, BLOCK_THREADS, BufferRef, Kernel, Launch};
use crate::domain::geometry::{LINK_WORDS, NO_CELL};
use crate::error::{LaunchProblem, Result};
use crate::lattice::{C, OPP, Q, W};

use super::lbm::bouzidi;
use super::reduce::BlockSum;
use super::{ArgReader, BufferUse, ExactShape, HostViews, KernelArgs};

/// f64 words per body in an exchange accumulator: Fx, Fy, torque, unused.
pub const EXCHANGE_WORDS: usize = 4;

/// Body slots one level may have: a link names its slot in the 28 bits of its
/// second word above the direction.
pub const MAX_BODY_SLOTS: u32 = 1 << 28;

/// `accumulate_exchange`: one block of [`BLOCK_THREADS`] threads per body
/// slot, each block striding over every link and summing those of its slot.
/// The exchange of the streaming that leaves `f`: each link gives the body
/// `c_d (f*_d + f_in)` (real populations), `f_in` being the population the
/// wall rule returns.
#[derive(Clone, Debug, PartialEq)]
pub struct AccumulateExchange {
    /// Post-collision populations of the body's patch before the hop's streaming.
    pub f: BufferRef,
    pub plane_cells: u32,
    /// [`LINK_WORDS`] u32 per link, from [`crate::domain::geometry::wall_tables`].
    pub links: BufferRef,
    pub n_links: u32,
    /// Body slots of the level: the accumulators' length in [`EXCHANGE_WORDS`]
    /// and the launch's blocks.
    pub n_slots: u32,
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
            interval: r.buffer()?,
            window: r.optional_buffer()?,
        };
        r.presence("window_on", decoded.window.is_some())?;
        Ok(decoded)
    }

    fn work_items(&self) -> usize {
        self.n_slots as usize * BLOCK_THREADS as usize
    }

    /// Each block sums one slot in shared memory sized for its block.
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
        Ok(())
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        // Every block adds its slot's total, links or none.
        let slots = self.n_slots as usize * EXCHANGE_WORDS * 8;
        let mut uses = vec![
            BufferUse::read("f", self.f, Q * self.plane_cells as usize * 4, 4),
            BufferUse::read("links", self.links, LINK_WORDS * self.n_links as usize * 4, 4),
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
        match self.window {
            Some(_) => {
                let (interval, window) = views.writes.get2("interval", "window");
                accumulate_exchange(self, f, links, interval, Some(window));
            }
            None => accumulate_exchange(self, f, links, views.writes.get("interval"), None),
        }
    }
}

impl AccumulateExchange {
    /// One block per body slot.
    fn shape(&self) -> ExactShape {
        ExactShape { blocks: self.n_slots }
    }
}

/// Momentum exchange on body links for the streaming that leaves `f`: a link
/// from a fluid cell along `d` into the body gives it `c_d (f*_d + f_in)` in
/// real populations, `f_in` being what [`bouzidi`] returns along `-d` (the
/// stationary-wall form of the Galilean-invariant exchange). Torque is taken
/// about the body centre with the lever arm in the table.
///
/// The sums follow the kernel: slot `s` is block `s`, whose thread `t` sums
/// the contributions of the links of slot `s` among links `t`, `t + T`,
/// `t + 2T`, ... (T = [`BLOCK_THREADS`]) in that order; the block's tree of
/// `kernels::reduce` combines the threads' sums, and the total is added once
/// to the slot's interval words and, while a window is observed, to its window
/// words. So the result depends on nothing but `f`, the link table and the
/// accumulators, bit for bit on every backend and run. A link naming a slot
/// of `n_slots` or more contributes nothing, as no block takes it.
pub fn accumulate_exchange(
    k: &AccumulateExchange,
    f: &[f32],
    links: &[u32],
    interval: &mut [f64],
    mut window: Option<&mut [f64]>,
) {
    let plane = k.plane_cells as usize;
    let mut sums: Vec<BlockSum<3>> = (0..k.n_slots).map(|_| BlockSum::new()).collect();
    for (item, link) in links.chunks_exact(LINK_WORDS).take(k.n_links as usize).enumerate() {
        if let Some(sum) = sums.get_mut((link[1] >> 4) as usize) {
            sum.add(item, link_exchange(f, plane, link));
        }
    }
    for (slot, sum) in sums.into_iter().enumerate() {
        let total = sum.total();
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
    fn random_case(rng: &mut Rng, n_links: u32) -> (AccumulateExchange, Vec<f32>, Vec<u32>, Vec<f64>) {
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
            interval: BufferId(2).into(),
            window: Some(BufferId(3).into()),
        };
        (k, f, links, start)
    }

    /// The reference on `start` for both accumulators, which must agree.
    fn reference(k: &AccumulateExchange, f: &[f32], links: &[u32], start: &[f64]) -> Vec<f64> {
        let (mut interval, mut window) = (start.to_vec(), start.to_vec());
        accumulate_exchange(k, f, links, &mut interval, Some(&mut window));
        assert_eq!(bits(&interval), bits(&window), "the window gets what the interval gets");
        interval
    }

    fn bits(words: &[f64]) -> Vec<u64> {
        words.iter().map(|w| w.to_bits()).collect()
    }

    /// The kernel's order written out as the kernel runs it: block `slot`,
    /// thread `t` summing links `t + i T` of its slot, then the tree.
    fn kernel_order(f: &[f32], links: &[u32], start: &[f64]) -> Vec<f64> {
        let threads = BLOCK_THREADS as usize;
        let n_links = links.len() / LINK_WORDS;
        let mut out = start.to_vec();
        for slot in 0..N_SLOTS as usize {
            // Fx, Fy and torque of every thread, as in the kernel's shared memory.
            let mut partial = [vec![0.0f64; threads], vec![0.0f64; threads], vec![0.0f64; threads]];
            for t in 0..threads {
                let mut link = t;
                while link < n_links {
                    let words = &links[link * LINK_WORDS..(link + 1) * LINK_WORDS];
                    if (words[1] >> 4) as usize == slot {
                        for (p, value) in partial.iter_mut().zip(link_exchange(f, PLANE, words)) {
                            p[t] += value;
                        }
                    }
                    link += threads;
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
            for (j, p) in partial.iter().enumerate() {
                out[slot * EXCHANGE_WORDS + j] += p[0];
            }
        }
        out
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
        for n_links in [0, 1, 255, 256, 257, 3000] {
            let (k, f, links, start) = random_case(&mut rng, n_links);
            let got = reference(&k, &f, &links, &start);
            let what = format!("{n_links} links");
            assert_eq!(bits(&got), bits(&kernel_order(&f, &links, &start)), "{what}");
            let plain = link_order(&f, &links, &start);
            for (g, p) in got.iter().zip(&plain) {
                assert!((g - p).abs() <= 1e-12 * (1.0 + p.abs()), "{what}: {g} against {p}");
            }
            reordered += (bits(&got) != bits(&plain)) as usize;
            // The unused fourth word of every slot stays as it was.
            for slot in 0..N_SLOTS as usize {
                assert_eq!(
                    got[slot * EXCHANGE_WORDS + 3],
                    start[slot * EXCHANGE_WORDS + 3],
                    "{what}"
                );
            }
            // The table alone decides: the same inputs give the same bits again.
            assert_eq!(bits(&got), bits(&reference(&k, &f, &links, &start)), "{what}");
        }
        assert!(reordered > 0, "the order never mattered, so this test shows nothing");
    }
}
