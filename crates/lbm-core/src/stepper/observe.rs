//! Reads of a stepper's state from the device: fields, raw populations, the
//! exchange ledgers, surface density and total mass, and the upload of an
//! initial state. Each read downloads what it needs and fails the stepper when
//! the driver fails.
//!
//! What it does not do: wait for anything but its own downloads.

use ndarray::Array2;

use crate::device::{BufferId, Driver};
use crate::domain::geometry::{self, FLAG_SOLID};
use crate::domain::hierarchy::{Patch, Rect};
use crate::error::{Error, Result};
use crate::kernels::exchange::EXCHANGE_WORDS;
use crate::kernels::moments::{MOMENT_PLANES, active_moments};
use crate::lattice::{self, Moments, Q};
use crate::ledger::ExchangeRecord;
use crate::schedule::plan::current_buffer;

use super::State;

/// Density and velocity of a patch's active region, indexed `[y, x]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Fields {
    pub delta_rho: Array2<f32>,
    pub ux: Array2<f32>,
    pub uy: Array2<f32>,
}

impl Fields {
    /// Fields of regions with the same rows, side by side in the order
    /// given: a split run's base grid from its slabs.
    pub fn side_by_side(parts: &[Fields]) -> Fields {
        let join = |pick: fn(&Fields) -> &Array2<f32>| {
            let views: Vec<_> = parts.iter().map(|f| pick(f).view()).collect();
            ndarray::concatenate(ndarray::Axis(1), &views).expect("every part holds the same rows")
        };
        Fields {
            delta_rho: join(|f| &f.delta_rho),
            ux: join(|f| &f.ux),
            uy: join(|f| &f.uy),
        }
    }

    /// The fields of `active` from the three planes `save_moments` writes.
    pub fn from_planes(active: &Rect, planes: &[f32]) -> Fields {
        let shape = (active.height() as usize, active.width() as usize);
        let cells = active.cells();
        let plane = |k: usize| {
            Array2::from_shape_vec(shape, planes[k * cells..(k + 1) * cells].to_vec()).expect("a plane per field")
        };
        Fields {
            delta_rho: plane(0),
            ux: plane(1),
            uy: plane(2),
        }
    }
}

pub(super) fn upload_state<D: Driver>(
    driver: &mut D,
    state: &State,
    init: &impl Fn(usize, f64, f64) -> Moments,
) -> Result<()> {
    let patches: Vec<Patch> = state.hierarchy.patches().cloned().collect();
    for patch in &patches {
        let layout = patch.layout;
        let plane = layout.plane_cells();
        let mut f = vec![0.0f32; Q * plane];
        // The populations held between steps are after a collision, whose
        // momentum carries half of the step's force on top of the velocity
        // (the fields read `j - F/2`): without it a forced flow started at
        // -F/2 and lagged the exact one by half a step ever after.
        let force = state.physics[patch.level].force;
        // A body's cells start at rest whatever the flow around them starts
        // at: the updates leave them as set up, and what reads them (the
        // vorticity beside a body) takes them at rest.
        let (flags, _) = geometry::rasterize(patch, &state.lattice.level_bodies(patch.level));
        for y in 0..layout.ny {
            for x in 0..layout.nx {
                let [cx, cy] = geometry::cell_center(patch, x, y);
                let m = match flags[layout.index(x, y)] == FLAG_SOLID {
                    true => Moments::default(),
                    false => init(patch.level, cx, cy),
                };
                let feq = lattice::equilibrium(Moments {
                    ux: m.ux + 0.5 * force[0],
                    uy: m.uy + 0.5 * force[1],
                    ..m
                });
                let index = layout.index(x, y);
                for (i, v) in feq.iter().enumerate() {
                    f[i * plane + index] = *v;
                }
            }
        }
        let bytes: &[u8] = bytemuck::cast_slice(&f);
        for buffer in state.resources.patches[patch.level][patch.index].f {
            driver.upload(buffer, 0, bytes)?;
        }
    }
    Ok(())
}

fn patch_of(state: &State, level: usize, patch: usize) -> Result<&Patch> {
    state
        .hierarchy
        .levels
        .get(level)
        .and_then(|l| l.get(patch))
        .ok_or_else(|| {
            Error::parameter(
                "level/patch",
                format!("{level}/{patch}"),
                "an existing level and patch of the hierarchy",
            )
        })
}

/// The finest patch whose active region holds `point` (base lattice units).
fn finest_patch_at(state: &State, point: [f64; 2]) -> Result<(usize, usize)> {
    let mut found = None;
    for (level, patches) in state.hierarchy.levels.iter().enumerate() {
        let scale = 2f64.powi(level as i32);
        for p in patches {
            let [x0, y0, x1, y1] = p.global_active().map(|v| v as f64);
            let (x, y) = (point[0] * scale, point[1] * scale);
            if x >= x0 && x < x1 && y >= y0 && y < y1 {
                found = Some((level, p.index));
            }
        }
    }
    found.ok_or_else(|| Error::parameter("point", format!("{point:?}"), "a point inside the domain"))
}

pub(super) fn download_current<D: Driver>(
    driver: &mut D,
    state: &mut State,
    level: usize,
    patch: usize,
) -> Result<Vec<f32>> {
    let plane = patch_of(state, level, patch)?.layout.plane_cells();
    // A patch with children holds restricted cells, which may wait for the settle.
    let refined = state
        .hierarchy
        .levels
        .get(level + 1)
        .is_some_and(|children| children.iter().any(|c| c.parent == Some(patch)));
    if refined {
        state.settle(driver)?;
    }
    let mut f = vec![0.0f32; Q * plane];
    let buffer: BufferId = current_buffer(&state.resources, level, patch, state.step_count);
    if let Err(e) = driver.download(buffer, 0, bytemuck::cast_slice_mut(&mut f)) {
        state.fail();
        return Err(e);
    }
    Ok(f)
}

pub(super) fn fields<D: Driver>(driver: &mut D, state: &mut State, level: usize, patch: usize) -> Result<Fields> {
    let f = download_current(driver, state, level, patch)?;
    let p = patch_of(state, level, patch)?;
    let a = p.active;
    let mut planes = vec![0.0f32; MOMENT_PLANES * a.cells()];
    active_moments(&p.layout, &a, state.physics[level].force, &f, &mut planes);
    Ok(Fields::from_planes(&a, &planes))
}

pub(super) fn read_exchange<D: Driver>(
    driver: &mut D,
    state: &mut State,
    body: usize,
    start: u64,
    end: u64,
    window: bool,
) -> Result<ExchangeRecord> {
    let Some(level) = state.lattice.bodies.get(body).map(|b| b.level) else {
        return Err(Error::parameter(
            "body",
            body,
            &format!("a body index below {}", state.lattice.bodies.len()),
        ));
    };
    let slot = state.resources.body_slots[level]
        .iter()
        .position(|b| *b == body)
        .expect("every body has a slot");
    let acc = state
        .resources
        .accumulators
        .iter()
        .find(|a| a.level == level)
        .expect("observed bodies have accumulators")
        .clone();
    let buffer = if window {
        acc.window.expect("window observed")
    } else {
        acc.interval
    };
    let mut words = [0.0f64; EXCHANGE_WORDS];
    if let Err(e) = driver.download(buffer, slot * EXCHANGE_WORDS * 8, bytemuck::cast_slice_mut(&mut words)) {
        state.fail();
        return Err(e);
    }
    Ok(exchange_record(body, level, &words, start, end))
}

/// The record of `body` on `level` from its accumulator slot's `words`
/// (hop sums of Fx, Fy, torque) over base intervals `start..end`.
pub(super) fn exchange_record(body: usize, level: usize, words: &[f64], start: u64, end: u64) -> ExchangeRecord {
    let hop = 0.5f64.powi(level as i32);
    ExchangeRecord {
        body,
        level,
        time_start: start,
        time_end: end,
        sample_count: (end - start) << level,
        force: [words[0] * hop, words[1] * hop],
        torque: words[2] * hop,
    }
}

/// Density minus one at `point` (base lattice units) on a body surface or a
/// wall, seen from the fluid side `outward` (a unit axis vector pointing
/// from the surface into the fluid): taken on the finest patch holding the
/// point, interpolated linearly across the axis and extrapolated linearly
/// along it from the first two fluid cell centres.
pub(super) fn surface_density<D: Driver>(
    driver: &mut D,
    state: &mut State,
    point: [f64; 2],
    outward: [i32; 2],
) -> Result<f64> {
    let (level, index) = finest_patch_at(state, point)?;
    let fields = fields(driver, state, level, index)?;
    let patch = &state.hierarchy.levels[level][index];
    let scale = 2f64.powi(level as i32);
    let [gx0, gy0, _, _] = patch.global_active();
    // Active-region coordinates in which cell (i, j) has its centre at (i, j).
    let local = [point[0] * scale - gx0 as f64 - 0.5, point[1] * scale - gy0 as f64 - 0.5];
    let along = if outward[0] != 0 { 0 } else { 1 };
    let across = 1 - along;
    let sign = (outward[0] + outward[1]) as f64;
    let base = local[across].floor();
    let weight = local[across] - base;
    let solid = |c: [f64; 2]| {
        let p = [(c[0] + gx0 as f64 + 0.5) / scale, (c[1] + gy0 as f64 + 0.5) / scale];
        state.lattice.bodies.iter().any(|b| b.shape.contains(p))
    };
    let (h, w) = fields.delta_rho.dim();
    let mut value = 0.0;
    for (offset, share) in [(0.0, 1.0 - weight), (1.0, weight)] {
        // The first two fluid cell centres beyond the point along the normal.
        let mut samples = Vec::with_capacity(2);
        let mut k = (sign * local[along]).floor() * sign;
        while samples.len() < 2 {
            k += sign;
            let mut c = [0.0; 2];
            c[along] = k;
            c[across] = base + offset;
            if c[0] < 0.0 || c[1] < 0.0 || c[0] >= w as f64 || c[1] >= h as f64 {
                return Err(Error::NotAvailable {
                    what: format!("surface density at ({:.3}, {:.3})", point[0], point[1]),
                    reason: "the fluid cells beside it leave the patch; refine around the point",
                });
            }
            if !solid(c) {
                samples.push((k, fields.delta_rho[(c[1] as usize, c[0] as usize)] as f64));
            }
        }
        let [(k1, d1), (k2, d2)] = [samples[0], samples[1]];
        value += share * (d1 + (d2 - d1) * (local[along] - k1) / (k2 - k1));
    }
    Ok(value)
}

/// Total mass in base-cell units: every level's active cells not covered by
/// a finer patch, each weighted by its area `4^-level`.
pub(super) fn total_mass<D: Driver>(driver: &mut D, state: &mut State) -> Result<f64> {
    let mut excess = 0.0f64;
    let mut volume = 0.0f64;
    for level in 0..state.hierarchy.n_levels() {
        let area = 0.25f64.powi(level as i32);
        for p in 0..state.hierarchy.levels[level].len() {
            let fields = fields(driver, state, level, p)?;
            let patch = &state.hierarchy.levels[level][p];
            let [gx0, gy0, _, _] = patch.global_active();
            let children: Vec<[i64; 4]> = state
                .hierarchy
                .levels
                .get(level + 1)
                .map(|c| {
                    c.iter()
                        .filter(|c| c.parent == Some(p))
                        .map(|c| [c.rect.x0, c.rect.y0, c.rect.x1, c.rect.y1].map(i64::from))
                        .collect()
                })
                .unwrap_or_default();
            for ((y, x), d) in fields.delta_rho.indexed_iter() {
                let (gx, gy) = (gx0 + x as i64, gy0 + y as i64);
                if children
                    .iter()
                    .any(|r| gx >= r[0] && gx < r[2] && gy >= r[1] && gy < r[3])
                {
                    continue;
                }
                excess += *d as f64 * area;
                volume += area;
            }
        }
    }
    Ok(volume + excess)
}
