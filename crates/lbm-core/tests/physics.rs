//! Physics of the CPU backend against analytic solutions and conservation laws:
//! Taylor–Green decay, body-force Poiseuille flow, mass across refinement
//! interfaces, and bit-identity across storage tile shapes.

use std::f64::consts::PI;

use lbm_core::Boundary;
use lbm_core::domain::geometry::{Body, Shape};
use lbm_core::domain::hierarchy::Rect;
use lbm_core::lattice::Moments;
use lbm_core::{CpuDriver, ExecConfig, LatticeConfig, Stepper};

fn config(nx: u32, ny: u32, tau: f64, boundaries: [Boundary; 4]) -> LatticeConfig {
    LatticeConfig::uniform(nx, ny, tau, boundaries)
}

const PERIODIC: [Boundary; 4] = [Boundary::Periodic; 4];
const BOX: [Boundary; 4] = [Boundary::Wall; 4];

fn kinetic_energy(stepper: &Stepper<CpuDriver>) -> f64 {
    let f = stepper.fields(0, 0).unwrap();
    f.ux.iter()
        .zip(f.uy.iter())
        .map(|(u, v)| (*u as f64).powi(2) + (*v as f64).powi(2))
        .sum()
}

#[test]
fn taylor_green_decays_at_the_viscous_rate() {
    let n = 64u32;
    let tau = 0.8;
    let u0 = 0.03;
    let k = 2.0 * PI / n as f64;
    let stepper = Stepper::new(CpuDriver::new(), config(n, n, tau, PERIODIC), ExecConfig::default()).unwrap();
    stepper
        .initialize(|_, x, y| {
            let (kx, ky) = (k * x, k * y);
            let p = -0.25 * u0 * u0 * ((2.0 * kx).cos() + (2.0 * ky).cos());
            Moments {
                delta_rho: (3.0 * p) as f32,
                ux: (-u0 * kx.cos() * ky.sin()) as f32,
                uy: (u0 * kx.sin() * ky.cos()) as f32,
            }
        })
        .unwrap();
    stepper.step(100).unwrap();
    let e1 = kinetic_energy(&stepper);
    let span = 500;
    stepper.step(span).unwrap();
    let e2 = kinetic_energy(&stepper);
    let nu = (tau - 0.5) / 3.0;
    let measured = -(e2 / e1).ln() / (4.0 * k * k * span as f64);
    let error = (measured - nu).abs() / nu;
    assert!(
        error < 0.01,
        "viscosity from decay {measured:.6} vs {nu:.6}: {:.3}% off",
        100.0 * error
    );
}

#[test]
fn body_force_poiseuille_matches_the_parabola() {
    let (nx, ny) = (4u32, 32u32);
    let tau = 1.0;
    let force = 1e-6;
    let mut cfg = config(
        nx,
        ny,
        tau,
        [Boundary::Periodic, Boundary::Periodic, Boundary::Wall, Boundary::Wall],
    );
    cfg.force = [force, 0.0];
    let stepper = Stepper::new(CpuDriver::new(), cfg, ExecConfig::default()).unwrap();
    stepper.step(8000).unwrap();
    let fields = stepper.fields(0, 0).unwrap();
    let nu = (tau - 0.5) / 3.0;
    let h = ny as f64;
    let (mut err2, mut ref2) = (0.0, 0.0);
    for j in 0..ny as usize {
        let y = j as f64 + 0.5;
        let exact = force / (2.0 * nu) * y * (h - y);
        let got = fields.ux[(j, 1)] as f64;
        err2 += (got - exact).powi(2);
        ref2 += exact * exact;
    }
    let rel = (err2 / ref2).sqrt();
    assert!(rel < 0.01, "relative L2 error {rel:.2e}");
}

/// A uniform body force on a periodic box accelerates a fluid at rest by F
/// a step, from zero: the populations between steps are after a collision,
/// whose momentum carries half a step's force, and a lattice filled at
/// zero momentum read -F/2 at the start and lagged by half a step ever
/// after.
#[test]
fn a_body_force_accelerates_a_fluid_at_rest_by_f_a_step_from_zero() {
    let force = [2e-5f32, -1e-5];
    let mut cfg = config(8, 6, 0.7, PERIODIC);
    cfg.force = force.map(f64::from);
    let stepper = Stepper::new(CpuDriver::new(), cfg, ExecConfig::default()).unwrap();
    let mut done = 0;
    for n in [0u64, 1, 10] {
        stepper.step(n - done).unwrap();
        done = n;
        let fields = stepper.fields(0, 0).unwrap();
        for (axis, field) in [&fields.ux, &fields.uy].into_iter().enumerate() {
            let want = n as f32 * force[axis];
            let worst = field.iter().map(|u| (u - want).abs()).fold(0.0f32, f32::max);
            assert!(
                worst < 0.01 * force[axis].abs(),
                "after {n} steps the velocity along axis {axis} is off n F = {want:e} by up to {worst:e}"
            );
        }
    }
}

/// A periodic box with one patch under a body force moves at F per step
/// on both levels, the coarse cells the patch covers included: the
/// restriction left the fine ghost band (the last fill, older than the
/// active cells) out of its stencil there. With it in, the covered cells
/// along the interface ran 6% ahead after one step and streamed it into the
/// coarse level (the box 0.2% ahead of g t after a few hundred steps).
#[test]
fn a_refined_box_under_a_body_force_keeps_pace_with_f_t() {
    let force = 2e-5f32;
    let mut cfg = config(20, 20, 0.8, PERIODIC);
    cfg.force = [f64::from(force), 0.0];
    cfg.hierarchy.levels = vec![vec![Rect::new(6, 6, 14, 14)]];
    let stepper = Stepper::new(CpuDriver::new(), cfg, ExecConfig::default()).unwrap();
    let mut done = 0;
    for n in [1u64, 2, 50, 400] {
        stepper.step(n - done).unwrap();
        done = n;
        let want = n as f32 * force;
        for level in [0, 1] {
            let ux = stepper.fields(level, 0).unwrap().ux;
            let mean = ux.iter().map(|u| f64::from(*u)).sum::<f64>() / ux.len() as f64;
            let worst = ux.iter().map(|u| (u - want).abs()).fold(0.0f32, f32::max);
            assert!(
                (mean / f64::from(want) - 1.0).abs() < 5e-4 && worst < 1e-2 * want,
                "level {level} after {n} steps: mean {mean:e}, off n F = {want:e} by up to {worst:e}"
            );
        }
    }
}

/// A lid-driven box refined twice around its centre, so the recirculation
/// crosses both interfaces.
fn refined_cavity(tiles: Vec<Option<[u32; 2]>>) -> Stepper<CpuDriver> {
    let mut cfg = config(32, 32, 0.56, BOX);
    cfg.hierarchy.levels = vec![vec![Rect::new(6, 6, 26, 26)], vec![Rect::new(18, 18, 46, 40)]];
    cfg.wall_velocity[3] = [0.08, 0.0];
    cfg.bodies = vec![Body {
        shape: Shape::Circle {
            center: [16.0, 15.0],
            radius: 1.5,
        },
        level: 2,
    }];
    let exec = ExecConfig {
        tiles,
        ..ExecConfig::default()
    };
    Stepper::new(CpuDriver::new(), cfg, exec).unwrap()
}

#[test]
fn mass_is_conserved_across_two_refinement_levels() {
    let stepper = refined_cavity(Vec::new());
    let m0 = stepper.total_mass().unwrap();
    stepper.step(1000).unwrap();
    let m1 = stepper.total_mass().unwrap();
    let fields = stepper.fields(1, 0).unwrap();
    let speed = fields.ux.iter().map(|u| u.abs()).fold(0.0f32, f32::max);
    assert!(
        speed > 1e-3,
        "the flow must reach the refined levels, max |ux| = {speed}"
    );
    let drift = (m1 - m0).abs() / m0;
    assert!(drift < 1e-6, "relative mass drift {drift:.3e} over 1000 intervals");
}

#[test]
fn tile_shape_does_not_change_a_bit() {
    let whole = refined_cavity(Vec::new());
    let tiled = refined_cavity(vec![Some([4, 4]); 3]);
    whole.step(20).unwrap();
    tiled.step(20).unwrap();
    for level in 0..3 {
        let (a, b) = (whole.fields(level, 0).unwrap(), tiled.fields(level, 0).unwrap());
        for (x, y) in [(&a.delta_rho, &b.delta_rho), (&a.ux, &b.ux), (&a.uy, &b.uy)] {
            assert!(
                x.iter().zip(y.iter()).all(|(p, q)| p.to_bits() == q.to_bits()),
                "level {level} differs"
            );
        }
    }
}

/// A Taylor–Green vortex on a 48x48 periodic base with a refined centre patch:
/// both levels must follow the analytic decay as well as the uniform grid does.
/// The uniform 48x48 grid is within 0.20% of the amplitude, the refined run
/// within 0.19% (coarse) and 0.15% (fine); bilinear ghost interpolation gave
/// 3.5%, so 0.4% guards against regressions.
#[test]
fn a_refined_taylor_green_vortex_follows_the_analytic_solution() {
    let n = 48u32;
    let tau = 0.65;
    let u0 = 0.03;
    let k = 2.0 * PI / n as f64;
    let mut cfg = config(n, n, tau, PERIODIC);
    cfg.hierarchy.levels = vec![vec![Rect::new(12, 12, 36, 36)]];
    let stepper = Stepper::new(CpuDriver::new(), cfg, ExecConfig::default()).unwrap();
    let velocity = |x: f64, y: f64, decay: f64| {
        let (kx, ky) = (k * x, k * y);
        [-u0 * kx.cos() * ky.sin() * decay, u0 * kx.sin() * ky.cos() * decay]
    };
    stepper
        .initialize(|_, x, y| {
            let [ux, uy] = velocity(x, y, 1.0);
            let p = -0.25 * u0 * u0 * ((2.0 * k * x).cos() + (2.0 * k * y).cos());
            Moments {
                delta_rho: (3.0 * p) as f32,
                ux: ux as f32,
                uy: uy as f32,
            }
        })
        .unwrap();
    let steps = 400;
    stepper.step(steps).unwrap();
    let nu = (tau - 0.5) / 3.0;
    let decay = (-2.0 * nu * k * k * steps as f64).exp();
    let hierarchy = stepper.hierarchy();
    for level in 0..2 {
        let fields = stepper.fields(level, 0).unwrap();
        let [gx0, gy0, _, _] = hierarchy.levels[level][0].global_active();
        let scale = 0.5f64.powi(level as i32);
        let mut worst = 0.0f64;
        for ((j, i), ux) in fields.ux.indexed_iter() {
            let (x, y) = ((gx0 + i as i64) as f64 + 0.5, (gy0 + j as i64) as f64 + 0.5);
            let [ex, ey] = velocity(x * scale, y * scale, decay);
            let uy = fields.uy[(j, i)] as f64;
            worst = worst.max((*ux as f64 - ex).abs()).max((uy - ey).abs());
        }
        let relative = worst / (u0 * decay);
        assert!(
            relative < 0.02,
            "level {level}: worst velocity error {:.2}% of the amplitude",
            100.0 * relative
        );
    }
}

/// A vortex carried by a uniform stream through a refined patch and out again
/// keeps its shape: after it has crossed both interfaces, its velocity field
/// matches the same run without refinement (measured: within 3.9% of the peak
/// swirl, the part of its path on the fine level being resolved better) and it
/// stays on its track.
#[test]
fn a_vortex_crossing_an_interface_keeps_its_shape() {
    let (nx, ny, stream, swirl, core) = (96u32, 48u32, 0.05, 0.01, 6.0);
    let run = |refined: bool| {
        let mut cfg = config(nx, ny, 0.53, PERIODIC);
        if refined {
            cfg.hierarchy.levels = vec![vec![Rect::new(32, 8, 64, 40)]];
        }
        let stepper = Stepper::new(CpuDriver::new(), cfg, ExecConfig::default()).unwrap();
        stepper
            .initialize(|_, x, y| {
                let (dx, dy) = (x - 16.0, y - 24.0);
                // Peak swirl speed `swirl` at radius `core`.
                let g = swirl * (0.5 - (dx * dx + dy * dy) / (2.0 * core * core)).exp() / core;
                Moments {
                    delta_rho: 0.0,
                    ux: (stream - g * dy) as f32,
                    uy: (g * dx) as f32,
                }
            })
            .unwrap();
        // 64 cells downstream: from x = 16, through the patch (32..64), to x = 80.
        stepper.step((64.0 / stream) as u64).unwrap();
        stepper.fields(0, 0).unwrap()
    };
    let (uniform, refined) = (run(false), run(true));
    let worst = uniform
        .ux
        .iter()
        .zip(refined.ux.iter())
        .chain(uniform.uy.iter().zip(refined.uy.iter()))
        .map(|(a, b)| (a - b).abs() as f64)
        .fold(0.0, f64::max);
    let peak = uniform.uy.iter().map(|v| v.abs() as f64).fold(0.0, f64::max);
    let centre = |f: &lbm_core::stepper::Fields| {
        let (mut best, mut at) = (0.0f32, 0usize);
        for (x, column) in f.uy.columns().into_iter().enumerate() {
            let swing = column.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            if swing > best {
                best = swing;
                at = x;
            }
        }
        at as i64
    };
    assert!(peak > 0.3 * swirl, "the vortex diffused away: peak swirl {peak:.2e}");
    assert!(
        worst < 0.05 * peak,
        "velocity differs by {worst:.2e}, {:.1}% of the swirl",
        100.0 * worst / peak
    );
    assert!(
        (centre(&uniform) - centre(&refined)).abs() <= 1,
        "the vortex moved off its track"
    );
}
