//! The plan's groups (`Action::Together`) hold only launches that touch
//! different bytes, which is what lets a device run them side by side: every
//! case computes the same bits with each group run first member first and
//! last member first (`CpuDriver::reversing_groups`). A member that read what
//! another writes would show as a difference.

use lbm_core::device::Action;
use lbm_core::{CpuDriver, Stepper};

mod common;

use common::{CASE_FILES, case_file, initial_flow, observed_case, population_bits};

/// Every population of every patch, ghost bands included, and each body's
/// raw exchange, as bits.
fn state(stepper: &Stepper<CpuDriver>, bodies: usize) -> (Vec<Vec<u32>>, Vec<String>) {
    let fields = population_bits(stepper);
    let bodies = (0..bodies)
        .map(|b| format!("{:?}", stepper.read_raw_exchange(b).expect("exchange")))
        .collect();
    (fields, bodies)
}

/// `case` (at `resolution` base cells per reference length, if given),
/// `intervals` intervals in both orders; the number of groups its interval
/// holds.
fn both_orders(case: &str, resolution: Option<u32>, intervals: u64) -> usize {
    let (lattice, exec, bodies) = observed_case(&case_file(case, resolution));
    let forward = Stepper::new(CpuDriver::new(), lattice.clone(), exec.clone()).unwrap();
    let reversed = Stepper::new(CpuDriver::reversing_groups(), lattice, exec).unwrap();
    forward.initialize(initial_flow).unwrap();
    reversed.initialize(initial_flow).unwrap();
    forward.step(intervals).unwrap();
    reversed.step(intervals).unwrap();
    let (f, r) = (state(&forward, bodies), state(&reversed, bodies));
    for (p, (a, b)) in forward.hierarchy().patches().zip(f.0.iter().zip(&r.0)) {
        assert!(a == b, "{case}: {} differs with the groups reversed", p.name());
    }
    assert_eq!(f.1, r.1, "{case}: the exchange differs with the groups reversed");
    forward
        .plan()
        .interval(0)
        .iter()
        .filter(|s| matches!(s.action, Action::Together(_)))
        .count()
}

#[test]
fn every_case_computes_the_same_bits_with_its_groups_reversed() {
    for case in CASE_FILES {
        let groups = both_orders(case, None, 4);
        assert!(groups > 0, "{case}: its interval has groups");
    }
}

/// Patches large enough for the split update: the bulk kernel and the
/// general kernel over its rim and the cylinder's spans in one group.
#[test]
fn a_split_update_computes_the_same_bits_with_its_groups_reversed() {
    both_orders("dfg-2d1.toml", Some(40), 3);
}
