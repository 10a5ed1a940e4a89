//! Core of the lattice Boltzmann engine: the D2Q9 lattice, refinement hierarchy,
//! hop plan, ledgers, the device seam (`Driver`, `Kernel`, `Launch`), the
//! `Stepper` and the CPU reference backend.
//!
//! This crate depends on no other crate of the workspace and on no GPU library.

pub mod case;
pub mod cpu;
pub mod device;
pub mod error;
pub mod geometry;
pub mod hierarchy;
pub mod lattice;
pub mod launch;
pub mod ledger;
pub mod plan;
pub mod stepper;
pub mod units;

pub use cpu::CpuDriver;
pub use device::{Arg, BufferId, Driver, Kernel, Launch};
pub use error::{Error, Result};
pub use stepper::{ExecConfig, LatticeConfig, Status, Stepper};
