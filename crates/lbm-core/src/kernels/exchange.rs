//! `kernels/exchange.cu`: `accumulate_exchange`, the momentum exchange on
//! body links of one patch, added to the interval and window integrals of its
//! level. Launch struct and CPU reference.
//!
//! What it does not do: zero the integrals (the plan's memsets) or turn them
//! into forces (the stepper's exchange ledgers).

use crate::device::{Arg, BufferRef, Kernel, Launch};
use crate::domain::geometry::{LINK_WORDS, NO_CELL};
use crate::error::{LaunchProblem, Result};
use crate::lattice::{C, OPP, Q, W};

use super::lbm::bouzidi;
use super::{ArgReader, BufferUse, HostViews, KernelArgs};

/// f64 words per body in an exchange accumulator: Fx, Fy, torque, unused.
pub const EXCHANGE_WORDS: usize = 4;

/// `accumulate_exchange`: one thread per body link. The exchange of the
/// streaming that leaves `f`: each link gives the body `c_d (f*_d + f_in)`
/// (real populations), `f_in` being the population the wall rule returns.
#[derive(Clone, Debug, PartialEq)]
pub struct AccumulateExchange {
    /// Post-collision populations of the body's patch before the hop's streaming.
    pub f: BufferRef,
    pub plane_cells: u32,
    /// [`LINK_WORDS`] u32 per link, from [`crate::domain::geometry::wall_tables`].
    pub links: BufferRef,
    pub n_links: u32,
    /// [`EXCHANGE_WORDS`] f64 per body of the level.
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
            self.interval.into(),
            self.window.into(),
            Arg::U32(self.window.is_some() as u32),
        ];
        Launch::linear(Kernel::AccumulateExchange, self.n_links as usize, args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        let decoded = AccumulateExchange {
            f: r.buffer()?,
            plane_cells: r.u32()?,
            links: r.buffer()?,
            n_links: r.u32()?,
            interval: r.buffer()?,
            window: r.optional_buffer()?,
        };
        r.presence("window_on", decoded.window.is_some())?;
        Ok(decoded)
    }

    fn work_items(&self) -> usize {
        self.n_links as usize
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        Ok(())
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        // The body slots are in the links; one body's words is what any link
        // table needs at least.
        let one_body = if self.n_links > 0 { EXCHANGE_WORDS * 8 } else { 0 };
        let mut uses = vec![
            BufferUse::read("f", self.f, Q * self.plane_cells as usize * 4, 4),
            BufferUse::read("links", self.links, LINK_WORDS * self.n_links as usize * 4, 4),
            BufferUse::read_write("interval", self.interval, one_body, 8),
        ];
        if let Some(window) = self.window {
            uses.push(BufferUse::read_write("window", window, one_body, 8));
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

/// Momentum exchange on body links for the streaming that leaves `f`: a link
/// from a fluid cell along `d` into the body gives it `c_d (f*_d + f_in)` in
/// real populations, `f_in` being what [`bouzidi`] returns along `-d` (the
/// stationary-wall form of the Galilean-invariant exchange). Torque is taken
/// about the body centre with the lever arm in the table. Sums run in link
/// order so the result is reproducible.
pub fn accumulate_exchange(
    k: &AccumulateExchange,
    f: &[f32],
    links: &[u32],
    interval: &mut [f64],
    mut window: Option<&mut [f64]>,
) {
    let plane = k.plane_cells as usize;
    for link in links.chunks_exact(LINK_WORDS).take(k.n_links as usize) {
        let cell = link[0] as usize;
        let d = (link[1] & 15) as usize;
        let body = (link[1] >> 4) as usize;
        let (rx, ry) = (f32::from_bits(link[2]) as f64, f32::from_bits(link[3]) as f64);
        let q = f32::from_bits(link[4]);
        let behind = (link[5] != NO_CELL).then_some(link[5] as usize);
        let returned = bouzidi(f, plane, cell, behind, OPP[d], q);
        let both = (f[d * plane + cell] + returned + 2.0 * W[d]) as f64;
        let fx = C[d][0] as f64 * both;
        let fy = C[d][1] as f64 * both;
        let contribution = [fx, fy, rx * fy - ry * fx];
        let base = body * EXCHANGE_WORDS;
        for (slot, value) in interval[base..base + 3].iter_mut().zip(contribution) {
            *slot += value;
        }
        if let Some(w) = window.as_deref_mut() {
            for (slot, value) in w[base..base + 3].iter_mut().zip(contribution) {
                *slot += value;
            }
        }
    }
}
