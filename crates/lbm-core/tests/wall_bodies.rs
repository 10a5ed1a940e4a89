//! Bodies that stand on a resting wall (a step, a block on a floor, a bump):
//! the wall's rule takes the links that cross it and the body's the links
//! into it, so a body through the wall is the body that touches it, a block
//! on the floor and its mirror image on the ceiling drive mirrored flows, and
//! a closed box with a block in a refined corner keeps its mass.

use lbm_core::domain::geometry::{Body, Shape};
use lbm_core::domain::hierarchy::Rect;
use lbm_core::stepper::Fields;
use lbm_core::{Boundary, CpuDriver, ExecConfig, LatticeConfig, Stepper};

const WIDTH: u32 = 48;
const HEIGHT: u32 = 24;

/// A channel of `height` periodic in x, a wall below and `top` above,
/// driven by a body force, with `body` on `level` inside the patches
/// `levels`; its bodies' exchange observed.
fn periodic_channel(
    height: u32,
    top: Boundary,
    body: Shape,
    level: usize,
    levels: Vec<Vec<Rect>>,
) -> Stepper<CpuDriver> {
    let mut cfg = LatticeConfig::uniform(
        WIDTH,
        height,
        0.8,
        [Boundary::Periodic, Boundary::Periodic, Boundary::Wall, top],
    );
    cfg.force = [2e-6, 0.0];
    cfg.bodies = vec![Body { shape: body, level }];
    cfg.hierarchy.levels = levels;
    let exec = ExecConfig {
        observe_raw_exchange: true,
        ..ExecConfig::default()
    };
    Stepper::new(CpuDriver::new(), cfg, exec).unwrap()
}

/// [`periodic_channel`] between walls with one rectangle from (16, `y0`) to
/// (28, `y1`) in base cells, on the base grid or on a patch refined around
/// it and on the floor.
fn channel(y0: f64, y1: f64, refined: bool) -> Stepper<CpuDriver> {
    let block = Shape::Rectangle {
        min: [16.0, y0],
        max: [28.0, y1],
    };
    let levels = match refined {
        true => vec![vec![Rect::new(8, 0, 36, 14)]],
        false => Vec::new(),
    };
    periodic_channel(HEIGHT, Boundary::Wall, block, refined as usize, levels)
}

/// The largest difference of `a`'s fields over its lowest `HEIGHT` rows from
/// `b`'s at row `row(y)`, `b`'s cross-flow velocity taken with `sign`.
fn largest_difference(a: &Fields, b: &Fields, row: impl Fn(usize) -> usize, sign: f32) -> f32 {
    let mut worst = 0.0f32;
    for y in 0..HEIGHT as usize {
        for x in 0..WIDTH as usize {
            worst = worst
                .max((a.ux[[y, x]] - b.ux[[row(y), x]]).abs())
                .max((a.uy[[y, x]] - sign * b.uy[[row(y), x]]).abs())
                .max((a.delta_rho[[y, x]] - b.delta_rho[[row(y), x]]).abs());
        }
    }
    worst
}

/// A block given through the floor has the cells and links of the block
/// given on it: the same flow to the bit and the same force, on the base grid
/// and on a patch whose ghost band reaches past the floor. A solid cell in
/// that band would have given the block links into the wall.
#[test]
fn a_body_through_a_wall_is_the_body_that_touches_it() {
    for refined in [false, true] {
        let (on, through) = (channel(0.0, 8.0, refined), channel(-6.0, 8.0, refined));
        on.step(400).unwrap();
        through.step(400).unwrap();
        let level = refined as usize;
        for level in 0..=level {
            let (a, b) = (on.fields(level, 0).unwrap(), through.fields(level, 0).unwrap());
            for (p, q) in [(&a.delta_rho, &b.delta_rho), (&a.ux, &b.ux), (&a.uy, &b.uy)] {
                assert!(p.iter().zip(q.iter()).all(|(p, q)| p.to_bits() == q.to_bits()));
            }
        }
        let (fa, fb) = (on.read_raw_exchange(0).unwrap(), through.read_raw_exchange(0).unwrap());
        assert_eq!(fa.force, fb.force, "refined: {refined}");
        // The flow pushes the block downstream, and the pressure relative to
        // the rest state, not the rest pressure on its top with none under
        // it (a third of a lattice unit a cell of its width), holds it to the floor.
        assert!(fa.force[0] > 0.0, "{:?}", fa.force);
        assert!(fa.force[1].abs() < 0.1 * fa.force[0], "{:?}", fa.force);
        // The block stops the flow where it stands and the channel flows over it.
        let (cells, scale) = (on.fields(level, 0).unwrap(), 1 << level);
        let at = |x: usize, y: usize| cells.ux[[y * scale, (x - 8 * level) * scale]];
        assert_eq!(at(20, 4), 0.0, "a solid cell reads zero");
        assert!(at(20, 10) > 0.0 && at(12, 4) > 0.0);
    }
}

/// A block on the floor and its mirror image on the ceiling drive mirrored
/// flows: each wall row beside the block bounces off the wall and the body
/// alike. Not bit for bit (a cell sums its populations in one order), to
/// rounding.
#[test]
fn a_block_on_the_floor_and_on_the_ceiling_drive_mirrored_flows() {
    let (floor, ceiling) = (channel(0.0, 8.0, false), channel(16.0, 24.0, false));
    floor.step(600).unwrap();
    ceiling.step(600).unwrap();
    let (a, b) = (floor.fields(0, 0).unwrap(), ceiling.fields(0, 0).unwrap());
    let peak = a.ux.iter().fold(0.0f32, |m, u| m.max(u.abs()));
    assert!(peak > 1e-4, "the flow must be under way: {peak}");
    let worst = largest_difference(&a, &b, |y| HEIGHT as usize - 1 - y, -1.0);
    assert!(worst < 1e-5 * peak, "mirrored flows differ by {worst:e} of {peak:e}");
    let (fa, fb) = (
        floor.read_raw_exchange(0).unwrap(),
        ceiling.read_raw_exchange(0).unwrap(),
    );
    assert!(
        (fa.force[0] - fb.force[0]).abs() < 1e-5 * fa.force[0].abs(),
        "{fa:?} {fb:?}"
    );
    assert!(
        (fa.force[1] + fb.force[1]).abs() < 1e-5 * fa.force[0].abs(),
        "{fa:?} {fb:?}"
    );
}

/// A lid-driven box with a block standing in its lower-left corner, on both
/// walls, inside a patch refined over that corner: an axis-aligned block
/// keeps the mass to round-off, on the wall as in the open.
#[test]
fn a_block_in_a_refined_corner_keeps_the_mass() {
    let mut cfg = LatticeConfig::uniform(32, 32, 0.56, [Boundary::Wall; 4]);
    cfg.wall_velocity[3] = [0.08, 0.0];
    cfg.hierarchy.levels = vec![vec![Rect::new(0, 0, 20, 20)]];
    cfg.bodies = vec![Body {
        shape: Shape::Rectangle {
            min: [0.0, 0.0],
            max: [6.0, 5.0],
        },
        level: 1,
    }];
    let stepper = Stepper::new(CpuDriver::new(), cfg, ExecConfig::default()).unwrap();
    let m0 = stepper.total_mass().unwrap();
    stepper.step(1500).unwrap();
    let m1 = stepper.total_mass().unwrap();
    let fine = stepper.fields(1, 0).unwrap();
    // Beside the block, on the floor and up its side, the flow turns.
    let (ux, uy) = (fine.ux[[0, 14]], fine.uy[[6, 12]]);
    assert!(ux != 0.0 && uy != 0.0, "the flow must reach the block: {ux} {uy}");
    assert_eq!(fine.ux[[3, 3]], 0.0, "a solid cell reads zero");
    let drift = (m1 - m0).abs() / m0;
    assert!(drift < 1e-6, "relative mass drift {drift:.3e}");
}

/// Half a channel with a free-slip side on its centre line, and half the
/// body standing on it, drives the lower half of the whole channel's flow
/// around the whole body: across the side each link meets the body's mirror
/// image, at its distance. A circle centred on the line, and a rectangle
/// that reaches past it (its part beyond is not its mirror image and is left
/// out). The half's drag is half the whole's: its links across the side
/// count. Not to rounding: where interpolated bounce-back would read a
/// fluid cell beyond the side, it falls back to half-way bounce-back (the
/// whole grid's and the half's flows differ by 2.3e-4 of the peak speed
/// here, their drags by 4e-5).
#[test]
fn half_a_body_on_a_free_slip_side_is_the_whole_body_mirrored() {
    let circle = |cy: f64| Shape::Circle {
        center: [22.0, cy],
        radius: 4.5,
    };
    let rectangle = |y0: f64, y1: f64| Shape::Rectangle {
        min: [18.0, y0],
        max: [26.0, y1],
    };
    for (whole, half) in [
        (circle(HEIGHT as f64), circle(HEIGHT as f64)),
        (rectangle(20.5, 27.5), rectangle(20.5, 31.0)),
    ] {
        let whole = periodic_channel(2 * HEIGHT, Boundary::Wall, whole, 0, Vec::new());
        let half = periodic_channel(HEIGHT, Boundary::FreeSlip, half, 0, Vec::new());
        whole.step(600).unwrap();
        half.step(600).unwrap();
        let (a, b) = (whole.fields(0, 0).unwrap(), half.fields(0, 0).unwrap());
        let peak = b.ux.iter().fold(0.0f32, |m, u| m.max(u.abs()));
        assert!(peak > 1e-4, "the flow must be under way: {peak}");
        let worst = largest_difference(&a, &b, |y| y, 1.0);
        assert!(worst < 1e-3 * peak, "the half differs by {worst:e} of {peak:e}");
        let (fa, fb) = (whole.read_raw_exchange(0).unwrap(), half.read_raw_exchange(0).unwrap());
        assert!(fb.force[0] > 0.0);
        assert!(
            (fa.force[0] - 2.0 * fb.force[0]).abs() < 1e-3 * fa.force[0],
            "{fa:?} {fb:?}"
        );
    }
}
