//! The one error type of `lbm-core`, shared by every driver through the device seam.
//!
//! Drivers in other crates report their failures as [`Error::Device`] so the
//! stepper can treat a CUDA, CPU or mock failure the same way.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("refinement layout: {patch}: {reason}")]
    Layout { patch: String, reason: String },

    #[error("invalid parameter `{key}` = {value}: {accepted}")]
    Parameter {
        key: String,
        value: String,
        accepted: String,
    },

    #[error("{backend} device error during {operation}: {message}")]
    Device {
        backend: String,
        operation: String,
        message: String,
    },

    #[error("unknown buffer {buffer} on the {backend} backend")]
    UnknownBuffer { backend: String, buffer: u32 },

    #[error("{kernel} launch arguments: {reason}")]
    LaunchArgs { kernel: String, reason: String },

    #[error("the stepper failed earlier and can no longer {action}; build a new one")]
    Failed { action: String },

    #[error("the stepper is closed and can no longer {action}")]
    Closed { action: String },

    #[error("no interval has completed yet: {what} is available after the first step")]
    NotCompleted { what: String },

    #[error("{what}: {reason}")]
    NotAvailable { what: String, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn parameter(key: &str, value: impl std::fmt::Display, accepted: &str) -> Self {
        Error::Parameter {
            key: key.to_owned(),
            value: value.to_string(),
            accepted: accepted.to_owned(),
        }
    }

    pub fn unknown_buffer(backend: &str, id: crate::device::BufferId) -> Self {
        Error::UnknownBuffer {
            backend: backend.to_owned(),
            buffer: id.0,
        }
    }
}
