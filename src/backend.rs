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

    /// The driver of the choice and what it runs on.
    pub fn open(self) -> Result<(Box<dyn Driver>, Device), AppError> {
        match self.is_cuda() {
            true => {
                let driver = lbm_cuda::CudaDriver::new(0).map_err(|e| AppError::NoCuda { reason: e.to_string() })?;
                let device = Device {
                    backend: "cuda",
                    name: driver.device_name().to_owned(),
                    memory_bytes: driver.total_memory()?,
                };
                Ok((Box::new(driver), device))
            }
            false => Ok((Box::new(CpuDriver::new()), Device::host())),
        }
    }
}

/// What a run runs on, for the manifest and `lbm info`.
#[derive(Clone, Debug, Serialize)]
pub struct Device {
    pub backend: &'static str,
    /// The GPU's name, or the CPU model and its thread count.
    pub name: String,
    pub memory_bytes: u64,
}

impl Device {
    /// This machine's CPU and memory, as the CPU backend uses them.
    pub fn host() -> Device {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split(':').nth(1)))
            .map_or_else(|| "unknown CPU".to_owned(), |m| m.trim().to_owned());
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let kib = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        Device {
            backend: "cpu",
            name: format!("{model} ({threads} threads)"),
            memory_bytes: kib * 1024,
        }
    }
}

/// sha256 of the PTX embedded in this build, hex.
pub fn ptx_sha256() -> String {
    use sha2::Digest;
    sha2::Sha256::digest(lbm_cuda::PTX.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
