//! Helpers shared by the CLI test files: the binary under test, scratch
//! directories, the workspace root.
#![allow(dead_code)] // each test file uses its own subset

pub mod runs;

use std::process::{Command, Output};

use std::path::PathBuf;

/// The binary under test: `LBM_BIN` when set (a packed run on another machine,
/// where Cargo's build path does not exist), else the one Cargo built.
pub fn lbm(args: &[&str]) -> Output {
    Command::new(binary()).args(args).output().expect("the binary runs")
}

/// The binary under test's path (see [`lbm`]).
pub fn binary() -> PathBuf {
    std::env::var_os("LBM_BIN").map_or_else(|| env!("CARGO_BIN_EXE_lbm").into(), PathBuf::from)
}

/// `lbm run CASE --backend cpu --out OUT --steps STEPS EXTRA...`.
pub fn run_on_cpu(case: &std::path::Path, out: &std::path::Path, steps: &str, extra: &[&str]) -> Output {
    let (case, out) = (case.display().to_string(), out.display().to_string());
    lbm(&[
        &["run", &case, "--backend", "cpu", "--out", &out, "--steps", steps][..],
        extra,
    ]
    .concat())
}

/// What `lbm check` prints of `text` written to `path`; the check must pass.
pub fn check_report(path: &std::path::Path, text: &str) -> String {
    std::fs::write(path, text).unwrap();
    let report = lbm(&["check", &path.display().to_string()]);
    assert!(report.status.success(), "{}", stderr(&report));
    String::from_utf8_lossy(&report.stdout).into_owned()
}

/// `lbm validate ARGS --backend cpu --out OUT`.
pub fn validate_on_cpu(args: &[&str], out: &std::path::Path) -> Output {
    let out = out.display().to_string();
    let mut all = vec!["validate"];
    all.extend_from_slice(args);
    all.extend(["--backend", "cpu", "--out", &out]);
    lbm(&all)
}

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lbm-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The workspace, or where `LBM_WORKSPACE_ROOT` says it is (a packed copy on
/// the GPU machine, which has no sources at the build path).
pub fn workspace() -> PathBuf {
    std::env::var_os("LBM_WORKSPACE_ROOT").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

pub fn case_path() -> String {
    workspace().join("cases/cavity-re100.toml").display().to_string()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
