//! The lockstep baseline of issue 12's ensemble targets: N members of a small
//! case, each a `Stepper` on its own `CudaDriver` (its own stream), advanced
//! as `lockstep::LockstepRunner` advances them (every member's intervals
//! enqueued, then every member waited for, so the streams run side by
//! side), against one member alone in the same run, in cell updates per
//! second over all members. The fused batch
//! stepper (not built yet) is to beat this figure. Prints a skip notice and
//! measures nothing without a CUDA device.
//!
//! Run: `cargo xtask gpu-pack`, then on the GPU machine
//! `bash gpu-pack/run.sh benches gpu_lockstep`.

use std::process::ExitCode;
use std::time::Instant;

use bench_record::Group;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use lbm_core::case::Case;
use lbm_core::member::{FixedSchedule, Member};
use lbm_core::{ExecConfig, Stepper};
use lbm_cuda::CudaDriver;

// Shared with the other GPU benches; this one times the members' advance, not `timed`.
#[allow(dead_code)]
mod common;

const GPU_LOCKSTEP: Group = Group {
    name: "gpu_lockstep",
    figures: &["lockstep"],
    ceiling: "one_member",
    element_unit: "cell updates/s",
};

/// Intervals per timed advance.
const INTERVALS: u64 = 50;

fn members(text: &str, resolution: Option<f64>, n: usize) -> Vec<Stepper<CudaDriver>> {
    let mut case = Case::from_toml(text).unwrap();
    if let Some(r) = resolution {
        // Twice the case's lattice velocity keeps the base τ above BGK's
        // floor at this resolution.
        case.domain.resolution = r;
        case.flow.lattice_velocity = 0.05;
    }
    let resolved = case.resolve().unwrap();
    (0..n)
        .map(|_| {
            let exec = ExecConfig {
                tiles: resolved.tiles.clone(),
                observe_window_exchange: !resolved.lattice.bodies.is_empty(),
                schedule: Some(FixedSchedule::new(INTERVALS, INTERVALS).unwrap()),
                ..ExecConfig::default()
            };
            Stepper::new(CudaDriver::new(0).unwrap(), resolved.lattice.clone(), exec).unwrap()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    if !lbm_cuda::device_available() {
        eprintln!("gpu_lockstep: no CUDA device, nothing measured");
        return;
    }
    let mut group = c.benchmark_group(GPU_LOCKSTEP.name);
    group.sample_size(10);
    // The targets' batches: 256 refined cavities, and 64 DFG 2D-2 at 40 cells
    // per diameter on the finest level (resolution 10 on the base; the
    // target's 20, resolution 5, puts the case's patches closer to the
    // channel's ends than the coupling allows).
    for (id, text, resolution, n) in [
        (
            "cavity-re100",
            include_str!("../../../cases/cavity-re100.toml"),
            None,
            256usize,
        ),
        (
            "dfg-2d2-40",
            include_str!("../../../cases/dfg-2d2.toml"),
            Some(10.0),
            64,
        ),
    ] {
        let batch = members(text, resolution, n);
        let updates = batch[0].hierarchy().cell_updates_per_interval() * INTERVALS;
        for (figure, count) in [("lockstep", n), ("one_member", 1)] {
            group.throughput(Throughput::Elements(updates * count as u64));
            group.bench_function(BenchmarkId::new(figure, format!("{id}x{n}")), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        // As the runner advances them: all enqueued, then all waited for.
                        batch[..count].iter().for_each(|m| m.begin_advance(INTERVALS).unwrap());
                        batch[..count].iter().for_each(|m| m.finish_advance().unwrap());
                    }
                    start.elapsed()
                })
            });
        }
        batch.iter().for_each(|m| Member::close(m).unwrap());
    }
    group.finish();
}

criterion_group!(benches, bench);

fn main() -> ExitCode {
    common::main(benches, GPU_LOCKSTEP)
}
