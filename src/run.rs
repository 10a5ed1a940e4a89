//! `lbm run` and `lbm resume`: resolve a case, pick a backend, advance,
//! write the outputs, checkpoint, and end in one of the ways `summary.json`
//! names.
//!
//! Everything a run could refuse is checked before anything is written.
//! Outputs go to a directory that must be new or empty, so a run never mixes
//! its files with an earlier one's. `manifest.json` (with the plan and its
//! hash) and `case.toml` are written before stepping, so a failed run still
//! says what it was; `summary.json` is written at every ending, with `ended`
//! and, when it failed, the error.
//!
//! The run advances in chunks of about half a second between the points
//! where something is written (force samples, save points, checkpoints), so
//! that a signal, the wall limit and the watchdog are seen within a chunk.
//! Splitting changes no result: `step(a)` then `step(b)` is `step(a + b)`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use lbm_core::case::{Case, LevelParameters, Resolved};
use lbm_core::ledger::ExchangeRecord;
use lbm_core::{CoveredCells, Driver, ExecConfig};

use crate::AppError;
use crate::backend::{BackendChoice, Device, ptx_sha256};
use crate::checkpoint;
use crate::engine::{Engine, Rings, Sampled};
use crate::guard::{EXIT_FAILED, EXIT_INTERRUPTED, Signals, Watchdog};
use crate::output::fields::finest_at;
use crate::output::ring::RingStats;
use crate::output::thread::WriterThread;
use crate::output::{ForceScale, Writer, WriterState, Written, check_identity, dir_identity, fields, write_atomic};
use crate::plan::{PilotChoice, PilotRecord, Plan, check_pilot, pilot_intervals};
use crate::progress::Progress;

/// An observation in physical units: every patch's fields (when asked
/// for), each body's exchange window, and the point probes' values when
/// they were sampled alone.
type Observation = (
    Arc<Vec<fields::PatchFields>>,
    Vec<ExchangeRecord>,
    Option<Vec<Option<[f64; 3]>>>,
);

/// Wall-clock seconds between checkpoints when the case names no period.
const CHECKPOINT_EVERY_SECONDS: f64 = 600.0;
/// The wall time a chunk of intervals aims at.
const CHUNK_SECONDS: f64 = 0.5;
/// Base intervals between divergence checks on the device (and at every
/// save point and at the end): counted in intervals, not seconds, so where a
/// diverging run stops does not depend on the machine. A check reads the
/// populations once, under 1% of the work of 64 intervals.
const HEALTH_EVERY_INTERVALS: u64 = 64;
/// Bytes per second a checkpoint is assumed to be written at before the
/// first one has been timed (for the wall limit's reserve).
const CHECKPOINT_BYTES_PER_S: f64 = 2e8;

pub struct RunOptions {
    pub case: PathBuf,
    pub backend: BackendChoice,
    /// CUDA device ordinal.
    pub device: Option<usize>,
    /// Split the domain over this many devices.
    pub devices: Option<usize>,
    /// The CUDA device of each slab of the split.
    pub device_list: Option<Vec<usize>>,
    pub out: PathBuf,
    pub steps: Option<u64>,
    /// No progress on stderr.
    pub quiet: bool,
    /// Pixels across the domain in pictures (default: the finest level's
    /// resolution, with the domain's longer side 512 to 1600 pixels).
    pub picture_width: Option<u32>,
    pub limits: Limits,
    pub pilot: PilotChoice,
}

pub struct ResumeOptions {
    /// The output directory of the run to continue.
    pub dir: PathBuf,
    pub backend: BackendChoice,
    pub device: Option<usize>,
    pub quiet: bool,
    pub limits: Limits,
}

/// How long a run may take.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// End cleanly, checkpointed, before this many seconds.
    pub max_wall_seconds: Option<f64>,
    /// End as stalled when no interval completes for this long.
    pub watchdog_seconds: f64,
}

/// A `--watchdog-seconds` below this is warned about.
const SHORT_WATCHDOG_SECONDS: f64 = 1.0;

/// The longest time limit taken, about 31700 years: a timer holds no more
/// than 1.8e19 s, and a longer limit is no limit anyway.
const MAX_LIMIT_SECONDS: f64 = 1e12;

impl Limits {
    pub fn check(&self) -> Result<(), AppError> {
        let within = |flag: &'static str, s: f64| match s > 0.0 && s <= MAX_LIMIT_SECONDS {
            true => Ok(()),
            false => Err(AppError::Flag {
                flag,
                value: s.to_string(),
                accepted: format!("a number of seconds above 0 and at most {MAX_LIMIT_SECONDS:e}"),
            }),
        };
        if let Some(s) = self.max_wall_seconds {
            within("--max-wall-seconds", s)?;
        }
        within("--watchdog-seconds", self.watchdog_seconds)?;
        // Shorter, it can end a healthy run between two chunks as hung.
        if self.watchdog_seconds < SHORT_WATCHDOG_SECONDS {
            tell!(
                "warning: --watchdog-seconds {:e} ends the run as stalled when no interval completes for that \
                 long, and a chunk of intervals can take longer (the default is 600)",
                self.watchdog_seconds
            );
        }
        Ok(())
    }
}

/// How a run ended, as `summary.json` names it ([`Ending::name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
pub enum Ending {
    Completed,
    WallLimit,
    Interrupted,
    Stalled,
    Diverged,
    Failed,
}

impl From<Ending> for &'static str {
    fn from(ending: Ending) -> Self {
        ending.name()
    }
}

impl TryFrom<String> for Ending {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        Ending::ALL
            .into_iter()
            .find(|e| e.name() == name)
            .ok_or_else(|| format!("unknown ending `{name}`"))
    }
}

impl Ending {
    pub(crate) const ALL: [Ending; 6] = [
        Ending::Completed,
        Ending::WallLimit,
        Ending::Interrupted,
        Ending::Stalled,
        Ending::Diverged,
        Ending::Failed,
    ];

    /// As `summary.json`'s `ended` names it, and every message.
    pub fn name(self) -> &'static str {
        match self {
            Ending::Completed => "completed",
            Ending::WallLimit => "wall limit",
            Ending::Interrupted => "interrupted",
            Ending::Stalled => "stalled",
            Ending::Diverged => "diverged",
            Ending::Failed => "failed",
        }
    }

    /// 0 for a run that ended as asked (completed, or at its wall limit),
    /// 130 interrupted, 3 failed.
    pub fn exit_code(self) -> u8 {
        match self {
            Ending::Completed | Ending::WallLimit => 0,
            Ending::Interrupted => EXIT_INTERRUPTED,
            Ending::Stalled | Ending::Diverged | Ending::Failed => EXIT_FAILED,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub case: String,
    pub ended: Ending,
    /// What went wrong, for a run that did not end as asked.
    pub error: Option<String>,
    pub plan: Plan,
    /// Set for a pilot (`lbm run --pilot`).
    pub pilot: Option<PilotRecord>,
    pub backend: String,
    /// Base intervals the run is to advance.
    pub steps: u64,
    /// Base intervals completed when it ended.
    pub completed_intervals: u64,
    /// Over every segment of the run (a resumed run has several).
    pub wall_seconds: f64,
    pub segments: u32,
    /// Million lattice cell updates per second, counting every level's hops.
    pub mlups: f64,
    pub cell_updates: u64,
    /// Total mass at the end relative to the start, minus one; unknown when
    /// the run failed.
    pub mass_drift: Option<f64>,
    /// Cell updates per second had every level been as fine as the finest,
    /// over the whole domain: what a uniform grid would have needed, millions.
    pub mlups_finest_equivalent: f64,
    /// Seconds spent advancing the flow, without setup, saving, checkpoints
    /// and the other work between chunks.
    pub stepping_seconds: f64,
    /// Million cell updates per second of `stepping_seconds`: the engine's
    /// speed on the case, what `mlups` dilutes with setup and output.
    pub stepping_mlups: f64,
    /// Each body's (cd, cl) over the last force sample.
    pub coefficients: Vec<[f64; 2]>,
    /// Each body's (cd, cl) averaged over the samples of the last 10% of the run.
    pub coefficients_last_tenth: Vec<[f64; 2]>,
    /// Each body's smallest and largest cd, then cl, over the same samples:
    /// how far from steady the run ended.
    pub coefficients_last_tenth_range: Vec<[[f64; 2]; 2]>,
    /// The newest checkpoint, relative to the output directory.
    pub checkpoint: Option<String>,
    /// The command that continues the run, when it can be continued.
    pub resume: Option<String>,
    /// What the output ring carried in this segment, and how often a
    /// record waited for room.
    pub ring: RingStats,
    /// Times this segment waited for the writer thread's queue.
    pub writer_waits: u64,
    /// The most memory this segment's process held (its peak resident
    /// set; unknown off Linux): against `lbm check`'s estimate.
    pub host_peak_bytes: Option<u64>,
    pub written: Written,
    #[serde(skip)]
    pub out: PathBuf,
}

/// How the run was asked for, beyond the case: what `lbm resume` repeats.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Request {
    pub steps: Option<u64>,
    pub picture_width: Option<u32>,
    /// The split the run was asked for (`--devices`, `--device-list`),
    /// which `lbm resume` opens again.
    #[serde(default)]
    pub devices: Option<usize>,
    #[serde(default)]
    pub device_list: Option<Vec<usize>>,
}

#[derive(Serialize)]
struct Manifest<'a> {
    case: &'a Case,
    resolved: &'a Resolved,
    levels: Vec<LevelParameters>,
    plan: &'a Plan,
    pilot: Option<&'a PilotRecord>,
    request: &'a Request,
    code_version: &'a str,
    ptx_sha256: String,
    backend: &'a str,
    device: &'a Device,
    /// Every device of the run, one per slab of a split.
    devices: &'a [Device],
    /// How a split's halos move between its slabs ("nccl", "device" copies
    /// or "host"); absent on one device.
    #[serde(skip_serializing_if = "Option::is_none")]
    halo_transport: Option<&'static str>,
    command_line: Vec<String>,
    started_utc: String,
    /// One entry per `lbm resume`.
    resumes: Vec<serde_json::Value>,
}

/// The runner's own state, kept in every checkpoint beside the stepper's.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct RunState {
    done: u64,
    coefficients: Vec<[f64; 2]>,
    /// (interval, each body's (cd, cl)) of every force sample.
    history: Vec<(u64, Vec<[f64; 2]>)>,
    /// (interval, each point probe's (p, ux, uy) in Pa and m/s, `None`
    /// where it reads no fluid) of every sample: a sweep's results average
    /// it over a member's every segment. Absent from checkpoints written
    /// before it existed.
    #[serde(default)]
    probe_history: Vec<(u64, Vec<Option<[f64; 3]>>)>,
    mass_start: f64,
    /// Wall seconds of the segments before this one.
    wall_seconds: f64,
    /// Seconds spent advancing (in `step` calls), every segment so far.
    /// Absent from checkpoints written before it existed: their resumed
    /// runs report the stepping rate of the new segments only.
    #[serde(default)]
    stepping_seconds: f64,
    segments: u32,
}

#[derive(Serialize, Deserialize)]
struct Checkpointed {
    run: RunState,
    writer: WriterState,
}

/// How far a blow-up has spread in the fields saved of it: the cell the
/// device names is the first in storage order on the finest level that has
/// one, which by then need not be where it began.
fn spread(patches: &[fields::PatchFields]) -> String {
    let (mut bad, mut fluid) = (0usize, 0usize);
    for p in patches {
        for ((solid, ux), pressure) in p.solid.iter().zip(&p.ux).zip(&p.pressure) {
            if !solid {
                fluid += 1;
                bad += usize::from(!(ux.is_finite() && pressure.is_finite()));
            }
        }
    }
    match bad {
        0 => String::new(),
        _ => format!(
            " (by then {bad} of the {fluid} fluid cells of all levels are not finite; the device names the first \
             cell it finds in storage order on the finest level that has one, which need not be where the blow-up \
             began; the saved fields show the rest)"
        ),
    }
}

fn diverged(resolved: &Resolved, step: u64, what: String, out: &Path) -> AppError {
    AppError::Diverged {
        step,
        time: step as f64 * resolved.units.dt,
        what,
        advice: divergence_advice(resolved),
        out: out.display().to_string(),
    }
}

/// τ⁻ above which a refined case's TRT is named as a cause of divergence:
/// the coupling rebuilds the odd non-equilibrium in proportion to τ⁻, and a
/// cylinder's wake crossing a patch edge at Re 100 grew unstable at 7.8
/// (level 0 τ⁺ 0.524) and 10.9 (magic 1/4) where BGK held; the shipped
/// square obstacle runs to its end at 6.36, but with its patch ending 3
/// sides behind the square, where the wake crosses the edge, it diverged
/// there (BGK held, with the same cd to four digits as the long patch's).
/// Whether a wake will cross an edge is not known before the run: below
/// the shipped cases, then.
pub const REFINED_TRT_TAU_MINUS: f64 = 5.0;

/// The largest τ⁻ of a refined TRT case when it is above
/// [`REFINED_TRT_TAU_MINUS`], given its `levels`.
pub fn refined_trt_tau_minus(resolved: &Resolved, levels: &[lbm_core::case::LevelParameters]) -> Option<f64> {
    let tau_minus = levels.iter().map(|l| l.tau_minus).fold(0.0, f64::max);
    let trt = matches!(resolved.lattice.collision, lbm_core::lattice::Collision::Trt { .. });
    (levels.len() > 1 && trt && tau_minus > REFINED_TRT_TAU_MINUS).then_some(tau_minus)
}

/// What to change in a case that diverged.
pub fn divergence_advice(resolved: &Resolved) -> String {
    if let Some(held) = resolved.lattice.forced_speed(resolved.steps).held_by_bodies {
        return format!(
            "only the bodies hold the body force's flow along {}: lower flow.acceleration (lbm check shows what \
             free acceleration would reach)",
            crate::check::held_axes(held.axes)
        );
    }
    if let Some(cell_reynolds) = crate::check::inlet_trt_cell_reynolds(resolved) {
        return format!(
            "the inlet's peak is at cell Re {cell_reynolds:.1} on level 0 with TRT, where channels diverged from \
             the inlet's corners: collision = {{ model = \"bgk\" }} holds there, or a finer domain.resolution \
             lowers the cell Reynolds number (lbm check shows it)"
        );
    }
    let levels = resolved.levels().unwrap_or_default();
    if let Some(tau_minus) = refined_trt_tau_minus(resolved, &levels) {
        // Here a lower lattice velocity makes it worse: it raises tau-.
        return format!(
            "with refinement, TRT's tau- ({tau_minus:.2} here) makes a wake that crosses a patch edge prone to \
             grow unstable: collision = {{ model = \"bgk\" }} holds there, and a finer domain.resolution lowers \
             tau-; a lower flow.lattice_velocity raises it (lbm check shows tau and Mach)"
        );
    }
    "lower flow.lattice_velocity or raise domain.resolution (lbm check shows tau and Mach)".to_owned()
}

/// Now as `YYYY-MM-DDThh:mm:ssZ`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil from days (H. Hinnant's algorithm), proleptic Gregorian.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

pub fn run_case(options: &RunOptions) -> Result<Summary, AppError> {
    let started = Instant::now();
    if let Some(w) = options.picture_width
        && !(64..=8192).contains(&w)
    {
        return Err(AppError::Flag {
            flag: "--picture-width",
            value: w.to_string(),
            accepted: "64 to 8192 pixels".into(),
        });
    }
    options.limits.check()?;
    let (text, case, resolved) = crate::check::read_case(&options.case, options.steps)?;
    let plan = Plan::of("run", &resolved)?;
    // Of `lbm check`'s doubts, the one a run can end in without a sign of
    // it (a steady flow settled wrong): a run says it too.
    for warning in crate::check::moving_wall_junctions(&case, &resolved, &resolved.levels()?) {
        eprintln!("warning: {warning}");
    }
    let pilot = match &options.pilot {
        PilotChoice::Run { intervals } => {
            let first_save = resolved.output.save_points.first().copied();
            let n = intervals.unwrap_or_else(|| pilot_intervals(resolved.steps, first_save));
            if !(1..=resolved.steps).contains(&n) {
                return Err(AppError::Flag {
                    flag: "--pilot-intervals",
                    value: n.to_string(),
                    accepted: format!("1 to {}, the run's base intervals", resolved.steps),
                });
            }
            Some(PilotRecord { intervals: n })
        }
        _ => None,
    };
    let request = Request {
        steps: options.steps,
        picture_width: options.picture_width,
        devices: options.devices,
        device_list: options.device_list.clone(),
    };
    let opened = open_admitted(&resolved, options.backend, options.device, &request)?;
    let device = opened[0].1.clone();
    match &options.pilot {
        PilotChoice::After(dir) => check_pilot(dir, &plan)?,
        PilotChoice::Default => {
            if let Some(reason) = crate::check::pilot_required(&case, &resolved, device.backend == "cuda")? {
                return Err(AppError::PilotRequired {
                    reason,
                    command: given_command(),
                });
            }
        }
        PilotChoice::Run { .. } | PilotChoice::Skip => {}
    }
    prepare_output(&options.out)?;
    if let Some(warning) = crate::check::held_by_bodies(&resolved) {
        tell!("warning: {warning}");
    }
    let input = SessionInput {
        text: &text,
        case: &case,
        resolved: &resolved,
        plan: &plan,
        out: &options.out,
    };
    let session = open_session(&input, opened, pilot, &request, started, None)?;
    session.drive(options.limits, options.quiet)
}

/// The command line as it was given, `lbm` first, less `--out DIR`: what a
/// refusal tells to run again with other flags (its `--steps` and the rest
/// kept, so that the plan stays the same).
pub(crate) fn given_command() -> String {
    given_words(&[], &["--out"]).join(" ")
}

/// The command that runs the full run after the pilot in `out`: this one,
/// its flags kept, its pilot flags and output directory replaced.
pub fn after_pilot_command(out: &Path) -> String {
    let kept = given_words(&["--pilot"], &["--out", "--pilot-intervals"]).join(" ");
    format!(
        "{kept} --after-pilot {} --out DIR",
        shell_word(&out.display().to_string())
    )
}

/// An exclusive lock on the output directory `dir` while the returned file
/// is held, so that a second lbm cannot write into it at the same time (a
/// resume while the run still goes on, two resumes at once). It is
/// advisory (flock), which every lbm takes; on a file system that has no
/// locks the run goes on without one.
pub(crate) fn lock_directory(dir: &Path) -> Result<Option<std::fs::File>, String> {
    let file = std::fs::File::open(dir).map_err(|e| format!("it cannot be opened ({e})"))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Err(
            "another lbm process is writing into it (a run, sweep or resume that has not ended): wait for it to \
             end, or stop it, before going on"
                .into(),
        ),
        Err(std::fs::TryLockError::Error(_)) => Ok(None),
    }
}

/// The command line's words as text: a word that is not UTF-8 (a path) in
/// ANSI-C quotes, as `lbm resume` hints give it, so that it reads back as
/// the same bytes (where `std::env::args` would panic).
fn command_line() -> Vec<String> {
    use std::os::unix::ffi::OsStrExt;
    std::env::args_os()
        .map(|a| match a.to_str() {
            Some(word) => word.to_owned(),
            None => ansi_c_word(a.as_bytes()),
        })
        .collect()
}

/// Where the directory open as `handle` is now, from Linux's `/proc`; `None`
/// where it was removed or `/proc` does not say.
fn moved_to(handle: &std::fs::File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    let path = std::fs::read_link(format!("/proc/self/fd/{}", handle.as_raw_fd())).ok()?;
    let held = handle.metadata().ok().map(|m| crate::output::identity(&m));
    (held.is_some() && dir_identity(&path) == held).then_some(path)
}

/// A directory's lock that the caller took before the session opens.
pub(crate) struct Held(Option<std::fs::File>);

/// The lock `held` by the caller, or `dir`'s taken now ([`lock_directory`]),
/// its refusal as `refuse` words it.
fn held_or_lock(
    held: Option<Held>,
    dir: &Path,
    refuse: impl FnOnce(String) -> AppError,
) -> Result<Option<std::fs::File>, AppError> {
    match held {
        Some(Held(lock)) => Ok(lock),
        None => lock_directory(dir).map_err(refuse),
    }
}

/// `lbm resume DIR` for the run or sweep in `out`, ready to paste (a
/// relative path that starts with `-` gets `./`, which no flag starts with).
pub fn resume_command(out: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut bytes = out.as_os_str().as_bytes().to_vec();
    if bytes.starts_with(b"-") {
        bytes.splice(0..0, *b"./");
    }
    let word = match std::str::from_utf8(&bytes) {
        Ok(path) => shell_word(path),
        Err(_) => ansi_c_word(&bytes),
    };
    format!("lbm resume {word}")
}

/// A path that is not UTF-8 as one shell word in ANSI-C quotes (`$'...'`,
/// which bash, zsh and ksh read back), its other bytes as `\xNN`, so that
/// the command pastes back to the same path (its display would hold U+FFFD).
fn ansi_c_word(bytes: &[u8]) -> String {
    let mut word = String::from("$'");
    for &b in bytes {
        match b {
            b'\'' => word.push_str("\\'"),
            b'\\' => word.push_str("\\\\"),
            0x20..=0x7e => word.push(b as char),
            _ => word.push_str(&format!("\\x{b:02x}")),
        }
    }
    word.push('\'');
    word
}

/// `word` as a POSIX shell reads it back as one word: as it is when it
/// holds only characters no shell treats specially, else in single quotes
/// (a single quote in it closed, escaped and reopened).
pub fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=,+@%".contains(c);
    match !word.is_empty() && word.chars().all(plain) {
        true => word.to_owned(),
        false => format!("'{}'", word.replace('\'', "'\\''")),
    }
}

/// The command line's words, `lbm` first, less the flags `alone` and the
/// flags `valued` with their values (`--flag V` or `--flag=V`), each as the
/// shell reads it back ([`shell_word`]).
fn given_words(alone: &[&str], valued: &[&str]) -> Vec<String> {
    let mut args = command_line().into_iter().skip(1);
    let mut kept = vec!["lbm".to_owned()];
    while let Some(arg) = args.next() {
        if valued.contains(&arg.as_str()) {
            args.next();
        } else if !alone.contains(&arg.as_str()) && !valued.iter().any(|flag| arg.starts_with(&format!("{flag}="))) {
            kept.push(shell_word(&arg));
        }
    }
    kept
}

/// The drivers of a run asked for as `request`, once its split (a patch in
/// the way, too many devices) is refused or planned before any device
/// opens, and its memory admitted on every device they open.
fn open_admitted(
    resolved: &Resolved,
    backend: BackendChoice,
    device: Option<usize>,
    request: &Request,
) -> Result<Vec<crate::backend::Opened>, AppError> {
    let split = match request.devices.or(request.device_list.as_ref().map(Vec::len)) {
        Some(g) => {
            let hierarchy = resolved.lattice.hierarchy.validate(&resolved.tiles)?;
            Some(lbm_core::domain::decompose::Decomposition::plan(
                &hierarchy,
                &resolved.lattice,
                g,
            )?)
        }
        None => None,
    };
    let opened = backend.open_split(device, request.devices, request.device_list.as_deref())?;
    crate::check::check_split_memory(resolved, &opened, split.as_ref(), request.picture_width)?;
    crate::check::check_open_files([resolved])?;
    Ok(opened)
}

/// What a session runs: the case as written and as resolved, its plan, and
/// the (empty) output directory.
pub(crate) struct SessionInput<'a> {
    pub text: &'a str,
    pub case: &'a Case,
    pub resolved: &'a Resolved,
    pub plan: &'a Plan,
    pub out: &'a Path,
}

/// A new run's session: the stepper on the one driver (or the split over
/// all of them), then `case.toml`, `manifest.json` and the writer in
/// `input.out`. A failure after the stepper exists leaves a failed
/// `summary.json` behind.
pub(crate) fn open_session<'a>(
    input: &SessionInput<'a>,
    opened: Vec<crate::backend::Opened>,
    pilot: Option<PilotRecord>,
    request: &Request,
    started: Instant,
    held: Option<Held>,
) -> Result<Session<'a, Box<dyn Driver>>, AppError> {
    let SessionInput {
        text,
        case,
        resolved,
        plan,
        out,
    } = *input;
    let lock = held_or_lock(held, out, |reason| AppError::OutputDir {
        path: out.display().to_string(),
        reason,
    })?;
    // Allocated before anything is written: a device that cannot hold the
    // run leaves only the empty directory, which a rerun may use.
    let backend = opened[0].0.backend();
    let (drivers, devices): (Vec<_>, Vec<_>) = opened.into_iter().unzip();
    let mut engine = Engine::open(drivers, &devices, resolved.lattice.clone(), exec(resolved))?;
    if let Some(initial) = &resolved.initial {
        engine.initialize(initial)?;
    }
    let started_up = (|| {
        write_atomic(&out.join("case.toml"), text.as_bytes())?;
        write_json(
            &out.join("manifest.json"),
            &Manifest {
                case,
                resolved,
                levels: resolved.levels()?,
                plan,
                pilot: pilot.as_ref(),
                request,
                code_version: env!("CARGO_PKG_VERSION"),
                ptx_sha256: ptx_sha256(),
                backend,
                device: &devices[0],
                devices: &devices,
                halo_transport: engine.halo_transport(),
                command_line: command_line(),
                started_utc: utc_now(),
                resumes: Vec::new(),
            },
        )?;
        let writer = Writer::create(out, case, resolved, request.picture_width)?;
        let mass_start = engine.total_mass()?;
        if !resolved.lattice.bodies.is_empty() {
            engine.start_exchange_window()?;
        }
        Ok((writer, mass_start))
    })();
    let (writer, mass_start) = started_up.inspect_err(|e: &AppError| {
        let summary = serde_json::json!({
            "case": case.name,
            "ended": Ending::Failed,
            "error": e.to_string(),
            "plan": plan,
            "completed_intervals": 0,
        });
        if let Err(second) = write_json(&out.join("summary.json"), &summary) {
            tell!("error: {second}");
        }
    })?;
    let state = RunState {
        done: 0,
        coefficients: Vec::new(),
        history: Vec::new(),
        probe_history: Vec::new(),
        mass_start,
        wall_seconds: 0.0,
        stepping_seconds: 0.0,
        segments: 1,
    };
    Ok(Session {
        lock,
        out_identity: dir_identity(out),
        stop: pilot.as_ref().map_or(resolved.steps, |p| p.intervals),
        pilot,
        backend,
        rings: engine.rings(None, resolved)?,
        engine,
        written: writer.written(),
        force_scale: writer.force_scale(),
        writer: WriterThread::spawn(writer)?,
        case,
        resolved,
        plan,
        out,
        state,
        started,
        last_checkpoint: None,
        checkpoint_seconds: None,
        diverging: None,
    })
}

pub fn resume(options: &ResumeOptions) -> Result<Summary, AppError> {
    let started = Instant::now();
    options.limits.check()?;
    let dir = options.dir.as_path();
    // Before anything is read: what another lbm writes there is no state
    // to go on from, and a run without a checkpoint starts again emptied.
    let held = Held(lock_directory(dir).map_err(|reason| AppError::Resume {
        dir: dir.display().to_string(),
        reason,
    })?);
    let manifest = read_manifest(dir)?;
    // A run that cannot write where it goes on is refused before any work.
    check_writable(dir).map_err(|reason| AppError::Resume {
        dir: dir.display().to_string(),
        reason: format!("{reason}: copy the directory somewhere writable and resume the copy"),
    })?;
    let request: Request = serde_json::from_value(manifest["request"].clone()).map_err(|e| AppError::Resume {
        dir: dir.display().to_string(),
        reason: format!("its manifest.json records no request ({e})"),
    })?;
    let (text, case, resolved) = crate::check::read_case(&dir.join("case.toml"), request.steps)?;
    let plan = Plan::of("run", &resolved)?;
    // The run starts again only as the run it was: an edited case.toml is
    // another run, which another directory is for.
    let started_as: Option<Plan> = serde_json::from_value(manifest["plan"].clone()).ok();
    let point = resume_point(dir, manifest, &plan, "run the case again into another directory")?;
    if point.is_none()
        && let Some(started_as) = started_as
        && started_as.case_sha256 != plan.case_sha256
    {
        return Err(AppError::Resume {
            dir: dir.display().to_string(),
            reason: format!(
                "it holds no checkpoint, and its case.toml is not the case it started with: {}; run the \
                 edited case into another directory",
                plan.differences(&started_as).unwrap_or_default()
            ),
        });
    }
    let opened = open_admitted(&resolved, options.backend, options.device, &request)?;
    let input = SessionInput {
        text: &text,
        case: &case,
        resolved: &resolved,
        plan: &plan,
        out: dir,
    };
    let session = match point {
        Some(point) => open_resumed(&input, point, opened, &request, started, Some(held))?,
        None => {
            // What a run killed before its first checkpoint wrote is the
            // start of what running it again writes: nothing is lost.
            tell!(
                "{} holds no checkpoint to continue from; the run starts again from interval 0",
                dir.display()
            );
            clear_run_files(dir)?;
            open_session(&input, opened, None, &request, started, Some(held))?
        }
    };
    session.drive(options.limits, options.quiet)
}

/// `dir`'s manifest, or the refusal to resume what is not a run directory,
/// a pilot or a run that completed.
pub(crate) fn read_manifest(dir: &Path) -> Result<serde_json::Value, AppError> {
    let refuse = |reason: String| AppError::Resume {
        dir: dir.display().to_string(),
        reason,
    };
    let manifest: serde_json::Value = std::fs::read_to_string(dir.join("manifest.json"))
        .map_err(|e| match failed_before_manifest(dir) {
            Some(why) => refuse(format!(
                "the run failed before it wrote its manifest.json ({why}), so there is nothing to continue: \
                 empty the directory and run the case again"
            )),
            None if stopped_before_manifest(dir) => refuse(
                "it holds only the case.toml a run writes as it starts: the run was stopped before it wrote its \
                 manifest.json, so there is nothing to continue: remove case.toml and run the case again"
                    .into(),
            ),
            None => refuse(format!(
                "it has no readable manifest.json ({e}): it is not a run directory"
            )),
        })
        .and_then(|t| serde_json::from_str(&t).map_err(|e| refuse(format!("its manifest.json is damaged ({e})"))))?;
    if !manifest["pilot"].is_null() {
        return Err(refuse("it is a pilot; pilots are run again, not resumed".into()));
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("summary.json"))
        && let Ok(summary) = serde_json::from_str::<serde_json::Value>(&text)
    {
        if summary["ended"] == "completed" {
            return Err(refuse("the run completed; there is nothing to resume".into()));
        }
        // The same bits diverge again: only another case gets past it.
        if summary["ended"] == "diverged" {
            return Err(refuse(format!(
                "the run diverged ({}); resumed, it would diverge again: change the case as that message \
                 advises and run it anew",
                summary["error"].as_str().unwrap_or("no error recorded")
            )));
        }
    }
    Ok(manifest)
}

/// Whether `name` is the temporary file of one of a run's own entries
/// (`manifest.json.tmp`, `case.toml.tmp`), which a write leaves half-done
/// when the run is killed.
fn start_temporary(name: &str) -> bool {
    name.strip_suffix(".tmp").is_some_and(|n| RUN_ENTRIES.contains(&n))
}

/// Whether `dir` holds what a run killed between writing its case.toml and
/// its manifest.json leaves: that case.toml, and nothing else but the
/// temporary files of its start.
fn stopped_before_manifest(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let names: Vec<String> = entries
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.iter().any(|n| n == "case.toml")
        && names
            .iter()
            .all(|n| n == "case.toml" || n.starts_with(".lbm-write-check-") || start_temporary(n))
}

/// The error of a run that failed before its manifest.json was written
/// (a full disk as it set out), from the summary.json it left: such a
/// directory is neither empty nor resumable.
fn failed_before_manifest(dir: &Path) -> Option<String> {
    if dir.join("manifest.json").exists() {
        return None;
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).ok()?).ok()?;
    (summary["ended"] == "failed").then(|| summary["error"].as_str().unwrap_or("no error recorded").to_owned())
}

/// Where a run directory continues from: its newest checkpoint that reads
/// back whole and is of `plan` (each damaged one passed over told), or
/// `None` when it holds no checkpoint at all.
pub(crate) struct ResumePoint {
    manifest: serde_json::Value,
    found: checkpoint::Checkpoint<Checkpointed>,
}

impl ResumePoint {
    /// Base intervals the run had advanced at the checkpoint.
    pub(crate) fn done(&self) -> u64 {
        self.found.run.run.done
    }
}

/// The checkpoint `lbm resume` continues `dir` from (`None`: there is none
/// and the run starts again), or the refusal, whose advice is `again` (what
/// starts the run afresh).
pub(crate) fn resume_point(
    dir: &Path,
    manifest: serde_json::Value,
    plan: &Plan,
    again: &str,
) -> Result<Option<ResumePoint>, AppError> {
    let (found, passed_over) = checkpoint::latest::<Checkpointed>(dir);
    // Without one to fall back on, the refusal below gives every reason.
    if found.is_some() {
        for reason in &passed_over {
            tell!("warning: {reason}; the one before is used");
        }
    }
    let refuse = |reason: String| AppError::Resume {
        dir: dir.display().to_string(),
        reason,
    };
    let Some(found) = found else {
        // Damaged checkpoints are evidence of a fault worth a look (a full
        // or failing disk); they are not silently written over.
        return match passed_over.is_empty() {
            true => Ok(None),
            false => Err(refuse(format!(
                "no checkpoint reads back whole: {}; {again}",
                passed_over.join("; ")
            ))),
        };
    };
    if let Some(what) = plan.differences(&found.plan) {
        return Err(refuse(format!(
            "{} is of another plan than this lbm computes for its case.toml: {what}",
            found.path.display()
        )));
    }
    // Before any work: the run would end refusing to call itself complete.
    let written = &found.run.writer.written().files;
    let missing: Vec<&PathBuf> = written.iter().filter(|f| !dir.join(f).exists()).collect();
    if let Some(first) = missing.first() {
        return Err(refuse(format!(
            "{} was written before {} and is gone, and {} more of its {} files with it, so the run cannot be \
             continued whole; {again}",
            dir.join(first).display(),
            found.path.display(),
            missing.len() - 1,
            written.len()
        )));
    }
    crate::output::verify_outputs(dir, &found.run.writer)
        .map_err(|reason| refuse(format!("{reason}, so the run cannot be continued whole; {again}")))?;
    Ok(Some(ResumePoint { manifest, found }))
}

/// The session that continues `input.out` from `point` on the drivers
/// `opened`: the stepper restored, a resume entry in the manifest, the
/// writer where the checkpoint left it.
pub(crate) fn open_resumed<'a>(
    input: &SessionInput<'a>,
    point: ResumePoint,
    opened: Vec<crate::backend::Opened>,
    request: &Request,
    started: Instant,
    held: Option<Held>,
) -> Result<Session<'a, Box<dyn Driver>>, AppError> {
    let SessionInput {
        case,
        resolved,
        plan,
        out: dir,
        ..
    } = *input;
    let lock = held_or_lock(held, dir, |reason| AppError::Resume {
        dir: dir.display().to_string(),
        reason,
    })?;
    let ResumePoint { mut manifest, found } = point;
    let (drivers, devices): (Vec<_>, Vec<_>) = opened.into_iter().unzip();
    let backend = drivers[0].backend();
    let mut engine = Engine::open(drivers, &devices, resolved.lattice.clone(), exec(resolved))?;
    // A checkpoint of another configuration (another split's), and files
    // it needs that are gone, are found before the manifest records a
    // segment that will not run.
    engine.restore(&found.snapshot).map_err(|e| match e {
        lbm_core::Error::Snapshot { .. } => AppError::Resume {
            dir: dir.display().to_string(),
            reason: format!("{} does not fit this run: {e}", found.path.display()),
        },
        e => e.into(),
    })?;
    remove_partial_files(dir);
    let writer = Writer::resume(dir, case, resolved, request.picture_width, found.run.writer)?;
    let mut state = found.run.run;
    state.segments += 1;
    if let Some(resumes) = manifest["resumes"].as_array_mut() {
        let mut entry = serde_json::json!({
            "from_interval": state.done,
            "checkpoint": found.path.strip_prefix(dir).unwrap_or(&found.path),
            "backend": backend,
            "device": &devices[0],
            "devices": &devices,
            "command_line": command_line(),
            "started_utc": utc_now(),
        });
        // As in the manifest itself: only a split has halos to move.
        if let Some(transport) = engine.halo_transport() {
            entry["halo_transport"] = transport.into();
        }
        resumes.push(entry);
    }
    write_json(&dir.join("manifest.json"), &manifest)?;
    tell!(
        "resuming {} from interval {} of {} ({})",
        dir.display(),
        state.done,
        resolved.steps,
        found.path.display()
    );
    Ok(Session {
        lock,
        out_identity: dir_identity(dir),
        stop: resolved.steps,
        pilot: None,
        backend,
        rings: engine.rings(None, resolved)?,
        engine,
        written: writer.written(),
        force_scale: writer.force_scale(),
        writer: WriterThread::spawn(writer)?,
        case,
        resolved,
        plan,
        out: dir,
        state,
        started,
        last_checkpoint: Some(relative(dir, &found.path)),
        checkpoint_seconds: None,
        diverging: None,
    })
}

/// The force and probe histories of a run directory's newest checkpoint
/// (a run that completed ends with one): what a sweep's results of a
/// member that completed before the sweep was stopped are made of.
pub(crate) fn checkpointed_histories(dir: &Path) -> Option<History> {
    let (found, _) = checkpoint::latest::<Checkpointed>(dir);
    found.map(|f| (f.run.run.history, f.run.run.probe_history))
}

/// (interval, each body's (cd, cl)) and (interval, each point probe's
/// (p, ux, uy)) of every sample.
pub(crate) type History = (Vec<(u64, Vec<[f64; 2]>)>, Vec<(u64, Vec<Option<[f64; 3]>>)>);

/// Removes the temporary files of writes a killed run left unfinished:
/// none of them is whole, and each is written again.
fn remove_partial_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            remove_partial_files(&path);
        } else if path.extension().is_some_and(|e| e == "tmp") {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// What a run writes at the top of its directory: all that a run from the
/// start removes there.
const RUN_ENTRIES: [&str; 11] = [
    "case.toml",
    "manifest.json",
    "summary.json",
    "forces.csv",
    "fields.pvd",
    "patches.pvd",
    "fields",
    "pictures",
    "probes",
    "plots",
    "checkpoints",
];

/// Removes what a run wrote in its directory (and the `.tmp` files of its
/// writes), for a run from the start; anything else there (a user's notes,
/// an analysis beside the outputs) stays.
pub(crate) fn clear_run_files(dir: &Path) -> Result<(), AppError> {
    let write = |source| AppError::Write {
        path: dir.display().to_string(),
        source,
    };
    // Its entries go, the directory stays: the lock a session holds is on
    // the directory itself, and a directory made anew would hold none.
    if dir.exists() {
        for entry in std::fs::read_dir(dir).map_err(write)? {
            let path = entry.map_err(write)?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if !RUN_ENTRIES.contains(&name.strip_suffix(".tmp").unwrap_or(name)) {
                continue;
            }
            match path.is_dir() && !path.is_symlink() {
                true => std::fs::remove_dir_all(&path),
                false => std::fs::remove_file(&path),
            }
            .map_err(write)?;
        }
    }
    std::fs::create_dir_all(dir).map_err(write)
}

fn relative(out: &Path, path: &Path) -> String {
    path.strip_prefix(out).unwrap_or(path).display().to_string()
}

pub(crate) fn exec(resolved: &Resolved) -> ExecConfig {
    ExecConfig {
        tiles: resolved.tiles.clone(),
        observe_window_exchange: !resolved.lattice.bodies.is_empty(),
        ..ExecConfig::default()
    }
}

/// The most bytes a path may have on Linux (`PATH_MAX`, its NUL included).
const PATH_MAX: usize = 4096;

/// Bytes every file a run (or a sweep's member) writes may add to its
/// output directory's path: `members/NNN/`, then the longest of
/// `fields/tNNNNNNNNN/L{l}_p{i}_{field}.{ext}`, a probe's or line's file
/// (a name of up to [`lbm_core::output::MAX_NAME`]) and the checkpoints, each
/// with the suffix of its temporary file; with room to spare.
const LONGEST_RELATIVE_PATH: usize = 128 + lbm_core::output::MAX_NAME;

/// Creates the output directory, refusing one that already holds files or
/// whose files' paths would be too long.
pub fn prepare_output(out: &Path) -> Result<(), AppError> {
    let refuse = |reason: String| AppError::OutputDir {
        path: out.display().to_string(),
        reason,
    };
    let absolute = std::path::absolute(out).map_err(|e| refuse(format!("it cannot be resolved ({e})")))?;
    let bytes = absolute.as_os_str().len();
    if bytes + 1 + LONGEST_RELATIVE_PATH >= PATH_MAX {
        return Err(refuse(format!(
            "its absolute path is {bytes} bytes, and the files written in it would reach the system's limit of \
             {PATH_MAX} bytes a path; choose one of at most {} bytes",
            PATH_MAX - 2 - LONGEST_RELATIVE_PATH
        )));
    }
    if out.exists() {
        if !out.is_dir() {
            return Err(refuse("it is a file, not a directory".into()));
        }
        let entries: Vec<PathBuf> = std::fs::read_dir(out)
            .map_err(|e| refuse(format!("it cannot be read ({e})")))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        // Only the half-written start of a run killed as it began
        // (`manifest.json.tmp`, `case.toml.tmp`): nothing to keep or continue.
        let started_only = !entries.is_empty()
            && entries.iter().all(|path| {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                start_temporary(name) && path.is_file()
            });
        if started_only && lock_directory(out).is_ok() {
            for path in &entries {
                std::fs::remove_file(path)
                    .map_err(|e| refuse(format!("{} cannot be removed ({e})", path.display())))?;
            }
        } else if !entries.is_empty() {
            // A run whose summary says it cannot be continued (files it
            // wrote gone) is not offered a resume that would be refused.
            let summary_refuses = std::fs::read_to_string(out.join("summary.json"))
                .ok()
                .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                .is_some_and(|s| s["ended"] == "failed" && s["resume"].is_null());
            let resumable = !summary_refuses && read_manifest(out).is_ok() && {
                let (found, damaged) = checkpoint::latest::<Checkpointed>(out);
                found.is_some() || damaged.is_empty()
            };
            let busy = lock_directory(out).is_err();
            let unfinished = match (resumable, crate::sweep::is_unfinished(out)) {
                // Named for what it is now: a resume would be refused too.
                _ if busy => {
                    ": another lbm process is writing into it (a run, sweep or resume that has not ended)".to_owned()
                }
                _ if stopped_before_manifest(out) => {
                    ": it holds only the case.toml of a run stopped as it started, before it wrote its \
                     manifest.json, which nothing continues: remove case.toml, or choose another directory"
                        .to_owned()
                }
                _ if failed_before_manifest(out).is_some() => {
                    ": it holds a run that failed before it wrote its manifest.json (its summary.json says why), \
                     which nothing continues: empty it, or choose another directory"
                        .to_owned()
                }
                (true, _) => format!(
                    ": it holds a run that did not complete, which `{}` continues",
                    resume_command(out)
                ),
                (_, true) => format!(
                    ": it holds a sweep that did not complete, which `{}` continues",
                    resume_command(out)
                ),
                _ => String::new(),
            };
            return Err(AppError::OutputNotEmpty {
                path: out.display().to_string(),
                unfinished,
            });
        }
    }
    let made = create_dirs(out).map_err(|e| refuse(format!("it cannot be created ({e})")))?;
    // A directory that exists but refuses files is found now, before any work.
    check_writable(out).map_err(|e| {
        remove_dirs(&made);
        refuse(e)
    })
}

/// Whether files can be made in `dir`, found by making one. Named by the
/// process, so that two runs started into one directory at once do not
/// remove each other's.
pub(crate) fn check_writable(dir: &Path) -> Result<(), String> {
    let probe = dir.join(format!(".lbm-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| format!("it is not writable ({e})"))
}

/// Creates `dir` and each missing directory above it, and returns those it
/// made, outermost first. Where one cannot be made, those made before it are
/// removed again, so that a refused output directory leaves nothing behind.
fn create_dirs(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && std::fs::symlink_metadata(p).is_err())
        .collect();
    let mut made = Vec::new();
    for path in missing.into_iter().rev() {
        match std::fs::create_dir(path) {
            Ok(()) => made.push(path.to_path_buf()),
            // Made meanwhile by another process: not this one's to remove.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => {}
            Err(e) => {
                remove_dirs(&made);
                return Err(e);
            }
        }
    }
    Ok(made)
}

/// Removes the directories [`create_dirs`] made, innermost first, where
/// they are still empty.
fn remove_dirs(made: &[PathBuf]) {
    for path in made.iter().rev() {
        let _ = std::fs::remove_dir(path);
    }
}

pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), AppError> {
    let text = serde_json::to_string_pretty(value).expect("plain data serialises");
    write_atomic(path, (text + "\n").as_bytes())
}

/// A chunk of intervals just stepped, with the samples taken inside it on
/// the device (`Rings::begin_sampled`, `Rings::finish_sampled`), in order.
pub(crate) struct Chunk {
    pub intervals: u64,
    pub sampled: Vec<Sampled>,
}

impl Chunk {
    /// `intervals` stepped without samples inside.
    pub(crate) fn plain(intervals: u64) -> Chunk {
        Chunk {
            intervals,
            sampled: Vec::new(),
        }
    }
}

/// How a session paces its chunks between `advance` calls.
pub(crate) struct Pace {
    last_checkpoint: Instant,
    /// Measured on the last chunk; `None` before the first.
    seconds_per_interval: Option<f64>,
}

impl Pace {
    pub(crate) fn new() -> Pace {
        Pace {
            last_checkpoint: Instant::now(),
            seconds_per_interval: None,
        }
    }
}

/// One process's part of a run: from a fresh start or a checkpoint to its
/// stop (the run's end, or a pilot's), a wall limit or a signal.
pub(crate) struct Session<'a, D: Driver> {
    /// Held for the session's life ([`lock_directory`]); a handle on the
    /// directory, wherever it is moved.
    lock: Option<std::fs::File>,
    /// The output directory's identity when the session opened
    /// ([`dir_identity`]): one moved or removed meanwhile is not written
    /// into anew by its old name.
    out_identity: Option<(u64, u64)>,
    backend: &'static str,
    engine: Engine<D>,
    /// Everything written leaves the devices through them, one per device.
    rings: Rings,
    writer: WriterThread,
    /// What the writer had written at its last flush, for summaries.
    written: Written,
    force_scale: ForceScale,
    case: &'a Case,
    resolved: &'a Resolved,
    plan: &'a Plan,
    out: &'a Path,
    state: RunState,
    /// Base intervals this session advances to.
    stop: u64,
    pilot: Option<PilotRecord>,
    started: Instant,
    /// The newest checkpoint, relative to `out`.
    last_checkpoint: Option<String>,
    /// How long the last checkpoint took to write.
    checkpoint_seconds: Option<f64>,
    /// A force sample that was not finite, while the run steps on to
    /// [`Session::divergence_stop`] to save its fields there.
    diverging: Option<Diverging>,
}

/// A divergence a force sample showed, before its fields are saved.
struct Diverging {
    step: u64,
    what: String,
}

impl<D: Driver> Session<'_, D> {
    /// Base intervals advanced so far.
    pub(crate) fn done(&self) -> u64 {
        self.state.done
    }

    /// The base interval the run ends at (a pilot's own length).
    fn end(&self) -> u64 {
        self.pilot.as_ref().map_or(self.resolved.steps, |p| p.intervals)
    }

    /// Makes the next `advance` stop at `stop` base intervals.
    pub(crate) fn set_stop(&mut self, stop: u64) {
        self.stop = stop;
    }

    /// What the watchdog writes if this session stalls.
    pub(crate) fn stalled_summary(&self) -> Summary {
        self.summary(Ending::Stalled, None, None)
    }

    /// Each sample's interval and every body's (cd, cl) then.
    pub(crate) fn coefficient_history(&self) -> Vec<(u64, Vec<[f64; 2]>)> {
        self.state.history.clone()
    }

    /// Each sample's interval and every point probe's (p, ux, uy) then, in
    /// Pa and m/s (`None` where a probe reads no fluid).
    pub(crate) fn probe_history(&self) -> &[(u64, Vec<Option<[f64; 3]>>)] {
        &self.state.probe_history
    }

    pub(crate) fn updates_per_interval(&self) -> u64 {
        self.engine.hierarchy().cell_updates_per_interval()
    }

    /// Advances to the end, writes the last checkpoint and the summary for
    /// whatever ending came, and returns the summary of a run that ended as
    /// asked or was interrupted, or the error of one that failed.
    fn drive(mut self, limits: Limits, quiet: bool) -> Result<Summary, AppError> {
        let signals = Signals::install();
        let watchdog = match Watchdog::start(
            self.out.to_owned(),
            Duration::from_secs_f64(limits.watchdog_seconds),
            self.summary(Ending::Stalled, None, None),
        ) {
            Ok(watchdog) => watchdog,
            Err(e) => return Err(self.fail(e).0),
        };
        let mut progress = Progress::new(
            self.state.done,
            self.stop,
            self.resolved.units.dt,
            self.updates_per_interval(),
            quiet,
        );
        let advanced = self.advance(&limits, &signals, &watchdog, &mut progress);
        progress.finish();
        let ended = advanced.and_then(|ending| self.end_cleanly(ending));
        drop(watchdog);
        ended.map_err(|e| self.fail(e).0)
    }

    /// Ends a session that failed with `e`: what was handed to the writer
    /// (the fields of a divergence among it) is on disk, and the summary says
    /// how it ended, before the error (with what failed after it and where
    /// the files are) and that summary are returned.
    pub(crate) fn fail(&mut self, e: AppError) -> (AppError, Summary) {
        let ending = match e {
            AppError::Diverged { .. } => Ending::Diverged,
            _ => Ending::Failed,
        };
        // What fails after the error (a full disk fails every later write)
        // follows it in the one message, so the cause reads first.
        let mut later = Vec::new();
        if self.writer.is_running() {
            match self.writer.finish() {
                Ok(written) => self.written = written,
                // Said below, with where the directory went.
                Err(AppError::OutputMoved { .. }) => {}
                Err(second) => later.push(second.to_string()),
            }
        }
        let mut summary = self.summary(ending, Some(e.to_string()), None);
        if matches!(e, AppError::FilesGone { .. }) {
            // What a checkpoint says was written is not there to continue.
            summary.resume = None;
        }
        let moved = self.out_identity.is_some() && dir_identity(self.out) != self.out_identity;
        if moved {
            // Its files are where it went, which its summary joins; a
            // directory of that name now is another one, perhaps another
            // run's, which nothing here writes into.
            let moved_to = self.lock.as_ref().and_then(moved_to);
            let what = match matches!(e.cause(), AppError::OutputMoved { .. }) {
                true => String::new(),
                false => format!(
                    "the output directory {} was moved or removed while the run wrote into it: ",
                    self.out.display()
                ),
            };
            match moved_to {
                Some(now) => {
                    summary.resume = summary.resume.as_ref().map(|_| resume_command(&now));
                    let written = write_json(&now.join("summary.json"), &summary);
                    later.push(format!(
                        "{what}it is now {}, where what it had written is{}",
                        now.display(),
                        match (&summary.resume, written) {
                            (_, Err(second)) => format!(" (its summary.json was not: {second})"),
                            (Some(command), Ok(())) => format!(", and `{command}` continues it"),
                            (None, Ok(())) => String::new(),
                        }
                    ));
                }
                None => {
                    summary.resume = None;
                    later.push(format!(
                        "{what}it was removed, or where it went is not known; if it was moved, `lbm resume` of \
                         where it went continues it from its last checkpoint"
                    ));
                }
            }
        } else if let Err(second) = write_json(&self.out.join("summary.json"), &summary) {
            later.push(second.to_string());
        }
        // A full disk fails the summary as it failed the file before it:
        // the same words once.
        let said = e.to_string();
        later.retain(|m| *m != said);
        later.dedup();
        let mut after = String::new();
        if !later.is_empty() {
            after += &format!("; after it: {}", later.join("; "));
        }
        // A divergence says where its files are.
        let diverged_alone = later.is_empty() && matches!(e, AppError::Diverged { .. });
        if !(moved || diverged_alone) {
            after += &format!(
                "; the run stopped after interval {} of {}, and what it had written is in {}",
                self.state.done,
                self.resolved.steps,
                self.out.display()
            );
        }
        // A failure a resume gets past (a full disk freed, a device back)
        // names it, as summary.json does.
        if summary.resume.is_some() && ending == Ending::Failed && !moved {
            after += &match summary.checkpoint {
                Some(_) => format!("; once the cause is fixed, continue with: {}", resume_command(self.out)),
                None => format!(
                    "; once the cause is fixed, {} runs it again from the start in its directory",
                    resume_command(self.out)
                ),
            };
        }
        (
            AppError::Failed {
                source: Box::new(e),
                after,
            },
            summary,
        )
    }

    /// The pilot's last fields, the checkpoint and the summary of a run that
    /// ended as asked or was interrupted.
    pub(crate) fn end_cleanly(&mut self, ending: Ending) -> Result<Summary, AppError> {
        // A limit or a signal that came while a divergence was under way.
        if self.diverging.is_some() {
            return Err(self.diverged_at());
        }
        let done = self.state.done;
        if self.pilot.is_some() {
            // A pilot vouches for finite fields at its end, saved or not.
            let (patches, ..) = self.observe(Some(CoveredCells::Settled), false)?;
            let saved = self.resolved.output.save_points.contains(&done);
            if !saved {
                self.writer.save(done, patches.clone())?;
            }
            self.check_finite(&patches)?;
            self.check_health(Some(&patches))?;
        } else {
            self.checkpoint()?;
        }
        let mass = self.engine.total_mass()?;
        let written = self.writer.finish()?;
        // A file removed under the run (its directory deleted or renamed, a
        // file deleted) would be listed as written by a run that says it
        // completed.
        let missing: Vec<&PathBuf> = written.files.iter().filter(|f| !self.out.join(f).exists()).collect();
        if let Some(first) = missing.first() {
            return Err(AppError::FilesGone {
                path: self.out.join(first).display().to_string(),
                others: missing.len() - 1,
                total: written.files.len(),
            });
        }
        self.written = written.clone();
        check_identity(self.out, self.out_identity)?;
        let mut summary = self.summary(ending, None, Some(mass));
        summary.written = written;
        if ending != Ending::Completed {
            summary.error = Some(match ending {
                Ending::WallLimit => "the run reached --max-wall-seconds".to_owned(),
                _ => "the run was interrupted by a signal".to_owned(),
            });
        }
        write_json(&self.out.join("summary.json"), &summary)?;
        self.engine.close()?;
        Ok(summary)
    }

    /// The device's divergence check: a non-finite population or a cell
    /// faster than [`lbm_core::DIVERGED_MACH`] stops the run, after the
    /// fields of this interval are written (unless `saved` holds them).
    fn check_health(&mut self, saved: Option<&[fields::PatchFields]>) -> Result<(), AppError> {
        let Some(cell) = self.unhealthy_cell()? else {
            return Ok(());
        };
        let spread = match saved {
            Some(patches) => spread(patches),
            None => self.save_divergence()?,
        };
        let done = self.state.done;
        Err(diverged(self.resolved, done, cell + &spread, self.out))
    }

    /// Where the device finds a population that is not finite or a cell
    /// faster than [`lbm_core::DIVERGED_MACH`] now, if anywhere.
    fn unhealthy_cell(&mut self) -> Result<Option<String>, AppError> {
        let limit = lbm_core::DIVERGED_MACH / 3f64.sqrt();
        let Some(found) = self.engine.check_health(limit)? else {
            return Ok(None);
        };
        let [x, y] = found.position.map(|v| v * self.resolved.units.dx);
        let problem = match found.problem {
            lbm_core::HealthProblem::NonFinite => "a population is not finite".to_owned(),
            lbm_core::HealthProblem::TooFast { speed } => format!(
                "the lattice speed is {speed:.3}, Mach {:.2}, over the limit of Mach {}",
                speed * 3f64.sqrt(),
                lbm_core::DIVERGED_MACH
            ),
        };
        Ok(Some(format!(
            "on level {} patch {}, in the cell at x = {x:.6} m, y = {y:.6} m, {problem}",
            found.level, found.patch
        )))
    }

    /// Writes the fields of the interval the device is at, so that a
    /// divergence can be looked at, and returns [`spread`]'s account of them.
    fn save_divergence(&mut self) -> Result<String, AppError> {
        let (patches, ..) = self.observe(Some(CoveredCells::Settled), false)?;
        let spread = spread(&patches);
        self.writer.save(self.state.done, patches)?;
        Ok(spread)
    }

    /// This interval's fields in physical units (when `fields`), each
    /// body's exchange window and, when `probes`, the point probes' values
    /// sampled alone, through the output ring.
    fn observe(&mut self, fields: Option<CoveredCells>, probes: bool) -> Result<Observation, AppError> {
        if fields.is_some() {
            self.writer.wait_saves()?;
        }
        let observed = self.rings.observe(&self.engine, fields, probes, self.state.done)?;
        let patches = match fields.is_some() {
            true => {
                let mut lattice = observed.fields.into_iter();
                fields::physical(
                    &self.engine.hierarchy(),
                    &self.resolved.units,
                    &self.resolved.lattice,
                    |_, _| Ok::<_, AppError>(lattice.next().expect("the rings brought every patch")),
                )?
            }
            false => Vec::new(),
        };
        Ok((Arc::new(patches), observed.records, observed.probes))
    }

    fn check_finite(&self, patches: &[fields::PatchFields]) -> Result<(), AppError> {
        let done = self.state.done;
        match patches
            .iter()
            .find(|p| !(p.ux.iter().chain(&p.uy).chain(&p.pressure)).all(|v| v.is_finite()))
        {
            Some(p) => Err(diverged(
                self.resolved,
                done,
                format!("the flow on level {} patch {} is not finite", p.level, p.patch),
                self.out,
            )),
            None => Ok(()),
        }
    }

    /// The summary as of now.
    fn summary(&self, ended: Ending, error: Option<String>, mass_end: Option<f64>) -> Summary {
        let done = self.state.done;
        let steps = self.resolved.steps;
        let wall_seconds = self.state.wall_seconds + self.started.elapsed().as_secs_f64();
        let hierarchy = self.engine.hierarchy();
        let cell_updates = self.updates_per_interval() * done;
        let finest = hierarchy.n_levels() - 1;
        let base = hierarchy.base().active.cells() as u64;
        let finest_equivalent = (base << (2 * finest)) * (1u64 << finest) * done;
        let tail: Vec<&Vec<[f64; 2]>> = self
            .state
            .history
            .iter()
            .filter(|(step, _)| 10 * step > 9 * steps)
            .map(|(_, c)| c)
            .collect();
        let bodies = self.resolved.lattice.bodies.len();
        // A run that ended before its last tenth has no mean there (null).
        let coefficients_last_tenth = (0..bodies)
            .map(|b| [0, 1].map(|k| tail.iter().map(|c| c[b][k]).sum::<f64>() / tail.len() as f64))
            .collect();
        // NaN (null) before the last tenth, or where a sample was not finite.
        let coefficients_last_tenth_range = (0..bodies)
            .map(|b| {
                [0, 1].map(|k| {
                    let values = || tail.iter().map(|c| c[b][k]);
                    match tail.is_empty() || values().any(|v| !v.is_finite()) {
                        true => [f64::NAN; 2],
                        false => [
                            values().fold(f64::INFINITY, f64::min),
                            values().fold(f64::NEG_INFINITY, f64::max),
                        ],
                    }
                })
            })
            .collect();
        // As `lbm resume` decides: a run without a checkpoint starts again
        // in its directory; a divergence would come back, so it is not
        // resumable.
        let resumable = self.pilot.is_none() && !matches!(ended, Ending::Completed | Ending::Diverged);
        Summary {
            case: self.case.name.clone(),
            ended,
            error,
            plan: self.plan.clone(),
            pilot: self.pilot.clone(),
            backend: self.backend.to_owned(),
            steps,
            completed_intervals: done,
            wall_seconds,
            segments: self.state.segments,
            mlups: cell_updates as f64 / wall_seconds.max(1e-9) / 1e6,
            cell_updates,
            mass_drift: mass_end
                .map(|m| m / self.state.mass_start - 1.0)
                .filter(|d| d.is_finite()),
            mlups_finest_equivalent: finest_equivalent as f64 / wall_seconds.max(1e-9) / 1e6,
            stepping_seconds: self.state.stepping_seconds,
            stepping_mlups: cell_updates as f64 / self.state.stepping_seconds.max(1e-9) / 1e6,
            // Before the first sample, one unknown (null) pair per body.
            coefficients: match self.state.coefficients.is_empty() {
                true => vec![[f64::NAN; 2]; bodies],
                false => self.state.coefficients.clone(),
            },
            coefficients_last_tenth,
            coefficients_last_tenth_range,
            checkpoint: self.last_checkpoint.clone(),
            // Absolute, so that it runs from any directory.
            resume: resumable.then(|| {
                let out = std::path::absolute(self.out).unwrap_or_else(|_| self.out.to_owned());
                resume_command(&out)
            }),
            ring: self.rings.stats(),
            writer_waits: self.writer.waits(),
            host_peak_bytes: lbm_core::cpu::host_peak_memory(),
            written: self.written.clone(),
            out: self.out.to_owned(),
        }
    }

    /// Writes a checkpoint of the state now.
    fn checkpoint(&mut self) -> Result<(), AppError> {
        check_identity(self.out, self.out_identity)?;
        let start = Instant::now();
        // The writer first: a save point's fields are written and dropped
        // before the state is downloaded beside them (`check::MemoryNeed`).
        let writer = self.writer.state()?;
        let snapshot = self.engine.snapshot()?;
        let mut run = self.state.clone();
        run.wall_seconds += self.started.elapsed().as_secs_f64();
        self.written = writer.written().clone();
        let state = Checkpointed { run, writer };
        let path = checkpoint::write(self.out, self.plan, &snapshot, &state)?;
        drop(snapshot);
        lbm_core::cpu::return_freed_memory();
        self.last_checkpoint = Some(relative(self.out, &path));
        self.checkpoint_seconds = Some(start.elapsed().as_secs_f64());
        Ok(())
    }

    /// Seconds to hold back before the wall limit for the last checkpoint.
    fn checkpoint_reserve(&self) -> f64 {
        self.checkpoint_seconds.unwrap_or_else(|| {
            let bytes: u64 = self.engine.memory_ledger().total();
            bytes as f64 / CHECKPOINT_BYTES_PER_S
        }) * 1.5
            + 0.05
    }

    /// Advances to `stop`, chunk by chunk; see [`Session::plan_chunk`] and
    /// [`Session::finish_chunk`].
    pub(crate) fn advance(
        &mut self,
        limits: &Limits,
        signals: &Signals,
        watchdog: &Watchdog,
        progress: &mut Progress,
    ) -> Result<Ending, AppError> {
        let mut pace = Pace::new();
        let first = self.state.done;
        while self.state.done < self.stop {
            let batch = self.samples_in_chunks();
            let Some(n) = self.plan_chunk(limits, &pace, batch)? else {
                // A segment that cannot step once would end so again at
                // every resume: a job array resubmitting on exit 0 loops.
                if self.state.done == first {
                    return Err(AppError::NoProgress {
                        limit: limits.max_wall_seconds.unwrap_or_default(),
                        elapsed: self.started.elapsed().as_secs_f64(),
                        reserve: self.checkpoint_reserve(),
                    });
                }
                return Ok(Ending::WallLimit);
            };
            let start = Instant::now();
            self.begin_chunk(n, batch)?;
            let chunk = self.end_chunk(n, batch)?;
            let seconds = start.elapsed().as_secs_f64();
            if let Some(ending) = self.finish_chunk(chunk, seconds, &mut pace, signals, watchdog, progress)? {
                return Ok(ending);
            }
        }
        Ok(Ending::Completed)
    }

    /// Enqueues a chunk of `n` intervals, with the samples due inside it
    /// where `samples_inside` (as `plan_chunk` was told), without waiting.
    pub(crate) fn begin_chunk(&mut self, n: u64, samples_inside: bool) -> Result<(), AppError> {
        match self.inside(n, samples_inside) {
            Some(every) => {
                let probes = !self.resolved.output.probes.is_empty();
                self.rings.begin_sampled(&self.engine, n, every, probes)
            }
            None => Ok(self.engine.begin_step(n)?),
        }
    }

    /// Waits for the chunk [`Session::begin_chunk`] enqueued.
    pub(crate) fn end_chunk(&mut self, n: u64, samples_inside: bool) -> Result<Chunk, AppError> {
        match self.inside(n, samples_inside) {
            Some(_) => {
                let probes = !self.resolved.output.probes.is_empty();
                let sampled = self.rings.finish_sampled(&self.engine, probes)?;
                Ok(Chunk { intervals: n, sampled })
            }
            None => {
                self.engine.finish_step()?;
                Ok(Chunk::plain(n))
            }
        }
    }

    /// The sample period of a chunk of `n` intervals that takes samples
    /// inside (it has room for one), or `None`.
    fn inside(&self, n: u64, samples_inside: bool) -> Option<u64> {
        self.sampling().filter(|_| samples_inside && n > 1)
    }

    /// Whether the samples between save points can be taken on the device
    /// inside a chunk of intervals (one stepper), so that a chunk need not
    /// end at each.
    pub(crate) fn samples_in_chunks(&self) -> bool {
        self.sampling().is_some() && self.rings.sample_probes_alone()
    }

    /// Whether the run still observes anything between save points (forces
    /// or probes), and how often.
    fn sampling(&self) -> Option<u64> {
        let plan = &self.resolved.output;
        (!self.resolved.lattice.bodies.is_empty() || !plan.probes.is_empty()).then_some(plan.forces_every)
    }

    fn checkpoint_every_intervals(&self) -> Option<u64> {
        self.case
            .run
            .checkpoint_every_intervals
            .filter(|_| self.pilot.is_none())
    }

    /// Where a run whose force sample after interval `step` was not finite
    /// saves its fields and stops: the first divergence check, save point,
    /// checkpoint interval or end at or after it. No chunk crosses one of
    /// these, so every run of the case gets there, whatever its chunks
    /// were (a sample taken inside a chunk is older than the device's
    /// state), and saves the same fields.
    fn divergence_stop(&self, step: u64) -> u64 {
        let at_or_after = |k: u64| step.div_ceil(k) * k;
        let save = self.resolved.output.save_points.iter().copied().find(|s| *s >= step);
        [
            Some(at_or_after(HEALTH_EVERY_INTERVALS)),
            save,
            self.checkpoint_every_intervals().map(at_or_after),
            Some(self.end()),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("the end is one")
    }

    /// The intervals of the next chunk: up to the next event (a sample, a
    /// save point, a checkpoint, a divergence check, `stop`), about
    /// `CHUNK_SECONDS` long, within the wall limit; `None` when the wall limit
    /// leaves no room.
    pub(crate) fn plan_chunk(
        &mut self,
        limits: &Limits,
        pace: &Pace,
        samples_inside: bool,
    ) -> Result<Option<u64>, AppError> {
        let done = self.state.done;
        let next_sample = match (self.sampling(), samples_inside) {
            (Some(sample), false) => (done / sample + 1) * sample,
            // As many samples inside as the ring holds, then the chunk's end.
            (Some(sample), true) => done + sample * self.rings.samples_in_room().max(1),
            (None, _) => u64::MAX,
        };
        let next_save = self.next_save();
        let next_checkpoint = self
            .checkpoint_every_intervals()
            .map_or(u64::MAX, |k| (done / k + 1) * k);
        let next_health = (done / HEALTH_EVERY_INTERVALS + 1) * HEALTH_EVERY_INTERVALS;
        let event = next_sample
            .min(next_save)
            .min(next_checkpoint)
            .min(next_health)
            .min(self.stop);
        let mut n = match pace.seconds_per_interval {
            Some(s) => (event - done).min(((CHUNK_SECONDS / s) as u64).max(1)),
            // The first chunk times one interval.
            None => 1,
        };
        if let Some(limit) = limits.max_wall_seconds {
            // The first save point's cost is unknown until it is written, and
            // it may be far more than a checkpoint's (pictures, several
            // formats): it is waited for, once, so that no chunk is committed
            // that its writing would push past the limit.
            if self.writer.save_seconds().is_none() && self.writer.saves_pending() > 0 {
                self.writer.wait()?;
            }
            // The last checkpoint, and the plots and summary: about what a
            // save point costs; twice that when this chunk ends at one.
            // Until a save point has been timed, a save is taken to cost what
            // the checkpoint does (about as many bytes: each level's fields in
            // two formats against its populations), so that a limit falling
            // just after the first save point still ends near the limit.
            let saving = done + n == next_save;
            let save_seconds = self.writer.save_seconds().unwrap_or_else(|| self.checkpoint_reserve());
            // A save point still being written holds the end back by what
            // it has left.
            let reserve = self.checkpoint_reserve()
                + save_seconds * if saving { 2.0 } else { 1.0 }
                + self.writer.save_left_seconds();
            let left = limit - self.started.elapsed().as_secs_f64() - reserve;
            let fits = match pace.seconds_per_interval {
                Some(s) => (left / s).floor().max(0.0) as u64,
                None => u64::from(left > 0.0),
            };
            if fits == 0 {
                return Ok(None);
            }
            n = n.min(fits);
        }
        Ok(Some(n))
    }

    fn next_save(&self) -> u64 {
        let done = self.state.done;
        self.resolved
            .output
            .save_points
            .iter()
            .copied()
            .find(|s| *s > done)
            .unwrap_or(u64::MAX)
    }

    /// What follows a chunk of `n` intervals that took `seconds` to step:
    /// samples, save points, divergence checks and checkpoints due now, the
    /// progress and the watchdog; `Some` ending when the run is to end here
    /// (a signal).
    pub(crate) fn finish_chunk(
        &mut self,
        chunk: Chunk,
        seconds: f64,
        pace: &mut Pace,
        signals: &Signals,
        watchdog: &Watchdog,
        progress: &mut Progress,
    ) -> Result<Option<Ending>, AppError> {
        let resolved = self.resolved;
        let plan = &resolved.output;
        let bodies = &resolved.lattice.bodies;
        let next_save = self.next_save();
        let n = chunk.intervals;
        self.state.stepping_seconds += seconds;
        pace.seconds_per_interval = Some(seconds / n as f64);
        // The device is at the chunk's end: a divergence that a sample
        // inside it shows is looked at there.
        self.state.done += n;
        for s in chunk.sampled {
            self.write_sample(s.step, s.records, s.probes.unwrap_or_default())?;
        }
        if let Some(end) = self.while_diverging(progress, signals, watchdog) {
            return end;
        }
        let done = self.state.done;
        let sampling = self
            .sampling()
            .is_some_and(|sample| done.is_multiple_of(sample) || done == resolved.steps);
        let saving = done == next_save;
        // A save point writes and checks every cell; a probe or a line
        // samples the uncovered cells and their covered neighbours, which
        // every interval leaves exact, so it needs no settle. Between save
        // points the probes read only their own cells where the rings can.
        let probing = sampling && !plan.probes.is_empty();
        let alone = probing && !saving && self.rings.sample_probes_alone();
        let fields = match (saving, probing && !alone) {
            (true, _) => Some(CoveredCells::Settled),
            (false, true) => Some(CoveredCells::Band),
            (false, false) => None,
        };
        let (patches, records, probes) = match sampling || saving {
            true => self.observe(fields, alone)?,
            false => (Arc::new(Vec::new()), Vec::new(), None),
        };
        if sampling {
            let probes = probes.unwrap_or_else(|| {
                let at = |point| finest_at(&patches, point).and_then(|f| f.sample(point));
                plan.probes.iter().map(|p| at(p.point)).collect()
            });
            self.write_sample(done, records, probes)?;
            if let Some(end) = self.while_diverging(progress, signals, watchdog) {
                return end;
            }
            if !bodies.is_empty() {
                self.engine.start_exchange_window()?;
            }
        }
        if saving {
            // What was computed is written first, so the blow-up can be looked at.
            self.writer.save(done, patches.clone())?;
        }
        // At the run's end, not at `stop`, which a sweep moves to each of
        // its boundaries: a member is checked where a plain run of its case
        // is, and diverges where it does.
        if saving || done == self.end() || done.is_multiple_of(HEALTH_EVERY_INTERVALS) {
            // The device check names the cell; the fields' own check
            // below is what remains if a moment alone went wrong.
            self.check_health(saving.then_some(&patches[..]))?;
        }
        if saving {
            self.check_finite(&patches)?;
        }
        let every_seconds = match self.pilot {
            Some(_) => f64::INFINITY,
            None => self
                .case
                .run
                .checkpoint_every_seconds
                .unwrap_or(CHECKPOINT_EVERY_SECONDS),
        };
        let due = self
            .checkpoint_every_intervals()
            .is_some_and(|k| done.is_multiple_of(k))
            || pace.last_checkpoint.elapsed().as_secs_f64() >= every_seconds;
        if due && done < self.end() {
            self.checkpoint()?;
            pace.last_checkpoint = Instant::now();
        }
        progress.update(done, &self.state.coefficients);
        watchdog.beat(done, self.last_checkpoint.as_ref(), || {
            self.summary(Ending::Stalled, None, None)
        });
        Ok(signals.raised().then_some(Ending::Interrupted))
    }

    /// Writes the sample taken after interval `step`: each body's forces
    /// from its exchange window `records` (a non-finite one ends the run as
    /// diverged) and each point probe's value.
    fn write_sample(
        &mut self,
        step: u64,
        records: Vec<ExchangeRecord>,
        probes: Vec<Option<[f64; 3]>>,
    ) -> Result<(), AppError> {
        // After a divergence the samples are not written: the files end at
        // the sample that showed it.
        if self.diverging.is_some() {
            return Ok(());
        }
        let time = step as f64 * self.resolved.units.dt;
        // The probes first: a divergence the forces show still leaves the
        // sample's row in every file.
        if !self.resolved.output.probes.is_empty() {
            self.writer.probes(time, probes.clone())?;
            // JSON, which checkpoints hold the history in, has no NaN: a
            // sample that is not finite (a run about to be stopped as
            // diverged) is kept as no value.
            let finite = probes
                .into_iter()
                .map(|p| p.filter(|v| v.iter().all(|x| x.is_finite())))
                .collect();
            self.state.probe_history.push((step, finite));
        }
        if !self.resolved.lattice.bodies.is_empty() {
            let coefficients = self.force_scale.coefficients(&records);
            // The loads in N, torque included, not their coefficients: a
            // coefficient's scale is the user's choice of reference.
            let unbounded = records
                .iter()
                .position(|r| !self.force_scale.load(r)[..3].iter().all(|v| v.is_finite()));
            self.writer.forces(time, records)?;
            self.state.history.push((step, coefficients.clone()));
            self.state.coefficients = coefficients;
            if let Some(b) = unbounded {
                self.diverging = Some(Diverging {
                    step,
                    what: format!("the force on body {b} is not finite"),
                });
            }
        }
        Ok(())
    }

    /// While a divergence is under way: its error once the run reaches
    /// [`Session::divergence_stop`], else the chunk's end with no save,
    /// check or checkpoint of a flow that is not finite; `None` without one.
    fn while_diverging(
        &mut self,
        progress: &mut Progress,
        signals: &Signals,
        watchdog: &Watchdog,
    ) -> Option<Result<Option<Ending>, AppError>> {
        let step = self.diverging.as_ref()?.step;
        let done = self.state.done;
        if done >= self.divergence_stop(step) {
            return Some(Err(self.diverged_at()));
        }
        progress.update(done, &self.state.coefficients);
        watchdog.beat(done, self.last_checkpoint.as_ref(), || {
            self.summary(Ending::Stalled, None, None)
        });
        Some(Ok(signals.raised().then_some(Ending::Interrupted)))
    }

    /// The error of the divergence under way, once the run has reached
    /// [`Session::divergence_stop`]; its fields are saved first.
    fn diverged_at(&mut self) -> AppError {
        let Diverging { step, mut what } = self.diverging.take().expect("a divergence is under way");
        let done = self.state.done;
        if done != step {
            what += &format!(" (the fields saved are those of interval {done}, where the run stopped)");
        }
        let mut tell = || -> Result<(), AppError> {
            if let Some(cell) = self.unhealthy_cell()? {
                what += &format!("; {cell}");
            }
            what += &self.save_divergence()?;
            Ok(())
        };
        match tell() {
            Ok(()) => diverged(self.resolved, step, what, self.out),
            Err(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Ending, resume_command, shell_word};
    use std::path::Path;

    /// What a hint prints for a path reads back, through a shell, as that
    /// path: spaces, quotes, a non-ASCII letter and shell syntax included.
    #[test]
    fn a_hints_path_reads_back_through_a_shell_as_itself() {
        for word in ["out/run-1", "sp ace/ü long", "it's", "a;b $(x) `y` *", "", "--out=a b"] {
            let quoted = shell_word(word);
            let echoed = std::process::Command::new("sh")
                .args(["-c", &format!("printf %s {quoted}")])
                .output()
                .unwrap();
            assert_eq!(String::from_utf8(echoed.stdout).unwrap(), word, "{quoted}");
        }
        assert_eq!(shell_word("out/run-1"), "out/run-1", "a plain path stays as it is");
        // A path that starts with a dash is not taken for a flag.
        assert_eq!(resume_command(Path::new("-out")), "lbm resume ./-out");
        // A path that is not UTF-8 reads back through bash byte for byte.
        use std::os::unix::ffi::OsStrExt;
        let bytes = b"out/r\xffn 'q' \\x".to_vec();
        let command = resume_command(Path::new(std::ffi::OsStr::from_bytes(&bytes)));
        let word = command.strip_prefix("lbm resume ").unwrap();
        let echoed = std::process::Command::new("bash")
            .args(["-c", &format!("printf %s {word}")])
            .output()
            .unwrap();
        assert_eq!(echoed.stdout, bytes, "{word}");
    }

    /// `summary.json` writes each ending by its name and reads it back; a
    /// name no ending has is refused.
    #[test]
    fn an_ending_is_written_and_read_by_its_name() {
        for ending in Ending::ALL {
            let json = serde_json::to_string(&ending).unwrap();
            assert_eq!(json, format!("\"{}\"", ending.name()));
            assert_eq!(serde_json::from_str::<Ending>(&json).unwrap(), ending);
        }
        assert_eq!(serde_json::to_string(&Ending::WallLimit).unwrap(), "\"wall limit\"");
        assert!(serde_json::from_str::<Ending>("\"WallLimit\"").is_err());
    }
}
