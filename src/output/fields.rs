//! The fields of every patch in physical units, with the masks the writers
//! need: which cells are solid (inside a body) and which a finer patch covers.
//!
//! Values are computed from the stepper's density and velocity, as the
//! output ring brings them off the device; this module writes nothing.

use lbm_core::domain::geometry::Body;
use lbm_core::domain::hierarchy::{Hierarchy, Patch};
use lbm_core::output::FieldName;
use lbm_core::stepper::Fields;
use lbm_core::units::UnitSystem;
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

    /// ∂u_y/∂x − ∂u_x/∂y at cell (x, y): central differences inside the patch,
    /// one-sided at its edges, across solid neighbours too.
    fn vorticity(&self, x: usize, y: usize) -> f32 {
        let [nx, ny] = self.size;
        let d = |f: &Array2<f32>, along_x: bool| -> f32 {
            let n = if along_x { nx } else { ny };
            let i = if along_x { x } else { y };
            if n < 2 {
                return 0.0;
            }
            let (lo, hi) = (i.saturating_sub(1), (i + 1).min(n - 1));
            let at = |k: usize| if along_x { f[(y, k)] } else { f[(k, x)] };
            (at(hi) - at(lo)) / ((hi - lo) as f64 * self.spacing) as f32
        };
        d(&self.uy, true) - d(&self.ux, false)
    }

    /// Bilinear value of (p, u_x, u_y) at physical `point`, from the four cell
    /// centres around it (clamped to the patch), or `None` where a solid cell
    /// takes part.
    pub fn sample(&self, point: [f64; 2]) -> Option<[f64; 3]> {
        let [nx, ny] = self.size;
        let local = [0, 1].map(|k| (point[k] - self.origin[k]) / self.spacing - 0.5);
        let clamp = |v: f64, n: usize| v.clamp(0.0, (n - 1) as f64);
        let (fx, fy) = (clamp(local[0], nx), clamp(local[1], ny));
        let (x0, y0) = (fx.floor() as usize, fy.floor() as usize);
        let (x1, y1) = ((x0 + 1).min(nx - 1), (y0 + 1).min(ny - 1));
        let (wx, wy) = (fx - x0 as f64, fy - y0 as f64);
        let corners = [
            (x0, y0, (1.0 - wx) * (1.0 - wy)),
            (x1, y0, wx * (1.0 - wy)),
            (x0, y1, (1.0 - wx) * wy),
            (x1, y1, wx * wy),
        ];
        let mut out = [0.0; 3];
        for (x, y, w) in corners {
            if w == 0.0 {
                continue;
            }
            if self.solid[(y, x)] {
                return None;
            }
            for (o, f) in out.iter_mut().zip([&self.pressure, &self.ux, &self.uy]) {
                *o += w * f[(y, x)] as f64;
            }
        }
        Some(out)
    }

    /// Whether physical `point` lies inside this patch's active region.
    pub fn contains(&self, point: [f64; 2]) -> bool {
        (0..2).all(|k| point[k] >= self.origin[k] && point[k] <= self.origin[k] + self.size[k] as f64 * self.spacing)
    }
}

/// The fields of every patch, coarsest level first.
/// Every patch of `hierarchy` in physical units, from `fields(k)`, the
/// lattice fields of the k-th patch in hierarchy order.
pub fn physical<E>(
    hierarchy: &Hierarchy,
    units: &UnitSystem,
    bodies: &[Body],
    mut fields: impl FnMut(usize, &Patch) -> Result<Fields, E>,
) -> Result<Vec<PatchFields>, E> {
    let velocity = units.dx / units.dt;
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
            let mut solid = Array2::from_elem((ny, nx), false);
            let mut covered = Array2::from_elem((ny, nx), false);
            for ((y, x), s) in solid.indexed_iter_mut() {
                let (gx, gy) = (gx0 + x as i64, gy0 + y as i64);
                let centre = [(gx as f64 + 0.5) / scale, (gy as f64 + 0.5) / scale];
                *s = bodies.iter().any(|b| b.shape.contains(centre));
                covered[(y, x)] = children
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
            });
        }
    }
    Ok(out)
}

/// [`physical`] from direct downloads of the stepper's populations: what
/// the ring's files are compared with.
#[cfg(test)]
pub fn gather<D: Driver>(
    stepper: &Stepper<D>,
    units: &UnitSystem,
    bodies: &[Body],
) -> lbm_core::Result<Vec<PatchFields>> {
    physical(&stepper.hierarchy(), units, bodies, |_, p| {
        stepper.fields(p.level, p.index)
    })
}

/// The finest patch holding physical `point`.
pub fn finest_at(patches: &[PatchFields], point: [f64; 2]) -> Option<&PatchFields> {
    patches.iter().rev().find(|p| p.contains(point))
}
