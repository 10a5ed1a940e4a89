//! Core of the lattice Boltzmann engine: the D2Q9 lattice, the configuration
//! of a run, the refinement domain, the kernel families with their CPU
//! references, the device seam, the schedule (resources and hop plan), and the
//! `Stepper` that replays the plan through a driver.
//!
//! This crate depends on no other crate of the workspace and on no GPU
//! library; its `unsafe` is the CPU bulk loop's run-time SIMD dispatch
//! (`kernels::lbm::vector`) and the libc calls of `cpu` (memory, the
//! open-file limit, a signal's action). The CUDA backend lives in
//! `lbm-cuda`, the recording mock in `mock-driver`. It writes no files and
//! parses no command lines (the `lbm` crate does).
//!
//! # A run as a library
//!
//! A case file in physical units, resolved into lattice units, advanced on the
//! CPU backend; the fields come back as arrays:
//!
//! ```
//! use lbm_core::case::Case;
//! use lbm_core::{CpuDriver, ExecConfig, Stepper};
//!
//! let case = Case::from_toml(include_str!("../../../cases/cavity-re100.toml"))?;
//! let resolved = case.resolve()?;
//! let exec = ExecConfig { tiles: resolved.tiles.clone(), ..ExecConfig::default() };
//! let stepper = Stepper::new(CpuDriver::new(), resolved.lattice, exec)?;
//! stepper.step(20)?;
//! assert_eq!(stepper.step_count(), 20);
//! let fields = stepper.fields(0, 0)?; // level 0, patch 0: the base grid
//! assert_eq!(fields.ux.dim(), (64, 64));
//! // The lid drags the fluid along +x under it.
//! assert!(fields.ux[(63, 32)] > 0.0);
//! # Ok::<(), lbm_core::Error>(())
//! ```
//!
//! # Forces on a body: the exchange ledgers
//!
//! A periodic channel driven by a body force, with a cylinder; the exchange
//! window integrates the momentum exchange over every hop since it opened:
//!
//! ```
//! use lbm_core::domain::geometry::{Body, Shape};
//! use lbm_core::{Boundary, CpuDriver, ExecConfig, LatticeConfig, Stepper};
//!
//! let mut lattice = LatticeConfig::uniform(
//!     48,
//!     24,
//!     0.8,
//!     [Boundary::Periodic, Boundary::Periodic, Boundary::Wall, Boundary::Wall],
//! );
//! lattice.force = [1e-5, 0.0];
//! lattice.bodies = vec![Body { shape: Shape::Circle { center: [16.0, 12.0], radius: 4.0 }, level: 0 }];
//! let exec = ExecConfig { observe_window_exchange: true, ..ExecConfig::default() };
//! let stepper = Stepper::new(CpuDriver::new(), lattice, exec)?;
//! stepper.step(100)?;
//! stepper.start_exchange_window()?;
//! stepper.step(50)?;
//! let window = stepper.read_exchange_window(0)?;
//! assert_eq!((window.time_start, window.time_end), (100, 150));
//! // The flow pushes the cylinder downstream.
//! assert!(window.mean_force()[0] > 0.0);
//! # Ok::<(), lbm_core::Error>(())
//! ```
// The one exception is the CPU row loop's run-time dispatch to AVX2 and
// AVX-512 (`kernels::lbm::vector`), which calling a function compiled for an
// instruction set needs.
#![deny(unsafe_code)]

pub mod case;
pub mod config;
pub mod cpu;
pub mod device;
pub mod domain;
pub mod error;
pub mod expression;
pub mod fixtures;
pub mod fused;
pub mod kernels;
pub mod lattice;
pub mod ledger;
pub mod member;
pub mod output;
pub mod schedule;
pub mod split;
pub mod stepper;
pub mod units;

pub use config::{Boundary, DIVERGED_MACH, ExecConfig, LatticeConfig};
pub use cpu::CpuDriver;
pub use device::{Arg, BufferId, BufferRef, Driver, Kernel, Launch};
pub use error::{Error, Result};
pub use stepper::{CoveredCells, DeviceView, HealthProblem, Snapshot, Status, Stepper, Unhealthy, WindowBuffer};
