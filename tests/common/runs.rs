//! The runs the long-run tests compare: DFG 2D-1 saving and checkpointing
//! often, run through the binary on `LBM_TEST_BACKEND` (default the CPU),
//! the run straight through, and the file-by-file comparison.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use super::{binary, lbm, scratch, stderr, workspace};

/// Base intervals of the runs compared here: `LBM_TEST_STEPS`, else 120 on
/// the CPU and 2000 on a GPU. An H200 ran 120 in 0.4 s, before the wall
/// limit, the signal or the pilot's interrupt the tests send mid-run
/// (2026-12-05: three of them failed so; at 2000 all pass).
pub fn steps() -> u64 {
    let default = if backend() == "cpu" { 120 } else { 2000 };
    std::env::var("LBM_TEST_STEPS").map_or(default, |s| s.parse().expect("LBM_TEST_STEPS is a count"))
}

/// The wall limit of the runs that stop at one: two seconds on the CPU; a
/// GPU run starting with others on the same device needs longer before its
/// first interval.
pub fn wall_limit() -> f64 {
    std::env::var("LBM_TEST_WALL_SECONDS").map_or(2.0, |s| s.parse().expect("LBM_TEST_WALL_SECONDS is seconds"))
}

pub fn backend() -> String {
    std::env::var("LBM_TEST_BACKEND").unwrap_or_else(|_| "cpu".into())
}

/// DFG 2D-1 (two levels, an inlet with its ramp, a cylinder, a probe and
/// two lines, one across the cylinder) saving every 30 intervals and checkpointing every 20. Its fields
/// are saved as VTK and NPY, not as pictures: composing and encoding them
/// in a debug build takes about a second a save point, half of the wall
/// limit these runs stop at, which no run can foresee before its first
/// save. Pictures across a resume are so not compared here; `tests/outputs.rs`
/// decodes them.
pub fn case_text() -> String {
    let text = std::fs::read_to_string(workspace().join("cases/dfg-2d1.toml")).unwrap();
    let changed = text
        .replace("steps = 6000", "steps = 6000\ncheckpoint_every_intervals = 20")
        .replace("[output]\n", "[output]\nformats = [\"vtk\", \"npy\"]\n")
        .replace("every = 1.0 ", "every = 0.05 ")
        // A line across the cylinder reads NaN inside it, which a
        // checkpoint must carry (JSON has no NaN).
        .replace(
            "points = 42 }]",
            "points = 42 }, { name = \"through\", from = [0.12, 0.2], to = [0.28, 0.2], points = 9 }]",
        );
    assert_eq!(
        changed.matches("every = 0.05 ").count(),
        1,
        "the save period was replaced"
    );
    assert!(changed.contains("checkpoint_every_intervals"));
    assert!(changed.contains("name = \"through\""));
    assert!(changed.contains("formats = [\"vtk\", \"npy\"]"));
    changed
}

pub fn write_case(dir: &Path, text: &str) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("case.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A scratch directory `name` holding the test case, and the run's output
/// directory in it: (root, case path, output directory).
pub fn setup(name: &str) -> (PathBuf, String, PathBuf) {
    let root = scratch(name);
    let case = write_case(&root, &case_text());
    let out = root.join("out");
    (root, case, out)
}

/// `lbm run CASE --steps STEPS --backend BACKEND --quiet --out OUT EXTRA...`.
pub fn run_command(case: &str, out: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(binary());
    command
        .args([
            "run",
            case,
            "--steps",
            &steps().to_string(),
            "--backend",
            &backend(),
            "--quiet",
            "--out",
        ])
        .arg(out)
        .args(extra);
    // The stop signals' default actions, whatever this process inherited
    // (tests run under `nohup` ignore SIGHUP): the signal tests send them.
    // SAFETY: `signal` is async-signal-safe, as a child's pre-exec hook needs.
    unsafe {
        command.pre_exec(|| {
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(signal, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    command
}

/// [`run_command`], spawned with its output captured.
pub fn spawn_run(case: &str, out: &Path, extra: &[&str]) -> std::process::Child {
    run_command(case, out, extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs")
}

pub fn resume(out: &Path, extra: &[&str]) -> Output {
    let dir = out.display().to_string();
    let backend = backend();
    let mut args = vec!["resume", &dir, "--backend", &backend, "--quiet"];
    args.extend_from_slice(extra);
    lbm(&args)
}

pub fn summary(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
}

/// The run straight through, once for every test here.
pub fn straight() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let (_, case, out) = setup("straight");
        let output = spawn_run(&case, &out, &[]).wait_with_output().unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        assert_eq!(summary(&out)["ended"], "completed");
        out
    })
}

/// Files of a run directory that must match byte for byte between runs:
/// all but the manifest, the summary (times, segments) and the checkpoints.
pub fn compared_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, into: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(root).unwrap().to_owned();
            if path.is_dir() {
                if relative != Path::new("checkpoints") {
                    walk(root, &path, into);
                }
            } else if !["manifest.json", "summary.json"].contains(&relative.to_str().unwrap()) {
                into.push(relative);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, dir, &mut files);
    files.sort();
    files
}

pub fn assert_identical(straight: &Path, other: &Path) {
    let (a, b) = (compared_files(straight), compared_files(other));
    assert_eq!(a, b, "the same files");
    assert!(a.iter().any(|f| f.ends_with("forces.csv")) && a.len() > 20, "{a:?}");
    for file in &a {
        let same = std::fs::read(straight.join(file)).unwrap() == std::fs::read(other.join(file)).unwrap();
        assert!(same, "{} differs from the run straight through", file.display());
    }
}
