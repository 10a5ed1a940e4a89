//! The `lbm` application crate: case runner and output writers behind the CLI.
//!
//! It wires a case file to a backend and a `Stepper`, and writes results; the
//! numerics live in `lbm-core` and the device code in `lbm-cuda`.
//!
//! It deliberately does no numerics and no device work of its own, and keeps
//! no state between commands: every command reads its inputs, writes a new
//! output directory and exits.
#![forbid(unsafe_code)]

/// Writes a line to stderr, ignoring a closed pipe (`lbm run ... 2>&1 |
/// head`): a run whose reader went away goes on, writes its summary and
/// exits as it would have (`eprintln!` panics there and leaves no summary).
#[macro_export]
macro_rules! tell {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod backend;
pub mod check;
pub mod checkpoint;
pub(crate) mod engine;
pub mod guard;
pub mod output;
pub mod plan;
pub mod progress;
pub mod run;
pub mod sweep;
pub mod validate;

use thiserror::Error;

/// Every way the CLI fails; [`AppError::exit_code`] tells bad input (2) from a
/// failed run (3).
#[derive(Debug, Error)]
pub enum AppError {
    #[error(transparent)]
    Core(#[from] lbm_core::Error),

    /// A command-line flag out of its accepted range.
    #[error("invalid {flag} {value}: {accepted}")]
    Flag {
        flag: &'static str,
        value: String,
        accepted: String,
    },

    #[error("case file {path}: {source}")]
    Case { path: String, source: lbm_core::Error },

    #[error("cannot read case file {path}: {source}")]
    ReadCase { path: String, source: std::io::Error },

    #[error("DFG 2D-2: the lift did not oscillate within {time_limit} s, so there is no shedding period")]
    NoShedding { time_limit: f64 },

    #[error("output directory {path} is not empty{unfinished}; choose a new one with --out or remove it")]
    OutputNotEmpty {
        path: String,
        /// Empty, or what continues the unfinished run the directory holds.
        unfinished: String,
    },

    #[error("output directory {path}: {reason}; choose another with --out")]
    OutputDir { path: String, reason: String },

    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },

    /// Files the run wrote are gone from its directory at its end.
    #[error(
        "{path} was written during the run and is gone, and {others} more of its {total} files with it: something \
         removed them from the output directory"
    )]
    FilesGone { path: String, others: usize, total: usize },

    /// A thread the program needs could not be started.
    #[error(
        "cannot start {what} ({source}): the process's limits are too low (`ulimit -u`, the processes and \
         threads a user may run; `ulimit -v`, the memory a process may map); raise them"
    )]
    Threads {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// A wall limit that leaves a segment no time for one interval.
    #[error(
        "--max-wall-seconds {limit} ended the run before its first interval: set-up took {elapsed:.1} s, and the \
         last checkpoint and summary are held back about {reserve:.1} s more; a limit that leaves time for some \
         intervals beyond these lets each `lbm resume` go on"
    )]
    NoProgress { limit: f64, elapsed: f64, reserve: f64 },

    /// The output directory is no longer at its path: nothing more is
    /// written by that name.
    #[error("the output directory {path} was moved or removed while the run wrote into it")]
    OutputMoved { path: String },

    #[error("the CUDA backend was requested but is unavailable: {reason}")]
    NoCuda { reason: String },

    /// The flow blew up: a force or a field turned non-finite, or a cell
    /// faster than the lattice speed of sound.
    #[error(
        "the run diverged at interval {step} (t = {time:.4} s): {what}; {advice}; \
         what was written until then, the fields at the divergence included, is in {out}"
    )]
    Diverged {
        step: u64,
        time: f64,
        what: String,
        /// What to change in the case ([`crate::run::divergence_advice`]).
        advice: String,
        out: String,
    },

    /// A run whose memory estimate exceeds what is free, found before any work.
    #[error(
        "the run needs about {} of {what} memory ({parts}), but {} is available; lower domain.resolution, \
         shrink or drop [[refinement]] patches, or save less (output.fields, output.formats, --picture-width); \
         a sweep also fits with fewer members, or spread over jobs with --shard K/N",
        crate::check::human_bytes(*needed),
        crate::check::human_bytes(*available)
    )]
    Memory {
        what: &'static str,
        needed: u64,
        available: u64,
        parts: String,
    },

    /// A run that would hold more files open than the process may.
    #[error(
        "the run keeps {needed} files open ({parts}), and with what the program itself opens that is more \
         than this process may open ({limit}, `ulimit -n`, raised to its hard limit); {remedy}"
    )]
    OpenFiles {
        needed: u64,
        limit: u64,
        parts: String,
        remedy: String,
    },

    #[error("{source}; what was measured until then is in {kept}")]
    Interrupted { source: Box<AppError>, kept: String },

    /// A run that failed after it started, with what failed after it (the
    /// files the failure left unwritten) and where the rest is.
    #[error("{source}{after}")]
    Failed {
        source: Box<AppError>,
        /// The later failures and where the run's files are, as a sentence's tail.
        after: String,
    },

    /// SIGINT, SIGTERM or SIGHUP ended a command that has no checkpoint to
    /// take.
    #[error("interrupted by a signal (SIGINT, SIGTERM or SIGHUP) at simulated time {time:.6} s")]
    Signalled { time: f64 },

    /// `--after-pilot DIR` names no completed pilot of this plan.
    #[error("--after-pilot {dir}: {reason}")]
    Pilot { dir: String, reason: String },

    /// A full run of a case that requires a pilot, asked for without one.
    #[error(
        "this run needs a pilot first ({reason}): run `{command} --pilot --out PILOT_DIR`, \
         then `{command} --after-pilot PILOT_DIR --out DIR`; or pass --no-pilot"
    )]
    PilotRequired {
        reason: String,
        /// The command as it was given, less its pilot and output flags.
        command: String,
    },

    /// The output ring refused a launch or lost its place.
    #[error("output ring: {source}")]
    Ring { source: ring_producer::RingError },

    /// A record drained from the output ring that is not what was sent.
    #[error("output ring record {sequence}: {reason}")]
    RingRecord { sequence: u64, reason: String },

    /// The writer thread ended before it was told to.
    #[error("the thread writing the run's files ended early (it panicked); what it wrote is on disk")]
    WriterGone,

    /// `lbm resume DIR` on a directory it cannot continue.
    #[error("cannot resume {dir}: {reason}")]
    Resume { dir: String, reason: String },

    /// A sweep member that cannot run, found before any member starts.
    #[error("sweep member {member} ({parameters}): {reason}")]
    SweepMember {
        member: usize,
        parameters: String,
        reason: String,
    },

    /// `lbm sweep --merge` given shards it cannot join.
    #[error("cannot merge shard {shard}: {reason}")]
    SweepMerge { shard: String, reason: String },

    /// Some members of a sweep failed; the others' results are written.
    #[error(
        "{failed} of {members} sweep members failed ({list}); sweep.csv in {out} says which, and sweep.json and \
         each member's summary.json why{rest}"
    )]
    SweepFailed {
        failed: usize,
        members: usize,
        list: String,
        out: String,
        /// What became of the others: where their results are, and the
        /// command that continues those that stopped early or failed and
        /// can go on.
        rest: String,
    },
}

impl AppError {
    /// 2 for input the run refused before any work (flags, case files, an
    /// output directory in use, a configuration out of range, a missing or
    /// foreign pilot, a directory that cannot be resumed), 3 for a run that
    /// failed once it had started.
    /// The failure itself, without what [`AppError::Failed`] adds to it.
    pub fn cause(&self) -> &AppError {
        match self {
            AppError::Failed { source, .. } => source.cause(),
            e => e,
        }
    }

    pub fn exit_code(&self) -> u8 {
        use lbm_core::Error as Core;
        match self {
            AppError::Flag { .. }
            | AppError::Case { .. }
            | AppError::ReadCase { .. }
            | AppError::OutputNotEmpty { .. }
            | AppError::OutputDir { .. }
            | AppError::Pilot { .. }
            | AppError::PilotRequired { .. }
            | AppError::Resume { .. }
            | AppError::SweepMember { .. }
            | AppError::SweepMerge { .. }
            | AppError::Memory { .. }
            | AppError::OpenFiles { .. }
            | AppError::Threads { .. } => 2,
            AppError::Core(Core::Parameter { .. } | Core::Layout { .. } | Core::CaseSyntax { .. }) => 2,
            AppError::Interrupted { source, .. } | AppError::Failed { source, .. } => source.exit_code(),
            AppError::Signalled { .. } => crate::guard::EXIT_INTERRUPTED,
            _ => crate::guard::EXIT_FAILED,
        }
    }
}
