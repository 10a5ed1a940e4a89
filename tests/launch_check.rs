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

/// Refusals of a fused batch's launch, the same from every driver: members
/// writing the same bytes, members of different shapes, an empty batch, and
/// a kernel without a `_batch` entry; a batch of one member of each kernel
/// that has one is accepted.
fn batch_verdicts<D: Driver>(mut driver: D) -> Vec<String> {
    use lbm_core::device::BatchLaunch;
    let samples = allocate_samples(&mut driver).expect("the samples allocate");
    let mut out = Vec::new();
    let mut refuse = |driver: &mut D, launches: Vec<lbm_core::Launch>| {
        let e = driver
            .prepare("bad batch", &[Action::Batch(BatchLaunch { launches })])
            .expect_err("refused");
        out.push(e.to_string());
    };
    refuse(&mut driver, Vec::new());
    for (launch, _) in &samples {
        if !launch.kernel.batches() {
            refuse(&mut driver, vec![launch.clone()]);
            continue;
        }
        driver
            .prepare(
                "one member",
                &[Action::Batch(BatchLaunch {
                    launches: vec![launch.clone()],
                })],
            )
            .expect("a batch of one member is its launch");
        refuse(&mut driver, vec![launch.clone(), launch.clone()]);
        // Members' grids may differ only where the kernel idles beyond its own.
        if !launch.kernel.idles_beyond_its_grid() {
            let mut wider = launch.clone();
            wider.grid[0] += 1;
            refuse(&mut driver, vec![launch.clone(), wider]);
        }
    }
    out
}

#[test]
fn batches_are_refused_alike_and_name_the_member() {
    let cpu = batch_verdicts(CpuDriver::new());
    assert_eq!(
        cpu,
        batch_verdicts(MockDriver::new()),
        "the CPU and mock drivers disagree"
    );
    assert!(cpu[0].contains("at least one member"), "{}", cpu[0]);
    let count = |needle: &str| cpu.iter().filter(|m| m.contains(needle)).count();
    let batchable = Kernel::ALL.iter().filter(|k| k.batches()).count();
    assert_eq!(count("overlaps member 0's"), batchable, "{cpu:#?}");
    let idling = Kernel::ALL
        .iter()
        .filter(|k| k.batches() && k.idles_beyond_its_grid())
        .count();
    assert_eq!(idling, 2, "the list update and the exchange");
    assert_eq!(count("member 1's launch is"), batchable - idling, "{cpu:#?}");
    assert_eq!(count("no `_batch` entry"), Kernel::ALL.len() - batchable, "{cpu:#?}");
}
