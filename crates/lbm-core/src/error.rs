//! The one error type of `lbm-core`, shared by every driver through the device seam.
//!
//! Errors are data: each variant carries the values that failed, so a caller
//! can tell an out-of-memory device from a sticky fault ([`CudaCode`]) or a
//! refused launch ([`LaunchProblem`]) without reading text. The messages name
//! the thing and what is accepted. Nothing here formats a CUDA error itself:
//! `lbm-cuda` hands over the driver's result code and its name.

use thiserror::Error;

use crate::device::{BufferId, Kernel, PlanId};
use crate::domain::hierarchy::Rect;

#[derive(Debug, Error)]
pub enum Error {
    /// A refinement layout the hierarchy refuses.
    #[error("refinement layout: level {level}{}: {reason}", patch.map_or(String::new(), |(i, r)| layout_patch(*level, i, r)))]
    Layout {
        level: usize,
        /// The patch index and its rectangle in parent-level cells, when one
        /// patch is at fault.
        patch: Option<(usize, Rect)>,
        reason: String,
    },

    /// A configuration value out of its accepted range.
    #[error("invalid parameter `{key}` = {value}: {accepted}")]
    Parameter {
        key: String,
        value: String,
        accepted: String,
    },

    /// A case file that is not valid TOML or does not fit the case schema
    /// (unknown key, wrong type, an array of the wrong length).
    #[error(
        "{}{}{message}",
        line.map_or(String::new(), |l| format!("line {l}, column {}: ", column.unwrap_or(1))),
        key.as_ref().map_or(String::new(), |k| format!("`{k}`: "))
    )]
    CaseSyntax {
        line: Option<usize>,
        column: Option<usize>,
        /// The dotted key at fault, where the reader points at one.
        key: Option<String>,
        message: String,
    },

    /// A CUDA driver call failed with `code`.
    #[error("cuda error during {operation}: {code}")]
    Cuda { operation: String, code: CudaCode },

    /// A call of a collective library (NCCL) failed with `code`.
    #[error("{library} error during {operation}: {code}")]
    Collective {
        library: &'static str,
        operation: String,
        code: String,
    },

    /// A backend cannot work at all (no driver library, a module that does not
    /// load, an emulator library missing).
    #[error("{backend} backend unavailable: {reason}")]
    Unavailable { backend: &'static str, reason: String },

    /// A host-side byte range outside a buffer or staging area; nothing was
    /// enqueued.
    #[error("{backend} {operation}: byte range [{start}, {end}) is outside `{label}` ({size} bytes)")]
    OutOfRange {
        backend: &'static str,
        operation: &'static str,
        label: String,
        start: u64,
        end: u64,
        size: u64,
    },

    /// A device allocation larger than the memory left.
    #[error("{backend} alloc of {bytes} bytes for `{label}`: only {available} bytes free")]
    OutOfMemory {
        backend: &'static str,
        label: String,
        bytes: u64,
        available: u64,
    },

    #[error("unknown buffer {buffer} on the {backend} backend")]
    UnknownBuffer { backend: &'static str, buffer: BufferId },

    #[error("unknown {what} {id} on the {backend} backend")]
    UnknownHandle {
        backend: &'static str,
        what: &'static str,
        id: u32,
    },

    /// A plan whose buffers were freed after it was prepared.
    #[error("plan {} on the {backend} backend uses {buffer}, freed since it was prepared", plan.0)]
    StalePlan {
        backend: &'static str,
        plan: PlanId,
        buffer: BufferId,
    },

    /// A fused batch's launch without a member.
    #[error("a batch launch needs at least one member")]
    EmptyBatch,

    /// A launch the shared launch check refuses.
    #[error("{kernel} launch: {problem}")]
    Launch { kernel: Kernel, problem: LaunchProblem },

    /// A fault the mock driver was told to inject.
    #[error("mock {call} #{count} failed as injected")]
    Injected { call: &'static str, count: u64 },

    #[error("the stepper failed earlier and can no longer {action}; build a new one")]
    Failed { action: &'static str },

    #[error("the stepper is closed and can no longer {action}")]
    Closed { action: &'static str },

    #[error("the stepper cannot {action} while intervals are in flight; call finish_step first")]
    InFlight { action: &'static str },

    /// A member whose buffers or launches differ in shape from member 0's,
    /// so that the two cannot share one launch per kernel.
    #[error(
        "fused batch member {member} cannot share member 0's launches: {what}; a fused batch needs members of one \
         geometry and resolution, whose buffers are of the same kinds (run such members in lockstep)"
    )]
    FusedShape { member: usize, what: String },

    /// A member of a fused batch that could not be built.
    #[error("fused batch member {member}: {source}")]
    FusedMember {
        member: usize,
        #[source]
        source: Box<Error>,
    },

    /// What one slab of a run split over several devices (`crate::split`)
    /// failed to do.
    #[error("slab {slab} of the split run: {source}")]
    Slab {
        slab: usize,
        #[source]
        source: Box<Error>,
    },

    /// A fused batch member asked to advance out of step with the others.
    #[error("fused batch member {member} cannot {action}: {why}")]
    FusedAdvance {
        member: usize,
        action: &'static str,
        why: &'static str,
    },

    #[error("no interval has completed yet: {what} is available after the first step")]
    NotCompleted { what: &'static str },

    #[error("{what}: {reason}")]
    NotAvailable { what: String, reason: &'static str },

    /// A snapshot taken from a stepper of another configuration.
    #[error("the snapshot does not fit this stepper: {reason}")]
    Snapshot { reason: String },
}

/// A refined patch as the case file gives it (its `refinement` key) and as
/// the hierarchy holds it (cells of the level above).
fn layout_patch(level: usize, index: usize, rect: Rect) -> String {
    let key = match level {
        0 => String::new(),
        l => format!("`refinement[{}].patches[{index}]`, ", l - 1),
    };
    format!(
        " patch {index} ({key}cells x {}..{} y {}..{} of level {})",
        rect.x0,
        rect.x1,
        rect.y0,
        rect.y1,
        level.saturating_sub(1)
    )
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The most characters of a refused value an error shows.
const MAX_SHOWN_VALUE: usize = 200;

impl Error {
    pub fn parameter(key: &str, value: impl std::fmt::Display, accepted: &str) -> Self {
        let mut value = value.to_string();
        // An f64 prints every digit of its decimal expansion: 1e300 would be
        // a 301-digit number.
        if value.len() > 24
            && let Ok(number) = value.parse::<f64>()
        {
            value = format!("{number:e}");
        }
        // A value of megabytes (a pasted file as a name) is shown by its start.
        if value.chars().count() > MAX_SHOWN_VALUE {
            let start: String = value.chars().take(MAX_SHOWN_VALUE).collect();
            // A string comes quoted: its length is the text's, not the quotes'.
            let quoted = value.len() >= 2 && value.starts_with('"') && value.ends_with('"');
            value = format!("{start}… ({} characters)", value.chars().count() - 2 * quoted as usize);
        }
        Error::Parameter {
            key: key.to_owned(),
            value,
            accepted: accepted.to_owned(),
        }
    }

    /// Whether the error leaves the device unusable for this process (a sticky
    /// CUDA fault); every later call would fail the same way.
    pub fn is_sticky(&self) -> bool {
        matches!(self, Error::Cuda { code, .. } if code.is_sticky())
    }
}

/// A CUDA driver result code (`CUresult`) and its name, e.g. 2
/// `CUDA_ERROR_OUT_OF_MEMORY`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaCode {
    pub code: u32,
    pub name: String,
}

impl CudaCode {
    pub const OUT_OF_MEMORY: u32 = 2;
    pub const LAUNCH_FAILED: u32 = 719;
    /// Results after which the context is unusable (illegal address, hardware
    /// stack error, illegal instruction, misaligned address, invalid address
    /// space, invalid PC, launch failed).
    const STICKY: [u32; 7] = [700, 714, 715, 716, 717, 718, 719];

    pub fn is_out_of_memory(&self) -> bool {
        self.code == Self::OUT_OF_MEMORY
    }

    pub fn is_sticky(&self) -> bool {
        Self::STICKY.contains(&self.code)
    }
}

impl std::fmt::Display for CudaCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.code)
    }
}

/// Why the launch check refused a launch.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum LaunchProblem {
    #[error("argument {index}: expected {expected}, got {got}")]
    ArgKind {
        index: usize,
        expected: &'static str,
        got: String,
    },
    #[error("{got} arguments, the kernel takes {expected}")]
    ArgCount { expected: usize, got: usize },
    #[error("`{param}` = {value} is not one of {accepted}")]
    ArgValue {
        param: &'static str,
        value: u32,
        accepted: &'static str,
    },
    #[error("grid {grid:?} x block {block:?} has a zero dimension")]
    EmptyGrid { grid: [u32; 3], block: [u32; 3] },
    #[error("block {block:?} has more than {max} threads")]
    BlockTooLarge { block: [u32; 3], max: u32 },
    /// A kernel that reduces inside its blocks launched in another shape than
    /// the one its shared memory and summation order are written for.
    #[error(
        "grid {grid:?} x block {block:?} is not the shape this reduction takes, grid {required_grid:?} x block {required_block:?}"
    )]
    ExactShape {
        grid: [u32; 3],
        block: [u32; 3],
        required_grid: [u32; 3],
        required_block: [u32; 3],
    },
    #[error("{threads} threads do not cover the {items} work items")]
    GridTooSmall { threads: u64, items: u64 },
    #[error("`{param}` is required: {why}")]
    MissingBuffer { param: &'static str, why: &'static str },
    #[error("`{param}` is passed but {why}")]
    UnexpectedBuffer { param: &'static str, why: &'static str },
    #[error("`{param}` ({buffer}) is not a buffer of this driver")]
    UnknownBuffer { param: &'static str, buffer: BufferId },
    #[error("`{param}` ({buffer}) byte offset {offset} is not a multiple of {align}")]
    Misaligned {
        param: &'static str,
        buffer: BufferId,
        offset: u64,
        align: u64,
    },
    #[error("`{param}` ({buffer}) holds {available} bytes after offset {offset}, the launch needs {needed}")]
    TooSmall {
        param: &'static str,
        buffer: BufferId,
        offset: u64,
        available: u64,
        needed: u64,
    },
    #[error("`{written}` and `{other}` are the same buffer {buffer}; kernels work out of place")]
    Aliased {
        written: &'static str,
        other: &'static str,
        buffer: BufferId,
    },
    /// A geometric inconsistency of the arguments (regions, stencils).
    #[error("{0}")]
    Shape(String),
    /// A fused batch's launch that cannot run as one: empty, too many
    /// members, or a kernel without a `_batch` entry.
    #[error("a batch of {members} member launches: {why}")]
    Batch { members: usize, why: &'static str },
    /// A member's launch in a batch that differs from member 0's in kernel,
    /// grid or block.
    #[error(
        "member {member}'s launch is {kernel} grid {grid:?} x block {block:?}, member 0's {first_kernel} grid {first_grid:?} x block {first_block:?}: a batch is one launch shape"
    )]
    BatchShape {
        member: usize,
        kernel: Kernel,
        grid: [u32; 3],
        block: [u32; 3],
        first_kernel: Kernel,
        first_grid: [u32; 3],
        first_block: [u32; 3],
    },
    /// A member's launch in a batch that the launch check refuses.
    #[error("member {member}: {problem}")]
    BatchMember { member: usize, problem: Box<LaunchProblem> },
    /// Two members of a batch whose launches touch the same bytes, one of them
    /// writing: members run side by side, so each must have its own.
    #[error("member {member}'s `{param}` overlaps member {other}'s `{other_param}` in {buffer}, and one writes it")]
    BatchOverlap {
        member: usize,
        param: &'static str,
        other: usize,
        other_param: &'static str,
        buffer: BufferId,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_codes_tell_out_of_memory_from_a_sticky_fault() {
        let cuda = |code: u32, name: &str| Error::Cuda {
            operation: "launch stream_collide".into(),
            code: CudaCode {
                code,
                name: name.into(),
            },
        };
        let oom = cuda(2, "CUDA_ERROR_OUT_OF_MEMORY");
        let illegal = cuda(700, "CUDA_ERROR_ILLEGAL_ADDRESS");
        assert!(matches!(&oom, Error::Cuda { code, .. } if code.is_out_of_memory() && !code.is_sticky()));
        assert!(!oom.is_sticky() && illegal.is_sticky());
        assert!(!cuda(1, "CUDA_ERROR_INVALID_VALUE").is_sticky());
        assert!(cuda(CudaCode::LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED").is_sticky());
        assert_eq!(
            illegal.to_string(),
            "cuda error during launch stream_collide: CUDA_ERROR_ILLEGAL_ADDRESS (700)"
        );
        assert!(!Error::Failed { action: "step" }.is_sticky());
    }
}
