//! `lbm`: the command-line front end. Parses arguments and hands over to
//! [`lbm::run`]; it holds no simulation logic.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use lbm::run::{BackendChoice, RunOptions, run_case};

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
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run {
            case,
            backend,
            out,
            steps,
        } => run_case(&RunOptions {
            case,
            backend,
            out,
            steps,
        }),
    };
    match result {
        Ok(summary) => {
            println!(
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
            ExitCode::FAILURE
        }
    }
}
