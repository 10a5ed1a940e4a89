//! `kernels/refine.cu`: the coupling between a refined patch and its parent.
//! `fill_ghost` (coarse to fine: the ghost band from the parent, in space and
//! time) and `restrict_to_parent` (fine to coarse: the parent cells a patch
//! covers), their launch structs and CPU references.
//!
//! What it does not do: correct the mass the coupling creates or loses
//! ([`super::reflux`]).

use crate::device::{Arg, BLOCK_THREADS, BufferRef, Kernel, Launch};
use crate::domain::hierarchy::{GHOST, Layout, Rect};
use crate::domain::order::inner_band_cells;
use crate::domain::sides::{PatchSides, beyond_wall, mirrored_cell, reflect_crossed};
use crate::error::{LaunchProblem, Result};
use rayon::prelude::*;

use crate::lattice::{self, Moments, Q};

use super::{
    ArgReader, BufferUse, ExactShape, HostViews, KernelArgs, check_layout, par_row_bands, population_bytes,
    push_layout, push_rect, push_sides, read_cell,
};

/// `fill_ghost`: one thread per ghost-band cell of the fine patch, one block
/// per run of [`FILL_RUN`] cells along a side, [`GHOST`] deep. Band cells
/// beyond a wall side are left as they are; nothing reads them.
#[derive(Clone, Debug, PartialEq)]
pub struct FillGhost {
    /// Parent populations at the start of its hop (time t).
    pub coarse_t: BufferRef,
    /// Parent populations at the end of its hop (time t + 1).
    pub coarse_t1: BufferRef,
    pub fine_dst: BufferRef,
    pub coarse: Layout,
    /// The parent's active region: stencil cells beyond its sides that are the
    /// domain's walls are read as mirror images (see `sides`).
    pub coarse_active: Rect,
    pub fine: Layout,
    /// Parent allocation coordinates of the parent cell under the fine active
    /// region's lower-left corner.
    pub active_offset: [u32; 2],
    /// The parent's sides as the stencil sees them: walls where the fine patch
    /// touches the domain's boundary, interfaces elsewhere (never reached).
    pub sides: PatchSides,
    /// Weight of `coarse_t1` in the time interpolation (0 or 1/2).
    pub alpha: f32,
    /// The fine level's relaxation times τ⁺ and τ⁻.
    pub tau_plus: f32,
    pub tau_minus: f32,
    /// Body-force density on the parent level, lattice units of the parent.
    pub coarse_force: [f32; 2],
}

impl KernelArgs for FillGhost {
    const KERNEL: Kernel = Kernel::FillGhost;
    const PARAMS: &'static [&'static str] = &[
        "coarse_t",
        "coarse_t1",
        "fine_dst",
        "coarse_nx",
        "coarse_ny",
        "coarse_tile_x",
        "coarse_tile_y",
        "coarse_active_x0",
        "coarse_active_y0",
        "coarse_active_x1",
        "coarse_active_y1",
        "fine_nx",
        "fine_ny",
        "fine_tile_x",
        "fine_tile_y",
        "active_offset_x",
        "active_offset_y",
        "side_kinds",
        "tangential_x_min",
        "tangential_x_max",
        "tangential_y_min",
        "tangential_y_max",
        "alpha",
        "tau_plus",
        "tau_minus",
        "coarse_force_x",
        "coarse_force_y",
    ];

    fn launch(&self) -> Launch {
        let mut args = vec![self.coarse_t.into(), self.coarse_t1.into(), self.fine_dst.into()];
        push_layout(&mut args, &self.coarse);
        push_rect(&mut args, &self.coarse_active);
        push_layout(&mut args, &self.fine);
        args.extend([Arg::U32(self.active_offset[0]), Arg::U32(self.active_offset[1])]);
        push_sides(&mut args, &self.sides);
        args.extend([
            Arg::F32(self.alpha),
            Arg::F32(self.tau_plus),
            Arg::F32(self.tau_minus),
            Arg::F32(self.coarse_force[0]),
            Arg::F32(self.coarse_force[1]),
        ]);
        self.shape().launch(Kernel::FillGhost, args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        Ok(FillGhost {
            coarse_t: r.buffer()?,
            coarse_t1: r.buffer()?,
            fine_dst: r.buffer()?,
            coarse: r.layout()?,
            coarse_active: r.rect()?,
            fine: r.layout()?,
            active_offset: [r.u32()?, r.u32()?],
            sides: r.patch_sides()?,
            alpha: r.f32()?,
            tau_plus: r.f32()?,
            tau_minus: r.f32()?,
            coarse_force: [r.f32()?, r.f32()?],
        })
    }

    fn work_items(&self) -> usize {
        inner_band_cells(&self.fine)
    }

    /// The kernel maps each block onto one run of a side.
    fn required_shape(&self) -> Option<ExactShape> {
        Some(self.shape())
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        check_layout("the parent", &self.coarse)?;
        check_layout("the fine patch", &self.fine)?;
        if self.fine.nx < 2 * GHOST || self.fine.ny < 2 * GHOST {
            return Err(LaunchProblem::Shape(format!(
                "the fine allocation {}x{} is smaller than its two ghost bands ({})",
                self.fine.nx,
                self.fine.ny,
                2 * GHOST
            )));
        }
        let a = self.coarse_active;
        if a.x0 >= a.x1 || a.y0 >= a.y1 || a.x1 > self.coarse.nx || a.y1 > self.coarse.ny {
            return Err(LaunchProblem::Shape(format!(
                "the parent's active region {a} is not inside its {}x{} allocation",
                self.coarse.nx, self.coarse.ny
            )));
        }
        // The parent stencil of band cell (fx, fy) spans floor(p) - 1 ..= floor(p) + 2
        // with p as the kernel computes it; p grows with fx, so the corners bound
        // it. Beyond a wall side the kernel reads the mirror image instead, so
        // the cells read are the mirrored range's.
        for (axis, (offset, fine_n, coarse_n, lo, hi)) in [
            (self.active_offset[0], self.fine.nx, self.coarse.nx, a.x0, a.x1),
            (self.active_offset[1], self.fine.ny, self.coarse.ny, a.y0, a.y1),
        ]
        .into_iter()
        .enumerate()
        {
            let start = offset as i64 - (GHOST / 2) as i64;
            let first = parent_floor(start, 0) - 1;
            let last = parent_floor(start, fine_n - 1) + 2;
            let walls = [2 * axis, 2 * axis + 1].map(|side| !self.sides.is_interface(side));
            let (lo, hi) = (lo as i64, hi as i64);
            let mirrored = |c: i64| match c {
                c if c < lo && walls[0] => 2 * lo - 1 - c,
                c if c >= hi && walls[1] => 2 * hi - 1 - c,
                c => c,
            };
            // The mirror map is monotone between these breakpoints.
            let read: Vec<i64> = [first, last, lo - 1, lo, hi - 1, hi]
                .into_iter()
                .filter(|c| (first..=last).contains(c))
                .map(mirrored)
                .collect();
            let (min, max) = (read.iter().min(), read.iter().max());
            if min
                .zip(max)
                .is_none_or(|(&min, &max)| min < 0 || max >= coarse_n as i64)
            {
                return Err(LaunchProblem::Shape(format!(
                    "active offset {offset} on axis {axis}: the parent stencil needs cells {first} to {last} \
                     of {coarse_n} (mirrored beyond wall sides)"
                )));
            }
        }
        Ok(())
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        let coarse = population_bytes(&self.coarse);
        vec![
            BufferUse::read("coarse_t", self.coarse_t, coarse, 4),
            BufferUse::read("coarse_t1", self.coarse_t1, coarse, 4),
            BufferUse::read_write("fine_dst", self.fine_dst, population_bytes(&self.fine), 4),
        ]
    }

    fn run_on_host(&self, views: &mut HostViews) {
        let r = &views.reads;
        fill_ghost(
            self,
            r.get("coarse_t"),
            r.get("coarse_t1"),
            views.writes.get("fine_dst"),
        );
    }
}

/// Inner-layer cells along one side of a `fill_ghost` block, one block of
/// [`BLOCK_THREADS`] threads. The block shares the parent moments its run's
/// stencils read, each computed once instead of by each of the up to eight
/// cells whose stencil reaches it.
pub const FILL_RUN: u32 = BLOCK_THREADS;

impl FillGhost {
    /// One block per run: the inner layer's bottom row's runs along x, its
    /// top row's, then its left and right columns' along y between the rows
    /// (the order kernels/refine.cu reads from the block index).
    fn shape(&self) -> ExactShape {
        let row_runs = (self.fine.nx + 2).saturating_sub(2 * GHOST).div_ceil(FILL_RUN);
        let column_runs = self.fine.ny.saturating_sub(2 * GHOST).div_ceil(FILL_RUN);
        ExactShape::blocks(2 * row_runs + 2 * column_runs)
    }
}

/// `floor(p)` of fine cell `f` in `fill_ghost`, in the kernel's f32 arithmetic.
fn parent_floor(start: i64, f: u32) -> i64 {
    (start as f32 + (f as f32 + 0.5) * 0.5 - 0.5).floor() as i64
}

/// Covered parent cells per side of one `restrict_to_parent` block's tile:
/// [`BLOCK_THREADS`] = 16², one thread per parent cell.
pub const RESTRICT_TILE: u32 = 16;
const _: () = assert!(RESTRICT_TILE * RESTRICT_TILE == BLOCK_THREADS);

/// `restrict_to_parent`: a block per tile of [`RESTRICT_TILE`]² covered
/// parent cells (but the tiles wholly inside the hole), one thread per cell;
/// the block shares its fine cells' moments.
#[derive(Clone, Debug, PartialEq)]
pub struct RestrictToParent {
    pub fine_src: BufferRef,
    pub coarse_dst: BufferRef,
    pub fine: Layout,
    pub coarse: Layout,
    /// The parent cells the fine active region covers, parent allocation coordinates.
    pub covered: Rect,
    /// The covered cells left as they are, parent allocation coordinates
    /// (empty for none): during a step, the deep cells that nothing reads
    /// (`crate::schedule::plan::restriction_holes`).
    pub hole: Rect,
    /// Fine allocation coordinates of the first active cell (the ghost width).
    pub fine_active_origin: u32,
    /// The fine patch's sides: its stencil reads mirror images of fine active
    /// cells beyond a wall side, and the ghost band beyond an interface.
    pub sides: PatchSides,
    /// The parent level's relaxation times τ⁺ and τ⁻.
    pub tau_plus: f32,
    pub tau_minus: f32,
    pub coarse_force: [f32; 2],
}

impl KernelArgs for RestrictToParent {
    const KERNEL: Kernel = Kernel::RestrictToParent;
    const PARAMS: &'static [&'static str] = &[
        "fine_src",
        "coarse_dst",
        "fine_nx",
        "fine_ny",
        "fine_tile_x",
        "fine_tile_y",
        "coarse_nx",
        "coarse_ny",
        "coarse_tile_x",
        "coarse_tile_y",
        "covered_x0",
        "covered_y0",
        "covered_x1",
        "covered_y1",
        "hole_x0",
        "hole_y0",
        "hole_x1",
        "hole_y1",
        "fine_active_origin",
        "side_kinds",
        "tangential_x_min",
        "tangential_x_max",
        "tangential_y_min",
        "tangential_y_max",
        "tau_plus",
        "tau_minus",
        "coarse_force_x",
        "coarse_force_y",
    ];

    fn launch(&self) -> Launch {
        let mut args = vec![self.fine_src.into(), self.coarse_dst.into()];
        push_layout(&mut args, &self.fine);
        push_layout(&mut args, &self.coarse);
        push_rect(&mut args, &self.covered);
        push_rect(&mut args, &self.hole);
        args.push(Arg::U32(self.fine_active_origin));
        push_sides(&mut args, &self.sides);
        args.extend([
            Arg::F32(self.tau_plus),
            Arg::F32(self.tau_minus),
            Arg::F32(self.coarse_force[0]),
            Arg::F32(self.coarse_force[1]),
        ]);
        self.shape().launch(Kernel::RestrictToParent, args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        Ok(RestrictToParent {
            fine_src: r.buffer()?,
            coarse_dst: r.buffer()?,
            fine: r.layout()?,
            coarse: r.layout()?,
            covered: r.rect()?,
            hole: r.rect()?,
            fine_active_origin: r.u32()?,
            sides: r.patch_sides()?,
            tau_plus: r.f32()?,
            tau_minus: r.f32()?,
            coarse_force: [r.f32()?, r.f32()?],
        })
    }

    /// The covered cells outside the hole (a hole is empty or inside the
    /// covered region: `check_shape`).
    fn work_items(&self) -> usize {
        self.covered.cells().saturating_sub(self.hole.cells())
    }

    /// The kernel maps its grid onto the tiles of the covered region outside the hole.
    fn required_shape(&self) -> Option<ExactShape> {
        Some(self.shape())
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        check_layout("the fine patch", &self.fine)?;
        check_layout("the parent", &self.coarse)?;
        let c = self.covered;
        if c.x0 > c.x1 || c.y0 > c.y1 || c.x1 > self.coarse.nx || c.y1 > self.coarse.ny {
            return Err(LaunchProblem::Shape(format!(
                "covered region {c} is not inside the {}x{} parent",
                self.coarse.nx, self.coarse.ny
            )));
        }
        let h = self.hole;
        // The empty hole, or one inside the covered region (whose tiles the
        // grid leaves out).
        if h != Rect::default() && (h.x0 < c.x0 || h.y0 < c.y0 || h.x1 > c.x1 || h.y1 > c.y1) {
            return Err(LaunchProblem::Shape(format!(
                "hole {h} is neither empty (0, 0, 0, 0) nor inside the covered region {c}"
            )));
        }
        let reach = |n: u32| self.fine_active_origin as u64 + 2 * n as u64;
        if reach(c.width()) > self.fine.nx as u64 || reach(c.height()) > self.fine.ny as u64 {
            return Err(LaunchProblem::Shape(format!(
                "covered region {c} from fine cell {} reaches past the {}x{} fine allocation",
                self.fine_active_origin, self.fine.nx, self.fine.ny
            )));
        }
        Ok(())
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![
            BufferUse::read("fine_src", self.fine_src, population_bytes(&self.fine), 4),
            BufferUse::read_write("coarse_dst", self.coarse_dst, population_bytes(&self.coarse), 4),
        ]
    }

    fn run_on_host(&self, views: &mut HostViews) {
        restrict_to_parent(self, views.reads.get("fine_src"), views.writes.get("coarse_dst"));
    }
}

impl RestrictToParent {
    /// One block per tile of the covered region (at least one each way)
    /// but those wholly inside the hole, at least one block (an empty
    /// region's, or one wholly inside its hole, has nothing to do).
    fn shape(&self) -> ExactShape {
        let (c, h) = (self.covered, self.hole);
        let tiles = |n: u32| n.div_ceil(RESTRICT_TILE).max(1);
        let (tx, ty) = (tiles(c.width()), tiles(c.height()));
        let [x0, x1] = inner_tiles(c.x0, c.x1, h.x0, h.x1, tx);
        let [y0, y1] = inner_tiles(c.y0, c.y1, h.y0, h.y1, ty);
        ExactShape {
            grid: [(tx * ty - (x1 - x0) * (y1 - y0)).max(1), 1, 1],
            block: [BLOCK_THREADS, 1, 1],
        }
    }
}

/// The tiles `[first, last)` of [`RESTRICT_TILE`] cells over `[c0, c1)`
/// (`tiles` of them) that lie wholly inside the hole's `[h0, h1)`, the last
/// one (perhaps partial) where the hole reaches `c1`; `[0, 0)` for none.
fn inner_tiles(c0: u32, c1: u32, h0: u32, h1: u32, tiles: u32) -> [u32; 2] {
    if h1 <= h0 {
        return [0, 0];
    }
    let first = (h0 - c0).div_ceil(RESTRICT_TILE);
    let last = if h1 == c1 { tiles } else { (h1 - c0) / RESTRICT_TILE };
    if last > first { [first, last] } else { [0, 0] }
}

/// Mixed-in-time moments of a parent cell, with the physical velocity (the
/// post-collision momentum minus half the force); beyond a wall side, those of
/// its mirror image.
#[inline]
fn parent_moments(k: &FillGhost, t0: &[f32], t1: &[f32], x: i32, y: i32) -> Moments {
    let (x, y, crossed) = mirrored_cell(&k.sides, &k.coarse_active, x, y);
    let plane = k.coarse.plane_cells();
    let index = k.coarse.index(x, y);
    let f: [f32; Q] = std::array::from_fn(|i| {
        let a = t0[i * plane + index];
        let b = t1[i * plane + index];
        a + k.alpha * (b - a)
    });
    let m = lattice::moments(&f, [-k.coarse_force[0], -k.coarse_force[1]]);
    reflect_crossed(m, &k.sides, crossed)
}

/// Coarse-to-fine coupling of the ghost band's inner layer
/// ([`inner_band_cells`]): density and velocity interpolated bicubically from
/// the parent, gradients of velocity and momentum flux by central differences
/// there, all time-interpolated by `alpha`, and rebuilt as fine post-collision
/// populations with the fine τ⁺, τ⁻. Gradients are halved because the fine
/// lattice unit of length is half the parent's. The fine level fills its band
/// before each of its hops, so a hop's update reads only the layer next to the
/// active region, as the restriction and the reflux do: the band's outer
/// cells, and its cells beyond a wall side, are left as they are (filling
/// every layer took a refined CPU run a quarter of its time).
pub fn fill_ghost(k: &FillGhost, t0: &[f32], t1: &[f32], fine: &mut [f32]) {
    // Each parent cell feeds up to sixteen band cells' stencils: take its
    // moments once (the same arithmetic as the device's, which takes them
    // once per block, so the same bits), over the frame that the stencils of
    // the band's inner layer reach: four parent cells deep from the
    // allocation's edge along each interface side (the frame's array starts
    // two cells beyond that edge; the band beyond a wall side is not filled,
    // and a corner of the layer lies in the strip along y as well); the rest
    // stays unset.
    let origin = k.active_offset.map(|o| o as i32 - GHOST as i32);
    let size = [k.fine.nx / 2 + 4, k.fine.ny / 2 + 4];
    // Frame rows or columns [FRAME_START, FRAME_END) from the low edge, and as
    // far from the high one.
    const FRAME_START: usize = (GHOST / 2) as usize;
    const FRAME_END: usize = FRAME_START + 4;
    let open = |side: usize| k.sides.is_interface(side);
    let (width, height) = (size[0] as usize, size[1] as usize);
    let strip = |j: usize, n: usize, low: bool| {
        let from_edge = if low { j } else { n - 1 - j };
        (FRAME_START..FRAME_END).contains(&from_edge)
    };
    // The frame's columns in parent row j: the whole row in a strip along
    // x, else the strips along y at the interface sides.
    let frame_columns = |j: usize| {
        if (open(2) && strip(j, height, true)) || (open(3) && strip(j, height, false)) {
            [0..width, width..width]
        } else {
            let low = if open(0) { FRAME_START..FRAME_END } else { 0..0 };
            let high = if open(1) {
                width - FRAME_END..width - FRAME_START
            } else {
                width..width
            };
            [low, high]
        }
    };
    let mut parent = vec![Moments::default(); width * height];
    parent.par_chunks_mut(width).enumerate().for_each(|(j, row)| {
        for i in frame_columns(j).into_iter().flatten() {
            row[i] = parent_moments(k, t0, t1, origin[0] + i as i32, origin[1] + j as i32);
        }
    });
    // Every ghost cell takes its derivatives at the four inner points of its
    // stencil, and each parent cell is an inner point of up to sixteen ghost
    // cells' stencils: its differences are taken once here, by the same
    // expressions, so the same bits (the fill was a third of a refined CPU
    // run's time). Cells on the parent frame's edge, or whose neighbours lie
    // outside the frame, are no ghost cell's inner point.
    let mut differences = vec![Differences::default(); parent.len()];
    differences.par_chunks_mut(width).enumerate().for_each(|(j, row)| {
        if j == 0 || j + 1 == height {
            return;
        }
        for i in frame_columns(j).into_iter().flatten() {
            if i > 0 && i + 1 < width {
                row[i] = Differences::at(&parent, width, i, j);
            }
        }
    });
    let rates = RebuildRates::new(k.tau_plus, k.tau_minus);
    // Written in place, band by band of rows: the inner layer's bottom and
    // top rows, or its cell at each end of a row between them.
    let (nx, ny) = (k.fine.nx, k.fine.ny);
    let (first_x, last_x) = (GHOST - 1, nx - GHOST);
    let stencil = Stencil {
        parent: &parent,
        differences: &differences,
        origin,
        width: size[0],
    };
    par_row_bands(fine, &k.fine, |first, rows, band| {
        for fy in first..first + rows {
            let columns = if fy == GHOST - 1 || fy == ny - GHOST {
                [first_x..last_x + 1, 0..0]
            } else if fy >= GHOST && fy < ny - GHOST {
                [first_x..first_x + 1, last_x..last_x + 1]
            } else {
                [0..0, 0..0]
            };
            for fx in columns.into_iter().flatten() {
                if !beyond_wall(&k.fine, &k.sides, fx, fy) {
                    let post = ghost_populations(k, &stencil, &rates, fx, fy);
                    band.set(k.fine.index(fx, fy), &post);
                }
            }
        }
    });
}

/// A parent cell's differences that the ghost cells around it interpolate:
/// the central differences of each [`gradient_field`] (not yet halved) and the
/// second differences of the velocity (`[∂xx, ∂yy, 4 ∂xy]`, the mixed one not
/// yet quartered).
#[derive(Clone, Copy, Default)]
struct Differences {
    d_dx: [f32; GRADIENT_FIELDS],
    d_dy: [f32; GRADIENT_FIELDS],
    curvature: [[f32; 3]; 2],
}

impl Differences {
    /// At parent cell (i, j) of the row-major `parent` frame, `width` wide.
    fn at(parent: &[Moments], width: usize, i: usize, j: usize) -> Self {
        let m = |ii: usize, jj: usize| &parent[jj * width + ii];
        let d_dx = std::array::from_fn(|f| gradient_field(m(i + 1, j), f) - gradient_field(m(i - 1, j), f));
        let d_dy = std::array::from_fn(|f| gradient_field(m(i, j + 1), f) - gradient_field(m(i, j - 1), f));
        let curvature = std::array::from_fn(|component| {
            let u = |jj: usize, ii: usize| gradient_field(m(ii, jj), component);
            [
                u(j, i + 1) - 2.0 * u(j, i) + u(j, i - 1),
                u(j + 1, i) - 2.0 * u(j, i) + u(j - 1, i),
                (u(j + 1, i + 1) - u(j + 1, i - 1)) - (u(j - 1, i + 1) - u(j - 1, i - 1)),
            ]
        });
        Self { d_dx, d_dy, curvature }
    }
}

/// What a fill's ghost cells read: the parent frame's moments and
/// [`Differences`] (row-major, `width` wide, from parent cell `origin`).
struct Stencil<'a> {
    parent: &'a [Moments],
    differences: &'a [Differences],
    origin: [i32; 2],
    width: u32,
}

/// A level's relaxation times and the share of each non-equilibrium part
/// that one collision keeps, computed once per launch.
struct RebuildRates {
    taus: [f32; 2],
    keep_even: f32,
    keep_odd: f32,
}

impl RebuildRates {
    fn new(tau_plus: f32, tau_minus: f32) -> Self {
        Self {
            taus: [tau_plus, tau_minus],
            keep_even: 1.0 - 1.0 / tau_plus,
            keep_odd: 1.0 - 1.0 / tau_minus,
        }
    }
}

/// The fine post-collision populations of ghost cell (fx, fy) from the
/// parent frame `stencil`.
fn ghost_populations(k: &FillGhost, stencil: &Stencil, rates: &RebuildRates, fx: u32, fy: u32) -> [f32; Q] {
    // The fine allocation starts GHOST / 2 parent cells before its active region.
    let half = (GHOST / 2) as i32;
    let px = (k.active_offset[0] as i32 - half) as f32 + (fx as f32 + 0.5) * 0.5 - 0.5;
    let py = (k.active_offset[1] as i32 - half) as f32 + (fy as f32 + 0.5) * 0.5 - 0.5;
    let (x0, y0) = (px.floor() as i32, py.floor() as i32);
    let (wx, wy) = (px - x0 as f32, py - y0 as f32);
    let at = |i: usize, j: usize| {
        let (x, y) = (
            x0 + i as i32 - 1 - stencil.origin[0],
            y0 + j as i32 - 1 - stencil.origin[1],
        );
        (y as u32 * stencil.width + x as u32) as usize
    };
    // Density and velocity: bicubic (4-point Lagrange in each direction),
    // because bilinear interpolation damps every mode a little at each of
    // the many fills and that adds up to visible extra dissipation.
    let (lx, ly) = (lagrange4(wx), lagrange4(wy));
    let mut acc = [0.0f32; 3];
    for (j, weight_y) in ly.iter().enumerate() {
        for (i, weight_x) in lx.iter().enumerate() {
            let w = weight_x * weight_y;
            let c = stencil.parent[at(i, j)];
            for (slot, value) in acc.iter_mut().zip([c.delta_rho, c.ux, c.uy]) {
                *slot += w * value;
            }
        }
    }
    // Gradients: central differences at the four inner points, bilinear
    // between them; they only enter the small non-equilibrium part.
    let mut gradients = [[0.0f32; GRADIENT_FIELDS]; 2];
    let mut curvature = [[0.0f32; 3]; 2];
    for (dj, weight_y) in [(0usize, 1.0 - wy), (1, wy)] {
        for (di, weight_x) in [(0usize, 1.0 - wx), (1, wx)] {
            let w = weight_x * weight_y;
            let d = &stencil.differences[at(di + 1, dj + 1)];
            let [g_dx, g_dy] = &mut gradients;
            for (f, (gx, gy)) in g_dx.iter_mut().zip(g_dy.iter_mut()).enumerate() {
                *gx += w * 0.5 * d.d_dx[f];
                *gy += w * 0.5 * d.d_dy[f];
            }
            // Curvature of the velocity: second differences, likewise.
            for (d2, c) in curvature.iter_mut().zip(&d.curvature) {
                d2[0] += w * c[0];
                d2[1] += w * c[1];
                d2[2] += w * 0.25 * c[2];
            }
        }
    }
    let [delta_rho, ux, uy] = acc;
    let fine_force = [0.5 * k.coarse_force[0], 0.5 * k.coarse_force[1]];
    // One fine lattice unit of length is half the parent's: first derivatives
    // halve, second derivatives quarter.
    rebuild_post_collision(
        delta_rho,
        [ux + 0.5 * fine_force[0], uy + 0.5 * fine_force[1]],
        rates,
        gradients.map(|g| g.map(|v| 0.5 * v)),
        curvature.map(|c| c.map(|v| 0.25 * v)),
    )
}

/// Weights of the 4-point Lagrange interpolation at `t` in [0, 1] between the
/// second and third of four equally spaced points.
#[inline]
pub fn lagrange4(t: f32) -> [f32; 4] {
    [
        -t * (t - 1.0) * (t - 2.0) * (1.0 / 6.0),
        (t + 1.0) * (t - 1.0) * (t - 2.0) / 2.0,
        -(t + 1.0) * t * (t - 2.0) / 2.0,
        (t + 1.0) * t * (t - 1.0) * (1.0 / 6.0),
    ]
}

/// Fields whose gradients rebuild the non-equilibrium part: `u_x`, `u_y` and
/// the momentum flux `u_x u_x`, `u_y u_y`, `u_x u_y` (ρ0 = 1).
pub(crate) const GRADIENT_FIELDS: usize = 5;

#[inline]
fn gradient_field(m: &Moments, field: usize) -> f32 {
    match field {
        0 => m.ux,
        1 => m.uy,
        2 => m.ux * m.ux,
        3 => m.uy * m.uy,
        _ => m.ux * m.uy,
    }
}

/// Post-collision populations for given moments, gradients (`[d/dx, d/dy]` of
/// the [`gradient_field`]s) and velocity curvature (`[∂xx, ∂yy, ∂xy]` of `u_x`,
/// `u_y`), all in lattice units of the target level: equilibrium plus the
/// non-equilibrium parts after one relaxation, the even (strain) part with τ⁺
/// and the odd (momentum-flux and curvature) parts with τ⁻.
#[inline]
fn rebuild_post_collision(
    delta_rho: f32,
    u: [f32; 2],
    rates: &RebuildRates,
    [d_dx, d_dy]: [[f32; GRADIENT_FIELDS]; 2],
    curvature: [[f32; 3]; 2],
) -> [f32; Q] {
    let m = Moments {
        delta_rho,
        ux: u[0],
        uy: u[1],
    };
    let feq = lattice::equilibrium(m);
    let strain = [d_dx[0], d_dy[1], 0.5 * (d_dy[0] + d_dx[1])];
    let [tau_plus, tau_minus] = rates.taus;
    let even = lattice::non_equilibrium(tau_plus, strain);
    let odd = lattice::non_equilibrium_odd(tau_minus, [[d_dx[2], d_dx[3], d_dx[4]], [d_dy[2], d_dy[3], d_dy[4]]]);
    let curved = lattice::non_equilibrium_odd_curvature(tau_plus, tau_minus, curvature);
    let (keep_even, keep_odd) = (rates.keep_even, rates.keep_odd);
    std::array::from_fn(|i| feq[i] + keep_even * even[i] + keep_odd * (odd[i] + curved[i]))
}

/// Weights of the 4-point Lagrange interpolation at the midpoint, `lagrange4(0.5)`.
const CENTRE4: [f32; 4] = [-1.0 / 16.0, 9.0 / 16.0, 9.0 / 16.0, -1.0 / 16.0];

/// The block's own two fine cells averaged: the restriction's weights along
/// an axis where [`CENTRE4`] would reach into the ghost band.
const BLOCK2: [f32; 4] = [0.0, 0.5, 0.5, 0.0];

/// The restriction's weights along one axis for a stencil of 4 fine cells
/// from `first`: [`CENTRE4`], or [`BLOCK2`] where the stencil's outer cell
/// lies in the ghost band beyond an interface side (`low_side` or the one
/// after it) of the active region `[lo, hi)`.
///
/// The ghost band holds the last fill, half a coarse step older than the
/// active cells at a restriction: in a flow that changes in time the cubic
/// stencil put the lag into the covered parent cells along the interface
/// (1/16 of it), which streamed it into the parent level, a momentum source
/// of first order in the spacing (a freely accelerating box with one patch
/// ran 0.2% ahead of g t). Of the stencils that leave that cell out and stay
/// second order, only the two-cell average passes none of the fine grid's
/// checkerboard mode to the parent, as the cubic passes none: the one-sided
/// 3-point Lagrange stencil (3/8, 3/4, -1/8) passed half of it, and
/// channels with a patch from wall to wall (the shipped square obstacle and
/// tandem cylinders) diverged at the patch's upstream corner on the wall.
/// Passing no checkerboard is not enough: the third-order stencil on the
/// block's two cells and the two beyond them inward (7/16, 9/16, 1/16,
/// -1/16) passes none, and cut a Taylor–Green vortex's excess decay with a
/// patch from 4.9% to 1.0% (32 base cells a wavelength, from a start whose
/// pressure had the wrong sign; the stale cubic gave 1.4%), but the tandem
/// cylinders diverged with it at the same corner
/// (interval 5440). A one-sided stencil shifts the phase of the modes it
/// passes; of the stencils symmetric about the block, which do not, the
/// two-cell average is the only one that leaves the ghost band out. A wall
/// side's mirror images are current and keep the cubic.
#[inline]
pub(crate) fn centre_weights(sides: &PatchSides, low_side: usize, first: i32, lo: u32, hi: u32) -> [f32; 4] {
    let stale = (first < lo as i32 && sides.is_interface(low_side))
        || (first + 3 >= hi as i32 && sides.is_interface(low_side + 1));
    if stale { BLOCK2 } else { CENTRE4 }
}

/// Whether every covered parent cell (`0..n` from the covered region's
/// edge) whose restriction stencil reaches stencil entry `i` (fine cell `i - 1`
/// from the fine active origin) lies in `hole` (the same offsets).
fn only_in_hole(i: u32, n: u32, hole: [u32; 2]) -> bool {
    // Parent cell p reads entries 2p to 2p + 3.
    let first = i.saturating_sub(2) / 2;
    let last = (i / 2).min(n.saturating_sub(1));
    first >= hole[0] && last < hole[1]
}

/// Fine-to-coarse coupling of every covered parent cell outside the hole: the
/// mass- and momentum-weighted average of its 2x2 fine cells, with the
/// gradients of that block doubled into parent lattice units and rebuilt with
/// the parent's τ⁺, τ⁻.
pub fn restrict_to_parent(k: &RestrictToParent, fine: &[f32], coarse: &mut [f32]) {
    let fine_plane = k.fine.plane_cells();
    let fine_force = [0.5 * k.coarse_force[0], 0.5 * k.coarse_force[1]];
    let cov = k.covered;
    let hole = k.hole;
    let g = k.fine_active_origin;
    let fine_active = Rect::new(g, g, k.fine.nx - g, k.fine.ny - g);
    // Each fine cell feeds up to sixteen parent cells' stencils: take the
    // moments of the covered fine cells and the ring around them once (the
    // same arithmetic as the device's, which takes them once per block, so
    // the same bits), row-major from fine cell (g - 1, g - 1); those that
    // only cells of the hole would read are not taken.
    let reach = [2 * cov.width() + 2, 2 * cov.height() + 2];
    let hole_x = [hole.x0.saturating_sub(cov.x0), hole.x1.saturating_sub(cov.x0)];
    let hole_y = [hole.y0.saturating_sub(cov.y0), hole.y1.saturating_sub(cov.y0)];
    let mut moments = vec![Moments::default(); (reach[0] * reach[1]) as usize];
    moments
        .par_chunks_mut(reach[0] as usize)
        .enumerate()
        .for_each(|(j, row)| {
            let j = j as u32;
            for (i, m) in (0u32..).zip(row.iter_mut()) {
                if !(only_in_hole(i, cov.width(), hole_x) && only_in_hole(j, cov.height(), hole_y)) {
                    let index = k.fine.index(g - 1 + i, g - 1 + j);
                    *m = lattice::moments(&read_cell(fine, fine_plane, index), [-fine_force[0], -fine_force[1]]);
                }
            }
        });
    let rates = RebuildRates::new(k.tau_plus, k.tau_minus);
    par_row_bands(coarse, &k.coarse, |first, rows, band| {
        for cy in first.max(cov.y0)..(first + rows).min(cov.y1) {
            for cx in cov.x0..cov.x1 {
                if hole.contains(cx, cy) {
                    continue;
                }
                let fx0 = k.fine_active_origin + 2 * (cx - cov.x0);
                let fy0 = k.fine_active_origin + 2 * (cy - cov.y0);
                // The 2x2 block and the ring of fine cells around it, for the
                // curvature; at an interface that ring reaches into the ghost
                // band, which holds the last fill (half a fine hop old), at a
                // wall it reads mirror images.
                let g: [[Moments; 4]; 4] = std::array::from_fn(|dy| {
                    std::array::from_fn(|dx| {
                        let (x, y) = ((fx0 + dx as u32) as i32 - 1, (fy0 + dy as u32) as i32 - 1);
                        let (x, y, crossed) = mirrored_cell(&k.sides, &fine_active, x, y);
                        let m = moments[((y + 1 - g) * reach[0] + (x + 1 - g)) as usize];
                        reflect_crossed(m, &k.sides, crossed)
                    })
                });
                let m = [[g[1][1], g[1][2]], [g[2][1], g[2][2]]];
                // Density and momentum: cubic interpolation to the block centre
                // over the 4x4 stencil; the plain 2x2 average smooths every mode
                // a little at each restriction, which adds up at the interface.
                let (fx, fy) = (fx0 as i32 - 1, fy0 as i32 - 1);
                let along_x = centre_weights(&k.sides, 0, fx, fine_active.x0, fine_active.x1);
                let along_y = centre_weights(&k.sides, 2, fy, fine_active.y0, fine_active.y1);
                let mut sums = [0.0f32; 3];
                for (dy, wy) in along_y.iter().enumerate() {
                    for (dx, wx) in along_x.iter().enumerate() {
                        let c = g[dy][dx];
                        let w = wx * wy;
                        for (sum, value) in sums.iter_mut().zip([c.delta_rho, c.ux, c.uy]) {
                            *sum += w * value;
                        }
                    }
                }
                let [delta_rho, ux, uy] = sums;
                // Differences across the 2x2 block are centred on the parent cell;
                // one fine spacing is half a parent spacing, hence no 1/2 here.
                let v = |dy: usize, dx: usize, f: usize| gradient_field(&m[dy][dx], f);
                let gradients = [
                    std::array::from_fn(|f| (v(0, 1, f) + v(1, 1, f)) - (v(0, 0, f) + v(1, 0, f))),
                    std::array::from_fn(|f| (v(1, 0, f) + v(1, 1, f)) - (v(0, 0, f) + v(0, 1, f))),
                ];
                // Second differences centred on the block: each row's
                // `u0 - u1 - u2 + u3` is twice the fine second derivative, so the
                // sum over the two middle rows is four times it, which is the
                // second derivative in parent lattice units; the mixed one is
                // one fine difference of differences, times four.
                let curvature: [[f32; 3]; 2] = std::array::from_fn(|component| {
                    let u = |dy: usize, dx: usize| gradient_field(&g[dy][dx], component);
                    let d2x = (u(1, 0) - u(1, 1) - u(1, 2) + u(1, 3)) + (u(2, 0) - u(2, 1) - u(2, 2) + u(2, 3));
                    let d2y = (u(0, 1) - u(1, 1) - u(2, 1) + u(3, 1)) + (u(0, 2) - u(1, 2) - u(2, 2) + u(3, 2));
                    let dxy = (u(2, 2) - u(2, 1)) - (u(1, 2) - u(1, 1));
                    [d2x, d2y, 4.0 * dxy]
                });
                let post = rebuild_post_collision(
                    delta_rho,
                    [ux + 0.5 * k.coarse_force[0], uy + 0.5 * k.coarse_force[1]],
                    &rates,
                    gradients,
                    curvature,
                );
                band.set(k.coarse.index(cx, cy), &post);
            }
        }
    });
}
