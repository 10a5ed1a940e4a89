//! The ensemble members `gpu_lockstep` and `gpu_interval` build alike.

use lbm_core::case::Case;
use lbm_core::member::FixedSchedule;
use lbm_core::{ExecConfig, LatticeConfig};

/// `n` members of the case in `text` as the ensemble benches build them
/// (`gpu_lockstep`, and `gpu_interval`'s fused batches), on a schedule of
/// `intervals` per save point: each member's relaxation time a little larger
/// than the one before (as a sweep would vary its viscosity). With
/// `resolution` the base resolution changes and the lattice velocity doubles
/// (0.05), which keeps the base τ above BGK's floor there.
pub fn members(text: &str, resolution: Option<f64>, n: usize, intervals: u64) -> Vec<(LatticeConfig, ExecConfig)> {
    let mut case = Case::from_toml(text).unwrap();
    if let Some(r) = resolution {
        case.domain.resolution = r;
        case.flow.lattice_velocity = 0.05;
    }
    let resolved = case.resolve().unwrap();
    (0..n)
        .map(|k| {
            let exec = ExecConfig {
                tiles: resolved.tiles.clone(),
                observe_window_exchange: !resolved.lattice.bodies.is_empty(),
                schedule: Some(FixedSchedule::new(intervals, intervals).unwrap()),
                ..ExecConfig::default()
            };
            let mut lattice = resolved.lattice.clone();
            lattice.tau += 1e-3 * k as f64;
            (lattice, exec)
        })
        .collect()
}
