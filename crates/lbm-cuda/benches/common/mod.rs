//! What the GPU benches share.

use std::time::{Duration, Instant};

use lbm_core::Driver;
use lbm_cuda::CudaDriver;

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
