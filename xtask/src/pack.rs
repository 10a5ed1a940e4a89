//! `cargo xtask gpu-pack`: everything the GPU machine needs to run the test
//! suite, without a Rust toolchain there.
//!
//! It builds the workspace's test binaries (`cargo test --release --no-run`) and
//! bench binaries (`cargo bench --no-run --benches`), finds the executables in
//! cargo's JSON messages, and lays out the git-ignored folder `gpu-pack/`:
//!
//! - `bin/`: the executables, debug info stripped unless `--no-strip` (the
//!   device tool carries at most 64 MiB);
//! - `binaries.tsv`: kind (test, bench or bin), package directory, file, target;
//! - the data tests read at run time, at their workspace paths: `kernels/`,
//!   `cases/` and every `snapshots/` folder, plus each package's directory so a
//!   binary can run from it as `cargo test` would;
//! - `run.sh`: runs every test binary with `--include-ignored` (so the GPU tests
//!   run) from its package directory, with `INSTA_WORKSPACE_ROOT` and
//!   `LBM_WORKSPACE_ROOT` set to the pack, then every bench binary with `--bench`,
//!   its records (`bench_record`) going to `$LBM_BENCH_RESULTS`, else
//!   `$OUT/bench-results` (the device tool's output folder), else the pack's
//!   `bench-results/`.
//!
//! It does not compile PTX (the checked-in `kernels/lbm.ptx` is embedded in the
//! binaries) and does not run anything on a GPU.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::{Result, cargo, workspace_root};

/// One executable cargo built.
struct Artifact {
    kind: &'static str,
    /// The package's directory, relative to the workspace root.
    package_dir: PathBuf,
    path: PathBuf,
    target: String,
}

pub fn run(args: &[String]) -> Result<()> {
    let mut strip = true;
    for arg in args {
        match arg.as_str() {
            "--no-strip" => strip = false,
            other => return Err(format!("unknown option `{other}` (accepted: --no-strip)")),
        }
    }
    let root = workspace_root();
    let ptx = root.join("kernels").join("lbm.ptx");
    if !ptx.is_file() {
        return Err(format!("{} is missing: run `cargo xtask ptx` first", ptx.display()));
    }
    let mut artifacts = build(&root, &["test", "--release", "--workspace", "--no-run"], "test")?;
    artifacts.extend(build(
        &root,
        &["bench", "--workspace", "--no-run", "--benches"],
        "bench",
    )?);

    let pack = root.join("gpu-pack");
    if pack.exists() {
        std::fs::remove_dir_all(&pack).map_err(|e| format!("cannot clear {}: {e}", pack.display()))?;
    }
    let bin = pack.join("bin");
    mkdir(&bin)?;
    let mut table = String::from("# kind\tpackage dir\tfile\ttarget\n");
    let mut seen = BTreeSet::new();
    let mut counts = [0usize; 3];
    for a in &artifacts {
        let file = a
            .path
            .file_name()
            .expect("executables have file names")
            .to_string_lossy()
            .into_owned();
        if !seen.insert(file.clone()) {
            continue;
        }
        let dest = bin.join(&file);
        std::fs::copy(&a.path, &dest).map_err(|e| format!("cannot copy {}: {e}", a.path.display()))?;
        if strip {
            strip_debug(&dest);
        }
        mkdir(&pack.join(&a.package_dir))?;
        counts[["test", "bench", "bin"]
            .iter()
            .position(|k| *k == a.kind)
            .expect("a known kind")] += 1;
        table += &format!("{}\t{}\t{file}\t{}\n", a.kind, a.package_dir.display(), a.target);
    }
    write(&pack.join("binaries.tsv"), &table)?;
    copy_tree(&root.join("kernels"), &pack.join("kernels"))?;
    copy_tree(&root.join("cases"), &pack.join("cases"))?;
    for dir in snapshot_dirs(&root) {
        let rel = dir.strip_prefix(&root).expect("found under the root");
        copy_tree(&dir, &pack.join(rel))?;
    }
    let script = pack.join("run.sh");
    write(&script, RUN_SH)?;
    set_executable(&script)?;

    let bytes = dir_bytes(&pack);
    eprintln!(
        "xtask gpu-pack: {} test, {} bench and {} other binaries in {} ({:.1} MiB)",
        counts[0],
        counts[1],
        counts[2],
        pack.display(),
        bytes as f64 / (1 << 20) as f64
    );
    if bytes > 64 << 20 {
        eprintln!("xtask gpu-pack: warning: the pack exceeds the 64 MiB the device tool carries");
    }
    eprintln!("xtask gpu-pack: on the GPU machine run `bash gpu-pack/run.sh` (tests and benches), or `run.sh tests`");
    Ok(())
}

/// Runs one `cargo test`/`cargo bench` build and collects its executables:
/// test harnesses as `kind`, plain binaries built alongside as "bin".
fn build(root: &Path, args: &[&str], kind: &'static str) -> Result<Vec<Artifact>> {
    let mut command = cargo();
    command
        .current_dir(root)
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    eprintln!("xtask: running {command:?}");
    let output = command.output().map_err(|e| format!("could not start cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo {} failed with {}", args.join(" "), output.status));
    }
    let mut out = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(path) = message["executable"].as_str() else {
            continue;
        };
        let is_harness = message["profile"]["test"].as_bool().unwrap_or(false);
        let target_kinds: Vec<&str> = message["target"]["kind"]
            .as_array()
            .map(|k| k.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let this_kind = if kind == "bench" && target_kinds.contains(&"bench") {
            "bench"
        } else if kind == "test" && is_harness {
            "test"
        } else {
            "bin"
        };
        let manifest = PathBuf::from(message["manifest_path"].as_str().unwrap_or_default());
        let package_dir = manifest
            .parent()
            .and_then(|d| d.strip_prefix(root).ok())
            .map(Path::to_path_buf)
            .unwrap_or_default();
        out.push(Artifact {
            kind: this_kind,
            package_dir: if package_dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                package_dir
            },
            path: PathBuf::from(path),
            target: message["target"]["name"].as_str().unwrap_or("?").to_owned(),
        });
    }
    Ok(out)
}

/// Every folder named `snapshots` in the workspace, outside build outputs.
fn snapshot_dirs(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if !path.is_dir()
                || [".git", "target", "gpu-pack", "out", ".whl"].contains(&name.to_string_lossy().as_ref())
            {
                continue;
            }
            if name == "snapshots" {
                found.push(path);
            } else {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    if !from.is_dir() {
        return Ok(());
    }
    mkdir(to)?;
    let entries = std::fs::read_dir(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let dest = to.join(entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &dest)?;
        } else {
            std::fs::copy(&path, &dest).map_err(|e| format!("cannot copy {}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// Strips debug info in place when `strip` exists; a missing `strip` only makes
/// the pack bigger.
fn strip_debug(path: &Path) {
    let ok = Command::new("strip")
        .arg("--strip-debug")
        .arg(path)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("xtask gpu-pack: could not strip {}; keeping debug info", path.display());
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let path = e.path();
            if path.is_dir() {
                dir_bytes(&path)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            }
        })
        .sum()
}

fn mkdir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(unix)]
fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot make {} executable: {e}", path.display()))
}

#[cfg(not(unix))]
fn set_executable(_path: &Path) -> Result<()> {
    Ok(())
}

const RUN_SH: &str = r#"#!/usr/bin/env bash
# run.sh: runs the packed binaries of `cargo xtask gpu-pack` on the GPU machine.
#
# Usage: run.sh [tests|benches|all] [ARGS...]   (default: all)
# Every test binary runs with --include-ignored, so the GPU tests run too, from
# its package directory as `cargo test` would; every bench binary runs with
# --bench and appends its records to $LBM_BENCH_RESULTS/<bench>.jsonl
# (default: $OUT/bench-results where $OUT is set, else the pack's
# bench-results/). ARGS (a test name filter, --nocapture, ...) go to every
# binary. It does not build anything and needs no Rust toolchain.
set -u
PACK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODE="${1:-all}"
if [ $# -gt 0 ]; then shift; fi
case "$MODE" in
  tests|benches|all) ;;
  *) echo "usage: $0 [tests|benches|all] [ARGS...]" >&2; exit 2 ;;
esac
export INSTA_WORKSPACE_ROOT="$PACK"
export LBM_WORKSPACE_ROOT="$PACK"
export LBM_BIN="$PACK/bin/lbm"
export INSTA_UPDATE="${INSTA_UPDATE:-no}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
# The split's halos may go through NCCL: NVLink multicast stays off.
export NCCL_NVLS_ENABLE=0
# Where $OUT is set, what is written under it comes back from the GPU machine.
if [ -z "${LBM_BENCH_RESULTS:-}" ]; then
  if [ -n "${OUT:-}" ]; then LBM_BENCH_RESULTS="$OUT/bench-results"; else LBM_BENCH_RESULTS="$PACK/bench-results"; fi
fi
export LBM_BENCH_RESULTS
passed=0
failed=0
failures=""
while IFS=$'\t' read -r kind dir file target; do
  case "$kind" in
    test) [ "$MODE" = benches ] && continue; flag=--include-ignored ;;
    bench) [ "$MODE" = tests ] && continue; flag=--bench ;;
    *) continue ;;
  esac
  echo "=== $kind $target ($dir, $file)"
  if (cd "$PACK/$dir" && CARGO_MANIFEST_DIR="$PACK/$dir" "$PACK/bin/$file" "$flag" "$@"); then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures="$failures $target"
  fi
done < "$PACK/binaries.tsv"
echo "gpu-pack: $passed binaries passed, $failed failed${failures:+ (failed:$failures)}"
[ "$MODE" = tests ] || echo "gpu-pack: bench records (if any) in $LBM_BENCH_RESULTS"
[ "$failed" -eq 0 ]
"#;
