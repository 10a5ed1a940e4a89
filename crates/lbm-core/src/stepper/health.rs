//! The divergence check of a stepper: `check_health` of every patch on the
//! current buffers, one wait, one download of the results, and the first
//! problem in level, patch and cell order, located for the caller.
//!
//! The plans are prepared on the first check and kept for its speed limit
//! (both level-0 parities, like the interval plans); a different limit
//! prepares them again. What it does not do: decide what a problem means. A
//! finding leaves the stepper `Ready`; only a driver failure fails it.

use serde::Serialize;

use crate::device::{Driver, PlanId};
use crate::domain::geometry::{self, NO_CELL};
use crate::error::{Error, Result};
use crate::kernels::health::{HEALTH_WORDS, speed_squared};
use crate::lattice::Q;
use crate::schedule::plan::{health_steps, parity_at_interval_start};

use super::{State, observe, prepare_pair};

/// Where a flow went wrong: the first cell found, in level order, then patch
/// order, then active-region cell order (row-major, x fastest).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Unhealthy {
    pub level: usize,
    pub patch: usize,
    /// The cell in active-region coordinates of its patch.
    pub cell: [u32; 2],
    /// The cell centre in base lattice units, as [`crate::Stepper::initialize`]
    /// gives it.
    pub position: [f64; 2],
    pub problem: HealthProblem,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum HealthProblem {
    /// A population is NaN or infinite.
    NonFinite,
    /// The cell's lattice speed (without the half-force shift) is above the
    /// limit checked.
    TooFast { speed: f64 },
}

impl std::fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [x, y] = self.cell;
        let [px, py] = self.position;
        write!(
            f,
            "level {} patch {} cell ({x}, {y}) at ({px}, {py}) in base cells: ",
            self.level, self.patch
        )?;
        match self.problem {
            HealthProblem::NonFinite => f.write_str("a population is not finite"),
            HealthProblem::TooFast { speed } => write!(f, "lattice speed {speed:.4}"),
        }
    }
}

/// The prepared health plans and the speed limit they check.
pub(super) struct HealthPlans {
    speed_limit: f32,
    /// By level-0 parity, as the interval plans.
    pub(super) prepared: [PlanId; 2],
}

/// Runs the check on `driver`; any driver error is returned for the caller
/// to fail the stepper with.
pub(super) fn check_health<D: Driver>(
    driver: &mut D,
    state: &mut State,
    speed_limit: f32,
) -> Result<Option<Unhealthy>> {
    let plans = prepared(driver, state, speed_limit)?;
    driver.replay(plans[parity_at_interval_start(0, state.step_count)])?;
    driver.synchronize()?;
    let n_patches = state.hierarchy.patches().count();
    let mut words = vec![0u32; n_patches * HEALTH_WORDS];
    driver.download(state.resources.health, 0, bytemuck::cast_slice_mut(&mut words))?;
    // The finest level first: a coarse cell under a patch holds the patch's
    // restriction, so a blow-up on the patch shows there too, where it is
    // smaller and less plain than on the patch itself.
    let mut by_patch: Vec<_> = state
        .hierarchy
        .patches()
        .zip(words.chunks_exact(HEALTH_WORDS))
        .collect();
    by_patch.sort_by_key(|(patch, _)| std::cmp::Reverse(patch.level));
    let found = by_patch.into_iter().find_map(|(patch, w)| {
        let cell = w[0].min(w[1]);
        (cell != NO_CELL).then_some((patch.level, patch.index, cell, cell == w[0]))
    });
    let Some((level, index, cell, non_finite)) = found else {
        return Ok(None);
    };
    let patch = state.hierarchy.levels[level][index].clone();
    let a = patch.active;
    let [x, y] = [cell % a.width(), cell / a.width()];
    let (ax, ay) = (a.x0 + x, a.y0 + y);
    let problem = match non_finite {
        true => HealthProblem::NonFinite,
        false => {
            let f = observe::download_current(driver, state, level, index)?;
            let (plane, at) = (patch.layout.plane_cells(), patch.layout.index(ax, ay));
            let populations: [f32; Q] = std::array::from_fn(|i| f[i * plane + at]);
            HealthProblem::TooFast {
                speed: f64::from(speed_squared(&populations)).sqrt(),
            }
        }
    };
    Ok(Some(Unhealthy {
        level,
        patch: index,
        cell: [x, y],
        position: geometry::cell_center(&patch, ax, ay),
        problem,
    }))
}

/// The health plans for `speed_limit`, prepared now unless they already are.
fn prepared<D: Driver>(driver: &mut D, state: &mut State, speed_limit: f32) -> Result<[PlanId; 2]> {
    if let Some(h) = &state.health
        && h.speed_limit.to_bits() == speed_limit.to_bits()
    {
        return Ok(h.prepared);
    }
    if let Some(old) = state.health.take() {
        old.prepared.iter().try_for_each(|p| driver.release_plan(*p))?;
    }
    let actions = [0, 1].map(|step_count| {
        health_steps(&state.hierarchy, &state.resources, step_count, speed_limit)
            .into_iter()
            .map(|s| s.action)
            .collect()
    });
    let prepared = prepare_pair(driver, ["health.even", "health.odd"], &actions)?;
    state.health = Some(HealthPlans { speed_limit, prepared });
    Ok(prepared)
}

/// `speed_limit` as the kernel takes it, refused unless a positive finite f32.
pub(super) fn kernel_speed_limit(speed_limit: f64) -> Result<f32> {
    let limit = speed_limit as f32;
    match limit.is_finite() && limit > 0.0 {
        true => Ok(limit),
        false => Err(Error::parameter(
            "speed_limit",
            speed_limit,
            "a finite lattice speed above 0 (DIVERGED_MACH / sqrt(3) for divergence)",
        )),
    }
}
