//! `kernels/health.cu`: `check_health`, the divergence check of one patch:
//! the first fluid cell of the active region with a non-finite population and
//! the first whose velocity exceeds a speed limit. Launch struct and CPU
//! reference.
//!
//! What it does not do: reset its result (the caller's memset to 0xFF does,
//! so that several launches may share one buffer at byte offsets), decide what
//! a finding means (the stepper reports it), or look at solid or ghost cells.

use rayon::prelude::*;

use crate::device::{Arg, BufferRef, Kernel, Launch};
use crate::domain::geometry::{FLAG_FLUID, NO_CELL};
use crate::domain::hierarchy::{Layout, Rect};
use crate::error::{LaunchProblem, Result};
use crate::lattice::{self, Q};

use super::{
    ArgReader, BufferUse, HostViews, KernelArgs, check_patch, population_bytes, push_layout, push_rect, read_cell,
};

/// u32 words of one patch's result: the active-region index (row-major, x
/// fastest) of the first cell with a non-finite population, then of the first
/// cell faster than the limit; [`NO_CELL`] where there is none.
pub const HEALTH_WORDS: usize = 2;

/// `check_health`: one thread per active cell. Keeps in `result` the smallest
/// index of each kind of problem it finds, so that the outcome does not depend
/// on the order threads run in (`atomicMin` on the device).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckHealth {
    /// The patch's current populations (shifted, `f_i - w_i`).
    pub f: BufferRef,
    pub flags: BufferRef,
    /// [`HEALTH_WORDS`] u32, reset to [`NO_CELL`] before the launch.
    pub result: BufferRef,
    pub layout: Layout,
    pub active: Rect,
    /// Lattice speed above which a cell is too fast; a cell with a
    /// non-finite population is reported as such and not tested for speed.
    pub speed_limit: f32,
}

impl KernelArgs for CheckHealth {
    const KERNEL: Kernel = Kernel::CheckHealth;
    const PARAMS: &'static [&'static str] = &[
        "f",
        "flags",
        "result",
        "nx",
        "ny",
        "tile_x",
        "tile_y",
        "x0",
        "y0",
        "x1",
        "y1",
        "speed_limit",
    ];

    fn launch(&self) -> Launch {
        let mut args = vec![self.f.into(), self.flags.into(), self.result.into()];
        push_layout(&mut args, &self.layout);
        push_rect(&mut args, &self.active);
        args.push(Arg::F32(self.speed_limit));
        Launch::linear(Kernel::CheckHealth, self.active.cells(), args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        Ok(CheckHealth {
            f: r.buffer()?,
            flags: r.buffer()?,
            result: r.buffer()?,
            layout: r.layout()?,
            active: r.rect()?,
            speed_limit: r.f32()?,
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
            BufferUse::read("flags", self.flags, self.layout.plane_cells(), 1),
            BufferUse::read_write("result", self.result, HEALTH_WORDS * 4, 4),
        ]
    }

    fn run_on_host(&self, views: &mut HostViews) {
        let r = &views.reads;
        check_health(self, r.get("f"), r.get("flags"), views.writes.get("result"));
    }
}

/// Squared speed of a cell from its shifted populations, with the moments of
/// the observation path but without Guo's half-force shift: a body force
/// moves the speed by F/2, far below any divergence limit. f32 in the same
/// order as the kernel, so both backends flag the same cells.
#[inline]
pub fn speed_squared(f: &[f32; Q]) -> f32 {
    let m = lattice::moments(f, [0.0, 0.0]);
    m.ux * m.ux + m.uy * m.uy
}

/// Lowers `result[0]` to the smallest active-region index of a fluid cell
/// with a non-finite population and `result[1]` to that of a cell whose
/// [`speed_squared`] exceeds the squared limit (comparing squares keeps a
/// square root off the device). Solid cells and cells outside the active
/// region are not read.
pub fn check_health(k: &CheckHealth, f: &[f32], flags: &[u8], result: &mut [u32]) {
    let (layout, a) = (k.layout, k.active);
    let plane = layout.plane_cells();
    let limit_squared = k.speed_limit * k.speed_limit;
    let row = |y: u32| {
        let mut found = [NO_CELL; HEALTH_WORDS];
        for x in a.x0..a.x1 {
            let index = layout.index(x, y);
            if flags[index] != FLAG_FLUID {
                continue;
            }
            let cell = (y - a.y0) * a.width() + (x - a.x0);
            let populations = read_cell(f, plane, index);
            let problem = match populations.iter().all(|v| v.is_finite()) {
                false => 0,
                true if speed_squared(&populations) > limit_squared => 1,
                true => continue,
            };
            found[problem] = found[problem].min(cell);
        }
        found
    };
    let found = (a.y0..a.y1)
        .into_par_iter()
        .map(row)
        .reduce(|| [NO_CELL; HEALTH_WORDS], |p, q| [p[0].min(q[0]), p[1].min(q[1])]);
    for (slot, cell) in result.iter_mut().zip(found) {
        *slot = (*slot).min(cell);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::BufferId;
    use crate::domain::geometry::FLAG_SOLID;
    use crate::lattice::{Moments, equilibrium};

    /// A 12x10 allocation in 4x4 tiles with the active region inset by two
    /// cells (a refined patch's ghost band), every cell at rest but for
    /// `edit`, which may change populations and flags by allocation cell.
    struct Grid {
        layout: Layout,
        active: Rect,
        f: Vec<f32>,
        flags: Vec<u8>,
    }

    impl Grid {
        fn new() -> Grid {
            let layout = Layout {
                nx: 12,
                ny: 10,
                tile: [4, 4],
            };
            let plane = layout.plane_cells();
            let flow = equilibrium(Moments {
                delta_rho: 0.01,
                ux: 0.05,
                uy: -0.03,
            });
            let mut f = vec![0.0; Q * plane];
            for cell in 0..plane {
                for (i, v) in flow.iter().enumerate() {
                    f[i * plane + cell] = *v;
                }
            }
            Grid {
                layout,
                active: Rect::new(2, 2, 10, 8),
                f,
                flags: vec![FLAG_FLUID; plane],
            }
        }
        fn set(&mut self, [x, y]: [u32; 2], i: usize, value: f32) {
            let plane = self.layout.plane_cells();
            self.f[i * plane + self.layout.index(x, y)] = value;
        }
        fn moving(&mut self, at: [u32; 2], ux: f32, uy: f32) {
            for (i, v) in equilibrium(Moments { delta_rho: 0.0, ux, uy }).iter().enumerate() {
                self.set(at, i, *v);
            }
        }
        fn solid(&mut self, [x, y]: [u32; 2]) {
            self.flags[self.layout.index(x, y)] = FLAG_SOLID;
        }
        /// The result words after one check that starts from `result`.
        fn check_into(&self, speed_limit: f32, mut result: [u32; HEALTH_WORDS]) -> [u32; HEALTH_WORDS] {
            let k = CheckHealth {
                f: BufferId(0).into(),
                flags: BufferId(1).into(),
                result: BufferId(2).into(),
                layout: self.layout,
                active: self.active,
                speed_limit,
            };
            check_health(&k, &self.f, &self.flags, &mut result);
            result
        }
        /// The result words after one check from a reset result.
        fn check(&self, speed_limit: f32) -> [u32; HEALTH_WORDS] {
            self.check_into(speed_limit, [NO_CELL; HEALTH_WORDS])
        }
    }

    /// The active-region index of allocation cell (x, y) of [`Grid::new`].
    fn cell(x: u32, y: u32) -> u32 {
        (y - 2) * 8 + (x - 2)
    }

    const LIMIT: f32 = 0.2;

    #[test]
    fn a_clean_lattice_has_no_problem() {
        assert_eq!(Grid::new().check(LIMIT), [NO_CELL, NO_CELL]);
    }

    #[test]
    fn each_problem_is_found_at_its_cell() {
        type Edit = fn(&mut Grid);
        let cases: [(&str, Edit, [u32; 2]); 7] = [
            ("NaN", |g| g.set([5, 4], 3, f32::NAN), [cell(5, 4), NO_CELL]),
            ("infinity", |g| g.set([9, 7], 8, f32::INFINITY), [cell(9, 7), NO_CELL]),
            ("minus infinity", |g| g.set([2, 2], 0, f32::NEG_INFINITY), [0, NO_CELL]),
            (
                "two bad cells: the smaller index wins",
                |g| {
                    g.set([8, 6], 1, f32::NAN);
                    g.set([3, 6], 5, f32::INFINITY);
                },
                [cell(3, 6), NO_CELL],
            ),
            ("too fast", |g| g.moving([6, 3], 0.15, -0.15), [NO_CELL, cell(6, 3)]),
            (
                "both kinds, each its own first cell",
                |g| {
                    g.moving([7, 5], 0.0, 0.3);
                    g.moving([4, 7], -0.25, 0.0);
                    g.set([9, 3], 2, f32::NAN);
                },
                [cell(9, 3), cell(7, 5)],
            ),
            (
                "a non-finite cell is not also too fast",
                |g| g.set([4, 4], 1, f32::INFINITY),
                [cell(4, 4), NO_CELL],
            ),
        ];
        for (what, edit, want) in cases {
            let mut grid = Grid::new();
            edit(&mut grid);
            assert_eq!(grid.check(LIMIT), want, "{what}");
        }
    }

    #[test]
    fn the_limit_applies_to_the_speed() {
        let mut grid = Grid::new();
        grid.moving([5, 5], 0.12, 0.16);
        let at = grid.layout.index(5, 5);
        let speed = speed_squared(&read_cell(&grid.f, grid.layout.plane_cells(), at)).sqrt();
        assert!((speed - 0.2).abs() < 1e-6, "{speed}");
        assert_eq!(grid.check(speed * 1.001), [NO_CELL, NO_CELL]);
        assert_eq!(grid.check(speed * 0.999), [NO_CELL, cell(5, 5)]);
    }

    #[test]
    fn solid_and_ghost_cells_are_ignored() {
        let mut grid = Grid::new();
        grid.solid([5, 4]);
        grid.set([5, 4], 3, f32::NAN);
        grid.solid([6, 4]);
        grid.moving([6, 4], 0.5, 0.0);
        // Ghost cells beyond each side of the active region 2..10 x 2..8.
        for ghost in [[1, 4], [10, 4], [5, 1], [5, 8], [0, 0], [11, 9]] {
            grid.set(ghost, 2, f32::NAN);
        }
        for ghost in [[1, 5], [10, 5], [6, 1], [6, 8]] {
            grid.moving(ghost, 0.5, 0.5);
        }
        assert_eq!(grid.check(LIMIT), [NO_CELL, NO_CELL]);
        // The same cells as fluid are found: only the flags hid them.
        grid.flags.fill(FLAG_FLUID);
        assert_eq!(grid.check(LIMIT), [cell(5, 4), cell(6, 4)]);
    }

    #[test]
    fn a_result_keeps_what_an_earlier_launch_found_first() {
        let mut grid = Grid::new();
        grid.set([9, 7], 4, f32::NAN);
        grid.moving([3, 3], 0.3, 0.0);
        assert_eq!(grid.check_into(LIMIT, [3, 50]), [3, cell(3, 3)]);
    }
}
