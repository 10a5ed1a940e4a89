//! What several of lbm-core's integration tests share.

#![allow(dead_code)] // each test file uses its own subset

use lbm_core::case::Case;
use lbm_core::lattice::Moments;
use lbm_core::{Driver, ExecConfig, LatticeConfig, Stepper};

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

/// Every case file of `cases/`.
pub const CASE_FILES: [&str; 6] = [
    "cavity-re100.toml",
    "dfg-2d1.toml",
    "dfg-2d2.toml",
    "naca0012.toml",
    "square-obstacle.toml",
    "tandem-cylinders.toml",
];

/// The text of `case` in `cases/`, at `resolution` base cells per
/// reference length where given.
pub fn case_file(case: &str, resolution: Option<u32>) -> String {
    let text =
        std::fs::read_to_string(format!("{}/../../cases/{case}", env!("CARGO_MANIFEST_DIR"))).expect("the case file");
    text.lines()
        .map(|l| match (resolution, l.trim_start().starts_with("resolution =")) {
            (Some(r), true) => format!("resolution = {r}"),
            _ => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A case's lattice and its execution (the case's tiles, nothing observed),
/// and its number of bodies.
pub fn resolved_case(text: &str) -> (LatticeConfig, ExecConfig, usize) {
    let resolved = Case::from_toml(text)
        .and_then(|c| c.resolve())
        .expect("the case resolves");
    let exec = ExecConfig {
        tiles: resolved.tiles.clone(),
        ..ExecConfig::default()
    };
    let bodies = resolved.lattice.bodies.len();
    (resolved.lattice, exec, bodies)
}

/// [`resolved_case`] with each body's raw exchange observed.
pub fn observed_case(text: &str) -> (LatticeConfig, ExecConfig, usize) {
    let (lattice, exec, bodies) = resolved_case(text);
    let exec = ExecConfig {
        observe_raw_exchange: true,
        ..exec
    };
    (lattice, exec, bodies)
}
