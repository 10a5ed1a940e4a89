//! Issue 12's ensemble targets, in cell updates per second over all members.
//! Group `gpu_lockstep`: N members of a small case, each a `Stepper` on its
//! own `CudaDriver` (its own stream), advanced as `lockstep::LockstepRunner`
//! advances them (every member's intervals enqueued, then every member waited
//! for, so the streams run side by side), against one member alone in the
//! same run. Group `gpu_fused`: the same N members as one fused batch
//! (`lbm_core::fused`, one launch per kernel per hop for all members, on one
//! driver) against that lockstep baseline. Group `gpu_fused_uniform`: the
//! fused batch against one uniform periodic grid of the same total cell count.
//! Prints a skip notice and measures nothing without a CUDA device.
//!
//! Run: `cargo xtask gpu-pack`, then on the GPU machine
//! `bash gpu-pack/run.sh benches gpu_lockstep`.

use std::process::ExitCode;
use std::time::Instant;

use bench_record::Group;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};

use lbm_core::member::Member;
use lbm_core::{Boundary, ExecConfig, LatticeConfig, Stepper};
use lbm_cuda::CudaDriver;

// Shared with the other GPU benches; this one times the members' advance, not `timed`.
#[allow(dead_code)]
mod common;
mod ensemble;

const GPU_LOCKSTEP: Group = Group {
    name: "gpu_lockstep",
    figures: &["lockstep"],
    ceiling: "one_member",
    element_unit: "cell updates/s",
};

const GPU_FUSED: Group = Group {
    name: "gpu_fused",
    figures: &["fused"],
    ceiling: "lockstep",
    element_unit: "cell updates/s",
};

const GPU_FUSED_UNIFORM: Group = Group {
    name: "gpu_fused_uniform",
    figures: &["fused"],
    ceiling: "uniform",
    element_unit: "cell updates/s",
};

/// Intervals per timed advance.
const INTERVALS: u64 = 50;

/// Advances every member `INTERVALS` as the runner does: all enqueued, then
/// all waited for, `iters` times.
fn advance<M: Member>(members: &[M], iters: u64) -> std::time::Duration {
    let start = Instant::now();
    for _ in 0..iters {
        lockstep::advance_together(members, INTERVALS).unwrap();
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    if !lbm_cuda::device_available() {
        eprintln!("gpu_lockstep: no CUDA device, nothing measured");
        return;
    }
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
        let configs = ensemble::members(text, resolution, n, INTERVALS);
        let batch: Vec<Stepper<CudaDriver>> = configs
            .iter()
            .map(|(l, e)| Stepper::new(CudaDriver::new(0).unwrap(), l.clone(), e.clone()).unwrap())
            .collect();
        let fused = lbm_core::fused::batch(CudaDriver::new(0).unwrap(), configs).unwrap();
        let per_member = batch[0].hierarchy().cell_updates_per_interval();
        let updates = per_member * INTERVALS;
        let param = format!("{id}x{n}");
        let mut group = c.benchmark_group(GPU_LOCKSTEP.name);
        group.sample_size(10);
        for (figure, count) in [("lockstep", n), ("one_member", 1)] {
            group.throughput(Throughput::Elements(updates * count as u64));
            group.bench_function(BenchmarkId::new(figure, &param), |b| {
                b.iter_custom(|iters| advance(&batch[..count], iters))
            });
        }
        group.finish();
        let mut fused_group = c.benchmark_group(GPU_FUSED.name);
        fused_group.sample_size(10);
        fused_group.throughput(Throughput::Elements(updates * n as u64));
        fused_group.bench_function(BenchmarkId::new("fused", &param), |b| {
            b.iter_custom(|iters| advance(&fused, iters))
        });
        fused_group.bench_function(BenchmarkId::new("lockstep", &param), |b| {
            b.iter_custom(|iters| advance(&batch, iters))
        });
        fused_group.finish();
        batch.iter().for_each(|m| Member::close(m).unwrap());
        // One uniform periodic grid with the batch's cell updates per
        // interval, as near a square as whole cells allow.
        let side = ((per_member * n as u64) as f64).sqrt().round() as u32;
        let uniform_lattice = LatticeConfig::uniform(side, side, 0.8, [Boundary::Periodic; 4]);
        let uniform = Stepper::new(CudaDriver::new(0).unwrap(), uniform_lattice, ExecConfig::default()).unwrap();
        let uniform_updates = uniform.hierarchy().cell_updates_per_interval() * INTERVALS;
        let mut uniform_group = c.benchmark_group(GPU_FUSED_UNIFORM.name);
        uniform_group.sample_size(10);
        uniform_group.throughput(Throughput::Elements(updates * n as u64));
        uniform_group.bench_function(BenchmarkId::new("fused", &param), |b| {
            b.iter_custom(|iters| advance(&fused, iters))
        });
        uniform_group.throughput(Throughput::Elements(uniform_updates));
        uniform_group.bench_function(BenchmarkId::new("uniform", &param), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    uniform.step(INTERVALS).unwrap();
                }
                start.elapsed()
            })
        });
        uniform_group.finish();
        fused.iter().for_each(|m| Member::close(m).unwrap());
    }
}

criterion_group!(benches, bench);

fn main() -> ExitCode {
    common::main(benches, &[GPU_LOCKSTEP, GPU_FUSED, GPU_FUSED_UNIFORM])
}
