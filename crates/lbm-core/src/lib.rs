//! Core of the lattice Boltzmann engine: the D2Q9 lattice, the configuration
//! of a run, the refinement domain, the kernel families with their CPU
//! references, the device seam, the schedule (resources and hop plan), and the
//! `Stepper` that replays the plan through a driver.
//!
//! This crate depends on no other crate of the workspace and on no GPU
//! library, and contains no `unsafe` code: the CUDA backend lives in
//! `lbm-cuda`, the recording mock in `mock-driver`.
#![forbid(unsafe_code)]

pub mod case;
pub mod config;
pub mod cpu;
pub mod device;
pub mod domain;
pub mod error;
pub mod fixtures;
pub mod kernels;
pub mod lattice;
pub mod ledger;
pub mod schedule;
pub mod stepper;
pub mod units;

pub use config::{Boundary, ExecConfig, LatticeConfig};
pub use cpu::CpuDriver;
pub use device::{Arg, BufferId, BufferRef, Driver, Kernel, Launch};
pub use error::{Error, Result};
pub use stepper::{Status, Stepper};
