//! `cargo xtask bench`: the benches this machine can run, with their records.
//!
//! - `bench [--gpu-pack] [ARGS...]`: every bench target of the workspace but
//!   lbm-cuda's (`cargo bench --workspace --exclude lbm-cuda --bench '*' ARGS`),
//!   each appending its records to `target/bench-results/<bench>.jsonl`; with
//!   `--gpu-pack`, then `cargo xtask gpu-pack`, whose `run.sh benches` runs the
//!   GPU benches on the GPU machine and leaves their records in
//!   `$OUT/bench-results/`.
//! - `bench --report [--check] [DIR...]`: the tables of `docs/PERFORMANCE.md`
//!   from `docs/bench/*.jsonl` and the DIRs' (see [`crate::report`]).

use crate::{Result, cargo, pack, report, run_status, target_dir, workspace_root};

/// The package whose benches need a GPU: without one they measure nothing,
/// so they run from the pack instead.
const GPU_PACKAGE: &str = "lbm-cuda";

pub fn run(args: &[String]) -> Result<()> {
    if args.first().is_some_and(|a| a == "--report") {
        return report::run(&args[1..]);
    }
    // `--gpu-pack` is ours only before `--`; after it everything is the binaries'.
    let ours = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let gpu_pack = args[..ours].iter().any(|a| a == "--gpu-pack");
    let cargo_args = args
        .iter()
        .enumerate()
        .filter(|&(i, a)| i >= ours || a != "--gpu-pack")
        .map(|(_, a)| a);

    let root = workspace_root();
    let results = target_dir(&root).join("bench-results");
    run_status(
        cargo()
            .current_dir(&root)
            .env("LBM_BENCH_RESULTS", &results)
            // `--bench '*'`, not `--benches`: that also builds and runs every
            // library's test harness in the bench profile.
            .args(["bench", "--workspace", "--exclude", GPU_PACKAGE, "--bench", "*"])
            .args(cargo_args),
    )?;
    eprintln!(
        "xtask bench: records in {}; append them to docs/bench/<bench>.jsonl and run `cargo xtask bench --report`",
        results.display()
    );
    if gpu_pack {
        pack::run(&[])?;
    }
    Ok(())
}
