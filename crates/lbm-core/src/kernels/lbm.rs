//! `kernels/lbm.cu`: the per-hop update of one patch (pull streaming with
//! boundaries, then TRT collision with Guo forcing), `current -> spare`, as
//! two kernels: [`StreamCollide`], the general update over every active cell
//! or over a list of cells, and [`StreamCollideBulk`], the same arithmetic on
//! a row-major patch's interior with no flag and only the wrap and wall
//! rules of the sides its region reaches ([`BulkSide`]). A patch large
//! enough for the pair runs the bulk kernel over [`bulk_interior`], skipping
//! each row's span of [`bulk_skip`], beside the general one over
//! [`boundary_cells`] (the rim and those spans, every cell where the bulk
//! kernel's assumption of a fluid cell with fluid neighbours fails): the two
//! write different cells, and together the general kernel's bits. Their launch structs and CPU
//! references live here; the CPU reference of the bulk kernel is vectorised
//! across the cells of a row ([`vector`]).
//!
//! What it does not do: no momentum exchange ([`super::exchange`]), no coupling
//! between levels ([`super::refine`]), no update of the inlet factor
//! ([`super::boundary`]).

pub mod vector;

use crate::config::{Boundary, LevelPhysics};
use crate::device::{Arg, BufferRef, Kernel, Launch};
use crate::domain::geometry::FLAG_FLUID;
use crate::domain::hierarchy::{Layout, Rect};
use crate::domain::order::{inlet_sample, inlet_samples};
use crate::error::{Error, LaunchProblem, Result};
use crate::lattice::{self, C, INV_CS2, OPP, Q, W};

use super::{
    ArgReader, BufferUse, ExactShape, HostViews, KernelArgs, check_patch, par_row_bands, population_bytes, push_layout,
    push_rect, read_cell,
};
use crate::device::BLOCK_THREADS;
use vector::Vector;

/// Cells of the active region, each a number in its row-major order
/// (`(y - y0) * width + (x - x0)`), ascending: what [`StreamCollide`] updates
/// instead of every active cell. With a wall-distance table in the launch,
/// the buffer holds `count` more words after the numbers: each listed cell's
/// slot in the table ([`cell_list_words`]), which the CUDA kernel takes
/// after one check where the table's bisection is a chain of dependent
/// loads. A slot is only a hint: a wrong one (not below the table's cell
/// count, or naming another cell) makes the kernel bisect, and in a table of
/// ascending distinct indices, the only kind [`wall_distance_table`] builds,
/// the bisection finds the very slot a right hint names, so the CPU, which
/// always bisects, computes the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellList {
    pub cells: BufferRef,
    pub count: u32,
}

/// The wall distances of a patch's body links, by cell: a table of
/// [`wall_distance_words`]`(cells)` u32 words, the storage indices of the
/// `cells` fluid cells that have a solid neighbour, ascending, then Q f32 (as
/// bits) per listed cell, in the order of the list: entry `i` is the fraction
/// q of the link from the cell to its neighbour `(x, y) - c_i` that lies in
/// fluid, 0 where that neighbour is not solid. Nine f32 planes over every cell
/// cost 36 bytes a cell; this costs 40 per cell beside a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WallDistances {
    pub table: BufferRef,
    pub cells: u32,
}

/// Words of a wall-distance table of `cells` cells (see [`WallDistances`]).
pub const fn wall_distance_words(cells: usize) -> usize {
    cells * (1 + Q)
}

/// The table of [`WallDistances`] for `links`, each a fluid cell's storage
/// index, the direction `i` along which its population arrives from the body,
/// and the link's q; the table's cell count beside it.
pub fn wall_distance_table(links: impl IntoIterator<Item = (u32, usize, f32)>) -> (Vec<u32>, usize) {
    let mut by_cell = std::collections::BTreeMap::<u32, [f32; Q]>::new();
    for (index, i, q) in links {
        by_cell.entry(index).or_insert([0.0; Q])[i] = q;
    }
    let cells = by_cell.len();
    let mut table: Vec<u32> = by_cell.keys().copied().collect();
    table.extend(by_cell.values().flatten().map(|q| q.to_bits()));
    debug_assert_eq!(table.len(), wall_distance_words(cells));
    (table, cells)
}

/// The wall distance of the link arriving at storage cell `index` along `i`
/// from a table of `cells` cells (see [`WallDistances`]): the first listed
/// index not below `index`, found by bisection, and 0 when that is not
/// `index`. The CUDA kernel bisects step for step the same way, so the two
/// agree on any table, ascending or not.
pub fn wall_distance(table: &[u32], cells: usize, index: u32, i: usize) -> f32 {
    let (mut lo, mut hi) = (0, cells);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if table[mid] < index {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    match lo < cells && table[lo] == index {
        true => f32::from_bits(table[cells + lo * Q + i]),
        false => 0.0,
    }
}

/// `stream_collide`: one thread per active cell, row-major over the active
/// region, or one per listed cell.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamCollide {
    pub src: BufferRef,
    pub dst: BufferRef,
    pub flags: BufferRef,
    /// Wall distances of the body links. Present: Bouzidi interpolated
    /// bounce-back; absent: half-way.
    pub wall_distance: Option<WallDistances>,
    /// Inlet velocities (f32), three per active row, bottom up
    /// ([`inlet_sample`]), scaled by the factor in `boundary_state`; present
    /// exactly when a side is an inlet.
    pub inlet_profile: Option<BufferRef>,
    /// `[u32 interval, f32 inlet factor]`, written by `update_boundary_state`;
    /// present exactly when a side is an inlet.
    pub boundary_state: Option<BufferRef>,
    /// The cells to update; absent: every active cell.
    pub cells: Option<CellList>,
    pub layout: Layout,
    pub active: Rect,
    /// Sides in the order x-min, x-max, y-min, y-max.
    pub boundaries: [Boundary; 4],
    pub wall_velocity: [[f32; 2]; 4],
    pub omega_plus: f32,
    pub omega_minus: f32,
    pub force: [f32; 2],
}

/// Cells per block of `stream_collide`: a column of [`Q`] threads each,
/// one per population (kernels/lbm.cu's `LBM_LIST_CELLS`).
pub const LIST_CELLS: u32 = 32;

impl StreamCollide {
    /// Blocks of [`LIST_CELLS`] x [`Q`] threads over the launch's cells: a
    /// cell's nine pulls side by side, what a short list (one patch's rim
    /// and the spans around its body) needs to keep the device busy.
    fn shape(&self) -> ExactShape {
        ExactShape {
            grid: [(self.work_items() as u32).div_ceil(LIST_CELLS).max(1), 1, 1],
            block: [LIST_CELLS, Q as u32, 1],
        }
    }

    /// One thread per cell, in blocks of [`BLOCK_THREADS`]: what a fused
    /// batch launches, whose members' lists together already fill the
    /// device (there nine threads a cell only add waves). The same bits.
    pub fn per_cell_shape(&self) -> ExactShape {
        ExactShape {
            grid: [(self.work_items() as u32).div_ceil(BLOCK_THREADS).max(1), 1, 1],
            block: [BLOCK_THREADS, 1, 1],
        }
    }

    /// A whole `nx` x `ny` allocation, row-major, periodic on every side,
    /// without bodies, inlet or force: the benchmark case.
    pub fn periodic(
        src: BufferRef,
        dst: BufferRef,
        flags: BufferRef,
        [nx, ny]: [u32; 2],
        physics: LevelPhysics,
    ) -> Self {
        StreamCollide {
            src,
            dst,
            flags,
            wall_distance: None,
            inlet_profile: None,
            boundary_state: None,
            cells: None,
            layout: Layout { nx, ny, tile: [nx, ny] },
            active: Rect::new(0, 0, nx, ny),
            boundaries: [Boundary::Periodic; 4],
            wall_velocity: [[0.0; 2]; 4],
            omega_plus: physics.relaxation.omega_plus(),
            omega_minus: physics.relaxation.omega_minus(),
            force: physics.force,
        }
    }

    fn has_inlet(&self) -> bool {
        self.boundaries.contains(&Boundary::Inlet)
    }
}

impl KernelArgs for StreamCollide {
    const KERNEL: Kernel = Kernel::StreamCollide;
    const PARAMS: &'static [&'static str] = &[
        "src",
        "dst",
        "flags",
        "wall_distance",
        "inlet_profile",
        "boundary_state",
        "cells",
        "n_cells",
        "nx",
        "ny",
        "tile_x",
        "tile_y",
        "x0",
        "y0",
        "x1",
        "y1",
        "boundary_x_min",
        "boundary_x_max",
        "boundary_y_min",
        "boundary_y_max",
        "wall_x_min_ux",
        "wall_x_min_uy",
        "wall_x_max_ux",
        "wall_x_max_uy",
        "wall_y_min_ux",
        "wall_y_min_uy",
        "wall_y_max_ux",
        "wall_y_max_uy",
        "omega_plus",
        "omega_minus",
        "force_x",
        "force_y",
        "n_wall_cells",
    ];

    fn launch(&self) -> Launch {
        let mut args = vec![
            self.src.into(),
            self.dst.into(),
            self.flags.into(),
            self.wall_distance.map(|w| w.table).into(),
            self.inlet_profile.into(),
            self.boundary_state.into(),
            self.cells.map(|c| c.cells).into(),
            Arg::U32(self.cells.map_or(0, |c| c.count)),
        ];
        push_layout(&mut args, &self.layout);
        push_rect(&mut args, &self.active);
        args.extend(self.boundaries.iter().map(|b| Arg::U32(*b as u32)));
        args.extend(self.wall_velocity.iter().flatten().map(|v| Arg::F32(*v)));
        args.extend([
            Arg::F32(self.omega_plus),
            Arg::F32(self.omega_minus),
            Arg::F32(self.force[0]),
            Arg::F32(self.force[1]),
            Arg::U32(self.wall_distance.map_or(0, |w| w.cells)),
        ]);
        self.shape().launch(Kernel::StreamCollide, args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        let (src, dst, flags) = (r.buffer()?, r.buffer()?, r.buffer()?);
        let wall_table = r.optional_buffer()?;
        let (inlet_profile, boundary_state) = (r.optional_buffer()?, r.optional_buffer()?);
        let cells = r.optional_buffer()?;
        let count = r.u32()?;
        let cells = match cells {
            Some(cells) => Some(CellList { cells, count }),
            None if count == 0 => None,
            None => {
                return Err(Error::Launch {
                    kernel: Self::KERNEL,
                    problem: LaunchProblem::ArgValue {
                        param: "n_cells",
                        value: count,
                        accepted: "0 (no cell list is passed)",
                    },
                });
            }
        };
        let layout = r.layout()?;
        let active = r.rect()?;
        let mut boundaries = [Boundary::Periodic; 4];
        for (side, b) in boundaries.iter_mut().enumerate() {
            let code = r.u32()?;
            *b = Boundary::from_code(code).ok_or(Error::Launch {
                kernel: Self::KERNEL,
                problem: LaunchProblem::ArgValue {
                    param: Self::PARAMS[16 + side],
                    value: code,
                    accepted: "a boundary code 0..=5",
                },
            })?;
        }
        let mut wall_velocity = [[0.0; 2]; 4];
        for v in wall_velocity.iter_mut().flatten() {
            *v = r.f32()?;
        }
        let (omega_plus, omega_minus, force) = (r.f32()?, r.f32()?, [r.f32()?, r.f32()?]);
        let cells_with_walls = r.u32()?;
        let wall_distance = match (wall_table, cells_with_walls) {
            (Some(table), 1..) => Some(WallDistances {
                table,
                cells: cells_with_walls,
            }),
            (None, 0) => None,
            (table, value) => {
                return Err(Error::Launch {
                    kernel: Self::KERNEL,
                    problem: LaunchProblem::ArgValue {
                        param: "n_wall_cells",
                        value,
                        accepted: match table {
                            Some(_) => "at least 1 (a wall-distance table is passed)",
                            None => "0 (no wall-distance table is passed)",
                        },
                    },
                });
            }
        };
        Ok(StreamCollide {
            src,
            dst,
            flags,
            wall_distance,
            inlet_profile,
            boundary_state,
            cells,
            layout,
            active,
            boundaries,
            wall_velocity,
            omega_plus,
            omega_minus,
            force,
        })
    }

    fn work_items(&self) -> usize {
        self.cells.map_or(self.active.cells(), |c| c.count as usize)
    }

    /// The kernel maps a block's columns onto cells and its rows onto the
    /// populations it shares between them.
    fn required_shape(&self) -> Option<ExactShape> {
        Some(self.shape())
    }

    fn alternative_shape(&self) -> Option<ExactShape> {
        Some(self.per_cell_shape())
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        check_patch(&self.layout, &self.active)?;
        let (a, l) = (self.active, self.layout);
        // An interface side reads one cell beyond the active region.
        let room = [a.x0, l.nx - a.x1, a.y0, l.ny - a.y1];
        for (side, (b, room)) in self.boundaries.iter().zip(room).enumerate() {
            if *b == Boundary::Interface && room == 0 && a.cells() > 0 {
                return Err(LaunchProblem::Shape(format!(
                    "side {side} is an interface but the active region {a} has no band beyond it"
                )));
            }
        }
        for (param, buffer) in [
            ("inlet_profile", self.inlet_profile),
            ("boundary_state", self.boundary_state),
        ] {
            match (self.has_inlet(), buffer) {
                (true, None) => {
                    return Err(LaunchProblem::MissingBuffer {
                        param,
                        why: "a side is an inlet",
                    });
                }
                (false, Some(_)) => {
                    return Err(LaunchProblem::UnexpectedBuffer {
                        param,
                        why: "no side is an inlet, so nothing reads it",
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        let f = population_bytes(&self.layout);
        let mut uses = vec![
            BufferUse::read("src", self.src, f, 4),
            BufferUse::write("dst", self.dst, f, 4),
            BufferUse::read("flags", self.flags, self.layout.plane_cells(), 1),
        ];
        if let Some(list) = self.cells {
            let words = match self.wall_distance {
                Some(_) => 2 * list.count as usize,
                None => list.count as usize,
            };
            uses.push(BufferUse::read("cells", list.cells, words * 4, 4));
        }
        if let Some(w) = self.wall_distance {
            uses.push(BufferUse::read(
                "wall_distance",
                w.table,
                wall_distance_words(w.cells as usize) * 4,
                4,
            ));
        }
        if let (Some(profile), Some(state)) = (self.inlet_profile, self.boundary_state) {
            uses.push(BufferUse::read(
                "inlet_profile",
                profile,
                inlet_samples(self.active.height()) * 4,
                4,
            ));
            uses.push(BufferUse::read("boundary_state", state, 8, 4));
        }
        uses
    }

    fn run_on_host(&self, views: &mut HostViews) {
        let r = &views.reads;
        let inlet = match self.inlet_profile {
            Some(_) => Inlet {
                profile: r.get("inlet_profile"),
                factor: r.get::<f32>("boundary_state")[1],
            },
            None => Inlet {
                profile: &[],
                factor: 0.0,
            },
        };
        let walls = Walls {
            table: match self.wall_distance {
                Some(_) => r.get("wall_distance"),
                None => &[],
            },
            cells: self.wall_distance.map_or(0, |w| w.cells as usize),
        };
        // The numbers without the slots that may follow them (the CPU bisects).
        let cells = self.cells.map(|list| &r.get::<u32>("cells")[..list.count as usize]);
        let dst = views.writes.get("dst");
        stream_collide(self, r.get("src"), dst, r.get("flags"), walls, &inlet, cells);
    }
}

/// What a body's bounce-back reads of the wall distances: the table of
/// [`WallDistances`] and its cell count, 0 (the default) for half-way
/// bounce-back.
#[derive(Clone, Copy, Default)]
pub struct Walls<'a> {
    pub table: &'a [u32],
    pub cells: usize,
}

/// What an inlet side reads: the velocity shape per active row and the
/// current amplitude factor.
pub struct Inlet<'a> {
    pub profile: &'a [f32],
    pub factor: f32,
}

/// The general update of every active cell, or of the listed ones (`cells`,
/// see [`CellList`]; a number beyond the active region is skipped).
pub fn stream_collide(
    k: &StreamCollide,
    src: &[f32],
    dst: &mut [f32],
    flags: &[u8],
    walls: Walls,
    inlet: &Inlet,
    cells: Option<&[u32]>,
) {
    let layout = k.layout;
    let plane = layout.plane_cells();
    let a = k.active;
    if a.cells() == 0 {
        return;
    }
    // With one tile column the storage is row-major with stride tile[0], so a
    // neighbour is a fixed offset away; cells off the active edge take the
    // general path that handles walls, wrap-around and the ghost band.
    let stride = (layout.tiles_x() == 1).then_some(layout.tile[0] as isize);
    let offsets: Option<[isize; Q]> =
        stride.map(|s| std::array::from_fn(|i| -(C[i][0] as isize + C[i][1] as isize * s)));
    let update = |x: u32, y: u32| -> [f32; Q] {
        let index = layout.index(x, y);
        if flags[index] != FLAG_FLUID {
            return read_cell(src, plane, index);
        }
        let interior = y > a.y0 && y + 1 < a.y1 && x > a.x0 && x + 1 < a.x1;
        let mut f: [f32; Q] = match offsets {
            Some(offsets) if interior => std::array::from_fn(|i| {
                let source = (index as isize + offsets[i]) as usize;
                if flags[source] != FLAG_FLUID {
                    body_wall(k, src, flags, walls, x, y, i, index, plane)
                } else {
                    src[i * plane + source]
                }
            }),
            _ => std::array::from_fn(|i| pull(k, src, flags, walls, inlet, x, y, i, index, plane)),
        };
        lattice::collide(&mut f, k.omega_plus, k.omega_minus, k.force);
        f
    };
    let width = a.width();
    par_row_bands(dst, &layout, |first, rows, band| {
        let (lo, hi) = (first.max(a.y0), (first + rows).min(a.y1));
        match cells {
            None => {
                for y in lo..hi {
                    for x in a.x0..a.x1 {
                        band.set(layout.index(x, y), &update(x, y));
                    }
                }
            }
            // The list ascends, so the cells of this band's rows are one run of it.
            Some(list) => {
                let row = |c: u32| a.y0 as u64 + (c / width) as u64;
                let start = list.partition_point(|&c| row(c) < lo as u64);
                for &c in list[start..].iter().take_while(|&&c| row(c) < hi as u64) {
                    let (x, y) = (a.x0 + c % width, a.y0 + c / width);
                    band.set(layout.index(x, y), &update(x, y));
                }
            }
        }
    });
}

/// The number [`CellList`] gives cell `(x, y)` of the active region `a`.
fn cell_number(a: &Rect, x: u32, y: u32) -> u32 {
    (y - a.y0) * a.width() + (x - a.x0)
}

/// What the bulk kernel does where a population would come from beyond a
/// side of its region.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BulkSide {
    /// Pulls it from the neighbour at the fixed offset: inside the active
    /// region where the region stops a cell short of the side (the general
    /// kernel applies the side's rule over that rim), or in the ghost band
    /// beyond an interface side.
    Neighbour,
    /// Pulls it from the region's other end: a periodic axis it spans whole.
    Wrap,
    /// Bounces it back from a wall moving with this velocity (lattice
    /// units), as the general kernel's wall rule does.
    Wall([f32; 2]),
}

impl BulkSide {
    /// The two-bit code of `kernels/lbm.cu`'s `LBM_BULK_*`.
    fn code(self) -> u32 {
        match self {
            BulkSide::Neighbour => 0,
            BulkSide::Wrap => 1,
            BulkSide::Wall(_) => 2,
        }
    }
}

/// The `sides` argument of the bulk kernel: each side's code in two bits,
/// x-min lowest.
fn sides_code(sides: &[BulkSide; 4]) -> u32 {
    sides.iter().enumerate().map(|(s, side)| side.code() << (2 * s)).sum()
}

/// The sides of a patch with sides `boundaries` that the bulk kernel may
/// take into its region, applying the side's rule itself: an interface side
/// with a band beyond it (a population from across it is pulled from the
/// band as from any neighbour), each side of an axis periodic at both ends,
/// and walls. The others (inlet, outflow, free slip) leave their rim to the
/// general kernel. A caller narrows this where it must: a patch with solid
/// cells takes none (a row's span around a body does not wrap, and a body's
/// cells may lie in the band).
pub fn bulk_open(layout: &Layout, active: &Rect, boundaries: [Boundary; 4]) -> [bool; 4] {
    let room = [active.x0, layout.nx - active.x1, active.y0, layout.ny - active.y1];
    std::array::from_fn(|side| match boundaries[side] {
        Boundary::Interface => room[side] > 0,
        Boundary::Periodic => boundaries[side ^ 1] == Boundary::Periodic,
        Boundary::Wall => true,
        _ => false,
    })
}

/// The rectangle [`StreamCollideBulk`] takes on a patch: the active region
/// less its outermost cells along every side that is not `open`
/// ([`bulk_open`]), when the layout is one tile column, nine planes index in
/// 32 bits and the rows fit one grid dimension; else none.
pub fn bulk_interior(layout: &Layout, active: &Rect, open: [bool; 4]) -> Option<Rect> {
    let inset = |side: usize| u32::from(!open[side]);
    let interior = Rect::new(
        active.x0 + inset(0),
        active.y0 + inset(2),
        active.x1.saturating_sub(inset(1)),
        active.y1.saturating_sub(inset(3)),
    );
    let fits = layout.tiles_x() == 1
        && interior.width() > 0
        && interior.height() > 0
        && interior.height() <= MAX_BULK_ROWS
        && Q as u64 * layout.plane_cells() as u64 <= u32::MAX as u64;
    fits.then_some(interior)
}

/// The bulk kernel's rule at each side of its region `interior` on a patch
/// whose sides are `boundaries` (walls moving with `wall_velocity`): the
/// side's own where the region reaches it (wrap on a periodic axis, the
/// wall's bounce-back), else a neighbour (inside the active region, or in
/// the band beyond an interface).
pub fn bulk_sides(
    active: &Rect,
    interior: &Rect,
    boundaries: [Boundary; 4],
    wall_velocity: [[f32; 2]; 4],
) -> [BulkSide; 4] {
    let reached = [
        interior.x0 == active.x0,
        interior.x1 == active.x1,
        interior.y0 == active.y0,
        interior.y1 == active.y1,
    ];
    std::array::from_fn(|side| match (reached[side], boundaries[side]) {
        (true, Boundary::Periodic) if reached[side ^ 1] => BulkSide::Wrap,
        (true, Boundary::Wall) => BulkSide::Wall(wall_velocity[side]),
        _ => BulkSide::Neighbour,
    })
}

/// The cells [`StreamCollideBulk`] leaves to the general kernel, ascending
/// as [`CellList`] numbers them: those of the active region outside
/// `interior` ([`bulk_interior`]: the rim along sides with rules of their
/// own) and the fluid cells of each interior row's [`body_span`], which the
/// bulk kernel skips ([`bulk_skip`]); none on a patch whose interior is its
/// whole active region and which no body reaches. Neither kernel writes the
/// solid cells of a span: the general kernel would copy them unchanged, and
/// a body's cells hold the same populations in both buffers, as nothing
/// writes them after the initial state (a parent's cells under a child's
/// patch, which restriction writes, are settled before any read:
/// `HopPlan::settle`).
pub fn boundary_cells(flags: &[u8], layout: &Layout, active: &Rect, interior: &Rect) -> Vec<u32> {
    let (a, r) = (*active, *interior);
    let mut cells = Vec::new();
    for y in a.y0..a.y1 {
        if y < r.y0 || y >= r.y1 {
            cells.extend((a.x0..a.x1).map(|x| cell_number(&a, x, y)));
            continue;
        }
        cells.extend((a.x0..r.x0).map(|x| cell_number(&a, x, y)));
        if let Some([first, last]) = body_span(flags, layout, &r, y) {
            cells.extend(
                (first..=last)
                    .filter(|&x| flags[layout.index(x, y)] == FLAG_FLUID)
                    .map(|x| cell_number(&a, x, y)),
            );
        }
        cells.extend((r.x1..a.x1).map(|x| cell_number(&a, x, y)));
    }
    cells
}

/// The words of a [`CellList`] buffer for `cells` (numbers of `active`,
/// ascending) in a launch with the wall-distance table `table` of
/// `wall_cells` cells ([`wall_distance_table`]): the numbers, then each
/// cell's slot in the table, `u32::MAX` for a cell the table does not hold
/// (or a number beyond the region, which the kernels skip).
pub fn cell_list_words(cells: &[u32], table: &[u32], wall_cells: usize, layout: &Layout, active: &Rect) -> Vec<u32> {
    let slot: std::collections::HashMap<u32, u32> = table[..wall_cells]
        .iter()
        .enumerate()
        .map(|(s, &index)| (index, s as u32))
        .collect();
    let width = active.width();
    let storage = |cell: u32| layout.index(active.x0 + cell % width, active.y0 + cell / width) as u32;
    let slots = cells.iter().map(|&c| match (c as usize) < active.cells() {
        true => slot.get(&storage(c)).copied().unwrap_or(u32::MAX),
        false => u32::MAX,
    });
    cells.iter().copied().chain(slots).collect()
}

/// The span `[first, last]` of row `y` of the bulk region `interior` from
/// the first cell that is solid or has a solid neighbour to the last, where
/// there is one. One span per row: the bulk kernel skips it whole, so the
/// two kernels write different cells and may run side by side. A
/// neighbour beyond the allocation counts as fluid: a region reaches the
/// allocation's side only where the bulk kernel applies the side's rule
/// ([`BulkSide`]), and a patch with solid cells takes none.
pub fn body_span(flags: &[u8], layout: &Layout, interior: &Rect, y: u32) -> Option<[u32; 2]> {
    let near_solid = |x: u32| {
        C.iter().any(|c| {
            let (nx, ny) = ((x as i64 - c[0] as i64) as u32, (y as i64 - c[1] as i64) as u32);
            nx < layout.nx && ny < layout.ny && flags[layout.index(nx, ny)] != FLAG_FLUID
        })
    };
    let inner = interior.x0..interior.x1;
    let first = inner.clone().find(|&x| near_solid(x))?;
    let last = inner.rev().find(|&x| near_solid(x))?;
    Some([first, last])
}

/// Cells of one aligned 128-byte line, where the bulk kernel starts each row's
/// blocks (see `kernels/lbm.cu`).
pub const ALIGN_CELLS: u32 = 32;

/// Rows a bulk launch covers at most: one grid row each, and a CUDA grid
/// has at most 65535 rows.
pub const MAX_BULK_ROWS: u32 = 65535;

/// Cell rows of one block of the bulk kernel on rows that span less than
/// [`BLOCK_THREADS`] cells: 32 x 8 threads, as many as a long row's block.
pub const SHORT_ROWS: u32 = 8;

/// `stream_collide_bulk`: the update of `interior` as if every cell there and
/// its eight neighbours were fluid, in blocks of [`BLOCK_THREADS`] along a
/// row, starting at an aligned storage index, and one grid row per cell row.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamCollideBulk {
    pub src: BufferRef,
    pub dst: BufferRef,
    /// The cells of each row the bulk leaves to the general kernel
    /// ([`bulk_skip`]): two u32 per row of `interior`, bottom up, `[xa, xb)`
    /// in allocation coordinates (empty where `xa == xb`). Absent: none.
    pub skip: Option<BufferRef>,
    pub layout: Layout,
    pub interior: Rect,
    /// The rule at each side of `interior` ([`bulk_sides`]): where it wraps
    /// or is a wall, the region's cells along it pull across to the other
    /// end or bounce back instead of pulling from beyond it, and the region
    /// may reach the allocation's side.
    pub sides: [BulkSide; 4],
    pub omega_plus: f32,
    pub omega_minus: f32,
    pub force: [f32; 2],
}

impl StreamCollideBulk {
    /// The entry that runs it: the walls' own where a side is a wall.
    pub fn kernel(&self) -> Kernel {
        match self.sides.iter().any(|s| matches!(s, BulkSide::Wall(_))) {
            true => Kernel::StreamCollideBulkWalled,
            false => Kernel::StreamCollideBulk,
        }
    }

    /// A row's threads start up to [`ALIGN_CELLS`] - 1 cells before the
    /// region (at an aligned storage index), so they cover that many more:
    /// blocks of one row of 256 threads, or, where those would leave more
    /// than a fifth of a row's threads idle (a row spanning less than a
    /// block, or a little more than a whole number of blocks), either
    /// [`SHORT_ROWS`] rows of 32 or one run over the region's storage
    /// indices (one grid row of one-row blocks, from the aligned index at or
    /// below its first cell), whichever puts fewer warps on the region: the
    /// run idles only on the cells between rows, a 32-wide row on its last
    /// warp's unused lanes.
    fn shape(&self) -> ExactShape {
        let span = self.interior.width() + ALIGN_CELLS - 1;
        let rows = self.interior.height().max(1);
        let long_row_threads = span.div_ceil(BLOCK_THREADS) * BLOCK_THREADS;
        if 4 * long_row_threads <= 5 * span {
            return ExactShape {
                grid: [span.div_ceil(BLOCK_THREADS).max(1), rows, 1],
                block: [BLOCK_THREADS, 1, 1],
            };
        }
        let Rect { x0, y0, x1, y1 } = self.interior;
        let stride = self.layout.tile[0];
        let run_cells = ((y1.max(y0 + 1) - 1) * stride + x1).saturating_sub((y0 * stride + x0) & !(ALIGN_CELLS - 1));
        let row_warps: u32 = (y0..y1)
            .map(|y| ((y * stride + x0) % ALIGN_CELLS + x1 - x0).div_ceil(ALIGN_CELLS))
            .sum();
        match rows > 1 && run_cells.div_ceil(ALIGN_CELLS) < row_warps {
            true => ExactShape {
                grid: [run_cells.div_ceil(BLOCK_THREADS).max(1), 1, 1],
                block: [BLOCK_THREADS, 1, 1],
            },
            false => ExactShape {
                grid: [span.div_ceil(ALIGN_CELLS).max(1), rows.div_ceil(SHORT_ROWS), 1],
                block: [ALIGN_CELLS, SHORT_ROWS, 1],
            },
        }
    }
}

impl KernelArgs for StreamCollideBulk {
    const KERNEL: Kernel = Kernel::StreamCollideBulk;
    const PARAMS: &'static [&'static str] = &[
        "src",
        "dst",
        "skip",
        "nx",
        "ny",
        "tile_x",
        "tile_y",
        "x0",
        "y0",
        "x1",
        "y1",
        "sides",
        "wall_x_min_ux",
        "wall_x_min_uy",
        "wall_x_max_ux",
        "wall_x_max_uy",
        "wall_y_min_ux",
        "wall_y_min_uy",
        "wall_y_max_ux",
        "wall_y_max_uy",
        "omega_plus",
        "omega_minus",
        "force_x",
        "force_y",
    ];

    fn launch(&self) -> Launch {
        let mut args = vec![self.src.into(), self.dst.into(), self.skip.into()];
        push_layout(&mut args, &self.layout);
        push_rect(&mut args, &self.interior);
        args.push(Arg::U32(sides_code(&self.sides)));
        args.extend(self.sides.iter().flat_map(|side| match side {
            BulkSide::Wall(u) => [Arg::F32(u[0]), Arg::F32(u[1])],
            _ => [Arg::F32(0.0), Arg::F32(0.0)],
        }));
        args.extend([
            Arg::F32(self.omega_plus),
            Arg::F32(self.omega_minus),
            Arg::F32(self.force[0]),
            Arg::F32(self.force[1]),
        ]);
        self.shape().launch(self.kernel(), args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let kernel = match launch.kernel {
            Kernel::StreamCollideBulkWalled => Kernel::StreamCollideBulkWalled,
            _ => Self::KERNEL,
        };
        let mut r = ArgReader::new(launch, kernel, Self::PARAMS)?;
        let bulk = StreamCollideBulk {
            src: r.buffer()?,
            dst: r.buffer()?,
            skip: r.optional_buffer()?,
            layout: r.layout()?,
            interior: r.rect()?,
            sides: {
                let codes = r.u32()?;
                let mut sides = [BulkSide::Neighbour; 4];
                for (s, side) in sides.iter_mut().enumerate() {
                    let u = [r.f32()?, r.f32()?];
                    *side = match (codes >> (2 * s)) & 3 {
                        0 => BulkSide::Neighbour,
                        1 => BulkSide::Wrap,
                        2 => BulkSide::Wall(u),
                        _ => {
                            return Err(r.value_error(
                                "sides",
                                codes,
                                "four 2-bit codes, x-min lowest: 0 neighbour, 1 wrap, 2 wall",
                            ));
                        }
                    };
                }
                sides
            },
            omega_plus: r.f32()?,
            omega_minus: r.f32()?,
            force: [r.f32()?, r.f32()?],
        };
        if bulk.kernel() != kernel {
            return Err(r.value_error(
                "sides",
                sides_code(&bulk.sides),
                "a wall side (code 2) on stream_collide_bulk_walled, none on stream_collide_bulk",
            ));
        }
        Ok(bulk)
    }

    fn work_items(&self) -> usize {
        self.interior.cells()
    }

    /// Threads find their cell from the block and the grid row.
    fn required_shape(&self) -> Option<ExactShape> {
        Some(self.shape())
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        let (l, r) = (self.layout, self.interior);
        check_patch(&l, &r)?;
        if l.tiles_x() != 1 {
            return Err(LaunchProblem::Shape(format!(
                "the bulk kernel needs one tile column, but tiles of {:?} split {} cells into {} columns",
                l.tile,
                l.nx,
                l.tiles_x()
            )));
        }
        let pulls = |side: usize| self.sides[side] == BulkSide::Neighbour;
        let at_edge = [r.x0 == 0, r.x1 == l.nx, r.y0 == 0, r.y1 == l.ny];
        if let Some(side) = (0..4).find(|&s| r.cells() > 0 && at_edge[s] && pulls(s)) {
            return Err(LaunchProblem::Shape(format!(
                "the bulk region {r} reaches side {side} of the {}x{} allocation, where it pulls from a \
                 neighbour: that neighbour would lie outside",
                l.nx, l.ny
            )));
        }
        let wraps = |side: usize| self.sides[side] == BulkSide::Wrap;
        if wraps(0) != wraps(1) || wraps(2) != wraps(3) {
            return Err(LaunchProblem::Shape(format!(
                "the bulk region {r} wraps at one end of an axis only ({:?})",
                self.sides
            )));
        }
        if self.skip.is_some() && (0..4).any(wraps) {
            return Err(LaunchProblem::Shape(format!(
                "the bulk region {r} wraps, but a row's skipped span around a body does not: \
                 a patch with solid cells takes an inset region"
            )));
        }
        if r.height() > MAX_BULK_ROWS {
            return Err(LaunchProblem::Shape(format!(
                "the bulk region {r} has {} rows, more than the {MAX_BULK_ROWS} of one grid dimension",
                r.height()
            )));
        }
        if Q as u64 * l.plane_cells() as u64 > u32::MAX as u64 {
            return Err(LaunchProblem::Shape(format!(
                "nine planes of {} cells do not index in 32 bits",
                l.plane_cells()
            )));
        }
        Ok(())
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        let f = population_bytes(&self.layout);
        let mut uses = vec![
            BufferUse::read("src", self.src, f, 4),
            BufferUse::write("dst", self.dst, f, 4),
        ];
        if let Some(skip) = self.skip {
            uses.push(BufferUse::read("skip", skip, bulk_skip_bytes(&self.interior), 4));
        }
        uses
    }

    fn run_on_host(&self, views: &mut HostViews) {
        let skip = self.skip.map(|_| views.reads.get::<u32>("skip"));
        let src = views.reads.get("src");
        stream_collide_bulk(self, src, views.writes.get("dst"), skip, Vector::best());
    }
}

/// The bulk update on the CPU with the instruction set `vector`, rayon over
/// rows: every variant gives the same bits.
pub fn stream_collide_bulk(k: &StreamCollideBulk, src: &[f32], dst: &mut [f32], skip: Option<&[u32]>, vector: Vector) {
    let layout = k.layout;
    let plane = layout.plane_cells();
    let r = k.interior;
    if r.cells() == 0 {
        return;
    }
    let stride = layout.tile[0] as isize;
    let offsets: [isize; Q] = std::array::from_fn(|i| -(C[i][0] as isize + C[i][1] as isize * stride));
    let (width, height) = (r.width() as isize, r.height() as isize * stride);
    let wraps = |side: usize| k.sides[side] == BulkSide::Wrap;
    let wall = |side: usize| matches!(k.sides[side], BulkSide::Wall(_));
    // What a wrapped side adds to a direction's fixed offset at the
    // region's cells along it: the pull from beyond one end comes from the
    // other (as the device's kernel shifts it).
    let shift = |c: i32, first: bool, last: bool, span: isize| match c {
        1 if first => span,
        -1 if last => -span,
        _ => 0,
    };
    // The populations arriving at (x, y) in the region, each side's rule
    // applied as the device's kernel applies it.
    let arriving = |x: u32, y: u32| -> [f32; Q] {
        let index = layout.index(x, y);
        std::array::from_fn(|i| {
            let (cx, cy) = (C[i][0], C[i][1]);
            let side_x = [(cx > 0 && x == r.x0, 0), (cx < 0 && x + 1 == r.x1, 1)];
            let side_y = [(cy > 0 && y == r.y0, 2), (cy < 0 && y + 1 == r.y1, 3)];
            let beyond = |sides: [(bool, usize); 2]| sides.iter().find(|(b, _)| *b).map(|(_, s)| *s);
            let wall_of = |side: Option<usize>| match side.map(|s| k.sides[s]) {
                Some(BulkSide::Wall(u)) => Some(u),
                _ => None,
            };
            let (side_x, side_y) = (beyond(side_x), beyond(side_y));
            if let Some(u) = corner_velocity(wall_of(side_y), wall_of(side_x)) {
                return bounce_back(src, plane, index, i, u);
            }
            let from = (i * plane + index) as isize
                + offsets[i]
                + shift(cx, side_x == Some(0) && wraps(0), side_x == Some(1) && wraps(1), width)
                + shift(cy, side_y == Some(2) && wraps(2), side_y == Some(3) && wraps(3), height);
            src[from as usize]
        })
    };
    let x_ruled = k.sides[0] != BulkSide::Neighbour || k.sides[1] != BulkSide::Neighbour;
    par_row_bands(dst, &layout, |first, rows, band| {
        for y in first.max(r.y0)..(first + rows).min(r.y1) {
            // The row less its skipped span, as the device's threads of
            // that span return: one run of cells on each side of it.
            let row = (y - r.y0) as usize;
            let (xa, xb) = skip.map_or((r.x1, r.x1), |s| (s[2 * row], s[2 * row + 1]));
            let (xa, xb) = match xa < xb {
                true => (xa.clamp(r.x0, r.x1), xb.clamp(r.x0, r.x1)),
                false => (r.x1, r.x1),
            };
            let (bottom, top) = (y == r.y0, y + 1 == r.y1);
            let wall_row = (bottom && wall(2)) || (top && wall(3));
            for (lo, hi) in [(r.x0, xa), (xb, r.x1)] {
                // A row's end cells apart from the cells between, which keep
                // the fixed offsets, where an x side has a rule.
                let pieces = match x_ruled && lo < hi {
                    true => {
                        let last = (hi - 1).max(lo + 1);
                        [(lo, lo + 1), (lo + 1, last), (last, hi)]
                    }
                    false => [(lo, hi), (hi, hi), (hi, hi)],
                };
                for (lo, hi) in pieces {
                    if lo >= hi {
                        continue;
                    }
                    let (start, n) = (layout.index(lo, y), (hi - lo) as usize);
                    let (west, east) = (lo == r.x0, hi == r.x1);
                    // A wall's bounce-back is no fixed offset: cell by cell,
                    // the same collision over one-cell rows.
                    if wall_row || (west && wall(0)) || (east && wall(1)) {
                        for x in lo..hi {
                            let f = arriving(x, y);
                            let sources: [&[f32]; Q] = std::array::from_fn(|i| std::slice::from_ref(&f[i]));
                            let at = layout.index(x, y);
                            vector.row(sources, band.row(at, 1), k.omega_plus, k.omega_minus, k.force);
                        }
                        continue;
                    }
                    let sources: [&[f32]; Q] = std::array::from_fn(|i| {
                        let from = (i * plane) as isize
                            + start as isize
                            + offsets[i]
                            + shift(C[i][0], west && wraps(0), east && wraps(1), width)
                            + shift(C[i][1], bottom && wraps(2), top && wraps(3), height);
                        &src[from as usize..from as usize + n]
                    });
                    vector.row(sources, band.row(start, n), k.omega_plus, k.omega_minus, k.force);
                }
            }
        }
    });
}

/// Bytes of a bulk region's skip table: two u32 per row.
pub fn bulk_skip_bytes(interior: &Rect) -> usize {
    interior.height() as usize * 2 * 4
}

/// The skip table of [`StreamCollideBulk`] for `interior` ([`bulk_interior`]):
/// each row's [`body_span`] as `[xa, xb)`, `[x1, x1)` where the row has none.
pub fn bulk_skip(flags: &[u8], layout: &Layout, interior: &Rect) -> Vec<u32> {
    (interior.y0..interior.y1)
        .flat_map(|y| match body_span(flags, layout, interior, y) {
            Some([first, last]) => [first, last + 1],
            None => [interior.x1, interior.x1],
        })
        .collect()
}

/// The population arriving at (x, y) in direction `i`, from the neighbour
/// `(x, y) - c_i` or, where that lies beyond a side of the active region, from
/// the side's rule. At a corner the first matching rule in this order wins:
/// inlet, wall (bounce-back; across two walls with `corner_velocity`),
/// outflow, free-slip, then periodic wrap or ghost.
#[inline]
#[allow(clippy::too_many_arguments)]
fn pull(
    k: &StreamCollide,
    src: &[f32],
    flags: &[u8],
    walls: Walls,
    inlet: &Inlet,
    x: u32,
    y: u32,
    i: usize,
    index: usize,
    plane: usize,
) -> f32 {
    let a = k.active;
    let mut sx = x as i64 - C[i][0] as i64;
    let mut sy = y as i64 - C[i][1] as i64;
    let side_x = if sx < a.x0 as i64 {
        Some(0)
    } else if sx >= a.x1 as i64 {
        Some(1)
    } else {
        None
    };
    let side_y = if sy < a.y0 as i64 {
        Some(2)
    } else if sy >= a.y1 as i64 {
        Some(3)
    } else {
        None
    };
    // Plain comparisons rather than iterator adaptors: this runs for every
    // population of every cell the bulk kernel leaves to the general one.
    let (kind_x, kind_y) = (side_x.map(|s| k.boundaries[s]), side_y.map(|s| k.boundaries[s]));
    let either = |b: Boundary| kind_x == Some(b) || kind_y == Some(b);
    let bounce = |u: [f32; 2]| bounce_back(src, plane, index, i, u);
    // At a corner an inlet wins over a wall, so that every row injects exactly
    // its profile's mass flux: with the wall's rule the corner cell would miss
    // a sixth of it, a deficit at the walls of first order in the spacing.
    if either(Boundary::Inlet) {
        let sample = inlet.profile[inlet_sample(y - a.y0, C[i][1])];
        let value = bounce([sample * inlet.factor, 0.0]);
        // A row outside the inlet's span has no sample: a resting wall there,
        // whose bounce-back keeps the wall's own odd part.
        return match k.omega_minus < 1.0 && sample != 0.0 {
            true => {
                let here = lattice::moments(&read_cell(src, plane, index), [-k.force[0], -k.force[1]]);
                value + 2.0 * odd_non_equilibrium(k, src, i, index, plane, &here)
            }
            false => value,
        };
    }
    let wall = |kind: Option<Boundary>, side: Option<usize>| match (kind, side) {
        (Some(Boundary::Wall), Some(s)) => Some(k.wall_velocity[s]),
        _ => None,
    };
    if let Some(u) = corner_velocity(wall(kind_y, side_y), wall(kind_x, side_x)) {
        return bounce(u);
    }
    if either(Boundary::Outflow) {
        return anti_bounce_back(k, src, x, y, i, index, plane);
    }
    // A free-slip side mirrors the direction's normal component: the arriving
    // population left the same row (or column) towards the wall.
    let mut direction = i;
    if kind_x == Some(Boundary::FreeSlip) {
        direction = MIRROR_X[direction];
        sx = x as i64;
    }
    if kind_y == Some(Boundary::FreeSlip) {
        direction = MIRROR_Y[direction];
        sy = y as i64;
    }
    if kind_x == Some(Boundary::Periodic) {
        sx += if side_x == Some(0) {
            a.width() as i64
        } else {
            -(a.width() as i64)
        };
    }
    if kind_y == Some(Boundary::Periodic) {
        sy += if side_y == Some(2) {
            a.height() as i64
        } else {
            -(a.height() as i64)
        };
    }
    let source = k.layout.index(sx as u32, sy as u32);
    if flags[source] != FLAG_FLUID {
        body_wall(k, src, flags, walls, x, y, i, index, plane)
    } else {
        src[direction * plane + source]
    }
}

/// The velocity a link that leaves across a y-side wall moving with `y`
/// and/or an x-side wall moving with `x` bounces back with: at a corner, the
/// sum of the two. A wall moves along itself, so the sum is the one velocity
/// that has both walls' tangential components, whichever side a lid is on
/// (a case turned by a quarter turn gives the turned flow); and a lid's two
/// diagonal terms in the corner cell still cancel, so it adds no mass there.
/// In f32, `a + 0` is `a`, so beside a resting wall this is the moving one's
/// velocity bit for bit.
#[inline]
fn corner_velocity(y: Option<[f32; 2]>, x: Option<[f32; 2]>) -> Option<[f32; 2]> {
    match (y, x) {
        (Some(a), Some(b)) => Some([a[0] + b[0], a[1] + b[1]]),
        (a, b) => a.or(b),
    }
}

/// The population arriving at `index` along `i` from a wall or an inlet
/// moving with `u`: the one leaving along opp(i), plus 2 w_i ρ0 (c_i·u) / c_s²
/// (the general kernel's rule, and the bulk kernel's at a wall).
fn bounce_back(src: &[f32], plane: usize, index: usize, i: usize, u: [f32; 2]) -> f32 {
    src[OPP[i] * plane + index] + W[i] * (C[i][0] as f32 * u[0] + C[i][1] as f32 * u[1]) * (2.0 * INV_CS2)
}

/// The odd non-equilibrium part of the population leaving `index` along `i`
/// after the last collision: its odd part less the equilibrium's and the
/// force's (S = 3 w c·F: a population carries -½ S of it before the
/// collision, +½ S after).
///
/// Bounce-back returns the leaving population's odd part with its sign
/// turned, which is right for the equilibrium (the side's velocity puts it
/// back) and wrong for the non-equilibrium. TRT's odd rate is slow where τ⁺
/// is near ½ (τ⁻ − ½ = magic / (τ⁺ − ½)), so that part grows with the cell
/// Reynolds number: at an inlet, where the flow carries momentum across the
/// side, the turned part drove a transverse velocity of 9% of the inflow's
/// peak out of a parabolic inlet at cell Re 10, and slowed its wall rows
/// by 17%. The inlet adds it back twice where ω⁻ < 1. Where ω⁻ > 1 (BGK near
/// τ ½) the collision itself turns its sign each step, and bounce-back
/// returns it with the sign the arriving population would have; at ω⁻ = 1
/// it is zero.
///
/// `here` is the cell's velocity, the force taken back out.
fn odd_non_equilibrium(
    k: &StreamCollide,
    src: &[f32],
    i: usize,
    index: usize,
    plane: usize,
    here: &lattice::Moments,
) -> f32 {
    let (cx, cy) = (C[i][0] as f32, C[i][1] as f32);
    let cf = cx * k.force[0] + cy * k.force[1];
    0.5 * (src[i * plane + index] - src[OPP[i] * plane + index])
        - 3.0 * W[i] * (cx * here.ux + cy * here.uy)
        - 0.5 * 3.0 * W[i] * cf
}

/// The direction with the x (resp. y) component of c_i negated.
const MIRROR_X: [usize; Q] = mirrored(0);
const MIRROR_Y: [usize; Q] = mirrored(1);

const fn mirrored(axis: usize) -> [usize; Q] {
    let mut out = [0; Q];
    let mut i = 0;
    while i < Q {
        let mut want = C[i];
        want[axis] = -want[axis];
        let mut j = 0;
        while C[j][0] != want[0] || C[j][1] != want[1] {
            j += 1;
        }
        out[i] = j;
        i += 1;
    }
    out
}

/// The population a body returns into (x, y) along `i`, its neighbour
/// `(x, y) - c_i` being solid: interpolated bounce-back with the link's wall
/// distance when the launch has them, else half-way bounce-back.
#[inline]
#[allow(clippy::too_many_arguments)]
fn body_wall(
    k: &StreamCollide,
    src: &[f32],
    flags: &[u8],
    walls: Walls,
    x: u32,
    y: u32,
    i: usize,
    index: usize,
    plane: usize,
) -> f32 {
    let q = if walls.cells > 0 {
        wall_distance(walls.table, walls.cells, index as u32, i)
    } else {
        0.5
    };
    let (bx, by) = (x as i64 + C[i][0] as i64, y as i64 + C[i][1] as i64);
    let a = k.active;
    let behind = (bx >= a.x0 as i64 && by >= a.y0 as i64 && bx < a.x1 as i64 && by < a.y1 as i64)
        .then(|| k.layout.index(bx as u32, by as u32))
        .filter(|b| flags[*b] == FLAG_FLUID);
    bouzidi(src, plane, index, behind, i, q)
}

/// Bouzidi's linear interpolated bounce-back for the population arriving at
/// `index` along `i` from a wall at fraction `q` of the link: for q < 1/2 it
/// interpolates between the leaving populations of the cell and of the fluid
/// cell `behind` it (half-way bounce-back when there is none), for q >= 1/2
/// between the leaving and the cell's own post-collision population along `i`.
/// The weights sum to one, so shifted populations need no correction.
#[inline]
pub fn bouzidi(f: &[f32], plane: usize, index: usize, behind: Option<usize>, i: usize, q: f32) -> f32 {
    let toward = OPP[i];
    let leaving = f[toward * plane + index];
    if q < 0.5 {
        match behind {
            Some(b) => 2.0 * q * leaving + (1.0 - 2.0 * q) * f[toward * plane + b],
            None => leaving,
        }
    } else {
        leaving / (2.0 * q) + (2.0 * q - 1.0) / (2.0 * q) * f[i * plane + index]
    }
}

/// Pressure outlet at rest density, `f_i = -f*_opp(i) + 2 w_i (δρ_b + ρ0 (4.5
/// (c_i·u_b)² − 1.5 u_b²)) + c_i (+ d_i)` in shifted populations (δρ_b the
/// hydrostatic part, [`outflow_rest_density`]), with the boundary velocity `u_b`
/// extrapolated half a cell from the last two cells of the row. It pins the
/// mean pressure, which channel flows need; acoustic waves reflect from it.
/// The anti-bounce-back alone returns the leaving population's viscous
/// (non-equilibrium) part with the wrong sign, `-(2 - ω⁺) n⁺_i`, which bent
/// a sheared flow's last columns the more, the larger τ⁺; `c_i` adds it
/// back, with `n⁺_i = -(w_i ρ0 τ⁺ / c_s²) Q_i : ∇u` from the velocity
/// gradient of the cell's neighbourhood ([`outflow_gradient`]). Its odd
/// non-equilibrium part, `-(1 - ω⁻) n⁻_i`, has the wrong sign where ω⁻ > 1,
/// which BGK near τ = ½ makes a reflection of nearly full strength: a plug
/// flow diverged from the outlet at τ 0.51. There it is dropped (`d_i`, the
/// leaving population's odd part less its equilibrium's and the force's;
/// at ω⁻ = 1 it is zero either way). Under a body force the reflection
/// also turns the force's odd part around, which drove flow through a
/// still fluid's outlet; it is put back.
#[inline]
fn anti_bounce_back(k: &StreamCollide, src: &[f32], x: u32, y: u32, i: usize, index: usize, plane: usize) -> f32 {
    let velocity = |index: usize| lattice::moments(&read_cell(src, plane, index), [-k.force[0], -k.force[1]]);
    let here = velocity(index);
    let upstream = (x > k.active.x0).then(|| velocity(k.layout.index(x - 1, y)));
    let u = match &upstream {
        Some(m) => [1.5 * here.ux - 0.5 * m.ux, 1.5 * here.uy - 0.5 * m.uy],
        None => [here.ux, here.uy],
    };
    let g = outflow_gradient(k, x, y, &here, upstream.as_ref(), velocity);
    let (cx, cy) = (C[i][0] as f32, C[i][1] as f32);
    let strain = (cx * cx - 1.0 / 3.0) * g[0] + (cy * cy - 1.0 / 3.0) * g[3] + cx * cy * (g[1] + g[2]);
    let correction = -(2.0 / k.omega_plus - 1.0) * 3.0 * W[i] * strain;
    let cu = cx * u[0] + cy * u[1];
    let leaving = OPP[i];
    let rest = outflow_rest_density(k, y);
    let (lx, ly) = (C[leaving][0] as f32, C[leaving][1] as f32);
    let cf = lx * k.force[0] + ly * k.force[1];
    // The force's odd part, S = 3 w c·F: a population before the collision
    // carries -½ S of it (its moment is j = ρu − F/2), after it +½ S; the
    // reflection turns the leaving one's +½ S into -½ S where the arriving
    // one needs +½ S of its own direction's.
    let value = -src[leaving * plane + index]
        + 2.0 * W[i] * (rest + 4.5 * cu * cu - 1.5 * (u[0] * u[0] + u[1] * u[1]))
        + correction
        + 3.0 * W[leaving] * cf;
    if k.omega_minus > 1.0 {
        value + odd_non_equilibrium(k, src, leaving, index, plane, &here)
    } else {
        value
    }
}

/// The outflow's density in row `y` less ρ0: hydrostatic under a body force
/// across the channel, `3 F_y (y − y_mid)`, so that a fluid at rest under
/// gravity stays at rest (a uniform rest density drove flow in and out
/// through the outlet's rows); zero (its sign aside) without one.
fn outflow_rest_density(k: &StreamCollide, y: u32) -> f32 {
    let middle = (k.active.y0 + k.active.y1 - 1) as f32 * 0.5;
    3.0 * k.force[1] * (y as f32 - middle)
}

/// The velocity gradient at the outflow cell (x, y) whose velocity is `here`,
/// `[∂x ux, ∂x uy, ∂y ux, ∂y uy]`, from its neighbours after the last
/// collision (`velocity` of a storage index): backward along x (zero without
/// an `upstream` cell), central along y, one-sided in an edge row of the
/// active region. The neighbours are fluid: a body keeps 4 cells from every
/// side ([`crate::LatticeConfig::check_bodies`]).
fn outflow_gradient(
    k: &StreamCollide,
    x: u32,
    y: u32,
    here: &lattice::Moments,
    upstream: Option<&lattice::Moments>,
    velocity: impl Fn(usize) -> lattice::Moments,
) -> [f32; 4] {
    let a = k.active;
    let dx = upstream.map_or([0.0; 2], |m| [here.ux - m.ux, here.uy - m.uy]);
    let row = |y: u32| velocity(k.layout.index(x, y));
    let dy = match (y > a.y0, y + 1 < a.y1) {
        (true, true) => {
            let (b, t) = (row(y - 1), row(y + 1));
            [0.5 * (t.ux - b.ux), 0.5 * (t.uy - b.uy)]
        }
        (false, true) => {
            let t = row(y + 1);
            [t.ux - here.ux, t.uy - here.uy]
        }
        (true, false) => {
            let b = row(y - 1);
            [here.ux - b.ux, here.uy - b.uy]
        }
        (false, false) => [0.0; 2],
    };
    [dx[0], dx[1], dy[0], dy[1]]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slots the host writes are the table's own positions of the listed
    /// cells (so the kernel's hint hits), on a tiled layout whose storage
    /// order is not the list's row-major order.
    #[test]
    fn a_cell_lists_slots_name_each_listed_cells_place_in_the_wall_table() {
        let layout = Layout {
            nx: 12,
            ny: 10,
            tile: [4, 4],
        };
        let active = Rect::new(1, 2, 11, 9);
        let cells: Vec<u32> = (0..active.cells() as u32)
            .step_by(3)
            .chain([active.cells() as u32 + 5])
            .collect();
        // Every fifth listed cell and one cell outside the list have body links.
        let number = |c: u32| (active.x0 + c % active.width(), active.y0 + c / active.width());
        let walled: Vec<u32> = cells[..cells.len() - 1]
            .iter()
            .step_by(5)
            .map(|&c| layout.index(number(c).0, number(c).1) as u32)
            .chain([layout.index(0, 0) as u32])
            .collect();
        let (table, wall_cells) = wall_distance_table(walled.iter().map(|&index| (index, 1, 0.25)));
        assert_eq!(wall_cells, walled.len());
        let words = cell_list_words(&cells, &table, wall_cells, &layout, &active);
        assert_eq!(&words[..cells.len()], &cells[..], "the numbers come first, unchanged");
        let slots = &words[cells.len()..];
        assert_eq!(slots.len(), cells.len());
        for (&c, &slot) in cells.iter().zip(slots) {
            if c as usize >= active.cells() {
                assert_eq!(slot, u32::MAX, "a number beyond the region");
                continue;
            }
            let index = layout.index(number(c).0, number(c).1) as u32;
            match walled.contains(&index) {
                true => {
                    assert_eq!(table[slot as usize], index, "cell {c}");
                    let bisected = wall_distance(&table, wall_cells, index, 1);
                    assert_eq!(bisected, f32::from_bits(table[wall_cells + slot as usize * Q + 1]));
                }
                false => assert_eq!(slot, u32::MAX, "cell {c} has no body link"),
            }
        }
        assert_eq!(slots.iter().filter(|s| **s != u32::MAX).count(), walled.len() - 1);
    }

    /// A bulk launch's threads, mapped to cells as `bulk_cell` in
    /// `kernels/lbm.cu` maps them, update each cell of the region once and
    /// nothing else: rows of 256, short rows of 32 x 8, and one run over the
    /// storage indices where short rows span most of the allocation's row.
    #[test]
    fn a_bulk_launch_covers_its_region_once_in_whichever_shape() {
        use crate::device::BufferId;
        let mut shapes = std::collections::BTreeSet::new();
        for (nx, ny, interior) in [
            (4096, 8, Rect::new(0, 0, 4096, 8)),
            (613, 37, Rect::new(40, 2, 102, 35)),
            (613, 37, Rect::new(29, 3, 285, 20)),
            (150, 41, Rect::new(4, 4, 146, 37)),
            (150, 41, Rect::new(0, 0, 150, 41)),
            (150, 41, Rect::new(3, 7, 147, 8)),
            (72, 72, Rect::new(5, 5, 67, 67)),
        ] {
            let launch = StreamCollideBulk {
                src: BufferId(0).into(),
                dst: BufferId(1).into(),
                skip: None,
                layout: Layout { nx, ny, tile: [nx, ny] },
                interior,
                sides: [BulkSide::Neighbour; 4],
                omega_plus: 1.0,
                omega_minus: 1.0,
                force: [0.0; 2],
            }
            .launch();
            let (grid, block) = (launch.grid, launch.block);
            let run = grid[1] == 1 && block[1] == 1 && interior.height() > 1;
            shapes.insert((block, run));
            let mut hits = vec![0u8; (nx * ny) as usize];
            let Rect { x0, y0, x1, y1 } = interior;
            for (bx, by, tx, ty) in threads_of(grid, block) {
                let cell = if run {
                    let index = ((y0 * nx + x0) & !31) + bx * block[0] + tx;
                    let (y, x) = (index / nx, index % nx);
                    (y >= y0 && y < y1 && x >= x0 && x < x1).then_some((x, y))
                } else {
                    let y = y0 + by * block[1] + ty;
                    let lead = (y * nx + x0) & 31;
                    let x = (x0 + bx * block[0] + tx).checked_sub(lead);
                    x.filter(|&x| x >= x0 && x < x1 && y < y1).map(|x| (x, y))
                };
                if let Some((x, y)) = cell {
                    hits[(y * nx + x) as usize] += 1;
                }
            }
            for y in 0..ny {
                for x in 0..nx {
                    let inside = x >= x0 && x < x1 && y >= y0 && y < y1;
                    assert_eq!(
                        hits[(y * nx + x) as usize],
                        u8::from(inside),
                        "{interior} in {nx}x{ny}: ({x}, {y})"
                    );
                }
            }
        }
        let seen: Vec<_> = shapes.into_iter().collect();
        assert_eq!(
            seen,
            [([32, 8, 1], false), ([256, 1, 1], false), ([256, 1, 1], true)],
            "every shape is exercised"
        );
    }

    /// Every (block x, block y, thread x, thread y) of a 2D launch.
    fn threads_of(grid: [u32; 3], block: [u32; 3]) -> impl Iterator<Item = (u32, u32, u32, u32)> {
        (0..grid[1]).flat_map(move |by| {
            (0..grid[0])
                .flat_map(move |bx| (0..block[1]).flat_map(move |ty| (0..block[0]).map(move |tx| (bx, by, tx, ty))))
        })
    }

    /// A list launch comes in nine threads a cell; the launch check takes
    /// that shape or one thread a cell (a fused batch's) over the same
    /// cells, and no grid that leaves cells out.
    #[test]
    fn a_list_launch_is_nine_threads_a_cell_or_one_and_covers_every_cell() {
        use crate::device::BufferId;
        let k = StreamCollide {
            cells: Some(CellList {
                cells: BufferId(3).into(),
                count: 300,
            }),
            ..StreamCollide::periodic(
                BufferId(0).into(),
                BufferId(1).into(),
                BufferId(2).into(),
                [40, 30],
                crate::fixtures::benchmark_physics(),
            )
        };
        let launch = k.launch();
        assert_eq!((launch.grid, launch.block), ([10, 1, 1], [LIST_CELLS, Q as u32, 1]));
        let size_of = |id: BufferId| {
            Some(if id.0 == 3 {
                4 * 300
            } else {
                population_bytes(&k.layout)
            })
        };
        let check = |grid: [u32; 3], block: [u32; 3]| {
            crate::kernels::check_launch(
                &Launch {
                    grid,
                    block,
                    ..launch.clone()
                },
                size_of,
            )
        };
        check(launch.grid, launch.block).unwrap();
        let per_cell = k.per_cell_shape();
        assert_eq!((per_cell.grid, per_cell.block), ([2, 1, 1], [BLOCK_THREADS, 1, 1]));
        check(per_cell.grid, per_cell.block).unwrap();
        for (grid, block) in [
            ([9, 1, 1], [LIST_CELLS, Q as u32, 1]),
            ([1, 1, 1], [BLOCK_THREADS, 1, 1]),
            ([2, 1, 1], [128, 2, 1]),
        ] {
            let e = check(grid, block).unwrap_err().to_string();
            assert!(e.contains("grid") && e.contains("block"), "{grid:?} {block:?}: {e}");
        }
    }
}
