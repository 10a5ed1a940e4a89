//! CPU backend throughput on a uniform periodic grid in million lattice updates
//! per second: `stream_collide` as the stepper enqueues it (the vectorised bulk
//! kernel, then the general one over the rim) and `stream_collide_general`
//! (the general kernel over every cell), next to a plain copy of the same bytes
//! (read and write one population set per cell) measured in the same run as
//! the ceiling.
//!
//! Run: `cargo bench -p lbm-core --bench stream_collide` (or `cargo xtask
//! bench`). Criterion reports "elements/s"; one element is one cell, so Melem/s
//! reads as MLUPS. Each figure and its ceiling are appended to
//! `stream_collide.jsonl` (see `bench_record`).

use std::process::ExitCode;

use bench_record::{Group, Run};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use lbm_core::fixtures::{PeriodicBenchmark, benchmark_physics};
use lbm_core::{CpuDriver, Driver};

const CPU_UNIFORM: Group = Group {
    name: "cpu_uniform",
    figures: &["stream_collide"],
    ceiling: "copy_same_bytes",
    element_unit: "cells/s",
};

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group(CPU_UNIFORM.name);
    group.sample_size(20);
    for n in [256u32, 1024] {
        let cells = (n * n) as usize;
        group.throughput(Throughput::Elements(cells as u64));
        let mut driver = CpuDriver::new();
        let bench = PeriodicBenchmark::allocate(&mut driver, n, benchmark_physics()).unwrap();
        let (src, dst, bytes) = (bench.src, bench.dst, bench.population_bytes);
        let split = bench.launches[0].clone();
        group.bench_with_input(BenchmarkId::new("stream_collide", n), &split, |b, split| {
            b.iter(|| split.iter().for_each(|l| driver.launch(l).unwrap()))
        });
        let whole = bench.whole[0].clone();
        group.bench_with_input(BenchmarkId::new("stream_collide_general", n), &whole, |b, whole| {
            b.iter(|| driver.launch(whole).unwrap())
        });
        group.bench_function(BenchmarkId::new("copy_same_bytes", n), |b| {
            b.iter(|| driver.copy_async(src, 0, dst, 0, bytes).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);

/// `criterion_main!`, then the records of what it measured.
fn main() -> ExitCode {
    let run = Run::start(env!("CARGO_PKG_NAME"), env!("CARGO_CRATE_NAME"));
    benches();
    Criterion::default().configure_from_args().final_summary();
    run.finish(&bench_record::cpu_device(), &[CPU_UNIFORM])
}
