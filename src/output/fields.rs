//! The fields of every patch in physical units, with the masks the writers
//! need: which cells are solid (inside a body) and which a finer patch covers.
//!
//! Values are computed from the stepper's density and velocity, as the
//! output ring brings them off the device; this module writes nothing.

use lbm_core::domain::geometry::Body;
use lbm_core::domain::hierarchy::{Hierarchy, Patch, Rect};
use lbm_core::output::FieldName;
use lbm_core::stepper::Fields;
use lbm_core::units::UnitSystem;
use lbm_core::{Boundary, LatticeConfig};
#[cfg(test)]
use lbm_core::{Driver, Stepper};
use ndarray::Array2;

/// One patch's active region at one instant, indexed `[y, x]`.
pub struct PatchFields {
    pub level: usize,
    pub patch: usize,
    /// Cells along x and y.
    pub size: [usize; 2],
    /// Physical position of the lower-left corner of the first cell, m.
    pub origin: [f64; 2],
    /// Cell size on this level, m.
    pub spacing: f64,
    /// Level-global cell index of the first cell (for AMR boxes).
    pub first_cell: [i64; 2],
    pub pressure: Array2<f32>,
    pub density: Array2<f32>,
    pub ux: Array2<f32>,
    pub uy: Array2<f32>,
    pub solid: Array2<bool>,
    /// Covered by a patch of the next finer level.
    pub covered: Array2<bool>,
    /// Which sides (x_min, x_max, y_min, y_max) lie on the domain's.
    pub on_boundary: [bool; 4],
    /// Along x and y: whether the patch spans a periodic axis, so that its
    /// first and last cells are neighbours.
    pub wraps: [bool; 2],
}

impl PatchFields {
    /// The scalar field `name` (a velocity component pair for `Velocity`,
    /// interleaved x, y per cell), row-major from the bottom row.
    pub fn values(&self, name: FieldName) -> Vec<f32> {
        let [nx, ny] = self.size;
        let mut out = Vec::with_capacity(nx * ny * name.components());
        for y in 0..ny {
            for x in 0..nx {
                let at = (y, x);
                match name {
                    FieldName::Pressure => out.push(self.pressure[at]),
                    FieldName::Density => out.push(self.density[at]),
                    FieldName::Velocity => out.extend([self.ux[at], self.uy[at]]),
                    FieldName::Speed => out.push(self.ux[at].hypot(self.uy[at])),
                    FieldName::Vorticity => out.push(self.vorticity(x, y)),
                }
            }
        }
        out
    }

    /// [`PatchFields::values`] as the NPY and VTK files hold them: NaN in a
    /// body's cells, whose populations are not a flow (the updates leave
    /// them as they were set up), so that no reader takes them for one.
    pub fn saved_values(&self, name: FieldName) -> Vec<f32> {
        let mut out = self.values(name);
        let c = name.components();
        for (k, _) in self.solid.iter().enumerate().filter(|(_, solid)| **solid) {
            out[k * c..(k + 1) * c].fill(f32::NAN);
        }
        out
    }

    /// ∂u_y/∂x − ∂u_x/∂y at cell (x, y): central differences inside the patch
    /// and across a periodic side (whose neighbour is the opposite edge's
    /// cell), one-sided at its other edges, across solid neighbours too.
    fn vorticity(&self, x: usize, y: usize) -> f32 {
        let [nx, ny] = self.size;
        let d = |f: &Array2<f32>, along_x: bool| -> f32 {
            let n = if along_x { nx } else { ny };
            let i = if along_x { x } else { y };
            if n < 2 {
                return 0.0;
            }
            let at = |k: usize| if along_x { f[(y, k)] } else { f[(k, x)] };
            if self.wraps[usize::from(!along_x)] {
                return (at((i + 1) % n) - at((i + n - 1) % n)) / (2.0 * self.spacing) as f32;
            }
            let (lo, hi) = (i.saturating_sub(1), (i + 1).min(n - 1));
            (at(hi) - at(lo)) / ((hi - lo) as f64 * self.spacing) as f32
        };
        d(&self.uy, true) - d(&self.ux, false)
    }

    /// Bilinear value of (p, u_x, u_y) at physical `point`, from the four cell
    /// centres around it (clamped to the patch), or `None` where a solid cell
    /// takes part.
    pub fn sample(&self, point: [f64; 2]) -> Option<[f64; 3]> {
        let corners = corners(self.origin, self.spacing, self.size, point);
        bilinear(corners.map(|(x, y, w)| {
            let at = (y, x);
            (w, self.solid[at], [self.pressure[at], self.ux[at], self.uy[at]])
        }))
    }

    /// Whether physical `point` lies inside this patch's active region.
    pub fn contains(&self, point: [f64; 2]) -> bool {
        holds(self.origin, self.spacing, self.size, point)
    }

    /// Whether this patch's cell centres surround physical `point`
    /// ([`surrounds`]).
    fn surrounds(&self, point: [f64; 2]) -> bool {
        surrounds(self.origin, self.spacing, self.size, self.on_boundary, point)
    }
}

/// Whether a patch at `origin` of `size` cells of `spacing` holds `point`.
fn holds(origin: [f64; 2], spacing: f64, size: [usize; 2], point: [f64; 2]) -> bool {
    (0..2).all(|k| point[k] >= origin[k] && point[k] <= origin[k] + size[k] as f64 * spacing)
}

/// Whether a patch at `origin` of `size` cells of `spacing`, whose sides
/// `on_boundary` lie on the domain's, interpolates `point` without clamping:
/// between its first and last cell centres along each axis, or in the half
/// cell beside a side of the domain, where no level has a centre beyond.
/// In the outer half cell of a refined patch's interface a sample clamped
/// to the patch's last centres is off by half a fine cell's gradient; the
/// coarser level's centres surround the point there.
fn surrounds(origin: [f64; 2], spacing: f64, size: [usize; 2], on_boundary: [bool; 4], point: [f64; 2]) -> bool {
    (0..2).all(|k| {
        let inset = |side: usize| if on_boundary[side] { 0.0 } else { 0.5 * spacing };
        point[k] >= origin[k] + inset(2 * k) && point[k] <= origin[k] + size[k] as f64 * spacing - inset(2 * k + 1)
    })
}

/// The four cell centres around physical `point` in a patch at `origin` of
/// `size` cells of `spacing` (clamped to the patch), as (x, y, weight).
fn corners(origin: [f64; 2], spacing: f64, size: [usize; 2], point: [f64; 2]) -> [(usize, usize, f64); 4] {
    let [nx, ny] = size;
    let local = [0, 1].map(|k| (point[k] - origin[k]) / spacing - 0.5);
    let clamp = |v: f64, n: usize| v.clamp(0.0, (n - 1) as f64);
    let (fx, fy) = (clamp(local[0], nx), clamp(local[1], ny));
    let (x0, y0) = (fx.floor() as usize, fy.floor() as usize);
    let (x1, y1) = ((x0 + 1).min(nx - 1), (y0 + 1).min(ny - 1));
    let (wx, wy) = (fx - x0 as f64, fy - y0 as f64);
    [
        (x0, y0, (1.0 - wx) * (1.0 - wy)),
        (x1, y0, wx * (1.0 - wy)),
        (x0, y1, (1.0 - wx) * wy),
        (x1, y1, wx * wy),
    ]
}

/// The weighted sum of (p, u_x, u_y) over `corners` (weight, solid,
/// values), corners of weight zero left out; beside a body, over the fluid
/// corners with their weights scaled to sum to one (a point in the fluid
/// half a cell from a body reads the flow, not NaN); `None` where every
/// corner that takes part is solid.
fn bilinear(corners: [(f64, bool, [f32; 3]); 4]) -> Option<[f64; 3]> {
    let mut out = [0.0; 3];
    let (mut fluid, mut solid_weight) = (0.0, 0.0);
    for (w, solid, values) in corners {
        if w == 0.0 {
            continue;
        }
        if solid {
            solid_weight += w;
            continue;
        }
        fluid += w;
        for (o, v) in out.iter_mut().zip(values) {
            *o += w * v as f64;
        }
    }
    match (fluid > 0.0, solid_weight > 0.0) {
        (false, _) => None,
        (true, false) => Some(out),
        // Beside a body: the fluid cells' values, their weights made whole.
        (true, true) => Some(out.map(|v| v / fluid)),
    }
}

/// Every patch of `hierarchy` in physical units, coarsest level first,
/// from `fields(k)`, the lattice fields of the k-th patch in hierarchy
/// order, with `lattice`'s bodies and periodic sides.
pub fn physical<E>(
    hierarchy: &Hierarchy,
    units: &UnitSystem,
    lattice: &LatticeConfig,
    mut fields: impl FnMut(usize, &Patch) -> Result<Fields, E>,
) -> Result<Vec<PatchFields>, E> {
    let velocity = units.dx / units.dt;
    let mut solids = solid_masks(hierarchy, &lattice.bodies).into_iter();
    let mut out = Vec::new();
    let mut k = 0;
    for (level, patches) in hierarchy.levels.iter().enumerate() {
        let scale = 2f64.powi(level as i32);
        let spacing = units.dx / scale;
        let children: Vec<[i64; 4]> = hierarchy
            .levels
            .get(level + 1)
            .map(|c| {
                c.iter()
                    .map(|c| [c.rect.x0, c.rect.y0, c.rect.x1, c.rect.y1].map(i64::from))
                    .collect()
            })
            .unwrap_or_default();
        for patch in patches {
            let fields = fields(k, patch)?;
            k += 1;
            let [gx0, gy0, _, _] = patch.global_active();
            let (ny, nx) = fields.delta_rho.dim();
            let solid = solids.next().expect("a mask per patch");
            assert_eq!(solid.dim(), (ny, nx), "patch {k}'s fields are its active region");
            let mut covered = Array2::from_elem((ny, nx), false);
            for ((y, x), c) in covered.indexed_iter_mut() {
                let (gx, gy) = (gx0 + x as i64, gy0 + y as i64);
                *c = children
                    .iter()
                    .any(|r| gx >= r[0] && gx < r[2] && gy >= r[1] && gy < r[3]);
            }
            out.push(PatchFields {
                level,
                patch: patch.index,
                size: [nx, ny],
                origin: [gx0 as f64 * spacing, gy0 as f64 * spacing],
                spacing,
                first_cell: [gx0, gy0],
                pressure: fields.delta_rho.mapv(|d| units.pressure_to_physical(d as f64) as f32),
                density: fields.delta_rho.mapv(|d| (units.density * (1.0 + d as f64)) as f32),
                ux: fields.ux.mapv(|u| (u as f64 * velocity) as f32),
                uy: fields.uy.mapv(|u| (u as f64 * velocity) as f32),
                solid,
                covered,
                on_boundary: patch.on_boundary,
                wraps: [0, 1].map(|k| {
                    patch.on_boundary[2 * k]
                        && patch.on_boundary[2 * k + 1]
                        && lattice.boundaries[2 * k] == Boundary::Periodic
                }),
            });
        }
    }
    Ok(out)
}

/// Each patch's solid cells, in hierarchy order: a cell whose centre lies in
/// a body and, where a finer patch covers the cell, one whose restriction
/// reads a solid cell of that patch (the 4 x 4 fine cells around it,
/// [`lbm_core::kernels::refine::restrict_to_parent`]). Those read as fluid
/// would bias the covered cell (halve its velocity beside a body); NaN there
/// keeps a coarse level's finite values the fine cells' own.
fn solid_masks(hierarchy: &Hierarchy, bodies: &[Body]) -> Vec<Array2<bool>> {
    // Per level, finest first: each patch's active region (level-global
    // cells) and mask.
    let mut levels: Vec<Vec<([i64; 4], Array2<bool>)>> = Vec::new();
    for (level, patches) in hierarchy.levels.iter().enumerate().rev() {
        let scale = 2f64.powi(level as i32);
        let finer = levels.last().map_or(&[][..], Vec::as_slice);
        let masks = patches
            .iter()
            .map(|patch| {
                let region = patch.global_active();
                let [x0, y0, x1, y1] = region;
                let mask = Array2::from_shape_fn(((y1 - y0) as usize, (x1 - x0) as usize), |(y, x)| {
                    let (gx, gy) = (x0 + x as i64, y0 + y as i64);
                    let (fx, fy) = (2 * gx, 2 * gy);
                    match finer
                        .iter()
                        .find(|(r, _)| fx >= r[0] && fx + 1 < r[2] && fy >= r[1] && fy + 1 < r[3])
                    {
                        Some((r, fine)) => {
                            // The restriction's 4 x 4 fine cells, within the patch.
                            let (ix, iy) = (fx - r[0], fy - r[1]);
                            let (w, h) = (r[2] - r[0], r[3] - r[1]);
                            (iy - 1..iy + 3).filter(|y| (0..h).contains(y)).any(|y| {
                                (ix - 1..ix + 3)
                                    .filter(|x| (0..w).contains(x))
                                    .any(|x| fine[(y as usize, x as usize)])
                            })
                        }
                        None => {
                            let centre = [(gx as f64 + 0.5) / scale, (gy as f64 + 0.5) / scale];
                            bodies.iter().any(|b| b.shape.contains(centre))
                        }
                    }
                });
                (region, mask)
            })
            .collect();
        levels.push(masks);
    }
    levels.into_iter().rev().flatten().map(|(_, mask)| mask).collect()
}

/// The cells a point probe reads, found once for a run: the finest patch
/// holding the point and the (at most) 2x2 cells around it. A sample then
/// needs only their moments, not the patch's: [`ProbeCells::sample`] gives
/// the bits [`PatchFields::sample`] gives from the whole patch.
#[derive(Clone, Debug)]
pub struct ProbeCells {
    /// The patch, in hierarchy order.
    pub patch: usize,
    /// The cells, in the patch's storage coordinates (what `save_moments`
    /// takes).
    pub rect: Rect,
    /// Each corner's row-major index in `rect`, its weight, whether it is
    /// solid.
    corners: [(usize, f64, bool); 4],
}

impl ProbeCells {
    /// The most cells a probe reads: the four centres around its point.
    pub const MAX_CELLS: usize = 4;

    /// The cells physical `point` reads in `hierarchy`, or `None` where no
    /// patch holds it; the patch is [`finest_at`]'s and the corners
    /// [`PatchFields::sample`]'s.
    pub fn find(hierarchy: &Hierarchy, units: &UnitSystem, bodies: &[Body], point: [f64; 2]) -> Option<ProbeCells> {
        // The finest patch whose centres surround the point, else the
        // finest that holds it (hierarchy order is coarsest first).
        let (mut surrounding, mut holding) = (None, None);
        for (k, patch) in hierarchy.patches().enumerate() {
            let spacing = units.dx / 2f64.powi(patch.level as i32);
            let [gx0, gy0, _, _] = patch.global_active();
            let size = [patch.active.width() as usize, patch.active.height() as usize];
            let origin = [gx0 as f64 * spacing, gy0 as f64 * spacing];
            // A patch whose centres surround the point holds it too.
            if holds(origin, spacing, size, point) {
                let found = Some((k, patch, corners(origin, spacing, size, point)));
                holding = found;
                if surrounds(origin, spacing, size, patch.on_boundary, point) {
                    surrounding = found;
                }
            }
        }
        let (k, patch, corners) = surrounding.or(holding)?;
        let scale = 2f64.powi(patch.level as i32);
        let [gx0, gy0, _, _] = patch.global_active();
        let ([x0, y0], [x1, y1]) = ([corners[0].0, corners[0].1], [corners[3].0, corners[3].1]);
        let width = x1 - x0 + 1;
        let corners = corners.map(|(x, y, w)| {
            let (gx, gy) = (gx0 + x as i64, gy0 + y as i64);
            let centre = [(gx as f64 + 0.5) / scale, (gy as f64 + 0.5) / scale];
            (
                (y - y0) * width + (x - x0),
                w,
                bodies.iter().any(|b| b.shape.contains(centre)),
            )
        });
        let a = patch.active;
        let rect = Rect::new(
            a.x0 + x0 as u32,
            a.y0 + y0 as u32,
            a.x0 + x1 as u32 + 1,
            a.y0 + y1 as u32 + 1,
        );
        Some(ProbeCells {
            patch: k,
            rect,
            corners,
        })
    }

    /// (p, u_x, u_y) from the lattice fields of [`ProbeCells::rect`], or
    /// `None` where a solid cell takes part.
    pub fn sample(&self, fields: &Fields, units: &UnitSystem) -> Option<[f64; 3]> {
        let velocity = units.dx / units.dt;
        let width = fields.delta_rho.dim().1;
        bilinear(self.corners.map(|(i, w, solid)| {
            let at = (i / width, i % width);
            // Rounded to f32 as `physical` stores them.
            let values = [
                units.pressure_to_physical(fields.delta_rho[at] as f64) as f32,
                (fields.ux[at] as f64 * velocity) as f32,
                (fields.uy[at] as f64 * velocity) as f32,
            ];
            (w, solid, values)
        }))
    }
}

/// [`physical`] from direct downloads of the stepper's populations: what
/// the ring's files are compared with.
#[cfg(test)]
pub fn gather<D: Driver>(
    stepper: &Stepper<D>,
    units: &UnitSystem,
    lattice: &LatticeConfig,
) -> lbm_core::Result<Vec<PatchFields>> {
    physical(&stepper.hierarchy(), units, lattice, |_, p| {
        stepper.fields(p.level, p.index)
    })
}

/// The patch a sample at physical `point` reads: the finest whose cell
/// centres surround it (see `surrounds`), else the finest holding it.
pub fn finest_at(patches: &[PatchFields], point: [f64; 2]) -> Option<&PatchFields> {
    patches
        .iter()
        .rev()
        .find(|p| p.surrounds(point))
        .or_else(|| patches.iter().rev().find(|p| p.contains(point)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Beside a body the fluid corners' values are averaged with their
    /// weights made whole; with no solid corner the sum is as before; with
    /// every weighted corner solid there is none.
    #[test]
    fn a_sample_beside_a_body_reads_its_fluid_corners() {
        let v = |k: f32| [k, 10.0 * k, 100.0 * k];
        let fluid = [
            (0.25, false, v(1.0)),
            (0.25, false, v(2.0)),
            (0.25, false, v(3.0)),
            (0.25, false, v(4.0)),
        ];
        assert_eq!(bilinear(fluid), Some([2.5, 25.0, 250.0]));
        let beside = [
            (0.5, true, v(9.0)),
            (0.1, false, v(1.0)),
            (0.3, false, v(2.0)),
            (0.1, true, v(9.0)),
        ];
        let [p, ..] = bilinear(beside).unwrap();
        assert!((p - (0.1 + 0.6) / 0.4).abs() < 1e-12, "{p}");
        let inside = [
            (0.6, true, v(9.0)),
            (0.4, true, v(9.0)),
            (0.0, false, v(1.0)),
            (0.0, false, v(2.0)),
        ];
        assert_eq!(bilinear(inside), None);
    }

    /// A patch of `size` cells of `spacing` at `origin` whose pressure and
    /// velocity are `linear` at each cell centre.
    fn patch(level: usize, origin: [f64; 2], spacing: f64, size: [usize; 2], on_boundary: [bool; 4]) -> PatchFields {
        let field = |k: f64| {
            Array2::from_shape_fn((size[1], size[0]), |(j, i)| {
                let [x, y] = [
                    origin[0] + (i as f64 + 0.5) * spacing,
                    origin[1] + (j as f64 + 0.5) * spacing,
                ];
                (k * (1.0 + 2.0 * x + 3.0 * y)) as f32
            })
        };
        PatchFields {
            level,
            patch: 0,
            size,
            origin,
            spacing,
            first_cell: [0, 0],
            pressure: field(1.0),
            density: field(1.0),
            ux: field(0.5),
            uy: field(-0.25),
            solid: Array2::from_elem((size[1], size[0]), false),
            covered: Array2::from_elem((size[1], size[0]), false),
            on_boundary,
            wraps: [false; 2],
        }
    }

    /// A linear field is sampled exactly wherever cell centres surround the
    /// point: in the outer half cell of a refined patch's interface the
    /// coarser level's centres do (the patch's own would clamp), while
    /// beside a side of the domain the finest patch there clamps to its own
    /// centres, the nearest any level has.
    #[test]
    fn a_sample_beside_a_patch_interface_reads_the_level_whose_centres_surround_it() {
        let coarse = patch(0, [0.0, 0.0], 1.0, [8, 8], [true; 4]);
        // A fine patch over coarse cells 2..6 x 0..4, on the y_min side.
        let fine = patch(1, [2.0, 0.0], 0.5, [8, 8], [false, false, true, false]);
        let patches = [coarse, fine];
        let exact = |[x, y]: [f64; 2]| 1.0 + 2.0 * x + 3.0 * y;
        for (point, level) in [
            ([3.0, 2.0], 1),
            ([2.3, 2.0], 1),
            ([2.1, 2.0], 0),
            ([5.9, 2.0], 0),
            ([4.0, 3.8], 0),
            ([4.0, 0.3], 1),
        ] {
            let at = finest_at(&patches, point).unwrap();
            assert_eq!(at.level, level, "{point:?}");
            let [p, ux, uy] = at.sample(point).unwrap();
            let want = exact(point);
            assert!((p - want).abs() < 1e-5 * want, "{point:?}: {p} against {want}");
            assert!((ux - 0.5 * want).abs() < 1e-5 * want && (uy + 0.25 * want).abs() < 1e-5 * want);
        }
        // Within half a cell of the y_min side: the fine patch's first
        // centres (y 0.25), not the coarse level's (y 0.5).
        let point = [4.0, 0.1];
        let at = finest_at(&patches, point).unwrap();
        assert_eq!(at.level, 1);
        assert!((at.sample(point).unwrap()[0] - exact([4.0, 0.25])).abs() < 1e-5);
    }
}
