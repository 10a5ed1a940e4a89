//! Helpers shared by the CLI test files: the binary under test, scratch
//! directories, the workspace root.
#![allow(dead_code)] // each test file uses its own subset

pub mod runs;

use std::process::{Command, Output};

use std::path::PathBuf;

/// The binary under test: `LBM_BIN` when set (a packed run on another machine,
/// where Cargo's build path does not exist), else the one Cargo built.
pub fn lbm(args: &[&str]) -> Output {
    let binary = std::env::var_os("LBM_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_lbm").into());
    Command::new(binary).args(args).output().expect("the binary runs")
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
