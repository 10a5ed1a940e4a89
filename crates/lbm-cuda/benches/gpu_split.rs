//! A run split into two slabs (`lbm_core::split`) on the one GPU this
//! machine has: both slabs' `CudaDriver`s on device 0, the halo exchange
//! after every interval device to device: copies (the split's device
//! transport, `split`) or NCCL sends and receives to the device's own rank
//! (`split_nccl`). Two ceilings, each measured in the same run: the same two slabs stepped
//! the same way but with no exchange (`gpu_split`: what the exchange costs,
//! the "at most 5% slower" target), and the whole channel on one driver
//! (`gpu_split_whole`: what the split costs on one device). A uniform DFG-like
//! channel (inlet, outflow, walls, a cylinder on the base grid), 4400 x 820
//! cells and twice that along each axis. Prints a skip notice and measures nothing without a CUDA device.
//!
//! Run: `cargo xtask gpu-pack`, then on the GPU machine
//! `bash gpu-pack/run.sh benches gpu_split`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bench_record::Group;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use lbm_core::config::{Amplitude, InletSpec, Profile};
use lbm_core::domain::geometry::{Body, Shape};
use lbm_core::split::Split;
use lbm_core::{Boundary, ExecConfig, LatticeConfig, Stepper};
use lbm_cuda::CudaDriver;

// Shared with the other GPU benches; this one times its own loops.
#[allow(dead_code)]
mod common;

const GPU_SPLIT: Group = Group {
    name: "gpu_split",
    figures: &["split", "split_nccl"],
    ceiling: "no_exchange",
    element_unit: "cell updates/s",
};

const GPU_SPLIT_WHOLE: Group = Group {
    name: "gpu_split_whole",
    figures: &["split"],
    ceiling: "one_driver",
    element_unit: "cell updates/s",
};

/// Intervals per timed call.
const INTERVALS: u64 = 20;

/// The channel at `scale` times 4400 x 820 cells.
fn channel(scale: u32) -> LatticeConfig {
    let mut lattice = LatticeConfig::uniform(
        4400 * scale,
        820 * scale,
        0.56,
        [Boundary::Inlet, Boundary::Outflow, Boundary::Wall, Boundary::Wall],
    );
    lattice.inlet = Some(InletSpec {
        profile: Profile::Parabolic,
        velocity: 0.04,
        amplitude: Amplitude::Constant,
        span: None,
    });
    lattice.bodies = vec![Body {
        shape: Shape::Circle {
            center: [400.0 * scale as f64, 400.0 * scale as f64],
            radius: 100.0 * scale as f64,
        },
        level: 0,
    }];
    lattice
}

fn timed(iters: u64, mut interval_chunk: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        interval_chunk();
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    if !lbm_cuda::device_available() {
        eprintln!("gpu_split: no CUDA device, nothing measured");
        return;
    }
    // The exchange's host calls per interval are the same at both sizes;
    // the larger grid's intervals take four times as long.
    for scale in [1, 2] {
        bench_channel(c, scale);
    }
}

fn bench_channel(c: &mut Criterion, scale: u32) {
    let lattice = channel(scale);
    let exec = ExecConfig::default();
    let drivers = || (0..2).map(|_| CudaDriver::new(0).unwrap()).collect::<Vec<_>>();
    let mut split = Split::new(drivers(), lattice.clone(), exec.clone()).unwrap();
    let updates = split.hierarchy().cell_updates_per_interval() * INTERVALS;
    // Without NCCL's library the NCCL figure is not measured (and says so).
    let mut nccl = lbm_cuda::Nccl::open(&[0, 0]).unwrap().map(|library| {
        let mut nccl = Split::new(drivers(), lattice.clone(), exec.clone()).unwrap();
        nccl.use_collective(Box::new(library)).unwrap();
        nccl.step(INTERVALS).unwrap();
        nccl
    });
    if nccl.is_none() {
        eprintln!("gpu_split: NCCL's library (libnccl.so) not found, split_nccl not measured");
    }
    // The same slabs as plain steppers, nothing exchanged.
    let slabs: Vec<Stepper<CudaDriver>> = drivers()
        .into_iter()
        .enumerate()
        .map(|(k, d)| {
            let exec = ExecConfig {
                slab: Some(split.decomposition().window(k)),
                ..exec.clone()
            };
            Stepper::new(d, lattice.clone(), exec).unwrap()
        })
        .collect();
    let whole = Stepper::new(CudaDriver::new(0).unwrap(), lattice, exec).unwrap();
    split.step(INTERVALS).unwrap();
    whole.step(INTERVALS).unwrap();
    // Every slab's intervals enqueued before any is waited for, as the
    // split's device transport enqueues them.
    let mut no_exchange = || {
        slabs.iter().for_each(|s| s.begin_step(INTERVALS).unwrap());
        slabs.iter().for_each(|s| s.finish_step().unwrap());
    };
    no_exchange();
    let param = format!("dfg-channel-{}x{}", 4400 * scale, 820 * scale);
    let param = param.as_str();
    let mut group = c.benchmark_group(GPU_SPLIT.name);
    group.sample_size(10).throughput(Throughput::Elements(updates));
    group.bench_function(BenchmarkId::new("split", param), |b| {
        b.iter_custom(|iters| timed(iters, || split.step(INTERVALS).unwrap()))
    });
    if let Some(nccl) = nccl.as_mut() {
        group.bench_function(BenchmarkId::new("split_nccl", param), |b| {
            b.iter_custom(|iters| timed(iters, || nccl.step(INTERVALS).unwrap()))
        });
    }
    group.bench_function(BenchmarkId::new("no_exchange", param), |b| {
        b.iter_custom(|iters| timed(iters, &mut no_exchange))
    });
    group.finish();
    let mut group = c.benchmark_group(GPU_SPLIT_WHOLE.name);
    group.sample_size(10).throughput(Throughput::Elements(updates));
    group.bench_function(BenchmarkId::new("split", param), |b| {
        b.iter_custom(|iters| timed(iters, || split.step(INTERVALS).unwrap()))
    });
    group.bench_function(BenchmarkId::new("one_driver", param), |b| {
        b.iter_custom(|iters| timed(iters, || whole.step(INTERVALS).unwrap()))
    });
    group.finish();
    split.close().unwrap();
    if let Some(mut nccl) = nccl {
        nccl.close().unwrap();
    }
}

criterion_group!(benches, bench);

fn main() -> ExitCode {
    common::main(benches, &[GPU_SPLIT, GPU_SPLIT_WHOLE])
}
