//! Opening the CUDA backend never panics: without a driver library it is an
//! error that says no CUDA driver was found, and with one, a device that does
//! not exist is an ordinary error too.
//!
//! These run under plain `cargo test` on every machine. The first assertion is
//! only meaningful where no driver library is installed (a developer's machine,
//! CI); where one is, the test checks the opposite case instead of skipping.

use lbm_cuda::{CudaDriver, device_available, driver_library_present};

fn open_error(ordinal: usize) -> String {
    match CudaDriver::new(ordinal) {
        Ok(driver) => panic!("device {ordinal} opened unexpectedly: {driver:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn without_a_driver_library_new_says_no_cuda_driver_was_found() {
    if driver_library_present() {
        // A driver is installed: the no-driver path cannot be exercised here,
        // and `new` must not report it.
        if let Err(e) = CudaDriver::new(0) {
            assert!(!e.to_string().contains("no CUDA driver was found"), "{e}");
        }
        return;
    }
    let message = open_error(0);
    assert!(message.contains("no CUDA driver was found"), "{message}");
    assert!(message.starts_with("cuda backend unavailable"), "{message}");
    assert!(!device_available());
}

#[test]
fn a_device_that_does_not_exist_is_an_error_not_a_panic() {
    let message = open_error(4096);
    if driver_library_present() {
        assert!(message.contains("open device 4096"), "{message}");
    } else {
        assert!(message.contains("no CUDA driver was found"), "{message}");
    }
    // Whatever the machine, asking never panics.
    let _ = device_available();
}
