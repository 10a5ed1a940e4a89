//! `cargo xtask`: the project's task runner (alias in `.cargo/config.toml`).
//!
//! - `ptx [--check]`: compile `kernels/` into the checked-in `kernels/lbm.ptx`,
//!   with nvcc from the machine or from pinned pip wheels (see [`ptx`]).
//! - `gpu-pack [--no-strip]`: build release test and bench binaries into
//!   `gpu-pack/` with a `run.sh` for the GPU machine (see [`pack`]).
//! - `kernel-emu [ARGS...]`: the GPU tests on a host build of the kernels, to
//!   check them against the CPU reference without a GPU (see [`emu`]).
//! - `bench [--gpu-pack] [ARGS...]`: the CPU benches, each recording its
//!   figures as JSON lines; `--report [--check]` rebuilds the tables of
//!   `docs/PERFORMANCE.md` from the committed records (see [`mod@bench`],
//!   [`report`]).
//!
//! It deliberately does not run GPU tests itself (there is no GPU here), does not
//! touch anything outside the workspace except pip's download cache, and uses no
//! build-script magic: every step is an ordinary command it prints first.
#![forbid(unsafe_code)]

mod bench;
mod emu;
mod pack;
mod ptx;
mod report;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const USAGE: &str = "\
usage: cargo xtask <task> [options]

tasks:
  ptx [--check]          compile kernels/*.cu into kernels/lbm.ptx (sm_90, -O3, no fast math);
                         --check compiles to target/ and fails if kernels/lbm.ptx differs
  gpu-pack [--no-strip]  build release test and bench binaries into gpu-pack/ with run.sh
  kernel-emu [ARGS...]   run lbm-cuda's GPU tests on a g++ build of kernels/ (no GPU needed);
                         ARGS go to the test binary (e.g. a test name, --nocapture)
  bench [--gpu-pack] [ARGS...]
                         run every CPU bench (cargo bench --workspace --exclude lbm-cuda --bench '*' ARGS),
                         records appended to target/bench-results/<bench>.jsonl; --gpu-pack then runs
                         gpu-pack, whose `run.sh benches` records into $OUT/bench-results
  bench --report [--check] [DIR...]
                         rebuild the tables of docs/PERFORMANCE.md from docs/bench/*.jsonl and each
                         DIR's *.jsonl; --check changes nothing and fails if the page differs
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((task, rest)) = args.split_first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = match task.as_str() {
        "ptx" => ptx::run(rest),
        "gpu-pack" => pack::run(rest),
        "kernel-emu" => emu::run(rest),
        "bench" => bench::run(rest),
        "help" | "-h" | "--help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown task `{other}`\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask {task}: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The task runner's error type: a message for a person, nothing to match on.
pub type Result<T, E = String> = std::result::Result<T, E>;

/// The workspace root: the parent of this crate's directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// Cargo's target directory, honouring `CARGO_TARGET_DIR`.
pub fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// The cargo that runs us, so that toolchain overrides carry through.
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Runs `command`, echoing it first, and fails with its exit status.
pub fn run_status(command: &mut Command) -> Result<()> {
    eprintln!("xtask: running {command:?}");
    let status = command
        .status()
        .map_err(|e| format!("could not start {:?}: {e}", command.get_program()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{:?} failed with {status}", command.get_program()))
    }
}
