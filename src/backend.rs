//! The one backend choice of every command: `--backend auto|cpu|cuda` becomes
//! a boxed [`Driver`]. `auto` takes CUDA when a device is present, else the
//! CPU; asking for `cuda` without a driver or device is an error, not a crash.
//!
//! It opens device 0 only; it does not pick among several devices.

use clap::ValueEnum;
use serde::Serialize;

use lbm_core::{CpuDriver, Driver};

use crate::AppError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    Auto,
    Cpu,
    Cuda,
}

impl BackendChoice {
    /// Whether the choice goes to CUDA: `auto` picks it when a device is there.
    pub fn is_cuda(self) -> bool {
        match self {
            BackendChoice::Cpu => false,
            BackendChoice::Cuda => true,
            BackendChoice::Auto => lbm_cuda::device_available(),
        }
    }

    /// The driver of the choice.
    pub fn open(self) -> Result<Box<dyn Driver>, AppError> {
        match self.is_cuda() {
            true => {
                let driver = lbm_cuda::CudaDriver::new(0).map_err(|e| AppError::NoCuda { reason: e.to_string() })?;
                Ok(Box::new(driver))
            }
            false => Ok(Box::new(CpuDriver::new())),
        }
    }
}
