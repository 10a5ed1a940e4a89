//! What several of lbm-core's integration tests share.

#![allow(dead_code)] // each test file uses its own subset

use lbm_core::lattice::Moments;
use lbm_core::{Driver, Stepper};

/// A flow that varies everywhere (x and y in base cells), so that no two
/// runs agree by the fluid being at rest.
pub fn initial_flow(_level: usize, x: f64, y: f64) -> Moments {
    let (tx, ty) = (std::f64::consts::TAU * x / 48.0, std::f64::consts::TAU * y / 40.0);
    Moments {
        delta_rho: (0.01 * tx.sin() * ty.cos()) as f32,
        ux: (0.03 + 0.01 * ty.sin()) as f32,
        uy: (0.01 * tx.cos()) as f32,
    }
}

/// Every population of every patch, ghost bands included, as bits.
pub fn population_bits<D: Driver>(stepper: &Stepper<D>) -> Vec<Vec<u32>> {
    stepper
        .hierarchy()
        .patches()
        .map(|p| {
            let f = stepper.download(p.level, p.index).expect("download");
            f.iter().map(|v| v.to_bits()).collect()
        })
        .collect()
}
