//! The `lbm` application crate: case runner and output writers behind the CLI.
//!
//! It wires a case file to a backend and a `Stepper`, and writes results; the
//! numerics live in `lbm-core` and the device code in `lbm-cuda`.

pub mod run;
pub mod validate;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum AppError {
    #[error(transparent)]
    Core(#[from] lbm_core::Error),

    #[error("cannot read case file {path}: {source}")]
    ReadCase { path: String, source: std::io::Error },

    #[error("output directory {path} is not empty; choose a new one with --out or remove it")]
    OutputNotEmpty { path: String },

    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },

    #[error("the CUDA backend was requested but is unavailable: {reason}")]
    NoCuda { reason: String },

    #[error("{source}; what was measured until then is in {kept}")]
    Interrupted { source: Box<AppError>, kept: String },
}
