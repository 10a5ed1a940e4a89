//! What CUDA graphs buy a whole interval: `Stepper::step` of a case from
//! `cases/`, its plans captured as graphs (`PlanMode::Graphs`, the default)
//! against the same plans enqueued launch by launch (`PlanMode::Launches`)
//! in the same run, in cell updates per second. Small refined grids are
//! launch-bound, which is where graphs matter. Prints a skip notice and
//! measures nothing without a CUDA device.
//!
//! Run: `cargo xtask gpu-pack`, then on the GPU machine
//! `bash gpu-pack/run.sh benches gpu_plans`. The records land in
//! `gpu_plans.jsonl` (see `bench_record`); the ceiling of each figure is the
//! launch-by-launch replay, so the ratio is the graphs' speed-up.

use std::process::ExitCode;
use std::time::Instant;

use bench_record::Group;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use lbm_core::case::Case;
use lbm_core::{ExecConfig, Stepper};
use lbm_cuda::{CudaDriver, PlanMode};

// Shared with the other GPU benches; this one times `Stepper::step`, not `timed`.
#[allow(dead_code)]
mod common;

const GPU_PLANS: Group = Group {
    name: "gpu_plans",
    figures: &["graphs"],
    ceiling: "launches",
    element_unit: "cell updates/s",
};

/// The cases, by bench id: the refined cavity (64² and one patch) and DFG
/// 2D-1 at its defaults (two levels, a body, an inlet).
const CASES: [(&str, &str); 2] = [
    ("cavity-re100", include_str!("../../../cases/cavity-re100.toml")),
    ("dfg-2d1", include_str!("../../../cases/dfg-2d1.toml")),
];

/// Intervals per timed `step` call, as `lbm run` takes them between samples.
const INTERVALS: u64 = 100;

fn bench(c: &mut Criterion) {
    if !lbm_cuda::device_available() {
        eprintln!("gpu_plans: no CUDA device, nothing measured");
        return;
    }
    let mut group = c.benchmark_group(GPU_PLANS.name);
    group.sample_size(20);
    for (id, text) in CASES {
        let resolved = Case::from_toml(text).unwrap().resolve().unwrap();
        for (name, mode) in [("graphs", PlanMode::Graphs), ("launches", PlanMode::Launches)] {
            let mut driver = CudaDriver::new(0).unwrap();
            driver.set_plan_mode(mode);
            let exec = ExecConfig {
                tiles: resolved.tiles.clone(),
                observe_window_exchange: !resolved.lattice.bodies.is_empty(),
                ..ExecConfig::default()
            };
            let stepper = Stepper::new(driver, resolved.lattice.clone(), exec).unwrap();
            let updates = stepper.hierarchy().cell_updates_per_interval();
            group.throughput(Throughput::Elements(updates * INTERVALS));
            stepper.step(INTERVALS).unwrap();
            group.bench_function(BenchmarkId::new(name, id), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        stepper.step(INTERVALS).unwrap();
                    }
                    start.elapsed()
                })
            });
            stepper.close().unwrap();
        }
    }
    group.finish();
}

criterion_group!(benches, bench);

fn main() -> ExitCode {
    common::main(benches, &[GPU_PLANS])
}
