//! `lbm`: the command-line front end. Parses arguments and hands over to
//! [`lbm::run`]; it holds no simulation logic.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use lbm::AppError;
use lbm::backend::BackendChoice;
use lbm::plan::PilotChoice;
use lbm::run::{Ending, Limits, ResumeOptions, RunOptions, Summary, resume, run_case};
use lbm::validate::{Benchmark, ValidateOptions, Validated, validate};

#[derive(Parser)]
#[command(
    name = "lbm",
    version,
    about = "D2Q9 lattice Boltzmann with fixed-patch grid refinement"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Whether the full run follows a pilot (a short run of the same plan).
#[derive(clap::Args)]
struct PilotArgs {
    /// Run only the plan's first intervals, into their own directory, as the
    /// pilot a full run can then name with --after-pilot.
    #[arg(long, conflicts_with_all = ["after_pilot", "no_pilot"])]
    pilot: bool,
    /// Intervals of the pilot (default: to the first save point, at most 1%
    /// of the run); only with --pilot.
    #[arg(long)]
    pilot_intervals: Option<u64>,
    /// The directory of a completed pilot of the same plan.
    #[arg(long, value_name = "PILOT_DIR", conflicts_with = "no_pilot")]
    after_pilot: Option<PathBuf>,
    /// Run in full without a pilot, whatever the case requires.
    #[arg(long)]
    no_pilot: bool,
}

impl PilotArgs {
    fn choice(self) -> Result<PilotChoice, AppError> {
        if let (Some(n), false) = (self.pilot_intervals, self.pilot) {
            return Err(AppError::Flag {
                flag: "--pilot-intervals",
                value: n.to_string(),
                accepted: "a count of intervals, only with --pilot".into(),
            });
        }
        Ok(match (self.pilot, self.after_pilot, self.no_pilot) {
            (true, _, _) => PilotChoice::Run {
                intervals: self.pilot_intervals,
            },
            (_, Some(dir), _) => PilotChoice::After(dir),
            (_, None, true) => PilotChoice::Skip,
            _ => PilotChoice::Default,
        })
    }
}

/// How long a run may take.
#[derive(clap::Args)]
struct LimitArgs {
    /// End cleanly before this many seconds of wall time, with a checkpoint
    /// that `lbm resume` continues from.
    #[arg(long, value_name = "S")]
    max_wall_seconds: Option<f64>,
    /// End the run as stalled (exit 3) when no interval completes for this long.
    #[arg(long, value_name = "S", default_value_t = 600.0)]
    watchdog_seconds: f64,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        Limits {
            max_wall_seconds: self.max_wall_seconds,
            watchdog_seconds: self.watchdog_seconds,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run a case file and write manifest.json and summary.json.
    Run {
        /// The case, a TOML file in physical units (see cases/).
        case: PathBuf,
        /// Where to compute: auto picks CUDA when a device is present.
        #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
        backend: BackendChoice,
        /// Output directory; must not exist or be empty.
        #[arg(long, default_value = "out")]
        out: PathBuf,
        /// Override the case's number of base intervals.
        #[arg(long)]
        steps: Option<u64>,
        /// No progress on stderr.
        #[arg(long)]
        quiet: bool,
        /// Pixels across the domain in pictures, 64 to 8192 (default: the
        /// finest level's resolution, with the domain's longer side 512 to
        /// 1600 pixels).
        #[arg(long)]
        picture_width: Option<u32>,
        /// CUDA device ordinal (default 0).
        #[arg(long)]
        device: Option<usize>,
        /// Split the domain over G devices: slabs along x (as `lbm check
        /// --devices G` shows them), CUDA devices 0..G, or G host slabs
        /// with --backend cpu; the results are one device's, bit for bit.
        #[arg(long, value_name = "G")]
        devices: Option<usize>,
        /// The CUDA device of each slab, e.g. 0,1 (an ordinal may repeat:
        /// 0,0 puts two slabs on one device).
        #[arg(long, value_name = "LIST", value_delimiter = ',')]
        device_list: Option<Vec<usize>>,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        pilot: PilotArgs,
    },
    /// Continue a run (or a sweep) that ended at its wall limit, was
    /// interrupted or was killed, from the newest checkpoint in its output
    /// directory (each member's, for a sweep).
    Resume {
        /// The run's (or the sweep's) output directory.
        dir: PathBuf,
        #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
        backend: BackendChoice,
        /// CUDA device ordinal (default 0).
        #[arg(long)]
        device: Option<usize>,
        /// No progress on stderr.
        #[arg(long)]
        quiet: bool,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Print what a case resolves to (per level: dx, dt, tau, Mach, cells),
    /// the memory, work and output it needs, and warnings; runs nothing.
    Check {
        /// The case, a TOML file in physical units.
        case: PathBuf,
        /// Also show the case split over G devices: slabs along x, each cut
        /// placed to balance the cell updates and clear of patches and
        /// bodies, and the halo bytes per interval (what `lbm run --devices
        /// G` runs).
        #[arg(long, value_name = "G")]
        devices: Option<usize>,
    },
    /// Print the version, the backends this machine offers and the PTX hash.
    Info,
    /// Run one case over the cartesian product of key values (an ensemble)
    /// and write sweep.csv, its plots and each member's outputs under
    /// members/NNN/; or, with --merge OUT SHARD_DIR..., join shards.
    Sweep {
        /// The case (or, with --merge, the shard directories to join).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// A swept key and its values: KEY=V1,V2,... (a dotted case key, TOML
        /// values; an array entry by index, e.g. bodies.0.radius). Repeat for
        /// a cartesian product.
        #[arg(long = "set", value_name = "KEY=V1,V2,...")]
        sets: Vec<String>,
        /// Advance the members in lockstep, each on its own driver (the default).
        #[arg(long, conflicts_with = "fused")]
        lockstep: bool,
        /// One fused batch on one driver: one launch per kernel per hop for all members.
        #[arg(long)]
        fused: bool,
        /// Run members K, K+N, K+2N, ... only (K from 0): one task of a job array.
        #[arg(long, value_name = "K/N")]
        shard: Option<String>,
        /// Join the shard directories given as PATHS into the directory OUT
        /// (it runs nothing: the flags of a run are refused beside it).
        #[arg(
            long,
            value_name = "OUT",
            conflicts_with_all = [
                "sets", "shard", "fused", "lockstep", "steps", "out", "backend", "device", "quiet",
                "max_wall_seconds", "watchdog_seconds",
            ]
        )]
        merge: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
        backend: BackendChoice,
        /// Output directory; must not exist or be empty.
        #[arg(long, default_value = "out/sweep")]
        out: PathBuf,
        /// Override the case's number of base intervals.
        #[arg(long)]
        steps: Option<u64>,
        /// No progress on stderr.
        #[arg(long)]
        quiet: bool,
        /// CUDA device ordinal (default 0).
        #[arg(long)]
        device: Option<usize>,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Run a DFG cylinder benchmark to its criterion and write report.json, report.md and series.csv.
    Validate {
        benchmark: Benchmark,
        /// Cells per diameter on the finest level, a multiple of 10 x 2^levels
        /// (default 80: about 5 minutes of dfg-2d1 on two CPU cores, 12 s on an H200).
        #[arg(long)]
        resolution: Option<u32>,
        /// Refinement levels around the cylinder to keep, 0 (uniform) to all
        /// of the case's (the default; the built-in cases have 2).
        #[arg(long)]
        levels: Option<u32>,
        /// The inflow peak in lattice units (default: the case file's, 0.05
        /// for dfg-2d1 and 0.03 for dfg-2d2);
        /// halving it halves the Mach number and doubles the steps.
        #[arg(long)]
        lattice_velocity: Option<f64>,
        #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
        backend: BackendChoice,
        /// Output directory; must not exist or be empty.
        #[arg(long, default_value = "out/validate")]
        out: PathBuf,
        /// A variant of the benchmark's case file to validate instead of the
        /// built-in one (same channel and cylinder; patches, collision and
        /// lattice velocity may differ).
        #[arg(long)]
        case: Option<PathBuf>,
        /// CUDA device ordinal (default 0).
        #[arg(long)]
        device: Option<usize>,
        #[command(flatten)]
        pilot: PilotArgs,
        /// No progress on stderr (the results still go to stdout).
        #[arg(long)]
        quiet: bool,
    },
}

/// Writes a line to stdout, ignoring a closed pipe (`lbm run ... | head`):
/// what the run did stays done, and its exit code says so.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// A report on standard output, whose whole purpose it is: one that cannot
/// be written (a full disk under `lbm check CASE > plan.txt`) fails.
fn report_out(report: &str) -> ExitCode {
    use std::io::Write as _;
    let mut out = std::io::stdout();
    match writeln!(out, "{}", report.trim_end()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader stopped reading (`| head`): what it took was written.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            lbm::tell!("error: the report could not be written to standard output ({e})");
            ExitCode::from(lbm::guard::EXIT_FAILED)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The threads a command needs, started or tried before it writes
    // anything: a process limit that refuses them is bad input, not a panic
    // halfway (a run's writer, its watchdog and the stop signals' thread).
    let threads = match cli.command {
        Command::Info => Ok(()),
        Command::Check { .. } => lbm_core::cpu::start_workers().map_err(|source| lbm::AppError::Threads {
            what: "the worker threads",
            source,
        }),
        _ => lbm_core::cpu::start_workers()
            .map_err(|source| lbm::AppError::Threads {
                what: "the worker threads",
                source,
            })
            .and_then(|()| lbm::guard::check_thread_room(3)),
    };
    if let Err(e) = threads {
        lbm::tell!("error: {e}");
        return ExitCode::from(e.exit_code());
    }
    if !matches!(cli.command, Command::Check { .. } | Command::Info) {
        lbm::guard::Signals::install();
    }
    let result = match cli.command {
        Command::Check { case, devices } => {
            return match lbm::check::check(&case, devices) {
                Ok(report) => report_out(&report),
                Err(e) => {
                    lbm::tell!("error: {e}");
                    ExitCode::from(e.exit_code())
                }
            };
        }
        Command::Info => return report_out(&lbm::check::info()),
        Command::Run {
            case,
            backend,
            out,
            steps,
            quiet,
            picture_width,
            device,
            devices,
            device_list,
            limits,
            pilot,
        } => pilot.choice().and_then(|pilot| {
            run_case(&RunOptions {
                case,
                backend,
                device,
                devices,
                device_list,
                out,
                steps,
                quiet,
                picture_width,
                limits: limits.limits(),
                pilot,
            })
        }),
        Command::Resume {
            dir,
            backend,
            device,
            quiet,
            limits,
        } => {
            // A sweep's directory has its record and no manifest of its own.
            if dir.join("sweep.json").exists() && !dir.join("manifest.json").exists() {
                let done = lbm::sweep::resume(&dir, backend, device, quiet, limits.limits());
                return sweep_ended(done, &dir);
            }
            resume(&ResumeOptions {
                dir,
                backend,
                device,
                quiet,
                limits: limits.limits(),
            })
        }
        Command::Sweep {
            paths,
            sets,
            lockstep: _,
            fused,
            shard,
            merge,
            backend,
            out,
            steps,
            quiet,
            device,
            limits,
        } => {
            let done = match merge {
                Some(target) => {
                    return match lbm::sweep::merge(&target, &paths) {
                        Ok(()) => {
                            say!("merged {} shards into {}", paths.len(), target.display());
                            ExitCode::SUCCESS
                        }
                        Err(e) => {
                            lbm::tell!("error: {e}");
                            ExitCode::from(e.exit_code())
                        }
                    };
                }
                None if paths.len() != 1 => Err(lbm::AppError::Flag {
                    flag: "CASE",
                    value: format!("{} paths", paths.len()),
                    accepted: "one case file (several paths only with --merge OUT)".into(),
                }),
                None => lbm::sweep::sweep(&lbm::sweep::SweepOptions {
                    case: paths[0].clone(),
                    sets,
                    mode: match fused {
                        true => lbm::sweep::SweepMode::Fused,
                        false => lbm::sweep::SweepMode::Lockstep,
                    },
                    out: out.clone(),
                    shard,
                    backend,
                    device,
                    steps,
                    quiet,
                    limits: limits.limits(),
                }),
            };
            return sweep_ended(done, &out);
        }
        Command::Validate {
            benchmark,
            resolution,
            levels,
            lattice_velocity,
            backend,
            out,
            case,
            device,
            pilot,
            quiet,
        } => {
            let pilot = match pilot.choice() {
                Ok(pilot) => pilot,
                Err(e) => {
                    lbm::tell!("error: {e}");
                    return ExitCode::from(e.exit_code());
                }
            };
            let options = ValidateOptions {
                benchmark,
                resolution,
                levels,
                lattice_velocity,
                backend,
                device,
                case,
                out: out.clone(),
                pilot,
                quiet,
            };
            return match validate(&options) {
                Ok(Validated::Pilot(pilot)) => {
                    say!(
                        "pilot of {} intervals in {:.1} s on {}: finite; wrote {}",
                        pilot.pilot.intervals,
                        pilot.wall_seconds,
                        pilot.backend,
                        out.display()
                    );
                    say!("the validation may follow it: {}", lbm::run::after_pilot_command(&out));
                    ExitCode::SUCCESS
                }
                Ok(Validated::Report(report)) => {
                    for q in &report.quantities {
                        let mark = q
                            .outside
                            .as_ref()
                            .map_or("within".to_owned(), |by| format!("OUTSIDE, {by}"));
                        say!(
                            "{:>8} {:>12.6}  reference {} ({} - {}) {mark}",
                            q.name,
                            q.value,
                            q.reference,
                            q.low,
                            q.high
                        );
                    }
                    say!(
                        "{} steps in {:.1} s on {}; wrote {}",
                        report.steps,
                        report.wall_seconds,
                        report.backend,
                        out.display()
                    );
                    let outside: Vec<&str> = report.quantities.iter().filter(|q| !q.within).map(|q| q.name).collect();
                    if outside.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        lbm::tell!(
                            "error: {} outside the benchmark's interval (report.md says by how much); \
                             raise --resolution",
                            outside.join(", ")
                        );
                        ExitCode::from(4)
                    }
                }
                Err(e) => {
                    lbm::tell!("error: {e}");
                    ExitCode::from(e.exit_code())
                }
            };
        }
    };
    match result {
        Ok(summary) => {
            report(&summary);
            ExitCode::from(summary.ended.exit_code())
        }
        Err(e) => {
            lbm::tell!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// The last words and the exit code of a sweep (or its resume) in `out`.
fn sweep_ended(done: Result<Ending, lbm::AppError>, out: &std::path::Path) -> ExitCode {
    match done {
        Ok(ending) => {
            match ending {
                Ending::Completed => say!("sweep complete; wrote {}", out.display()),
                _ => say!(
                    "sweep stopped early ({}); what ran is in {}; continue with: {}",
                    ending.name(),
                    out.display(),
                    lbm::run::resume_command(out)
                ),
            }
            ExitCode::from(ending.exit_code())
        }
        Err(e) => {
            lbm::tell!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// The last words of a run that ended as asked or was interrupted.
fn report(summary: &Summary) {
    let out = summary.out.display();
    match summary.ended {
        Ending::Completed => {
            let what = match (&summary.pilot, summary.segments) {
                (Some(p), _) => format!("pilot of {} intervals", p.intervals),
                (None, 1) => format!("{} steps", summary.steps),
                // A resumed run's time and speed are its segments' together.
                (None, n) => format!("{} steps over {n} segments (resumed)", summary.steps),
            };
            say!(
                "{what} in {:.2} s on {} ({:.1} MLUPS); wrote {out}",
                summary.wall_seconds,
                summary.backend,
                summary.mlups,
            );
            if summary.pilot.is_some() {
                say!(
                    "the full run may follow it: {}",
                    lbm::run::after_pilot_command(&summary.out)
                );
            }
        }
        ending => {
            let why = match ending {
                Ending::WallLimit => "stopped at the wall limit",
                _ => "interrupted",
            };
            let way_on = match (&summary.resume, summary.pilot.is_some()) {
                (Some(_), _) if summary.checkpoint.is_none() => format!(
                    "no checkpoint yet: {} runs it again from the start in its directory",
                    lbm::run::resume_command(&summary.out)
                ),
                (Some(_), _) => format!("continue with: {}", lbm::run::resume_command(&summary.out)),
                // A pilot is short and resumes nothing: it runs again.
                (None, true) => format!(
                    "a pilot does not resume: run it again with --out into a new directory, or after emptying {}",
                    summary.out.display()
                ),
                (None, false) => format!(
                    "no checkpoint to continue from; what ran is in {}",
                    summary.out.display()
                ),
            };
            say!(
                "{why} after interval {} of {}; checkpoint {}; {way_on}",
                summary.completed_intervals,
                // A pilot runs its own intervals of the plan's.
                summary.pilot.as_ref().map_or(summary.steps, |p| p.intervals),
                summary.checkpoint.as_deref().unwrap_or("none"),
            );
        }
    }
}
