//! Issue 11's two DFG targets as benchmarks, each a ratio of one run:
//!
//! - `gpu_dfg`: the uniform DFG 2D-1 channel at 640 cells per diameter
//!   (14080 x 2624 cells: walls, the parabolic inlet, the outflow, the
//!   cylinder and its momentum exchange every interval) stepped by
//!   `Stepper::step` as `lbm run` steps it between samples, against a
//!   device-to-device copy of the same cells' populations (72 bytes each);
//! - `gpu_dfg_refined`: the same channel with its two refinement levels at
//!   160 base cells per diameter (640 on the finest), in cell updates per
//!   second, against the uniform channel's cell updates per second: what each
//!   refined cell update costs next to a uniform one. The finest-equivalent
//!   rate (the finest level's cells over the whole channel, four finest steps
//!   per interval, as Neon and XLB report) is printed beside it.
//!
//! Prints a skip notice and measures nothing without a CUDA device.
//!
//! Run: `cargo xtask gpu-pack`, then on the GPU machine
//! `bash gpu-pack/run.sh benches gpu_dfg`. The records land in `gpu_dfg.jsonl`.

use std::process::ExitCode;
use std::time::Instant;

use bench_record::Group;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use lbm_core::case::Case;
use lbm_core::{Driver, ExecConfig, Stepper};
use lbm_cuda::CudaDriver;

mod common;
mod dfg;

const GPU_DFG: Group = Group {
    name: "gpu_dfg",
    figures: &["channel"],
    ceiling: "copy_same_bytes",
    element_unit: "cell updates/s",
};

const GPU_DFG_REFINED: Group = Group {
    name: "gpu_dfg_refined",
    figures: &["three_levels"],
    ceiling: "uniform",
    element_unit: "cell updates/s",
};

/// Cells per diameter on the finest level.
const FINEST: u32 = 640;

/// Intervals per timed `step` call.
const INTERVALS: u64 = 50;

/// A stepper of `text` on device 0, its cell updates per interval, and the
/// cells of its base grid.
fn stepper(text: &str) -> (Stepper<CudaDriver>, u64, u64) {
    let resolved = Case::from_toml(text).unwrap().resolve().unwrap();
    let exec = ExecConfig {
        tiles: resolved.tiles.clone(),
        observe_window_exchange: true,
        ..ExecConfig::default()
    };
    let stepper = Stepper::new(CudaDriver::new(0).unwrap(), resolved.lattice, exec).unwrap();
    let updates = stepper.hierarchy().cell_updates_per_interval();
    let base = stepper
        .hierarchy()
        .patches()
        .filter(|p| p.level == 0)
        .map(|p| p.active.cells() as u64)
        .sum();
    stepper.step(INTERVALS).unwrap();
    (stepper, updates, base)
}

/// Benches `INTERVALS` intervals of `stepper` per iteration as `id/FINEST`
/// in `group`; returns the seconds of one interval from a separate timing,
/// for the finest-equivalent rate.
fn bench_steps(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: &str,
    stepper: &Stepper<CudaDriver>,
    updates: u64,
) -> f64 {
    group.throughput(Throughput::Elements(updates * INTERVALS));
    group.bench_function(BenchmarkId::new(id, FINEST), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                stepper.step(INTERVALS).unwrap();
            }
            start.elapsed()
        })
    });
    let start = Instant::now();
    stepper.step(INTERVALS).unwrap();
    start.elapsed().as_secs_f64() / INTERVALS as f64
}

fn bench(c: &mut Criterion) {
    if !lbm_cuda::device_available() {
        eprintln!("gpu_dfg: no CUDA device, nothing measured");
        return;
    }
    let uniform = dfg::dfg_2d1(FINEST, false);
    let refined = dfg::dfg_2d1(FINEST / 4, true);

    let mut group = c.benchmark_group(GPU_DFG.name);
    group.sample_size(10);
    let (channel, updates, cells) = stepper(&uniform);
    bench_steps(&mut group, "channel", &channel, updates);
    channel.close().unwrap();
    let mut driver = CudaDriver::new(0).unwrap();
    let bytes = cells as usize * 9 * 4;
    let (src, dst) = (driver.alloc("src", bytes).unwrap(), driver.alloc("dst", bytes).unwrap());
    group.throughput(Throughput::Elements(cells));
    group.bench_function(BenchmarkId::new("copy_same_bytes", FINEST), |b| {
        b.iter_custom(|iters| common::timed(&mut driver, iters, |d| d.copy_async(src, 0, dst, 0, bytes).unwrap()))
    });
    driver.free(src).unwrap();
    driver.free(dst).unwrap();
    group.finish();

    let mut group = c.benchmark_group(GPU_DFG_REFINED.name);
    group.sample_size(10);
    let (three, updates, _) = stepper(&refined);
    let interval = bench_steps(&mut group, "three_levels", &three, updates);
    three.close().unwrap();
    // The finest level spans the channel at 640 per diameter in `cells`
    // (the uniform grid), stepping four times per base interval.
    eprintln!(
        "gpu_dfg_refined: three_levels/{FINEST}: finest-equivalent {:.1} G cell updates/s ({} cell updates per interval)",
        (cells * 4) as f64 / interval / 1e9,
        updates
    );
    let (channel, updates, _) = stepper(&uniform);
    bench_steps(&mut group, "uniform", &channel, updates);
    channel.close().unwrap();
    group.finish();
}

criterion_group!(benches, bench);

fn main() -> ExitCode {
    common::main(benches, &[GPU_DFG, GPU_DFG_REFINED])
}
