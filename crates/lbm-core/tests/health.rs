//! `Stepper::check_health` on the CPU backend: a cell made non-finite or too
//! fast at a known place of a refined, tiled lattice is reported at that
//! level, patch, cell and position; the first problem wins in level, patch
//! and cell order; after steps the check reads the current ping-pong buffer;
//! a sound run is healthy; a finding leaves the stepper `Ready`.

use lbm_core::domain::geometry::{Body, Shape};
use lbm_core::domain::hierarchy::Rect;
use lbm_core::lattice::Moments;
use lbm_core::{
    Boundary, CpuDriver, DIVERGED_MACH, Error, ExecConfig, HealthProblem, LatticeConfig, Status, Stepper, Unhealthy,
};

/// The divergence limit callers pass: the lattice speed of sound.
fn diverged() -> f64 {
    DIVERGED_MACH / 3f64.sqrt()
}

/// A 32x32 channel, periodic in x with walls in y and a body force, two
/// patches on level 1 and one on level 2 inside the second, a cylinder on
/// level 2; every level in a different storage tiling.
fn refined() -> Stepper<CpuDriver> {
    let mut lattice = LatticeConfig::uniform(
        32,
        32,
        0.7,
        [Boundary::Periodic, Boundary::Periodic, Boundary::Wall, Boundary::Wall],
    );
    lattice.force = [2e-5, 0.0];
    lattice.hierarchy.levels = vec![
        vec![Rect::new(4, 4, 12, 12), Rect::new(18, 6, 28, 18)],
        vec![Rect::new(40, 16, 52, 32)],
    ];
    lattice.bodies = vec![Body {
        shape: Shape::Circle {
            center: [23.0, 12.0],
            radius: 1.0,
        },
        level: 2,
    }];
    let exec = ExecConfig {
        tiles: vec![Some([4, 4]), Some([8, 4]), None],
        ..ExecConfig::default()
    };
    Stepper::new(CpuDriver::new(), lattice, exec).unwrap()
}

/// A cell of one patch, in active-region coordinates.
#[derive(Clone, Copy, Debug)]
struct Cell {
    level: usize,
    patch: usize,
    cell: [u32; 2],
}

impl Cell {
    const fn new(level: usize, patch: usize, cell: [u32; 2]) -> Cell {
        Cell { level, patch, cell }
    }

    /// Its centre in base lattice units, worked out from the patch's
    /// allocation origin and active region.
    fn position(&self, stepper: &Stepper<CpuDriver>) -> [f64; 2] {
        let p = stepper.hierarchy().levels[self.level][self.patch].clone();
        let spacing = 0.5f64.powi(self.level as i32);
        let local = [p.active.x0, p.active.y0];
        [0, 1].map(|k| (p.origin[k] as f64 + (local[k] + self.cell[k]) as f64 + 0.5) * spacing)
    }

    fn report(&self, stepper: &Stepper<CpuDriver>, problem: HealthProblem) -> Unhealthy {
        Unhealthy {
            level: self.level,
            patch: self.patch,
            cell: self.cell,
            position: self.position(stepper),
            problem,
        }
    }
}

/// Initialises `stepper` at rest but for `spoiled` cells, each given its
/// moments; every other cell is at rest.
fn initialize_with(stepper: &Stepper<CpuDriver>, spoiled: &[(Cell, Moments)]) {
    let at: Vec<(usize, [f64; 2], Moments)> = spoiled
        .iter()
        .map(|(c, m)| (c.level, c.position(stepper), *m))
        .collect();
    stepper
        .initialize(|level, x, y| {
            at.iter()
                .find(|(l, p, _)| *l == level && *p == [x, y])
                .map_or(Moments::default(), |(_, _, m)| *m)
        })
        .unwrap();
}

const NAN: Moments = Moments {
    delta_rho: f32::NAN,
    ux: 0.0,
    uy: 0.0,
};
const INFINITE: Moments = Moments {
    delta_rho: 0.0,
    ux: f32::INFINITY,
    uy: 0.0,
};

fn fast(ux: f32, uy: f32) -> Moments {
    Moments { delta_rho: 0.0, ux, uy }
}

/// `found` is `want`, the speed within f32 rounding of the initial one.
fn assert_too_fast(found: Option<Unhealthy>, want: Unhealthy) {
    let found = found.expect("a problem");
    let (HealthProblem::TooFast { speed }, HealthProblem::TooFast { speed: want_speed }) =
        (found.problem, want.problem)
    else {
        panic!("{found:?} is not {want:?}");
    };
    assert!((speed - want_speed).abs() < 1e-5, "speed {speed} vs {want_speed}");
    assert_eq!(
        Unhealthy {
            problem: want.problem,
            ..found
        },
        want
    );
}

#[test]
fn a_non_finite_cell_is_reported_where_it_was_put() {
    let stepper = refined();
    for cell in [
        Cell::new(1, 1, [3, 5]),
        Cell::new(1, 0, [15, 15]),
        Cell::new(2, 0, [0, 0]),
        Cell::new(2, 0, [23, 31]),
        Cell::new(0, 0, [31, 31]),
    ] {
        for moments in [NAN, INFINITE] {
            initialize_with(&stepper, &[(cell, moments)]);
            let want = cell.report(&stepper, HealthProblem::NonFinite);
            assert_eq!(stepper.check_health(diverged()).unwrap(), Some(want), "{moments:?}");
            assert_eq!(stepper.status(), Status::Ready, "a finding does not fail the stepper");
        }
    }
}

#[test]
fn a_too_fast_cell_is_reported_with_its_speed() {
    let stepper = refined();
    for (cell, (ux, uy)) in [
        (Cell::new(1, 0, [2, 1]), (0.7, 0.0)),
        (Cell::new(2, 0, [7, 19]), (-0.4, 0.45)),
        (Cell::new(0, 0, [0, 0]), (0.0, -0.6)),
    ] {
        initialize_with(&stepper, &[(cell, fast(ux, uy))]);
        let speed = f64::from(ux).hypot(f64::from(uy));
        let want = cell.report(&stepper, HealthProblem::TooFast { speed });
        assert_too_fast(stepper.check_health(diverged()).unwrap(), want);
        // Just below the limit is not too fast.
        initialize_with(
            &stepper,
            &[(cell, fast(ux * 0.55 / speed as f32, uy * 0.55 / speed as f32))],
        );
        assert_eq!(stepper.check_health(diverged()).unwrap(), None);
    }
}

/// The finest level first (a coarse cell under a patch holds the patch's
/// restriction, so a blow-up there shows on both), then patch, then cell.
#[test]
fn the_first_problem_wins_in_finest_level_then_patch_then_cell_order() {
    let stepper = refined();
    let l1p0_early = Cell::new(1, 0, [1, 5]);
    let l1p0_late = Cell::new(1, 0, [5, 5]);
    let mut spoiled = vec![
        (Cell::new(0, 0, [30, 31]), NAN),
        (Cell::new(1, 1, [0, 0]), fast(0.9, 0.0)),
        (l1p0_late, NAN),
        (l1p0_early, fast(0.0, 0.8)),
    ];
    initialize_with(&stepper, &spoiled);
    let want = l1p0_early.report(&stepper, HealthProblem::TooFast { speed: 0.8 });
    assert_too_fast(stepper.check_health(diverged()).unwrap(), want);
    spoiled.pop();
    initialize_with(&stepper, &spoiled);
    let want = l1p0_late.report(&stepper, HealthProblem::NonFinite);
    assert_eq!(stepper.check_health(diverged()).unwrap(), Some(want));
    let finest = Cell::new(2, 0, [23, 31]);
    spoiled.push((finest, NAN));
    initialize_with(&stepper, &spoiled);
    let want = finest.report(&stepper, HealthProblem::NonFinite);
    assert_eq!(stepper.check_health(diverged()).unwrap(), Some(want));
}

/// A NaN spreads one cell per base interval in every direction on level 0,
/// so after n steps the first NaN cell of the current buffer is n cells below
/// and left of where it was put; the other ping-pong buffer is a step behind.
#[test]
fn after_steps_the_check_reads_the_current_buffer() {
    let stepper = refined();
    // Far from the patches and their coupling stencils, and from the walls.
    initialize_with(&stepper, &[(Cell::new(0, 0, [14, 27]), NAN)]);
    for (n, cell) in [(1, [13, 26]), (2, [12, 25]), (3, [11, 24])] {
        stepper.step(1).unwrap();
        assert_eq!(stepper.step_count(), n);
        let want = Cell::new(0, 0, cell).report(&stepper, HealthProblem::NonFinite);
        assert_eq!(stepper.check_health(diverged()).unwrap(), Some(want), "after {n} steps");
    }
}

#[test]
fn a_sound_run_is_healthy_and_a_lower_limit_finds_its_flow() {
    let stepper = refined();
    assert_eq!(stepper.check_health(diverged()).unwrap(), None, "at rest");
    stepper.step(40).unwrap();
    assert_eq!(stepper.check_health(diverged()).unwrap(), None, "after 40 steps");
    // The body force drives a flow everywhere, so with a limit below its
    // speed the first fluid cell of the finest level is too fast.
    let found = stepper.check_health(1e-9).unwrap().expect("the flow moves");
    assert_eq!((found.level, found.patch, found.cell), (2, 0, [0, 0]), "{found}");
    assert!(
        matches!(found.problem, HealthProblem::TooFast { speed } if speed > 1e-9),
        "{found}"
    );
    // The first limit again: the plans follow the limit asked for.
    assert_eq!(stepper.check_health(diverged()).unwrap(), None);
    assert_eq!(stepper.status(), Status::Ready);
}

#[test]
fn a_report_names_where_and_what() {
    let stepper = refined();
    let cell = Cell::new(1, 1, [3, 5]);
    initialize_with(&stepper, &[(cell, NAN)]);
    let text = stepper.check_health(diverged()).unwrap().unwrap().to_string();
    assert_eq!(
        text,
        "level 1 patch 1 cell (3, 5) at (19.75, 8.75) in base cells: a population is not finite"
    );
}

#[test]
fn a_bad_speed_limit_is_refused_and_the_stepper_stays_ready() {
    let stepper = refined();
    for limit in [0.0, -0.5, f64::NAN, f64::INFINITY, 1e-60, 1e60] {
        let e = stepper.check_health(limit).unwrap_err();
        assert!(
            matches!(&e, Error::Parameter { key, .. } if key == "speed_limit"),
            "{limit}: {e}"
        );
    }
    assert_eq!(stepper.status(), Status::Ready);
    stepper.close().unwrap();
    let e = stepper.check_health(diverged()).unwrap_err();
    assert!(matches!(e, Error::Closed { .. }), "{e}");
}
