//! The mock refuses what every other driver refuses: each spoiled sample
//! launch of `lbm_core::fixtures` gets the same error from `MockDriver` as
//! from `CpuDriver` (lbm-cuda's `tests/backends.rs` holds the CPU and CUDA
//! side), and every spoiling refuses something.

use lbm_core::device::Action;
use lbm_core::fixtures::{allocate_samples, spoiled_launches, spoiling_names};
use lbm_core::{CpuDriver, Driver, Kernel};
use mock_driver::MockDriver;

fn verdicts<D: Driver>(mut driver: D) -> Vec<(Kernel, &'static str, String)> {
    let samples = allocate_samples(&mut driver).expect("the samples allocate");
    let mut out = Vec::new();
    for (launch, _) in &samples {
        driver.launch(launch).expect("the valid sample is accepted");
        for (what, bad) in spoiled_launches(launch) {
            let refused = driver.launch(&bad).expect_err(what).to_string();
            let prepared = driver
                .prepare("bad", &[Action::Launch(bad)])
                .expect_err(what)
                .to_string();
            assert_eq!(refused, prepared, "launch and prepare refuse alike");
            out.push((launch.kernel, what, refused));
        }
    }
    out
}

#[test]
fn the_mock_refuses_each_bad_launch_as_the_cpu_does() {
    let cpu = verdicts(CpuDriver::new());
    assert_eq!(cpu, verdicts(MockDriver::new()), "the CPU and mock drivers disagree");
    for kernel in Kernel::ALL {
        assert!(
            cpu.iter().filter(|v| v.0 == kernel).count() >= 7,
            "{kernel} has few spoilings"
        );
    }
    for name in spoiling_names() {
        assert!(cpu.iter().any(|v| v.1 == name), "`{name}` refused nothing");
    }
}
