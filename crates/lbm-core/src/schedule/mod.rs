//! The schedule of a run: the device [`resources::Resources`] it needs and the
//! [`plan::HopPlan`] built from them, one base interval of the recursive
//! refinement time step as data.
//!
//! Nothing here executes anything; the stepper hands the plan to a driver.

pub mod plan;
pub mod resources;
