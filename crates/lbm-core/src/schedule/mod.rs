//! The schedule of a run: the device resources it needs (allocated by the
//! stepper, private to the crate, and [`estimate`]d before that) and the
//! [`plan::HopPlan`] built from them, one base interval of the recursive
//! refinement time step as data.
//!
//! Nothing here executes anything; the stepper hands the plan to a driver.

pub mod plan;
pub(crate) mod resources;

pub use resources::{BULK_MIN_CELLS, estimate};
