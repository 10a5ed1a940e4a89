//! CPU backend throughput: `stream_collide` on a uniform periodic grid in million
//! lattice updates per second, next to a plain copy of the same bytes (read and
//! write one population set per cell) measured in the same run as the ceiling.
//!
//! Run: `cargo bench -p lbm-core --bench stream_collide`. Criterion reports
//! "elements/s"; one element is one cell, so Melem/s reads as MLUPS.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use lbm_core::lattice::{Collision, Q, Relaxation};
use lbm_core::launch::StreamCollide;
use lbm_core::{CpuDriver, Driver};

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu_uniform");
    group.sample_size(20);
    for n in [256u32, 1024] {
        let cells = (n * n) as usize;
        group.throughput(Throughput::Elements(cells as u64));
        let mut driver = CpuDriver::new();
        let bytes = Q * cells * 4;
        let src = driver.alloc("src", bytes).unwrap();
        let dst = driver.alloc("dst", bytes).unwrap();
        let flags = driver.alloc("flags", cells).unwrap();
        let noise: Vec<f32> = (0..Q * cells)
            .map(|i| 1e-3 * ((i * 7919 % 1000) as f32 / 1000.0 - 0.5))
            .collect();
        driver.upload(src, 0, bytemuck::cast_slice(&noise)).unwrap();
        let relaxation = Relaxation::new(Collision::default(), 0.625);
        let launch = StreamCollide::periodic(src, dst, flags, [n, n], relaxation).launch();
        group.bench_with_input(BenchmarkId::new("stream_collide", n), &launch, |b, launch| {
            b.iter(|| driver.launch(launch).unwrap())
        });
        group.bench_function(BenchmarkId::new("copy_same_bytes", n), |b| {
            b.iter(|| driver.copy_async(src, 0, dst, 0, bytes).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
