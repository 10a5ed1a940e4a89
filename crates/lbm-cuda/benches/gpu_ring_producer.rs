//! GPU throughput of the static ring producer in GB/s: the grid of
//! `ring_producer::producer_grid_blocks` (one block per 16 KiB, up to 264)
//! against the four fixed tiers it replaced (`legacy_tier_blocks`), and a
//! plain device-to-device copy of the same bytes measured in the same run as
//! the ceiling, for 64 KiB, 256 KiB, 1200 KiB, 4 MiB and 16 MiB. Prints a skip
//! notice and measures nothing without a CUDA device.
//!
//! Run: `cargo xtask gpu-pack`, then on the GPU machine
//! `bash gpu-pack/run.sh benches gpu_ring_static`. Criterion's throughput is in
//! decimal GB/s. Both grids are recorded against the copy in
//! `gpu_ring_producer.jsonl` (see `bench_record`).
//! Sizes and rings are multiples of 16 bytes, so every copy takes the
//! kernel's 16-byte path; the ring is eight copies long, so the copies cycle
//! through it unconsumed (flow control is not what is measured) and none is
//! split at its end.

use std::process::ExitCode;

use bench_record::Group;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use lbm_core::Driver;
use lbm_core::kernels::KernelArgs;
use lbm_core::kernels::producer::ProduceStatic;
use lbm_cuda::CudaDriver;
use ring_producer::{Ring, legacy_tier_blocks, producer_grid_blocks};

mod common;

use common::timed;

const GPU_RING_STATIC: Group = Group {
    name: "gpu_ring_static",
    figures: &["scaled_grid", "legacy_tiers"],
    ceiling: "copy_same_bytes",
    element_unit: "bytes/s",
};

fn bench(c: &mut Criterion) {
    if !lbm_cuda::device_available() {
        eprintln!("gpu_ring_producer: no CUDA device, nothing measured");
        return;
    }
    let mut driver = CudaDriver::new(0).unwrap();
    let mut group = c.benchmark_group(GPU_RING_STATIC.name);
    group.sample_size(30);
    for nbytes in [64 << 10, 256 << 10, 1200 << 10, 4 << 20, 16 << 20u64] {
        group.throughput(Throughput::BytesDecimal(nbytes));
        let ring = Ring::new(&mut driver, "bench.ring", 8 * nbytes).unwrap();
        let src = driver.alloc("bench.src", nbytes as usize).unwrap();
        let dst = driver.alloc("bench.dst", nbytes as usize).unwrap();
        let scaled = ring.static_launch(src.into(), nbytes).unwrap();
        // The same launch on the old tier's grid: only the grid differs.
        let legacy = ProduceStatic {
            blocks: legacy_tier_blocks(nbytes),
            ..ProduceStatic::decode(&scaled).unwrap()
        }
        .launch();
        eprintln!(
            "gpu_ring_producer: {nbytes} bytes, scaled grid {} blocks, legacy grid {}",
            producer_grid_blocks(nbytes),
            legacy_tier_blocks(nbytes)
        );
        for (name, launch) in [("scaled_grid", &scaled), ("legacy_tiers", &legacy)] {
            group.bench_function(BenchmarkId::new(name, nbytes), |b| {
                b.iter_custom(|iters| timed(&mut driver, iters, |d| d.launch(launch).unwrap()))
            });
        }
        group.bench_function(BenchmarkId::new("copy_same_bytes", nbytes), |b| {
            b.iter_custom(|iters| {
                timed(&mut driver, iters, |d| {
                    d.copy_async(src, 0, dst, 0, nbytes as usize).unwrap()
                })
            })
        });
        ring.free(&mut driver).unwrap();
        for buffer in [src, dst] {
            driver.free(buffer).unwrap();
        }
    }
    group.finish();
}

criterion_group!(benches, bench);

fn main() -> ExitCode {
    common::main(benches, &[GPU_RING_STATIC])
}
