//! `lbm`: the command-line front end. Parses arguments and hands over to
//! [`lbm::run`]; it holds no simulation logic.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use lbm::backend::BackendChoice;
use lbm::run::{RunOptions, run_case};
use lbm::validate::{Benchmark, ValidateOptions, validate};

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
        /// Pixels across the domain in pictures (default: the finest level's
        /// resolution, 512 to 1600).
        #[arg(long)]
        picture_width: Option<u32>,
    },
    /// Print what a case resolves to (per level: dx, dt, tau, Mach, cells),
    /// the memory, work and output it needs, and warnings; runs nothing.
    Check {
        /// The case, a TOML file in physical units.
        case: PathBuf,
    },
    /// Print the version, the backends this machine offers and the PTX hash.
    Info,
    /// Run a DFG cylinder benchmark to its criterion and write report.json and report.md.
    Validate {
        benchmark: Benchmark,
        /// Cells per diameter on the finest level, a multiple of 10 x 2^levels
        /// (default: 40 for dfg-2d1, 80 for dfg-2d2).
        #[arg(long)]
        resolution: Option<u32>,
        /// Refinement levels around the cylinder to keep, 0 (uniform) to all
        /// of the case's (the default; the built-in cases have 2).
        #[arg(long)]
        levels: Option<u32>,
        /// The inflow peak in lattice units (default: the case file's, 0.05);
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { case } => {
            return match lbm::check::check(&case) {
                Ok(report) => {
                    say!("{}", report.trim_end());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(e.exit_code())
                }
            };
        }
        Command::Info => {
            say!("{}", lbm::check::info().trim_end());
            return ExitCode::SUCCESS;
        }
        Command::Run {
            case,
            backend,
            out,
            steps,
            quiet,
            picture_width,
        } => run_case(&RunOptions {
            case,
            backend,
            out,
            steps,
            quiet,
            picture_width,
        }),
        Command::Validate {
            benchmark,
            resolution,
            levels,
            lattice_velocity,
            backend,
            out,
            case,
        } => {
            let options = ValidateOptions {
                benchmark,
                resolution,
                levels,
                lattice_velocity,
                backend,
                case,
                out: out.clone(),
            };
            return match validate(&options) {
                Ok(report) => {
                    for q in &report.quantities {
                        let mark = if q.within { "within" } else { "OUTSIDE" };
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
                        eprintln!(
                            "error: {} outside the benchmark's interval (report.md says by how much); \
                             raise --resolution",
                            outside.join(", ")
                        );
                        ExitCode::from(4)
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(e.exit_code())
                }
            };
        }
    };
    match result {
        Ok(summary) => {
            say!(
                "{} steps in {:.2} s on {} ({:.1} MLUPS); wrote {}",
                summary.steps,
                summary.wall_seconds,
                summary.backend,
                summary.mlups,
                summary.out.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
