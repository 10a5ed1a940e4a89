//! A run split over several devices (`lbm_core::split`), on `CpuDriver`
//! slabs in one process: every population of every patch, the forces and
//! both exchange ledgers equal one device's bit for bit, over 2 and 3 slabs,
//! on a uniform channel with a cylinder, on a refined channel whose patches
//! and body sit in one slab, across a periodic side and with a tiled base.

use lbm_core::config::{Amplitude, InletSpec, Profile};
use lbm_core::domain::decompose::Decomposition;
use lbm_core::domain::geometry::{Body, Shape};
use lbm_core::domain::hierarchy::Rect;
use lbm_core::lattice::Moments;
use lbm_core::split::Split;
use lbm_core::{Boundary, CpuDriver, Error, ExecConfig, LatticeConfig, Stepper};

mod common;

use common::initial_flow;

fn cylinder(center: [f64; 2], radius: f64, level: usize) -> Body {
    Body {
        shape: Shape::Circle { center, radius },
        level,
    }
}

/// A 96 x 40 channel: a parabolic inlet ramped up over four intervals, an
/// outflow, walls at rest, a cylinder on the base grid.
fn channel() -> LatticeConfig {
    let mut lattice = LatticeConfig::uniform(
        96,
        40,
        0.62,
        [Boundary::Inlet, Boundary::Outflow, Boundary::Wall, Boundary::Wall],
    );
    lattice.inlet = Some(InletSpec {
        profile: Profile::Parabolic,
        velocity: 0.06,
        amplitude: Amplitude::Ramp { duration: 4.0 },
        span: None,
    });
    lattice.bodies = vec![cylinder([24.0, 20.3], 4.5, 0)];
    lattice
}

/// [`channel`] refined: two levels around a cylinder on the finest, and a
/// second level-1 patch downstream.
fn refined_channel() -> LatticeConfig {
    let mut lattice = channel();
    lattice.hierarchy.levels = vec![
        vec![Rect::new(10, 8, 36, 32), Rect::new(56, 12, 72, 28)],
        vec![Rect::new(28, 26, 56, 54)],
    ];
    lattice.bodies = vec![cylinder([20.0, 20.2], 2.5, 2)];
    lattice
}

/// Periodic along x, walls on y with a moving lid, a body force and a
/// cylinder: the last slab meets the first across the periodic side.
fn periodic_channel() -> LatticeConfig {
    let mut lattice = LatticeConfig::uniform(
        64,
        32,
        0.7,
        [Boundary::Periodic, Boundary::Periodic, Boundary::Wall, Boundary::Wall],
    );
    lattice.force = [3e-6, 0.0];
    lattice.wall_velocity[3] = [0.03, 0.0];
    lattice.bodies = vec![cylinder([40.0, 15.5], 3.5, 0)];
    lattice
}

fn exec(tiles: Vec<Option<[u32; 2]>>) -> ExecConfig {
    ExecConfig {
        tiles,
        observe_raw_exchange: true,
        observe_window_exchange: true,
        ..ExecConfig::default()
    }
}

fn bits(a: &ndarray::Array3<f32>) -> Vec<u32> {
    a.iter().map(|v| v.to_bits()).collect()
}

/// Runs `lattice` on one device and split over `devices`, from the same
/// initial flow, and compares everything after several chunks.
fn check_split(lattice: LatticeConfig, devices: usize, tiles: Vec<Option<[u32; 2]>>) {
    let what = format!("{devices} slabs, tiles {tiles:?}");
    let one = Stepper::new(CpuDriver::new(), lattice.clone(), exec(tiles.clone())).unwrap();
    let drivers = (0..devices).map(|_| CpuDriver::new()).collect();
    let mut split = Split::new(drivers, lattice.clone(), exec(tiles)).unwrap();
    assert_eq!(split.slabs().len(), devices, "{what}");
    one.initialize(initial_flow).unwrap();
    split.initialize(initial_flow).unwrap();
    one.start_exchange_window().unwrap();
    split.start_exchange_window().unwrap();
    let hierarchy = one.hierarchy();
    for chunk in [1, 6, 13] {
        one.step(chunk).unwrap();
        split.step(chunk).unwrap();
        assert_eq!(split.step_count(), one.step_count(), "{what}");
        let at = format!("{what}, after {} intervals", one.step_count());
        for p in hierarchy.patches() {
            let (want, got) = (
                one.active_populations(p.level, p.index).unwrap(),
                split.active_populations(p.level, p.index).unwrap(),
            );
            assert_eq!(got.dim(), want.dim(), "{at}: {}", p.name());
            assert!(bits(&got) == bits(&want), "{at}: populations of {} differ", p.name());
            assert_eq!(
                split.fields(p.level, p.index).unwrap(),
                one.fields(p.level, p.index).unwrap(),
                "{at}"
            );
        }
        for b in 0..lattice.bodies.len() {
            let (want, got) = (one.read_raw_exchange(b).unwrap(), split.read_raw_exchange(b).unwrap());
            assert_eq!(got, want, "{at}: raw exchange of body {b}");
            assert!(want.force[0] != 0.0, "{at}: the body feels the flow");
            let (want, got) = (
                one.read_exchange_window(b).unwrap(),
                split.read_exchange_window(b).unwrap(),
            );
            assert_eq!(got, want, "{at}: exchange window of body {b}");
        }
        let (want, got) = (one.total_mass().unwrap(), split.total_mass().unwrap());
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1.0),
            "{at}: mass {got} against {want}"
        );
        assert_eq!(split.check_health(0.3).unwrap(), None, "{at}");
        assert_eq!(one.check_health(0.3).unwrap(), None, "{at}");
        // A limit the flow exceeds here and there: the same first cell.
        for limit in [0.035, 0.05] {
            let want = one.check_health(limit).unwrap();
            assert_eq!(split.check_health(limit).unwrap(), want, "{at}: limit {limit}");
        }
    }
    split.close().unwrap();
}

#[test]
fn a_uniform_channel_with_a_cylinder_splits_bit_for_bit() {
    for devices in [2, 3] {
        check_split(channel(), devices, Vec::new());
    }
}

/// Three cylinders on the base grid, off the channel's axis so that each
/// feels a torque, which the cuts put on different slabs: a slab's link
/// table then lacks the others' links, and each body's sums must still be
/// one device's bits.
#[test]
fn bodies_on_different_slabs_get_one_devices_forces_and_torques() {
    let mut lattice = channel();
    lattice.bodies = vec![
        cylinder([16.0, 18.3], 3.5, 0),
        cylinder([48.0, 23.1], 4.0, 0),
        cylinder([78.0, 17.6], 3.0, 0),
    ];
    for devices in [2, 3] {
        let (hierarchy, _) = lattice.validate(&[]).unwrap();
        let plan = Decomposition::plan(&hierarchy, &lattice, devices).unwrap();
        let slab_of = |x: f64| plan.slabs.iter().position(|s| (s.x0 as f64) <= x && x < s.x1 as f64);
        let slabs: Vec<_> = [16.0, 48.0, 78.0].map(slab_of).into_iter().collect();
        assert!(slabs.windows(2).any(|w| w[0] != w[1]), "{devices} slabs: {slabs:?}");
        check_split(lattice.clone(), devices, Vec::new());
    }
}

#[test]
fn a_tiled_base_grid_splits_bit_for_bit() {
    check_split(channel(), 2, vec![Some([8, 4])]);
}

#[test]
fn a_refined_channel_splits_bit_for_bit() {
    for devices in [2, 3] {
        check_split(refined_channel(), devices, Vec::new());
    }
}

#[test]
fn slabs_meet_across_a_periodic_side_bit_for_bit() {
    for devices in [2, 3] {
        check_split(periodic_channel(), devices, Vec::new());
    }
}

#[test]
fn the_slabs_and_their_patches_are_where_the_decomposition_says() {
    let drivers = (0..3).map(|_| CpuDriver::new()).collect();
    let split = Split::new(drivers, refined_channel(), ExecConfig::default()).unwrap();
    let d = split.decomposition();
    assert_eq!(d.slabs.first().unwrap().x0, 0);
    assert_eq!(d.slabs.last().unwrap().x1, 96);
    for (k, slab) in split.slabs().iter().enumerate() {
        let h = slab.hierarchy();
        let base = h.base();
        assert_eq!(base.active.width(), d.slabs[k].x1 - d.slabs[k].x0, "slab {k}");
        // One halo column beyond each cut side, none beyond the domain's.
        let halos = u32::from(k > 0) + u32::from(k + 1 < 3);
        assert_eq!(base.layout.nx, base.active.width() + halos, "slab {k}");
        assert_eq!(base.origin[0], d.slabs[k].x0 as i64 - i64::from(k > 0), "slab {k}");
    }
    let patches: usize = split.slabs().iter().map(|s| s.hierarchy().patches().count() - 1).sum();
    assert_eq!(patches, 3, "each refined patch on exactly one slab");
}

#[test]
fn a_split_that_would_cut_a_patch_is_refused_naming_it() {
    let mut lattice = refined_channel();
    lattice.hierarchy.levels = vec![vec![Rect::new(6, 6, 90, 34)]];
    lattice.bodies.clear();
    let drivers = (0..2).map(|_| CpuDriver::new()).collect();
    let e = Split::new(drivers, lattice, ExecConfig::default())
        .err()
        .expect("no cut clears the patch");
    let message = e.to_string();
    assert!(matches!(e, Error::Parameter { .. }), "{message}");
    assert!(
        message.contains("--devices") && message.contains("patch L1.p0"),
        "{message}"
    );
}

#[test]
fn slabs_large_enough_for_the_bulk_update_split_bit_for_bit() {
    let mut lattice = channel();
    lattice.hierarchy.base = [600, 240];
    lattice.bodies = vec![cylinder([150.0, 120.5], 20.0, 0)];
    let drivers = (0..2).map(|_| CpuDriver::new()).collect();
    let split = Split::new(drivers, lattice.clone(), ExecConfig::default()).unwrap();
    for (k, slab) in split.slabs().iter().enumerate() {
        let bulk = slab
            .plan()
            .interval(0)
            .iter()
            .flat_map(|s| s.action.launches())
            .filter(|l| l.kernel.is_bulk())
            .count();
        assert_eq!(
            bulk, 1,
            "slab {k} takes the bulk kernel and the general one over its boundary cells"
        );
    }
    drop(split);
    check_split(lattice, 2, Vec::new());
}

#[test]
fn a_split_snapshot_restores_bit_for_bit_and_only_into_as_many_slabs() {
    let lattice = refined_channel();
    let build = |g: usize| {
        Split::new(
            (0..g).map(|_| CpuDriver::new()).collect(),
            lattice.clone(),
            exec(Vec::new()),
        )
        .unwrap()
    };
    let mut run = build(2);
    run.initialize(initial_flow).unwrap();
    run.step(7).unwrap();
    let snapshot = run.snapshot().unwrap();
    assert!(snapshot.buffers.iter().all(|(label, _)| label.starts_with("slab/")));
    run.step(5).unwrap();
    let mut resumed = build(2);
    resumed.restore(&snapshot).unwrap();
    assert_eq!(resumed.step_count(), 7);
    resumed.step(5).unwrap();
    for p in run.hierarchy().patches() {
        let (a, b) = (
            run.active_populations(p.level, p.index).unwrap(),
            resumed.active_populations(p.level, p.index).unwrap(),
        );
        assert!(bits(&a) == bits(&b), "{} after a restore", p.name());
    }
    assert_eq!(resumed.read_raw_exchange(0).unwrap(), run.read_raw_exchange(0).unwrap());
    let e = build(3).restore(&snapshot).unwrap_err().to_string();
    assert!(e.contains("split over 3 devices"), "{e}");
    let one = Stepper::new(CpuDriver::new(), lattice.clone(), exec(Vec::new())).unwrap();
    let e = build(2).restore(&one.snapshot().unwrap()).unwrap_err().to_string();
    assert!(e.contains("split over 2 devices"), "{e}");
    let ledger = run.memory_ledger();
    assert!(
        ledger.entries.keys().any(|k| k.starts_with("slab/1/")),
        "{:?}",
        ledger.entries.keys()
    );
}

#[test]
fn the_health_check_finds_the_cell_one_device_finds_whichever_slab_holds_it() {
    // Too fast low down on the right and high up on the left: row-major
    // order puts the right slab's cell first.
    let fast = |_: usize, x: f64, y: f64| Moments {
        delta_rho: 0.0,
        ux: if (x > 70.0 && y < 10.0) || (x < 20.0 && y > 30.0) {
            0.08
        } else {
            0.0
        },
        uy: 0.0,
    };
    let one = Stepper::new(CpuDriver::new(), channel(), exec(Vec::new())).unwrap();
    let drivers = (0..2).map(|_| CpuDriver::new()).collect();
    let mut split = Split::new(drivers, channel(), exec(Vec::new())).unwrap();
    one.initialize(fast).unwrap();
    split.initialize(fast).unwrap();
    let want = one.check_health(0.05).unwrap().expect("the fast cells are found");
    assert!(want.cell[0] >= split.decomposition().slabs[1].x0, "{want:?}");
    assert_eq!(split.check_health(0.05).unwrap(), Some(want));
}
