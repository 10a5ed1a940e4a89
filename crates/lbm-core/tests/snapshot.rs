//! A snapshot restored into a fresh stepper continues the run bit for bit:
//! the contract `lbm resume` is built on.

use lbm_core::{CpuDriver, Error, ExecConfig, Stepper};

mod common;

/// The DFG 2D-1 channel: two refinement levels, a parabolic inlet with its
/// ramp, a cylinder with an exchange window.
fn dfg() -> (lbm_core::LatticeConfig, ExecConfig) {
    let (lattice, exec, _) = common::resolved_case(include_str!("../../../cases/dfg-2d1.toml"));
    let exec = ExecConfig {
        observe_window_exchange: true,
        ..exec
    };
    (lattice, exec)
}

/// Every patch's populations and the window's record, as bits.
fn state(stepper: &Stepper<CpuDriver>) -> (Vec<Vec<u32>>, String) {
    let fields = common::population_bits(stepper);
    let window = format!("{:?}", stepper.read_exchange_window(0).expect("window"));
    (fields, window)
}

#[test]
fn a_restored_snapshot_continues_bit_for_bit() {
    let (lattice, exec) = dfg();
    // 31 intervals: an odd step count, so the base grid's current buffer is
    // the second one when the snapshot is taken.
    let (first, second) = (31, 24);
    let straight = Stepper::new(CpuDriver::new(), lattice.clone(), exec.clone()).unwrap();
    straight.step(5).unwrap();
    straight.start_exchange_window().unwrap();
    straight.step(first - 5 + second).unwrap();

    let interrupted = Stepper::new(CpuDriver::new(), lattice.clone(), exec.clone()).unwrap();
    interrupted.step(5).unwrap();
    interrupted.start_exchange_window().unwrap();
    interrupted.step(first - 5).unwrap();
    let snapshot = interrupted.snapshot().unwrap();
    assert_eq!(snapshot.step_count, first);
    assert_eq!(snapshot.window_start, Some(5));
    interrupted.close().unwrap();

    let resumed = Stepper::new(CpuDriver::new(), lattice, exec).unwrap();
    resumed.restore(&snapshot).unwrap();
    resumed.step(second).unwrap();
    assert_eq!(resumed.step_count(), straight.step_count());
    let (a, b) = (state(&straight), state(&resumed));
    assert_eq!(a.1, b.1, "the exchange window differs");
    for (p, (x, y)) in a.0.iter().zip(&b.0).enumerate() {
        assert!(x == y, "patch {p}: populations differ after the resume");
    }
}

#[test]
fn a_snapshot_of_another_configuration_is_refused() {
    let (lattice, exec) = dfg();
    let stepper = Stepper::new(CpuDriver::new(), lattice.clone(), exec.clone()).unwrap();
    let mut snapshot = stepper.snapshot().unwrap();
    snapshot.buffers[0].1.pop();
    let other = Stepper::new(CpuDriver::new(), lattice, exec).unwrap();
    let error = other.restore(&snapshot).unwrap_err();
    assert!(matches!(error, Error::Snapshot { .. }), "{error}");
    assert!(error.to_string().contains(&snapshot.buffers[0].0), "{error}");
    // The refused stepper is untouched and still runs.
    other.step(1).unwrap();
}
