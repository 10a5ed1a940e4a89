//! GPU throughput on a uniform periodic grid in million lattice updates per
//! second: `stream_collide` as the stepper enqueues it (a prepared plan, a
//! CUDA graph, of the bulk kernel wrapping both axes, alone),
//! `stream_collide_in_order` (the bulk kernel inset by a cell and the general
//! one over the rim, one after the other in a graph, as before the bulk
//! kernel wrapped), and
//! `stream_collide_general` (the general kernel over every cell, launch by
//! launch), next to a device-to-device copy of the same bytes
//! (one population set read and written per cell) measured in the same run as
//! the ceiling. Prints a skip notice and measures nothing without a CUDA device.
//!
//! Run: `cargo xtask gpu-pack`, then on the GPU machine
//! `bash gpu-pack/run.sh benches gpu_uniform`. Criterion's "elements/s" is
//! cells per second, so Gelem/s x 1000 reads as MLUPS. Each figure and its
//! ceiling are appended to `gpu_stream_collide.jsonl` (see `bench_record`).

use std::process::ExitCode;

use bench_record::Group;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use lbm_core::Driver;
use lbm_core::device::{Action, Launch};
use lbm_core::fixtures::{PeriodicBenchmark, benchmark_physics};
use lbm_cuda::CudaDriver;

mod common;

use common::timed;

const GPU_UNIFORM: Group = Group {
    name: "gpu_uniform",
    figures: &["stream_collide", "stream_collide_in_order", "stream_collide_general"],
    ceiling: "copy_same_bytes",
    element_unit: "cells/s",
};

fn bench(c: &mut Criterion) {
    if !lbm_cuda::device_available() {
        eprintln!("gpu_stream_collide: no CUDA device, nothing measured");
        return;
    }
    let mut driver = CudaDriver::new(0).unwrap();
    let mut group = c.benchmark_group(GPU_UNIFORM.name);
    group.sample_size(20);
    for n in [1024u32, 4096, 8192] {
        let cells = (n * n) as usize;
        group.throughput(Throughput::Elements(cells as u64));
        // Ping-pong like the stepper, so no launch reads what it writes.
        let bench = PeriodicBenchmark::allocate(&mut driver, n, benchmark_physics()).unwrap();
        let (src, dst, flags, bytes) = (bench.src, bench.dst, bench.flags, bench.population_bytes);
        let (launches, inset, whole) = (bench.launches, bench.inset, bench.whole);
        let plans = |driver: &mut CudaDriver, label: &str, steps: &[Vec<Launch>; 2]| {
            [0, 1].map(|k| {
                let actions: Vec<Action> = steps[k].iter().cloned().map(Action::Launch).collect();
                driver.prepare(&format!("{label}.{k}"), &actions).unwrap()
            })
        };
        let together = plans(&mut driver, "together", &launches);
        let in_order = plans(&mut driver, "in_order", &inset);
        for (id, plan) in [("stream_collide", together), ("stream_collide_in_order", in_order)] {
            group.bench_function(BenchmarkId::new(id, n), |b| {
                b.iter_custom(|iters| {
                    let mut k = 0;
                    timed(&mut driver, iters, |d| {
                        d.replay(plan[k % 2]).unwrap();
                        k += 1;
                    })
                })
            });
        }
        for plan in together.into_iter().chain(in_order) {
            driver.release_plan(plan).unwrap();
        }
        group.bench_function(BenchmarkId::new("stream_collide_general", n), |b| {
            b.iter_custom(|iters| {
                let mut k = 0;
                timed(&mut driver, iters, |d| {
                    d.launch(&whole[k % 2]).unwrap();
                    k += 1;
                })
            })
        });
        group.bench_function(BenchmarkId::new("copy_same_bytes", n), |b| {
            b.iter_custom(|iters| timed(&mut driver, iters, |d| d.copy_async(src, 0, dst, 0, bytes).unwrap()))
        });
        for buffer in [src, dst, flags, bench.cells] {
            driver.free(buffer).unwrap();
        }
    }
    group.finish();
}

criterion_group!(benches, bench);

fn main() -> ExitCode {
    common::main(benches, &[GPU_UNIFORM])
}
