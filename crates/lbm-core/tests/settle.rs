//! Restriction inside an interval writes only the covered cells the interval
//! reads back; the settle plan restricts the rest before any read. A stepper
//! read after every interval (each read settles, so every covered cell is
//! restricted every interval) and one read only at the end must hold the
//! same bits: a restriction that left out a cell some later interval reads
//! would show as a difference.

use lbm_core::{CpuDriver, Stepper};

mod common;

use common::{CASE_FILES, case_file, initial_flow, observed_case, population_bits};

/// `text` (a case file), `intervals` intervals read after each and read
/// once; whether the plan leaves cells to the settle plan at all.
fn settled_every_interval_and_once(name: &str, text: &str, intervals: u64) -> bool {
    let (lattice, exec, bodies) = observed_case(text);
    let each = Stepper::new(CpuDriver::new(), lattice.clone(), exec.clone()).unwrap();
    let once = Stepper::new(CpuDriver::new(), lattice, exec).unwrap();
    each.initialize(initial_flow).unwrap();
    once.initialize(initial_flow).unwrap();
    for _ in 0..intervals {
        each.step(1).unwrap();
        each.total_mass().unwrap();
    }
    once.step(intervals).unwrap();
    let (a, b) = (population_bits(&each), population_bits(&once));
    for (p, (a, b)) in each.hierarchy().patches().zip(a.iter().zip(&b)) {
        assert!(a == b, "{name}: {} differs when read only at the end", p.name());
    }
    for body in 0..bodies {
        assert_eq!(
            format!("{:?}", each.read_raw_exchange(body).unwrap()),
            format!("{:?}", once.read_raw_exchange(body).unwrap()),
            "{name}: body {body}'s exchange differs when read only at the end"
        );
    }
    !each.plan().settle[0].is_empty()
}

#[test]
fn every_case_reads_the_same_bits_settled_every_interval_or_once() {
    for case in CASE_FILES {
        assert!(
            settled_every_interval_and_once(case, &case_file(case, None), 6),
            "{case}: some restriction leaves a hole"
        );
    }
}

/// A finest patch as close to its parent's interface as the hierarchy
/// allows (4 parent cells), inside the cells the parent's own restriction
/// reads: its hole must leave those out.
#[test]
fn a_patch_near_its_parents_interface_keeps_what_the_parent_restriction_reads() {
    // DFG 2D-1 at 10 base cells per diameter: level 1 from x = 0.05 m, in
    // cells of 0.005 m; level 2 from 4 of them further.
    let text = case_file("dfg-2d1.toml", None).replace("[[0.1, 0.0, 0.45, 0.41]]", "[[0.07, 0.0, 0.45, 0.41]]");
    assert!(text.contains("0.07, 0.0, 0.45"), "the case file has the patch to move");
    assert!(settled_every_interval_and_once("dfg-2d1 near", &text, 6));
}
