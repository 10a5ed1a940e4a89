//! Test support for code that should behave the same on every backend: the
//! device under test ([`open_device`]) and [`backend_tests!`](crate::backend_tests), which turns one
//! test body into a `#[test]` per backend.
//!
//! The device is the GPU, or, when `LBM_KERNEL_EMU` names the host build of
//! the kernels and the `emu` feature is on, `EmuDriver`. Device
//! tests are `#[ignore]`d with their reason, so plain `cargo test` passes
//! everywhere and `--include-ignored` runs them where a device is; a device
//! test never skips silently. Nothing here is used by a run.

use lbm_core::Driver;

/// The device a device test runs on.
pub struct TestDevice {
    pub driver: Box<dyn Driver>,
    /// The device's name, for the test's output.
    pub name: String,
    /// Whether it is the real GPU (and not the host build of the kernels).
    pub is_cuda: bool,
}

/// Opens the device under test; see the module documentation.
///
/// # Panics
/// When there is neither an emulator library nor a CUDA device: a device
/// test that cannot run fails, it does not pass.
pub fn open_device() -> TestDevice {
    #[cfg(feature = "emu")]
    if let Ok(path) = std::env::var("LBM_KERNEL_EMU") {
        let driver = crate::emu::EmuDriver::open(&path).expect("the host build of the kernels loads");
        return TestDevice {
            driver: Box::new(driver),
            name: "host emulation of kernels/ (LBM_KERNEL_EMU)".into(),
            is_cuda: false,
        };
    }
    let driver = crate::CudaDriver::new(0).expect("device tests need a CUDA device or LBM_KERNEL_EMU");
    TestDevice {
        name: driver.device_name().to_owned(),
        driver: Box::new(driver),
        is_cuda: true,
    }
}

/// One test body, a `#[test]` per backend: `backend_tests! { name => body }`
/// makes module `name` with `cpu` (on `lbm_core::CpuDriver`, always run) and
/// `device` (on [`open_device`], ignored unless asked for), each calling
/// `body(driver)`; `body` is generic over `lbm_core::Driver` or takes a
/// `Box<dyn Driver>`.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident => $body:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn cpu() {
                    super::$body(Box::new(::lbm_core::CpuDriver::new()));
                }

                #[test]
                #[ignore = "needs an NVIDIA GPU or LBM_KERNEL_EMU: run with --include-ignored on the device machine"]
                fn device() {
                    let device = $crate::testing::open_device();
                    eprintln!("device: {}", device.name);
                    super::$body(device.driver);
                }
            }
        )*
    };
}
