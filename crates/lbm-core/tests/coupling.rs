//! The coarse-fine coupling operators on their own: fed a smooth analytic field
//! (a Taylor–Green vortex, populations rebuilt with the full non-equilibrium
//! part of each level), `fill_ghost` must reproduce the fine field in the ghost
//! band and `restrict_to_parent` the coarse field under the patch, with errors
//! that fall at second order in the grid spacing. The same holds for a patch
//! touching a free-slip wall of the domain placed on a symmetry line of the
//! vortex, where the operators read mirror images beyond the wall.

use std::f64::consts::PI;

use lbm_core::BufferId;
use lbm_core::domain::geometry::cell_center;
use lbm_core::domain::hierarchy::{GHOST, HierarchySpec, Patch, Rect};
use lbm_core::domain::order::{inner_band_cell, inner_band_cells};
use lbm_core::domain::sides::{PatchSide, PatchSides, beyond_wall};
use lbm_core::kernels::refine::{FillGhost, RestrictToParent, fill_ghost, restrict_to_parent};
use lbm_core::lattice::{self, Collision, Moments, Q, Relaxation};

const TAU: f64 = 0.65;
const U0: f64 = 0.03;

/// Post-collision populations of a uniform run of `level` at base point (x, y):
/// equilibrium plus the strain, momentum-flux and curvature parts, from the
/// analytic velocity of a Taylor–Green vortex of wavelength `n` base cells.
fn analytic(n: u32, x: f64, y: f64, level: i32, relaxation: Relaxation) -> [f32; Q] {
    let k = 2.0 * PI / n as f64;
    let (kx, ky) = (k * x, k * y);
    let (ux, uy) = (-U0 * kx.cos() * ky.sin(), U0 * kx.sin() * ky.cos());
    let rho = 1.0 - 0.75 * U0 * U0 * ((2.0 * kx).cos() + (2.0 * ky).cos());
    let s = 0.5f64.powi(level);
    let (dux_dx, dux_dy) = (U0 * k * kx.sin() * ky.sin() * s, -U0 * k * kx.cos() * ky.cos() * s);
    let (duy_dx, duy_dy) = (U0 * k * kx.cos() * ky.cos() * s, -U0 * k * kx.sin() * ky.sin() * s);
    let grad_p = [
        [2.0 * ux * dux_dx, 2.0 * uy * duy_dx, ux * duy_dx + uy * dux_dx],
        [2.0 * ux * dux_dy, 2.0 * uy * duy_dy, ux * duy_dy + uy * dux_dy],
    ];
    let kk = k * k * s * s;
    let d2ux = [-kk * ux, -kk * ux, U0 * kk * kx.sin() * ky.cos()];
    let d2uy = [-kk * uy, -kk * uy, -U0 * kk * kx.cos() * ky.sin()];
    let (tp, tm) = (relaxation.tau_plus as f32, relaxation.tau_minus as f32);
    let m = Moments {
        delta_rho: (rho - 1.0) as f32,
        ux: ux as f32,
        uy: uy as f32,
    };
    let feq = lattice::equilibrium(m);
    let strain = [dux_dx as f32, duy_dy as f32, (0.5 * (dux_dy + duy_dx)) as f32];
    let even = lattice::non_equilibrium(tp, strain);
    let odd = lattice::non_equilibrium_odd(tm, grad_p.map(|g| g.map(|v| v as f32)));
    let curved = lattice::non_equilibrium_odd_curvature(tp, tm, [d2ux, d2uy].map(|d| d.map(|v| v as f32)));
    std::array::from_fn(|i| feq[i] + (1.0 - 1.0 / tp) * even[i] + (1.0 - 1.0 / tm) * (odd[i] + curved[i]))
}

/// The vortex on every cell of `patch`'s allocation, shifted up by `shift`
/// base cells.
fn field(n: u32, patch: &Patch, relaxation: Relaxation, shift: f64) -> Vec<f32> {
    let plane = patch.layout.plane_cells();
    let mut f = vec![f32::NAN; Q * plane];
    for y in 0..patch.layout.ny {
        for x in 0..patch.layout.nx {
            let [cx, cy] = cell_center(patch, x, y);
            let cell = analytic(n, cx, cy + shift, patch.level as i32, relaxation);
            for (i, v) in cell.iter().enumerate() {
                f[i * plane + patch.layout.index(x, y)] = *v;
            }
        }
    }
    f
}

/// Worst velocity error relative to the amplitude and worst non-equilibrium
/// error relative to the largest non-equilibrium part, over `cells`.
fn compare(got: &[f32], want: &[f32], plane: usize, cells: impl Iterator<Item = usize>) -> (f64, f64) {
    let (mut du, mut dn, mut nn) = (0.0f64, 0.0f64, 0.0f64);
    for index in cells {
        let a: [f32; Q] = std::array::from_fn(|i| got[i * plane + index]);
        let b: [f32; Q] = std::array::from_fn(|i| want[i * plane + index]);
        let (ma, mb) = (lattice::moments(&a, [0.0; 2]), lattice::moments(&b, [0.0; 2]));
        let (ea, eb) = (lattice::equilibrium(ma), lattice::equilibrium(mb));
        du = du.max(((ma.ux - mb.ux).abs().max((ma.uy - mb.uy).abs())) as f64);
        for i in 0..Q {
            dn = dn.max(((a[i] - ea[i]) - (b[i] - eb[i])).abs() as f64);
            nn = nn.max((b[i] - eb[i]).abs() as f64);
        }
    }
    (du / U0, dn / nn)
}

/// (fill_ghost, restrict) errors for a vortex of wavelength `n`: on an `n`²
/// base with the centre half refined, or (`walled`) on an `n` x `n/2` base
/// whose bottom side, a free-slip wall, lies on the vortex's symmetry line
/// `y = n/4` and which the refined patch touches.
fn errors(n: u32, walled: bool) -> [(f64, f64); 2] {
    let q = n / 4;
    let (base, patch, shift) = if walled {
        ([n, 2 * q], Rect::new(q, 0, 3 * q, q), q as f64)
    } else {
        ([n, n], Rect::new(q, q, 3 * q, 3 * q), 0.0)
    };
    let hierarchy = HierarchySpec {
        base,
        levels: vec![vec![patch]],
    }
    .validate(&[])
    .unwrap();
    let mut sides = PatchSides::INTERFACES;
    if walled {
        sides.kinds[2] = PatchSide::FreeSlip;
    }
    let (coarse, fine) = (&hierarchy.levels[0][0], &hierarchy.levels[1][0]);
    let collision = Collision::default();
    let (r0, r1) = (
        Relaxation::new(collision, TAU),
        Relaxation::new(collision, 2.0 * TAU - 0.5),
    );
    let (coarse_field, fine_field) = (field(n, coarse, r0, shift), field(n, fine, r1, shift));

    let mut ghost = vec![f32::NAN; fine_field.len()];
    let fill = FillGhost {
        coarse_t: BufferId(0).into(),
        coarse_t1: BufferId(1).into(),
        fine_dst: BufferId(2).into(),
        coarse: coarse.layout,
        coarse_active: coarse.active,
        fine: fine.layout,
        active_offset: [patch.x0, patch.y0],
        sides,
        alpha: 0.5,
        tau_plus: r1.tau_plus as f32,
        tau_minus: r1.tau_minus as f32,
        coarse_force: [0.0; 2],
    };
    fill_ghost(&fill, &coarse_field, &coarse_field, &mut ghost);
    // Every cell of the band's inner layer is written but those beyond the
    // wall, which nothing reads, and no other cell of the allocation.
    let plane = fine.layout.plane_cells();
    let written_anywhere = (0..plane)
        .filter(|&i| (0..Q).any(|q| !ghost[q * plane + i].is_nan()))
        .count();
    let (mut band, mut skipped) = (Vec::new(), 0);
    for c in 0..inner_band_cells(&fine.layout) {
        let (x, y) = inner_band_cell(&fine.layout, c);
        let index = fine.layout.index(x, y);
        let written = (0..Q).map(|i| ghost[i * plane + index]).filter(|v| !v.is_nan()).count();
        if beyond_wall(&fine.layout, &sides, x, y) {
            assert_eq!(written, 0, "band cell ({x},{y}) beyond the wall was written");
            skipped += 1;
        } else {
            assert_eq!(written, Q, "band cell ({x},{y}) was not written");
            band.push(index);
        }
    }
    assert_eq!(skipped > 0, walled);
    assert_eq!(written_anywhere, band.len(), "cells written outside the inner layer");
    let fill_errors = compare(&ghost, &fine_field, plane, band.into_iter());

    let mut restricted: Vec<f32> = coarse_field.iter().map(|_| f32::NAN).collect();
    let covered = patch;
    let restrict = RestrictToParent {
        fine_src: BufferId(0).into(),
        coarse_dst: BufferId(1).into(),
        fine: fine.layout,
        coarse: coarse.layout,
        covered,
        hole: Rect::default(),
        fine_active_origin: GHOST,
        sides,
        tau_plus: r0.tau_plus as f32,
        tau_minus: r0.tau_minus as f32,
        coarse_force: [0.0; 2],
    };
    restrict_to_parent(&restrict, &fine_field, &mut restricted);
    let cells = (covered.y0..covered.y1).flat_map(|y| (covered.x0..covered.x1).map(move |x| (x, y)));
    let restrict_errors = compare(
        &restricted,
        &coarse_field,
        coarse.layout.plane_cells(),
        cells.map(|(x, y)| coarse.layout.index(x, y)),
    );
    [fill_errors, restrict_errors]
}

fn check_second_order(walled: bool) {
    let coarse = errors(48, walled);
    let fine = errors(96, walled);
    for (name, (c, f)) in ["fill_ghost", "restrict_to_parent"]
        .iter()
        .zip(coarse.iter().zip(fine.iter()))
    {
        // The restriction's cells beside an interface average their block's
        // two cells along it (second order: 5e-4 of the amplitude here,
        // 1.1e-3 beside the free-slip wall), where the cubic reaches 1e-5.
        let velocity = if *name == "restrict_to_parent" { 1.5e-3 } else { 1e-4 };
        assert!(
            c.0 < velocity,
            "{name}: velocity error {:.2e} of the amplitude at 48",
            c.0
        );
        assert!(
            c.0 / f.0 > 3.0,
            "{name}: velocity error ratio {:.2} between 48 and 96",
            c.0 / f.0
        );
        assert!(c.1 < 0.01, "{name}: non-equilibrium error {:.2}% at 48", 100.0 * c.1);
        // Halving the spacing must cut the non-equilibrium error about fourfold.
        assert!(
            c.1 / f.1 > 3.0,
            "{name}: error ratio {:.2} between 48 and 96",
            c.1 / f.1
        );
    }
}

#[test]
fn coupling_operators_reproduce_a_smooth_field_at_second_order() {
    check_second_order(false);
}

#[test]
fn coupling_at_a_free_slip_wall_reads_mirror_images_at_second_order() {
    check_second_order(true);
}
