//! A patch's update split into the bulk kernel and the general kernel over
//! the cells it leaves (the rim along sides with rules of their own and the
//! spans around a body's cells) computes what the general kernel over every
//! cell computes, bit for bit: a stepper that splits every patch it can
//! against one that splits none, on every example case and on small refined
//! grids with a body on a refined level.

use lbm_core::config::{Boundary, ExecConfig, LatticeConfig};
use lbm_core::domain::geometry::{Body, Shape};
use lbm_core::domain::hierarchy::{HierarchySpec, Rect};
use lbm_core::lattice::Collision;
use lbm_core::{CpuDriver, Stepper};

mod common;

use common::{CASE_FILES, case_file, initial_flow, observed_case, population_bits};

/// Runs `lattice` split and whole for three intervals and compares every
/// population and each body's exchange.
fn split_and_whole(what: &str, lattice: LatticeConfig, exec: ExecConfig, bodies: usize) {
    let split = Stepper::new(CpuDriver::splitting_from(1), lattice.clone(), exec.clone()).unwrap();
    let whole = Stepper::new(CpuDriver::splitting_from(usize::MAX), lattice, exec).unwrap();
    let plan = |s: &Stepper<CpuDriver>| format!("{:?}", s.plan().interval(0));
    // Patches without a body whose bulk region is the whole active region
    // (the cavity's) take the bulk kernel alone either way.
    assert!(
        bodies == 0 || plan(&split) != plan(&whole),
        "{what}: one stepper splits its updates and the other does not"
    );
    for stepper in [&split, &whole] {
        stepper.initialize(initial_flow).unwrap();
        stepper.step(3).unwrap();
    }
    let (a, b) = (population_bits(&split), population_bits(&whole));
    for (patch, (a, b)) in split.hierarchy().patches().zip(a.iter().zip(&b)) {
        let differ = a.iter().zip(b).filter(|(a, b)| a != b).count();
        assert_eq!(differ, 0, "{what}: {} differs split and whole", patch.name());
    }
    for body in 0..bodies {
        assert_eq!(
            format!("{:?}", split.read_raw_exchange(body).unwrap()),
            format!("{:?}", whole.read_raw_exchange(body).unwrap()),
            "{what}: body {body}'s exchange"
        );
    }
}

#[test]
fn every_case_computes_the_same_bits_split_or_whole() {
    for case in CASE_FILES {
        let (lattice, exec, bodies) = observed_case(&case_file(case, None));
        split_and_whole(case, lattice, exec, bodies);
    }
}

/// A 48 x 40 periodic channel between walls, two level-1 patches and a
/// level-2 patch, a cylinder on one of the level-1 patches.
#[test]
fn a_body_on_a_refined_level_computes_the_same_bits_split_or_whole() {
    let lattice = LatticeConfig {
        hierarchy: HierarchySpec {
            base: [48, 40],
            levels: vec![
                vec![Rect::new(8, 8, 24, 24), Rect::new(30, 10, 40, 30)],
                vec![Rect::new(64, 26, 74, 44)],
            ],
        },
        collision: Collision::default(),
        tau: 0.7,
        force: [5e-6, 0.0],
        boundaries: [Boundary::Periodic, Boundary::Periodic, Boundary::Wall, Boundary::Wall],
        wall_velocity: [[0.0; 2], [0.0; 2], [0.0; 2], [0.03, 0.0]],
        inlet: None,
        bodies: vec![Body {
            shape: Shape::Circle {
                center: [15.0, 16.0],
                radius: 2.5,
            },
            level: 1,
        }],
    };
    let exec = ExecConfig {
        observe_raw_exchange: true,
        ..ExecConfig::default()
    };
    split_and_whole("refined periodic channel", lattice, exec, 1);
}
