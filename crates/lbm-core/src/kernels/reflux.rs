//! `kernels/reflux.cu`: mass conservation across a coarse-fine interface.
//! `accumulate_fine_flux` measures what the fine level moves across the
//! interface in each fine hop; `correct_interface_mass` compares it with the
//! parent's flux over its hop and puts the difference back on the parent ring.
//! Launch structs and CPU references.
//!
//! What it does not do: any coupling of populations ([`super::refine`]).

use crate::device::{Arg, BLOCK_THREADS, BufferRef, Kernel, Launch};
use crate::domain::hierarchy::{GHOST, Layout, Rect};
use crate::domain::order::{fine_covered, ring_cell, ring_cells};
use crate::domain::sides::{PatchSide, is_interface};
use crate::error::{LaunchProblem, Result};
use crate::lattice::{C, OPP, Q, W};

use super::reduce::BlockSum;
use super::{
    ArgReader, BufferUse, ExactShape, HostViews, KernelArgs, check_layout, population_bytes, push_layout, push_rect,
};

/// `accumulate_fine_flux`: four threads per parent ring cell of a fine patch
/// (one per fine ghost cell of its 2x2 block), in blocks of [`BLOCK_THREADS`]
/// that gather the four's terms in shared memory. Adds a quarter of the mass
/// its ghost cells send into the active region minus the mass the active
/// region sends into them, for the coming fine hop.
#[derive(Clone, Debug, PartialEq)]
pub struct AccumulateFineFlux {
    /// Fine populations just after `fill_ghost`: ghost band and active region.
    pub fine: BufferRef,
    /// One f32 per ring cell, in [`ring_cell`] order.
    pub flux: BufferRef,
    pub layout: Layout,
    /// The fine patch's sides; the ring lies beyond its interfaces only.
    pub kinds: [PatchSide; 4],
}

/// Threads of [`AccumulateFineFlux`] per ring cell.
const FLUX_THREADS_PER_CELL: usize = 4;

impl AccumulateFineFlux {
    fn shape(&self) -> ExactShape {
        let threads = self.work_items() * FLUX_THREADS_PER_CELL;
        ExactShape::blocks(threads.div_ceil(BLOCK_THREADS as usize).max(1) as u32)
    }
}

impl KernelArgs for AccumulateFineFlux {
    const KERNEL: Kernel = Kernel::AccumulateFineFlux;
    const PARAMS: &'static [&'static str] = &["fine", "flux", "nx", "ny", "tile_x", "tile_y", "side_kinds"];

    fn launch(&self) -> Launch {
        let mut args = vec![self.fine.into(), self.flux.into()];
        push_layout(&mut args, &self.layout);
        args.push(Arg::U32(PatchSide::pack(self.kinds)));
        self.shape().launch(Self::KERNEL, args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        Ok(AccumulateFineFlux {
            fine: r.buffer()?,
            flux: r.buffer()?,
            layout: r.layout()?,
            kinds: r.side_kinds()?,
        })
    }

    fn work_items(&self) -> usize {
        ring_cells(&fine_covered(&self.layout), self.kinds)
    }

    /// A ring cell's four threads share a block.
    fn required_shape(&self) -> Option<ExactShape> {
        Some(self.shape())
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        check_layout("the fine patch", &self.layout)?;
        // The ring's ghost cells and their active neighbours lie inside the
        // allocation once both ghost bands fit.
        if self.layout.nx < 2 * GHOST || self.layout.ny < 2 * GHOST {
            return Err(LaunchProblem::Shape(format!(
                "the fine allocation {}x{} is smaller than its two ghost bands ({})",
                self.layout.nx,
                self.layout.ny,
                2 * GHOST
            )));
        }
        Ok(())
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![
            BufferUse::read("fine", self.fine, population_bytes(&self.layout), 4),
            BufferUse::read_write("flux", self.flux, self.work_items() * 4, 4),
        ]
    }

    fn run_on_host(&self, views: &mut HostViews) {
        accumulate_fine_flux(self, views.reads.get("fine"), views.writes.get("flux"));
    }
}

/// `correct_interface_mass`: one thread per parent ring cell, in blocks of
/// [`BLOCK_THREADS`]. The mass the parent exchanged with its covered cells over
/// its hop (from `coarse_t`) and the fine flux measured over the two fine hops
/// should cancel; their sum over the ring is taken out of the ring cells of
/// `coarse_t1` in equal shares, and the flux slots are zeroed. Each thread
/// leaves its cell's excess in its flux slot; the last block to arrive sums
/// the slots in the one-block order of `kernels::reduce` and applies the
/// share, so the result does not depend on how many blocks there are.
#[derive(Clone, Debug, PartialEq)]
pub struct CorrectInterfaceMass {
    pub coarse_t: BufferRef,
    pub coarse_t1: BufferRef,
    pub flux: BufferRef,
    /// [`REFLUX_ARRIVAL_WORDS`] u32: the blocks that have left their excess
    /// (zero between launches: the last block resets it), and the share the
    /// sum leaves for the apply (f32 bits).
    pub arrivals: BufferRef,
    pub coarse: Layout,
    /// Covered parent cells, parent allocation coordinates.
    pub covered: Rect,
    /// The fine patch's sides; the ring lies beyond its interfaces only.
    pub kinds: [PatchSide; 4],
    pub phase: RefluxPhase,
}

/// The words of `correct_interface_mass`'s arrival buffer.
pub const REFLUX_ARRIVAL_WORDS: usize = 2;

/// Which part of the correction a `correct_interface_mass` launch does: a
/// ring of one block, all of it; a longer one, the sum and then the apply
/// (one launch each), so that every block takes the share out of its own
/// cells instead of the last one taking it out of all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefluxPhase {
    /// The excess, the sum, the share taken out and the slots zeroed (one block).
    Whole = 0,
    /// The excess and the sum; the share left in the arrival buffer.
    Sum = 1,
    /// The share taken out of each ring cell and the slots zeroed.
    Apply = 2,
}

impl RefluxPhase {
    /// The launches, in order, that correct the ring around `covered`.
    pub fn of_ring(covered: &Rect, kinds: [PatchSide; 4]) -> &'static [RefluxPhase] {
        match ring_cells(covered, kinds) <= BLOCK_THREADS as usize {
            true => &[RefluxPhase::Whole],
            false => &[RefluxPhase::Sum, RefluxPhase::Apply],
        }
    }
}

impl KernelArgs for CorrectInterfaceMass {
    const KERNEL: Kernel = Kernel::CorrectInterfaceMass;
    const PARAMS: &'static [&'static str] = &[
        "coarse_t",
        "coarse_t1",
        "flux",
        "arrivals",
        "nx",
        "ny",
        "tile_x",
        "tile_y",
        "x0",
        "y0",
        "x1",
        "y1",
        "side_kinds",
        "phase",
    ];

    fn launch(&self) -> Launch {
        let mut args = vec![
            self.coarse_t.into(),
            self.coarse_t1.into(),
            self.flux.into(),
            self.arrivals.into(),
        ];
        push_layout(&mut args, &self.coarse);
        push_rect(&mut args, &self.covered);
        args.push(Arg::U32(PatchSide::pack(self.kinds)));
        args.push(Arg::U32(self.phase as u32));
        self.shape().launch(Kernel::CorrectInterfaceMass, args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        Ok(CorrectInterfaceMass {
            coarse_t: r.buffer()?,
            coarse_t1: r.buffer()?,
            flux: r.buffer()?,
            arrivals: r.buffer()?,
            coarse: r.layout()?,
            covered: r.rect()?,
            kinds: r.side_kinds()?,
            phase: match r.u32()? {
                0 => RefluxPhase::Whole,
                1 => RefluxPhase::Sum,
                2 => RefluxPhase::Apply,
                value => return Err(r.value_error("phase", value, "0 (whole), 1 (sum) or 2 (apply)")),
            },
        })
    }

    fn work_items(&self) -> usize {
        ring_cells(&self.covered, self.kinds)
    }

    /// The last block's reduction counts the blocks and is sized for blocks
    /// of exactly [`BLOCK_THREADS`].
    fn required_shape(&self) -> Option<ExactShape> {
        Some(self.shape())
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        check_layout("the parent", &self.coarse)?;
        let c = self.covered;
        // The ring lies one cell beyond each interface side.
        let room = |side: usize| is_interface(self.kinds, side) as u32;
        if c.x0 < room(0)
            || c.y0 < room(2)
            || c.x0 > c.x1
            || c.y0 > c.y1
            || c.x1 + room(1) > self.coarse.nx
            || c.y1 + room(3) > self.coarse.ny
        {
            return Err(LaunchProblem::Shape(format!(
                "the ring around {c} is not inside the {}x{} parent",
                self.coarse.nx, self.coarse.ny
            )));
        }
        let n_ring = ring_cells(&c, self.kinds);
        if self.phase == RefluxPhase::Whole && n_ring > BLOCK_THREADS as usize {
            return Err(LaunchProblem::Shape(format!(
                "a ring of {n_ring} cells takes more than one block: a sum and an apply, not one whole correction"
            )));
        }
        Ok(())
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        let f = population_bytes(&self.coarse);
        vec![
            BufferUse::read("coarse_t", self.coarse_t, f, 4),
            BufferUse::read_write("coarse_t1", self.coarse_t1, f, 4),
            BufferUse::read_write("flux", self.flux, ring_cells(&self.covered, self.kinds) * 4, 4),
            BufferUse::read_write("arrivals", self.arrivals, REFLUX_ARRIVAL_WORDS * 4, 4),
        ]
    }

    fn run_on_host(&self, views: &mut HostViews) {
        match self.phase {
            RefluxPhase::Whole => {
                let (t1, flux) = views.writes.get2("coarse_t1", "flux");
                let share = interface_share(self, views.reads.get("coarse_t"), flux);
                apply_interface_share(self, share, t1, flux);
            }
            RefluxPhase::Sum => {
                let share = interface_share(self, views.reads.get("coarse_t"), views.writes.get("flux"));
                views.writes.get::<f32>("arrivals")[1] = share;
            }
            RefluxPhase::Apply => {
                let share = views.writes.get::<f32>("arrivals")[1];
                let (t1, flux) = views.writes.get2("coarse_t1", "flux");
                apply_interface_share(self, share, t1, flux);
            }
        }
    }
}

impl CorrectInterfaceMass {
    /// One block per [`BLOCK_THREADS`] ring cells, at least one.
    fn shape(&self) -> ExactShape {
        let cells = ring_cells(&self.covered, self.kinds) as u32;
        ExactShape::blocks(cells.div_ceil(BLOCK_THREADS).max(1))
    }
}

/// Mass-flux bookkeeping of one fine hop at the coarse-fine interface.
///
/// For every ghost cell `g` of a ring cell and every direction `j` with
/// `g + c_j` active, the fine hop moves `f_j(g)` in and `f_opp(j)(g + c_j)` out;
/// a quarter (the fine cell's area in parent cells) of the difference is added
/// to the ring cell's slot. In and out directions pair up with equal weights, so
/// the shifted populations give the difference without cancellation error.
pub fn accumulate_fine_flux(k: &AccumulateFineFlux, fine: &[f32], flux: &mut [f32]) {
    let layout = k.layout;
    let plane = layout.plane_cells();
    let covered = fine_covered(&layout);
    let active = Rect::new(GHOST, GHOST, layout.nx - GHOST, layout.ny - GHOST);
    for (slot, value) in flux.iter_mut().enumerate().take(ring_cells(&covered, k.kinds)) {
        let (cx, cy) = ring_cell(&covered, k.kinds, slot);
        let mut net = 0.0f32;
        for (a, b) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            let (gx, gy) = (2 * cx + a, 2 * cy + b);
            let g = layout.index(gx, gy);
            for j in 1..Q {
                let (nx, ny) = (gx as i64 + C[j][0] as i64, gy as i64 + C[j][1] as i64);
                if nx < 0 || ny < 0 || !active.contains(nx as u32, ny as u32) {
                    continue;
                }
                let n = layout.index(nx as u32, ny as u32);
                net += fine[j * plane + g] - fine[OPP[j] * plane + n];
            }
        }
        *value += 0.25 * net;
    }
}

/// Reflux at the coarse-fine interface. Over the parent's hop, the mass the
/// parent moved between the ring and the covered cells (read from `t0`, the
/// post-collision state the hop pulled from) plus the fine flux of the two fine
/// hops is what the coupling created or lost. Its sum over the ring is taken out
/// of the ring cells of `t1` in equal shares, each spread over the populations in
/// proportion to the weights, which leaves momentum unchanged. Only the sum is
/// used: per cell, coarse and fine links attribute corner fluxes to different ring
/// cells, so a cell-by-cell correction would move mass along the ring even in a
/// uniform flow that the coupling already carries exactly. The sum is taken in
/// the kernel's order (`kernels::reduce`: the block's threads over strided
/// ring slots, then its tree), so the share is the kernel's bit for bit. The
/// flux slots are reset for the next hop ([`apply_interface_share`], in the
/// same launch or the next: [`RefluxPhase`]).
///
/// Here: each ring cell's excess, left in its flux slot as the kernel leaves
/// it, and the share of their sum per ring cell (0 without a ring).
fn interface_share(k: &CorrectInterfaceMass, t0: &[f32], flux: &mut [f32]) -> f32 {
    let layout = k.coarse;
    let plane = layout.plane_cells();
    let cov = k.covered;
    let n_ring = ring_cells(&cov, k.kinds);
    if n_ring == 0 {
        return 0.0;
    }
    let mut excess = BlockSum::<1>::new();
    for (slot, fine_flux) in flux.iter_mut().enumerate().take(n_ring) {
        let (x, y) = ring_cell(&cov, k.kinds, slot);
        let index = layout.index(x, y);
        let mut coarse_net = 0.0f32;
        for j in 1..Q {
            let (nx, ny) = (x as i64 + C[j][0] as i64, y as i64 + C[j][1] as i64);
            if nx < 0 || ny < 0 || !cov.contains(nx as u32, ny as u32) {
                continue;
            }
            let n = layout.index(nx as u32, ny as u32);
            coarse_net += t0[OPP[j] * plane + n] - t0[j * plane + index];
        }
        *fine_flux += coarse_net;
        excess.add(slot, [*fine_flux as f64]);
    }
    let [excess] = excess.total();
    (excess / n_ring as f64) as f32
}

/// `share` taken out of every ring cell of `t1`, spread over the populations
/// by weight, and the flux slots zeroed.
fn apply_interface_share(k: &CorrectInterfaceMass, share: f32, t1: &mut [f32], flux: &mut [f32]) {
    let layout = k.coarse;
    let plane = layout.plane_cells();
    let n_ring = ring_cells(&k.covered, k.kinds);
    for (slot, fine_flux) in flux.iter_mut().enumerate().take(n_ring) {
        let (x, y) = ring_cell(&k.covered, k.kinds, slot);
        let index = layout.index(x, y);
        for (i, w) in W.iter().enumerate() {
            t1[i * plane + index] -= share * w;
        }
        *fine_flux = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::BufferId;

    /// Every phase comes back from its launch; any other value of `phase`
    /// is refused, naming the parameter and what it accepts.
    #[test]
    fn the_phase_round_trips_and_anything_else_is_refused() {
        let buffer = |id| BufferRef::from(BufferId(id));
        let k = CorrectInterfaceMass {
            coarse_t: buffer(0),
            coarse_t1: buffer(1),
            flux: buffer(2),
            arrivals: buffer(3),
            coarse: Layout {
                nx: 40,
                ny: 40,
                tile: [40, 40],
            },
            covered: Rect::new(10, 10, 30, 30),
            kinds: [PatchSide::Interface; 4],
            phase: RefluxPhase::Whole,
        };
        for phase in [RefluxPhase::Whole, RefluxPhase::Sum, RefluxPhase::Apply] {
            let k = CorrectInterfaceMass { phase, ..k.clone() };
            assert_eq!(CorrectInterfaceMass::decode(&k.launch()).unwrap(), k);
        }
        let mut launch = k.launch();
        *launch.args.last_mut().expect("the phase is the last argument") = Arg::U32(3);
        let message = CorrectInterfaceMass::decode(&launch).unwrap_err().to_string();
        assert!(
            message.contains("phase") && message.contains("0 (whole), 1 (sum) or 2 (apply)"),
            "{message}"
        );
    }
}
