//! Refinement patches that touch the domain's walls: the fine level takes the
//! wall's own rule, and the coupling reads mirror images beyond it. Mass stays
//! conserved, a channel flow crossing a patch that spans it from wall to wall
//! keeps its parabola on both levels, a lid on any side drives the same flow
//! turned, and a patch may not touch a side that is not a wall.

use lbm_core::Boundary;
use lbm_core::domain::hierarchy::Rect;
use lbm_core::{CpuDriver, ExecConfig, LatticeConfig, Stepper};

/// A lid-driven box with a level-1 patch in its top-left corner (on the lid
/// and the left wall) and a level-2 patch on the lid inside it.
fn cornered_cavity() -> Stepper<CpuDriver> {
    Stepper::new(CpuDriver::new(), cornered_cavity_config(), ExecConfig::default()).unwrap()
}

fn cornered_cavity_config() -> LatticeConfig {
    let mut cfg = LatticeConfig::uniform(32, 32, 0.56, [Boundary::Wall; 4]);
    cfg.hierarchy.levels = vec![vec![Rect::new(0, 16, 16, 32)], vec![Rect::new(8, 40, 28, 64)]];
    cfg.wall_velocity[3] = [0.08, 0.0];
    cfg
}

/// `cfg` (a square base grid) turned a quarter counter-clockwise: a cell
/// (x, y) goes to (n - 1 - y, x), a velocity (u, v) to (-v, u), the y_max
/// side to x_min, x_min to y_min, y_min to x_max and x_max to y_max.
fn quarter_turn(cfg: &LatticeConfig) -> LatticeConfig {
    let mut turned = cfg.clone();
    let [n, ny] = cfg.hierarchy.base;
    assert_eq!(n, ny, "a square grid");
    // Where each side goes: x_min, x_max, y_min, y_max.
    let to = [2, 3, 1, 0];
    for (side, &goes) in to.iter().enumerate() {
        let [u, v] = cfg.wall_velocity[side];
        turned.wall_velocity[goes] = [-v, u];
        turned.boundaries[goes] = cfg.boundaries[side];
    }
    for (level, patches) in turned.hierarchy.levels.iter_mut().enumerate() {
        // A level's patches are given in its parent's cells.
        let m = n << level;
        for r in patches.iter_mut() {
            *r = Rect::new(m - r.y1, r.x0, m - r.y0, r.x1);
        }
    }
    turned
}

/// A lid on any side of a refined cavity (patches on the lid, one in its
/// corner with the left side, which is a wall or free-slip) drives the flow
/// of the lid on y_max, turned: a link across two walls bounces with the sum
/// of their velocities and a coupling stencil's image across two sides takes
/// no wall term, whichever side moves. Not bit for bit (a cell's moments add
/// its populations in one order whatever the turn), to rounding.
#[test]
fn a_lid_on_any_side_drives_the_same_flow_turned() {
    for left in [Boundary::Wall, Boundary::FreeSlip] {
        let mut cfg = cornered_cavity_config();
        cfg.boundaries[0] = left;
        let reference = Stepper::new(CpuDriver::new(), cfg.clone(), ExecConfig::default()).unwrap();
        reference.step(300).unwrap();
        for turns in 1..4 {
            cfg = quarter_turn(&cfg);
            let turned = Stepper::new(CpuDriver::new(), cfg.clone(), ExecConfig::default()).unwrap();
            turned.step(300).unwrap();
            for level in 0..3 {
                let (a, b) = (reference.fields(level, 0).unwrap(), turned.fields(level, 0).unwrap());
                // Turn the reference's field `turns` times: b[y][x] = a[h-1-x][y].
                let (mut ux, mut uy) = (a.ux.clone(), a.uy.clone());
                for _ in 0..turns {
                    let (h, w) = ux.dim();
                    let (u, v) = (ux.clone(), uy.clone());
                    ux = ndarray::Array2::from_shape_fn((w, h), |(y, x)| -v[[h - 1 - x, y]]);
                    uy = ndarray::Array2::from_shape_fn((w, h), |(y, x)| u[[h - 1 - x, y]]);
                }
                assert_eq!(ux.dim(), b.ux.dim(), "{turns} quarter turns, level {level}");
                let worst = ux
                    .iter()
                    .zip(&b.ux)
                    .chain(uy.iter().zip(&b.uy))
                    .fold(0.0f32, |w, (p, q)| w.max((p - q).abs()));
                assert!(
                    worst < 1e-5,
                    "left side {left:?}, {turns} quarter turns, level {level}: the turned flow differs by {worst:.3e} (lid 0.08)"
                );
            }
        }
    }
}

#[test]
fn mass_is_conserved_with_patches_on_the_lid_and_a_wall() {
    let stepper = cornered_cavity();
    let hierarchy = stepper.hierarchy();
    assert_eq!(hierarchy.levels[1][0].on_boundary, [true, false, false, true]);
    assert_eq!(hierarchy.levels[2][0].on_boundary, [false, false, false, true]);
    let m0 = stepper.total_mass().unwrap();
    stepper.step(1000).unwrap();
    let m1 = stepper.total_mass().unwrap();
    // The lid drives the finest level directly.
    let fields = stepper.fields(2, 0).unwrap();
    let top = fields.ux.nrows() - 1;
    let lid_row = fields.ux.row(top).iter().fold(0.0f32, |a, u| a.max(*u));
    assert!(lid_row > 0.02, "the lid drags the top fine row, max ux {lid_row}");
    let drift = (m1 - m0).abs() / m0;
    assert!(drift < 1e-6, "relative mass drift {drift:.3e} over 1000 intervals");
}

/// Worst deviation of `ux` along rows of `level` from the body-force parabola,
/// relative to its peak; `y` in base cells from the bottom wall.
fn parabola_error(stepper: &Stepper<CpuDriver>, level: usize, force: f64, nu: f64, height: f64) -> f64 {
    let fields = stepper.fields(level, 0).unwrap();
    let scale = 0.5f64.powi(level as i32);
    let peak = force / (8.0 * nu) * height * height;
    let mut worst = 0.0f64;
    for ((j, _), u) in fields.ux.indexed_iter() {
        let y = (j as f64 + 0.5) * scale;
        let exact = force / (2.0 * nu) * y * (height - y);
        worst = worst.max((*u as f64 - exact).abs() / peak);
    }
    worst
}

#[test]
fn poiseuille_flow_crosses_a_patch_that_spans_the_channel() {
    let (nx, ny, tau, force) = (32u32, 16u32, 0.8, 1e-5);
    let nu = (tau - 0.5) / 3.0;
    let mut cfg = LatticeConfig::uniform(
        nx,
        ny,
        tau,
        [Boundary::Periodic, Boundary::Periodic, Boundary::Wall, Boundary::Wall],
    );
    cfg.force = [force, 0.0];
    let uniform = Stepper::new(CpuDriver::new(), cfg.clone(), ExecConfig::default()).unwrap();
    cfg.hierarchy.levels = vec![vec![Rect::new(8, 0, 24, ny)]];
    let refined = Stepper::new(CpuDriver::new(), cfg, ExecConfig::default()).unwrap();
    assert_eq!(refined.hierarchy().levels[1][0].on_boundary, [false, false, true, true]);
    // Several viscous times of the channel, H^2 / nu.
    let steps = (6.0 * (ny * ny) as f64 / nu) as u64;
    uniform.step(steps).unwrap();
    refined.step(steps).unwrap();
    let height = ny as f64;
    let base = parabola_error(&uniform, 0, force, nu, height);
    let coarse = parabola_error(&refined, 0, force, nu, height);
    let fine = parabola_error(&refined, 1, force, nu, height);
    // TRT with its magic parameter makes the uniform channel exact to rounding;
    // the coupling's mirror images at the walls cost a little.
    assert!(base < 1e-4, "uniform channel off by {base:.2e}");
    assert!(coarse < 2e-3, "refined channel, base level off by {coarse:.2e}");
    assert!(fine < 2e-3, "refined channel, fine level off by {fine:.2e}");
}

#[test]
fn a_patch_may_touch_only_a_wall_or_free_slip_side() {
    let mut cfg = LatticeConfig::uniform(
        32,
        16,
        0.8,
        [
            Boundary::Periodic,
            Boundary::Periodic,
            Boundary::Wall,
            Boundary::FreeSlip,
        ],
    );
    cfg.hierarchy.levels = vec![vec![Rect::new(8, 0, 24, 16)]];
    Stepper::new(CpuDriver::new(), cfg.clone(), ExecConfig::default()).expect("wall and free-slip sides");
    cfg.hierarchy.levels = vec![vec![Rect::new(0, 4, 24, 12)]];
    let message = Stepper::new(CpuDriver::new(), cfg, ExecConfig::default())
        .err()
        .expect("a patch on a periodic side is refused")
        .to_string();
    for part in [
        "level 1 patch 0",
        "x_min",
        "which is periodic",
        "wall, moving wall or free-slip",
    ] {
        assert!(message.contains(part), "`{message}` lacks `{part}`");
    }
}
