//! `kernels/moments.cu`: `save_moments`, a patch's density and velocity into
//! a staging buffer: what the outputs need of a save point, computed on the
//! device so that only three values per cell leave it. Launch struct and CPU
//! reference; `Stepper::fields` computes its downloads with the same
//! reference, so both ways give the same bits.
//!
//! What it does not do: read the flags (every cell is written, solid ones
//! too) or convert to physical units.

use rayon::prelude::*;

use crate::device::{Arg, BufferRef, Kernel, Launch};
use crate::domain::hierarchy::{Layout, Rect};
use crate::error::{LaunchProblem, Result};
use crate::kernels::host::BAND_CELLS;
use crate::lattice;

use super::{
    ArgReader, BufferUse, HostViews, KernelArgs, check_patch, population_bytes, push_layout, push_rect, read_cell,
};

/// f32 values per active cell in the output: delta_rho, ux, uy, each a plane
/// of the active region in row-major order (x fastest).
pub const MOMENT_PLANES: usize = 3;

/// `save_moments`: one thread per active cell.
#[derive(Clone, Debug, PartialEq)]
pub struct SaveMoments {
    /// The patch's current populations (shifted, `f_i - w_i`).
    pub f: BufferRef,
    /// [`MOMENT_PLANES`] planes of `active.cells()` f32.
    pub out: BufferRef,
    pub layout: Layout,
    pub active: Rect,
    /// The level's body-force density: the stored populations carry half of
    /// it in their momentum, which the velocity gives back.
    pub force: [f32; 2],
}

impl SaveMoments {
    /// Bytes the output takes for `active`.
    pub fn out_bytes(active: &Rect) -> usize {
        MOMENT_PLANES * active.cells() * 4
    }
}

impl KernelArgs for SaveMoments {
    const KERNEL: Kernel = Kernel::SaveMoments;
    const PARAMS: &'static [&'static str] = &[
        "f", "out", "nx", "ny", "tile_x", "tile_y", "x0", "y0", "x1", "y1", "force_x", "force_y",
    ];

    fn launch(&self) -> Launch {
        let mut args = vec![self.f.into(), self.out.into()];
        push_layout(&mut args, &self.layout);
        push_rect(&mut args, &self.active);
        args.extend([Arg::F32(self.force[0]), Arg::F32(self.force[1])]);
        Launch::linear(Kernel::SaveMoments, self.active.cells(), args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        Ok(SaveMoments {
            f: r.buffer()?,
            out: r.buffer()?,
            layout: r.layout()?,
            active: r.rect()?,
            force: [r.f32()?, r.f32()?],
        })
    }

    fn work_items(&self) -> usize {
        self.active.cells()
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        check_patch(&self.layout, &self.active)
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![
            BufferUse::read("f", self.f, population_bytes(&self.layout), 4),
            BufferUse::write("out", self.out, Self::out_bytes(&self.active), 4),
        ]
    }

    fn run_on_host(&self, views: &mut HostViews) {
        let f = views.reads.get("f");
        active_moments(&self.layout, &self.active, self.force, f, views.writes.get("out"));
    }
}

/// The moments of every cell of `active` in `f` (laid out by `layout`) into
/// `out`'s three planes, as `save_moments` computes them; `force` is the
/// level's body-force density.
pub fn active_moments(layout: &Layout, active: &Rect, force: [f32; 2], f: &[f32], out: &mut [f32]) {
    let (layout, a) = (*layout, *active);
    let plane = layout.plane_cells();
    let cells = a.cells();
    let width = a.width() as usize;
    let (rho, rest) = out[..MOMENT_PLANES * cells].split_at_mut(cells);
    let (ux, uy) = rest.split_at_mut(cells);
    // A point probe's few cells on the calling thread: handing them to the
    // pool from outside it costs two thread switches per launch, and a run
    // with 50 probes sampled every interval spent 94% of its time waiting
    // on them.
    let min_rows = (BAND_CELLS as usize).div_ceil(width.max(1));
    let rows = rho
        .par_chunks_mut(width.max(1))
        .zip(ux.par_chunks_mut(width.max(1)))
        .zip(uy.par_chunks_mut(width.max(1)))
        .with_min_len(min_rows);
    rows.enumerate().for_each(|(row, ((rho, ux), uy))| {
        let y = a.y0 + row as u32;
        for x in a.x0..a.x1 {
            let m = lattice::moments(&read_cell(f, plane, layout.index(x, y)), [-force[0], -force[1]]);
            let i = (x - a.x0) as usize;
            (rho[i], ux[i], uy[i]) = (m.delta_rho, m.ux, m.uy);
        }
    });
}
