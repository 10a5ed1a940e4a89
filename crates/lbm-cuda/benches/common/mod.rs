//! What the GPU benches share.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bench_record::{Group, Run};
use criterion::Criterion;
use lbm_core::Driver;
use lbm_cuda::CudaDriver;

/// `criterion_main!` over `benches`, then the records of what `groups`
/// measured on device 0 (the one the benches open). This file is compiled
/// into each bench, so the crate name is the bench's.
pub fn main(benches: fn(), groups: &[Group]) -> ExitCode {
    let run = Run::start(env!("CARGO_PKG_NAME"), env!("CARGO_CRATE_NAME"));
    benches();
    Criterion::default().configure_from_args().final_summary();
    // Without a device nothing was measured, and `finish` finds nothing to record.
    let device = lbm_cuda::device_names().into_iter().next().unwrap_or_default();
    run.finish(&device, groups)
}

/// Times `iters` enqueues of `work` with one wait at the end.
pub fn timed(driver: &mut CudaDriver, iters: u64, mut work: impl FnMut(&mut CudaDriver)) -> Duration {
    driver.synchronize().unwrap();
    let start = Instant::now();
    for _ in 0..iters {
        work(driver);
    }
    driver.synchronize().unwrap();
    start.elapsed()
}
