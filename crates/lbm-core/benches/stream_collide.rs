//! CPU backend throughput on a uniform periodic grid in million lattice updates
//! per second: `stream_collide` as the stepper enqueues it (the vectorised bulk
//! kernel, then the general one over the rim) and `stream_collide_general`
//! (the general kernel over every cell), next to a copy of the same bytes
//! (read and write one population set per cell, split over the same threads)
//! measured in the same run as the ceiling. `cpu_uniform` runs on rayon's
//! default pool (every core), `cpu_uniform_one_core` on a pool of one thread.
//!
//! Run: `cargo bench -p lbm-core --bench stream_collide` (or `cargo xtask
//! bench`). Criterion reports "elements/s"; one element is one cell, so Melem/s
//! reads as MLUPS. Each figure and its ceiling are appended to
//! `stream_collide.jsonl` (see `bench_record`).

use std::process::ExitCode;

use bench_record::{Group, Run};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use lbm_core::fixtures::{PeriodicBenchmark, benchmark_physics};
use lbm_core::kernels::KernelArgs;
use lbm_core::kernels::lbm::vector::Vector;
use lbm_core::kernels::lbm::{StreamCollideBulk, stream_collide_bulk};
use lbm_core::{CpuDriver, Driver};
use rayon::prelude::*;

const CPU_UNIFORM: Group = Group {
    name: "cpu_uniform",
    figures: &[
        "stream_collide",
        "stream_collide_general",
        "bulk_avx512",
        "bulk_avx2",
        "bulk_baseline",
    ],
    ceiling: "copy_same_bytes",
    element_unit: "cells/s",
};

const CPU_UNIFORM_ONE_CORE: Group = Group {
    name: "cpu_uniform_one_core",
    ..CPU_UNIFORM
};

/// Copies `src` into `dst` in one chunk per thread of the current pool, as
/// the kernels split their rows.
fn copy(src: &[f32], dst: &mut [f32]) {
    let chunk = src.len().div_ceil(rayon::current_num_threads());
    dst.par_chunks_mut(chunk)
        .zip(src.par_chunks(chunk))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

/// Runs `work` on `pool`, or on rayon's default pool without one.
fn on<R: Send>(pool: Option<&rayon::ThreadPool>, work: impl FnOnce() -> R + Send) -> R {
    match pool {
        Some(pool) => pool.install(work),
        None => work(),
    }
}

fn group(c: &mut Criterion, spec: &Group, pool: Option<&rayon::ThreadPool>) {
    let mut group = c.benchmark_group(spec.name);
    group.sample_size(20);
    for n in [256u32, 1024] {
        let cells = (n * n) as usize;
        group.throughput(Throughput::Elements(cells as u64));
        let mut driver = CpuDriver::new();
        let bench = PeriodicBenchmark::allocate(&mut driver, n, benchmark_physics()).unwrap();
        let split = bench.launches[0].clone();
        group.bench_function(BenchmarkId::new("stream_collide", n), |b| {
            b.iter(|| on(pool, || split.iter().for_each(|l| driver.launch(l).unwrap())))
        });
        let whole = bench.whole[0].clone();
        group.bench_function(BenchmarkId::new("stream_collide_general", n), |b| {
            b.iter(|| on(pool, || driver.launch(&whole).unwrap()))
        });
        let src = vec![1.0f32; bench.population_bytes / 4];
        let mut dst = vec![0.0f32; src.len()];
        // The bulk kernel alone with each instruction set this processor has.
        let bulk = StreamCollideBulk::decode(&split[0]).unwrap();
        for vector in Vector::available() {
            group.bench_function(BenchmarkId::new(format!("bulk_{}", vector.name()), n), |b| {
                b.iter(|| on(pool, || stream_collide_bulk(&bulk, &src, &mut dst, None, vector)))
            });
        }
        group.bench_function(BenchmarkId::new("copy_same_bytes", n), |b| {
            b.iter(|| on(pool, || copy(&src, &mut dst)))
        });
    }
    group.finish();
}

fn bench(c: &mut Criterion) {
    group(c, &CPU_UNIFORM, None);
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    group(c, &CPU_UNIFORM_ONE_CORE, Some(&one));
}

criterion_group!(benches, bench);

/// `criterion_main!`, then the records of what it measured.
fn main() -> ExitCode {
    let run = Run::start(env!("CARGO_PKG_NAME"), env!("CARGO_CRATE_NAME"));
    benches();
    Criterion::default().configure_from_args().final_summary();
    run.finish(&bench_record::cpu_device(), &[CPU_UNIFORM, CPU_UNIFORM_ONE_CORE])
}
