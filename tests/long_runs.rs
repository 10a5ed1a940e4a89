//! Long runs done safely, through the binary: checkpoints and `lbm resume`
//! after a kill, a signal or the wall limit (bit-identical to a run straight
//! through), the watchdog, damaged checkpoints, pilots, and the flags that
//! bound a run.
//!
//! On the CPU backend by default; `LBM_TEST_BACKEND=cuda` runs the same
//! matrix on a GPU, with `LBM_TEST_STEPS` intervals (default 120 on the CPU,
//! 2000 on a GPU, so that a fast device still meets its wall limit mid-run),
//! and `LBM_TEST_WALL_SECONDS` (default 2) for that limit.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::runs::{
    assert_identical, case_text, compared_files, resume, run_command, setup, spawn_run, steps, straight, summary,
    wall_limit, write_case,
};
use common::{scratch, stderr};

/// Waits until `out` holds a checkpoint of at least `step` intervals.
fn wait_for_checkpoint(out: &Path, step: u64, child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let newest = std::fs::read_dir(out.join("checkpoints"))
            .map(|entries| {
                entries
                    .filter_map(|e| {
                        let name = e.ok()?.file_name().to_string_lossy().into_owned();
                        name.strip_prefix("step_")?.strip_suffix(".lbmck")?.parse::<u64>().ok()
                    })
                    .max()
            })
            .ok()
            .flatten();
        if newest.is_some_and(|n| n >= step) {
            return;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before its checkpoint"
        );
        assert!(Instant::now() < deadline, "no checkpoint of {step} intervals");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `output` is a refusal of a directory another lbm is writing into.
/// Sends `signal` (as `kill` takes it) to `child`, twice at once where
/// `signal` ends in `x2` (as `timeout` signals a process and then its group),
/// and waits for it: an interrupted run's exit, 130, and what it said.
fn signalled(child: std::process::Child, signal: &str) -> std::process::Output {
    let pid = child.id().to_string();
    let (signal, times) = match signal.strip_suffix("x2") {
        Some(signal) => (signal, 2),
        None => (signal, 1),
    };
    let killed = Command::new("kill")
        .arg(signal)
        .args(std::iter::repeat_n(&pid, times))
        .status()
        .unwrap();
    assert!(killed.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", stderr(&output));
    output
}

fn assert_busy(output: &std::process::Output) {
    assert_eq!(output.status.code(), Some(2), "{}", stderr(output));
    assert!(
        stderr(output).contains("another lbm process is writing into it"),
        "{}",
        stderr(output)
    );
}

/// Every file a killed run left is whole: JSON parses, CSV rows are complete,
/// NPY arrays hold the bytes their header promises, XML ends.
fn assert_complete(dir: &Path) {
    for file in compared_files(dir).iter().chain([&PathBuf::from("manifest.json")]) {
        let path = dir.join(file);
        let name = file.display().to_string();
        if name.ends_with(".tmp") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        if name.ends_with(".json") {
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        } else if name.ends_with(".csv") {
            let text = String::from_utf8(bytes).unwrap();
            assert!(text.ends_with('\n'), "{name} ends inside a row");
            let columns = text.lines().next().unwrap().split(',').count();
            assert!(text.lines().all(|l| l.split(',').count() == columns), "{name}");
        } else if name.ends_with(".npy") {
            let header = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            let text = String::from_utf8_lossy(&bytes[10..10 + header]);
            let shape: Vec<usize> = text
                .split("'shape': (")
                .nth(1)
                .unwrap()
                .split(')')
                .next()
                .unwrap()
                .split(',')
                .filter_map(|v| v.trim().parse().ok())
                .collect();
            assert_eq!(bytes.len() - 10 - header, 4 * shape.iter().product::<usize>(), "{name}");
        } else if [".vti", ".vthb", ".vtm", ".pvd"].iter().any(|e| name.ends_with(e)) {
            assert!(
                String::from_utf8_lossy(&bytes).trim_end().ends_with("</VTKFile>"),
                "{name}"
            );
        }
    }
}

#[test]
fn a_killed_run_keeps_whole_files_and_resumes_bit_for_bit() {
    let (root, case, out) = setup("killed");
    let mut child = spawn_run(&case, &out, &[]);
    // Between the save points at 30 and 60.
    wait_for_checkpoint(&out, 40, &mut child);
    // While the run goes on, a resume of its directory is refused before
    // it reads or writes anything there.
    let meanwhile = resume(&out, &[]);
    assert_busy(&meanwhile);
    // So is a run into it, named for what it is now.
    let into = run_command(&case, &out, &[]).output().unwrap();
    assert_busy(&into);
    assert!(child.try_wait().unwrap().is_none(), "the run went on");
    child.kill().unwrap();
    assert!(!child.wait().unwrap().success());
    assert_complete(&out);
    assert!(!out.join("summary.json").exists(), "SIGKILL leaves no summary");
    let resumed = resume(&out, &[]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let s = summary(&out);
    assert_eq!(s["ended"], "completed");
    assert_eq!(s["segments"], 2);
    assert_eq!(s["completed_intervals"], steps());
    assert_identical(straight(), &out);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["resumes"].as_array().unwrap().len(), 1);
    let checkpoints = std::fs::read_dir(out.join("checkpoints")).unwrap().count();
    assert_eq!(checkpoints, 2, "the last two checkpoints are kept");
    std::fs::remove_dir_all(root).unwrap();
}

/// A wall limit shorter than the set-up: the run fails (exit 3) saying so,
/// rather than end "wall limit" with exit 0 before its first interval, as
/// every resume under it would again (a job array resubmitting would loop).
#[test]
fn a_wall_limit_that_leaves_no_interval_fails_the_run() {
    let (root, case, out) = setup("no-progress");
    let output = spawn_run(&case, &out, &["--max-wall-seconds", "0.001"])
        .wait_with_output()
        .unwrap();
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{message}");
    assert!(
        message.contains("--max-wall-seconds 0.001 ended the run before its first interval"),
        "{message}"
    );
    let s = summary(&out);
    assert_eq!(
        (s["ended"].as_str(), s["completed_intervals"].as_u64()),
        (Some("failed"), Some(0))
    );
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn the_wall_limit_ends_cleanly_and_resume_finishes_bit_for_bit() {
    let (root, case, out) = setup("wall");
    let limit = wall_limit();
    let limit_text = limit.to_string();
    let start = Instant::now();
    let output = spawn_run(&case, &out, &["--max-wall-seconds", &limit_text])
        .wait_with_output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let elapsed = start.elapsed().as_secs_f64();
    assert!(
        elapsed < limit + 1.0,
        "it ends near its limit: {elapsed} s; {}",
        summary(&out)
    );
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(said.contains("lbm resume"), "{said}");
    let s = summary(&out);
    assert_eq!(s["ended"], "wall limit");
    let done = s["completed_intervals"].as_u64().unwrap();
    assert!(done > 0 && done < steps(), "{s}");
    // The last checkpoint and summary fit in the reserve it held back, as
    // well as their last timings foretell.
    assert!(s["wall_seconds"].as_f64().unwrap() < 1.25 * limit, "{s}");
    let checkpoint = s["checkpoint"].as_str().unwrap();
    assert!(checkpoint.contains(&format!("step_{done:012}")), "{checkpoint}");
    // Resumed with a limit again until it completes.
    let mut rounds = 0;
    while summary(&out)["ended"] != "completed" {
        let resumed = resume(&out, &["--max-wall-seconds", &(limit + 1.0).to_string()]);
        assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
        rounds += 1;
        assert!(rounds < 40, "no progress");
    }
    assert_identical(straight(), &out);
    std::fs::remove_dir_all(root).unwrap();
}

/// SIGINT, SIGHUP (a closed terminal) as SIGTERM, and a SIGTERM sent twice
/// at once (`timeout` signals the run and then its group): a checkpoint, the
/// summary, and a resume to the straight run's files.
#[test]
fn sigint_checkpoints_and_says_interrupted() {
    for signal in ["-INT", "-HUP", "-TERMx2"] {
        interrupted_by(signal);
    }
}

fn interrupted_by(signal: &str) {
    let (root, case, out) = setup(&format!("signal{signal}"));
    let mut child = spawn_run(&case, &out, &[]);
    wait_for_checkpoint(&out, 20, &mut child);
    signalled(child, signal);
    let s = summary(&out);
    assert_eq!(s["ended"], "interrupted");
    let done = s["completed_intervals"].as_u64().unwrap();
    assert!(out.join(s["checkpoint"].as_str().unwrap()).is_file());
    assert!(s["checkpoint"].as_str().unwrap().contains(&format!("{done:012}")));
    let resumed = resume(&out, &[]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert_identical(straight(), &out);
    // A completed run has nothing to resume.
    let again = resume(&out, &[]);
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("nothing to resume"), "{}", stderr(&again));
    std::fs::remove_dir_all(root).unwrap();
}

/// A SIGHUP ignored when the run started (`nohup lbm run ...`) stays
/// ignored: the run goes on to its end and completes.
#[test]
fn a_sighup_ignored_at_start_stays_ignored() {
    use std::os::unix::process::CommandExt;
    let (root, case, out) = setup("nohup");
    let mut command = common::runs::run_command(&case, &out, &[]);
    // SAFETY: `signal` is async-signal-safe, as a child's pre-exec hook needs.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_checkpoint(&out, 20, &mut child);
    let hung_up = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(hung_up.success());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(summary(&out)["ended"], "completed");
    std::fs::remove_dir_all(root).unwrap();
}

/// A CPU-time limit's soft end (SIGXCPU, repeated each CPU second until the
/// hard end kills) stops the run as a first stop signal does: its checkpoint
/// and summary, exit 130. It had been killed without either.
#[test]
fn a_cpu_time_limit_stops_the_run_with_its_checkpoint() {
    let (root, case, out) = setup("cpu-limit");
    let output = Command::new("bash")
        .arg("-c")
        .arg("ulimit -S -t 1 && ulimit -H -t 8 && exec \"$0\" run \"$1\" --backend cpu --quiet --no-pilot --steps 1000000 --out \"$2\"")
        .arg(common::binary())
        .arg(&case)
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", stderr(&output));
    let s = summary(&out);
    assert_eq!(s["ended"], "interrupted");
    assert!(out.join(s["checkpoint"].as_str().unwrap()).is_file(), "{s}");
    std::fs::remove_dir_all(root).unwrap();
}

/// A signal that comes during set-up ends the run at its first chunk, with
/// its summary; an interrupted pilot counts its own intervals and says to
/// run it again (it does not resume).
#[test]
fn an_interrupted_pilot_says_to_run_it_again() {
    let (root, case, out) = setup("pilot-signal");
    // Shorter than the run, so that the count told is the pilot's own.
    let pilot = (steps() * 5 / 6).to_string();
    let child = spawn_run(&case, &out, &["--pilot", "--pilot-intervals", &pilot]);
    std::thread::sleep(Duration::from_millis(500));
    let output = signalled(child, "-TERM");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        said.contains(&format!(" of {pilot}; checkpoint none; a pilot does not resume")),
        "{said}"
    );
    assert_eq!(summary(&out)["ended"], "interrupted");
    std::fs::remove_dir_all(root).unwrap();
}

/// A file the run wrote, removed under it: the run does not say it
/// completed, and names the file.
#[test]
fn a_file_removed_under_the_run_fails_it() {
    let (root, case, out) = setup("removed");
    let mut child = spawn_run(&case, &out, &[]);
    wait_for_checkpoint(&out, 20, &mut child);
    std::fs::remove_file(out.join("forces.csv")).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let gone = format!(
        "{} was written during the run and is gone",
        out.join("forces.csv").display()
    );
    assert!(stderr(&output).contains(&gone), "{}", stderr(&output));
    let s = summary(&out);
    assert_eq!(s["ended"], "failed");
    assert!(s["error"].as_str().unwrap().contains(&gone), "{s}");
    // Nothing continues it, and running the case into it again says so
    // rather than offering a resume that would be refused.
    let again = run_command(&case, &out, &[]).output().unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(!stderr(&again).contains("lbm resume"), "{}", stderr(&again));
    std::fs::remove_dir_all(root).unwrap();
}

/// A file-size limit (`ulimit -f`) reached: the write fails (SIGXFSZ is
/// caught), the run ends failed naming the file and where its outputs are,
/// and once the limit is lifted it resumes to the straight run's files.
#[test]
fn a_file_size_limit_fails_the_run_with_a_message_and_it_resumes() {
    let (root, case, out) = setup("file-size");
    // 1500 blocks of 512 bytes: past the first checkpoint (about 0.3 MB),
    // short of the run's largest files.
    let mut command = run_command(&case, &out, &[]);
    let line = format!(
        "ulimit -f 1500 && exec {}",
        std::iter::once(command.get_program())
            .chain(command.get_args())
            .map(|a| format!("'{}'", a.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ")
    );
    command = Command::new("sh");
    let output = command.args(["-c", &line]).output().unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(stderr(&output).contains("File too large"), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(&out.display().to_string()),
        "{}",
        stderr(&output)
    );
    let s = summary(&out);
    assert_eq!(s["ended"], "failed");
    // The message names the resume, as the summary does: from the
    // checkpoint, or from the start where the first one could not be
    // written (the summary said no resume then).
    assert!(s["resume"].is_string(), "{s}");
    let way_on = match s["checkpoint"].is_string() {
        true => "once the cause is fixed, continue with: lbm resume",
        false => "runs it again from the start in its directory",
    };
    assert!(stderr(&output).contains(way_on), "{}", stderr(&output));
    // A CSV row the limit cut partway is cut back: the failed run's files
    // hold whole rows.
    for file in compared_files(&out)
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "csv"))
    {
        let text = std::fs::read_to_string(out.join(file)).unwrap();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{} ends inside a row",
            file.display()
        );
    }
    let resumed = resume(&out, &[]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert_identical(straight(), &out);
    std::fs::remove_dir_all(root).unwrap();
}

/// `lbm validate` has no checkpoint to take: SIGTERM ends it at the next
/// chunk with what it measured written and exit 130.
#[test]
fn a_signal_ends_a_validation_with_its_series_written() {
    let out = common::scratch("validate-signal");
    let child = Command::new(common::binary())
        .args([
            "validate",
            "dfg-2d1",
            "--resolution",
            "40",
            "--levels",
            "0",
            "--no-pilot",
            "--quiet",
        ])
        .args(["--backend", "cpu", "--out", &out.display().to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Stepping: its output directory exists and a moment has passed.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !out.is_dir() {
        assert!(Instant::now() < deadline, "the validation never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let output = signalled(child, "-TERM");
    assert!(
        stderr(&output).contains("interrupted by a signal"),
        "{}",
        stderr(&output)
    );
    let series = std::fs::read_to_string(out.join("series.csv")).unwrap();
    assert!(series.starts_with("time_s,cd,cl,delta_p_pa\n"), "{series}");
    assert!(!out.join("report.json").exists());
    std::fs::remove_dir_all(out).unwrap();
}

#[test]
fn a_stalled_device_ends_the_run_as_stalled() {
    let (root, case, out) = setup("stall");
    let output = run_command(&case, &out, &["--watchdog-seconds", "1"])
        .env("LBM_INJECT_FAULT", "stall-after-replays=45")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(stderr(&output).contains("stalled"), "{}", stderr(&output));
    let s = summary(&out);
    assert_eq!(s["ended"], "stalled");
    // Reads of the exchange replay plans too: fewer intervals than replays.
    let done = s["completed_intervals"].as_u64().unwrap();
    assert!((20..45).contains(&done), "{s}");
    assert_eq!(
        s["checkpoint"],
        format!("checkpoints/step_{:012}.lbmck", done / 20 * 20)
    );
    assert!(
        s["error"].as_str().unwrap().contains("no interval completed for 1 s"),
        "{s}"
    );
    std::fs::remove_dir_all(root).unwrap();
}

/// A file system that stops answering (here a named pipe where a save
/// point's file goes: opening it blocks until a reader comes, which none
/// does) stalls the writer; the watchdog ends the run as stalled, naming the
/// writer, rather than waiting for it forever.
#[test]
fn a_hung_writer_ends_the_run_as_stalled() {
    let root = scratch("hung-writer");
    let text = std::fs::read_to_string(common::workspace().join("cases/cavity-re100.toml")).unwrap();
    let base = &text[..text.find("[output]").unwrap()];
    let case = write_case(
        &root,
        &format!("{base}[output]\nevery_intervals = 2000\nfields = [\"pressure\"]\nformats = [\"npy\"]\n"),
    );
    let out = root.join("out");
    let mut child = Command::new(common::binary())
        .args([
            "run",
            &case,
            "--steps",
            "2000",
            "--backend",
            "cpu",
            "--quiet",
            "--watchdog-seconds",
            "1",
            "--out",
        ])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !out.join("manifest.json").exists() {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let save = out.join("fields/t000002000");
    std::fs::create_dir_all(&save).unwrap();
    for level in 0..2 {
        let made = Command::new("mkfifo")
            .arg(save.join(format!("L{level}_p0_pressure.npy.tmp")))
            .status()
            .unwrap();
        assert!(made.success());
    }
    // A writer that stays hung must not hang the test.
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the run waited for its hung writer for a minute");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("the thread writing the run's files finished nothing"),
        "{}",
        stderr(&output)
    );
    assert_eq!(summary(&out)["ended"], "stalled");
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_damaged_checkpoint_falls_back_to_the_one_before() {
    let (root, case, out) = setup("damaged");
    // Interrupted once a second checkpoint exists, however fast the machine:
    // a wall limit would leave one checkpoint on a loaded host.
    let mut child = spawn_run(&case, &out, &[]);
    wait_for_checkpoint(&out, 40, &mut child);
    signalled(child, "-INT");
    let mut files: Vec<PathBuf> = std::fs::read_dir(out.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    let newest = &files[1];
    let bytes = std::fs::read(newest).unwrap();
    std::fs::write(newest, &bytes[..bytes.len() / 2]).unwrap();
    let resumed = resume(&out, &[]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let warning = stderr(&resumed);
    assert!(
        warning.contains("truncated") && warning.contains("the one before is used"),
        "{warning}"
    );
    assert_identical(straight(), &out);
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_run_killed_before_its_first_checkpoint_resumes_from_the_start() {
    let (root, case, out) = setup("before-checkpoint");
    let mut child = spawn_run(&case, &out, &[]);
    // Killed once it has saved fields (at 30), its checkpoints then taken
    // away: a run killed before its first checkpoint, whatever the machine's speed.
    wait_for_checkpoint(&out, 40, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(out.join("checkpoints")).unwrap();
    assert!(out.join("fields").read_dir().unwrap().next().is_some());
    let again = run_command(&case, &out, &[]).output().unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains(&format!("lbm resume {}", out.display())),
        "{}",
        stderr(&again)
    );
    // An edited case is another run.
    let text = std::fs::read_to_string(out.join("case.toml")).unwrap();
    let edited = text.replace("viscosity = 1e-3", "viscosity = 1.1e-3");
    assert_ne!(edited, text);
    std::fs::write(out.join("case.toml"), edited).unwrap();
    let refused = resume(&out, &[]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("not the case it started with"),
        "{}",
        stderr(&refused)
    );
    std::fs::write(out.join("case.toml"), text).unwrap();
    // What a user put beside the outputs is not the run's to remove.
    std::fs::create_dir(out.join("analysis")).unwrap();
    std::fs::write(out.join("analysis").join("notes.txt"), "mine").unwrap();
    std::fs::write(out.join("forces.csv.tmp"), "half a write").unwrap();
    let mut first = Command::new(common::binary())
        .args([
            "resume",
            &out.display().to_string(),
            "--backend",
            &common::runs::backend(),
            "--quiet",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Started again in its emptied directory, it still holds the lock: a
    // second resume meanwhile is refused (the directory made anew had none).
    wait_for_checkpoint(&out, 20, &mut first);
    let meanwhile = resume(&out, &[]);
    assert_busy(&meanwhile);
    let resumed = first.wait_with_output().unwrap();
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert!(
        stderr(&resumed).contains("starts again from interval 0"),
        "{}",
        stderr(&resumed)
    );
    assert!(!out.join("forces.csv.tmp").exists());
    assert_eq!(
        std::fs::read_to_string(out.join("analysis").join("notes.txt")).unwrap(),
        "mine"
    );
    std::fs::remove_dir_all(out.join("analysis")).unwrap();
    let s = summary(&out);
    assert_eq!(s["ended"], "completed");
    assert_eq!(s["completed_intervals"], steps());
    assert_identical(straight(), &out);
    std::fs::remove_dir_all(root).unwrap();
}

/// A field file the newest checkpoint lists as written, gone: `lbm resume`
/// refuses before any work (exit 2), naming it, and leaves the manifest as
/// it was. It ran every remaining interval and then failed, and its advice
/// to resume failed again the same way.
#[test]
fn resume_refuses_a_run_whose_written_files_are_gone() {
    let (root, case, out) = setup("files-gone");
    let mut child = spawn_run(&case, &out, &[]);
    wait_for_checkpoint(&out, 40, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    let manifest = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    let saved = out.join("fields/t000000030");
    let removed = std::fs::read_dir(&saved)
        .unwrap_or_else(|e| panic!("{}: {e}", saved.display()))
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "npy"))
        .expect("the save point at interval 30 holds NPY files");
    std::fs::remove_file(&removed).unwrap();
    let refused = resume(&out, &[]);
    let message = stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "{message}");
    assert!(
        message.contains(&removed.display().to_string())
            && message.contains("is gone")
            && message.contains("run the case again into another directory"),
        "{message}"
    );
    assert_eq!(std::fs::read_to_string(out.join("manifest.json")).unwrap(), manifest);
    std::fs::remove_dir_all(root).unwrap();
}

/// What the newest checkpoint saw written, damaged since: a CSV row it
/// counted edited, a field file cut short. `lbm resume` refuses before any
/// work (exit 2), naming the file, where it would have ended "completed"
/// with a mixed output.
#[test]
fn resume_refuses_a_run_whose_written_files_were_damaged() {
    let (root, case, out) = setup("files-damaged");
    let mut child = spawn_run(&case, &out, &[]);
    wait_for_checkpoint(&out, 40, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    let saved = out.join("fields/t000000030");
    let npy = std::fs::read_dir(&saved)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "npy"))
        .expect("the save point at interval 30 holds NPY files");
    let forces = out.join("forces.csv");
    let text = std::fs::read_to_string(&forces).unwrap();
    for (file, damage) in [(&forces, "a row edited"), (&npy, "cut short")] {
        let bytes = std::fs::read(file).unwrap();
        match damage {
            "a row edited" => {
                // The second row's first digit, well inside what the checkpoint saw.
                let at = text.find('\n').unwrap() + 1;
                let mut edited = bytes.clone();
                edited[at] = if edited[at] == b'9' { b'8' } else { b'9' };
                std::fs::write(file, edited).unwrap();
            }
            _ => std::fs::write(file, &bytes[..bytes.len() - 4]).unwrap(),
        }
        let refused = resume(&out, &[]);
        let message = stderr(&refused);
        assert_eq!(refused.status.code(), Some(2), "{damage}: {message}");
        let name = file.strip_prefix(&out).unwrap().display().to_string();
        assert!(
            message.contains(&name) && message.contains("since"),
            "{damage}: {message}"
        );
        std::fs::write(file, bytes).unwrap();
    }
    // Put back, the run resumes to the straight run's files.
    let resumed = resume(&out, &[]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert_identical(straight(), &out);
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn resume_refuses_a_directory_without_a_whole_checkpoint() {
    let (root, case, out) = setup("no-checkpoint");
    let mut child = spawn_run(&case, &out, &[]);
    wait_for_checkpoint(&out, 20, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    // A file the checkpoint continues gone: refused before the manifest
    // records a segment.
    let manifest = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    std::fs::rename(out.join("forces.csv"), out.join("forces.csv.away")).unwrap();
    let missing = resume(&out, &[]);
    assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
    assert!(
        stderr(&missing).contains("forces.csv") && stderr(&missing).contains("is gone"),
        "{}",
        stderr(&missing)
    );
    assert_eq!(std::fs::read_to_string(out.join("manifest.json")).unwrap(), manifest);
    std::fs::rename(out.join("forces.csv.away"), out.join("forces.csv")).unwrap();
    for entry in std::fs::read_dir(out.join("checkpoints")).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
    }
    let resumed = resume(&out, &[]);
    assert_eq!(resumed.status.code(), Some(2), "{}", stderr(&resumed));
    assert!(
        stderr(&resumed).contains("checksum does not match"),
        "{}",
        stderr(&resumed)
    );
    let not_a_run = resume(&root, &[]);
    assert_eq!(not_a_run.status.code(), Some(2));
    assert!(
        stderr(&not_a_run).contains("not a run directory"),
        "{}",
        stderr(&not_a_run)
    );
    // What a run that failed before its manifest leaves (a full disk as it
    // set out): its case and a failed summary. Neither a resume nor a run
    // into it goes on; both say so and what to do.
    let early = root.join("early");
    std::fs::create_dir_all(&early).unwrap();
    std::fs::copy(&case, early.join("case.toml")).unwrap();
    let error = "cannot write early/manifest.json: No space left on device (os error 28)";
    std::fs::write(
        early.join("summary.json"),
        serde_json::json!({ "ended": "failed", "error": error }).to_string(),
    )
    .unwrap();
    let resumed = resume(&early, &[]);
    assert_eq!(resumed.status.code(), Some(2));
    assert!(
        stderr(&resumed).contains(&format!("the run failed before it wrote its manifest.json ({error})"))
            && stderr(&resumed).contains("empty the directory and run the case again"),
        "{}",
        stderr(&resumed)
    );
    let again = run_command(&case, &early, &[]).output().unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("it holds a run that failed before it wrote its manifest.json"),
        "{}",
        stderr(&again)
    );
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_full_run_follows_only_a_completed_pilot_of_its_own_plan() {
    let root = scratch("pilot");
    let text = case_text().replace("steps = 6000\n", "steps = 6000\nrequire_pilot = true\n");
    let case = write_case(&root, &text);
    let full = root.join("full");
    let refused = spawn_run(&case, &full, &[]).wait_with_output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused).contains("run.require_pilot = true"),
        "{}",
        stderr(&refused)
    );
    assert!(!full.exists());

    let pilot = root.join("pilot");
    let output = spawn_run(&case, &pilot, &["--pilot"]).wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let s = summary(&pilot);
    assert_eq!(s["ended"], "completed");
    // To the first save point, at 30 intervals, but at most 1% of the run.
    let intervals = steps().div_ceil(100).min(30);
    assert_eq!(s["pilot"]["intervals"], intervals);
    let last = pilot.join(format!("fields/t{intervals:09}"));
    assert!(last.is_dir(), "the pilot saves its last fields");
    assert!(!pilot.join("checkpoints").exists());
    let pilot_dir = pilot.display().to_string();
    // It names the full run's command: this one, its pilot flag and output
    // replaced.
    let said = String::from_utf8_lossy(&output.stdout);
    let next = format!("--after-pilot {pilot_dir} --out DIR");
    assert!(
        said.contains(&format!("the full run may follow it: lbm run {case} ")) && said.contains(&next),
        "{said}"
    );
    assert!(!said.contains(" --pilot "), "{said}");

    // Another plan: a key changed.
    let other = write_case(
        &root.join("other"),
        &text.replace("viscosity = 1e-3", "viscosity = 1.1e-3"),
    );
    assert_ne!(std::fs::read_to_string(&other).unwrap(), text);
    let foreign = spawn_run(&other, &full, &["--after-pilot", &pilot_dir])
        .wait_with_output()
        .unwrap();
    assert_eq!(foreign.status.code(), Some(2));
    assert!(stderr(&foreign).contains("the case differs"), "{}", stderr(&foreign));
    assert!(!full.exists());
    // A pilot that did not complete vouches for nothing.
    let mut broken = s.clone();
    broken["ended"] = "diverged".into();
    let failed_pilot = root.join("failed-pilot");
    std::fs::create_dir_all(&failed_pilot).unwrap();
    std::fs::write(failed_pilot.join("summary.json"), broken.to_string()).unwrap();
    let failed_dir = failed_pilot.display().to_string();
    let after_failed = spawn_run(&case, &full, &["--after-pilot", &failed_dir])
        .wait_with_output()
        .unwrap();
    assert_eq!(after_failed.status.code(), Some(2));
    assert!(
        stderr(&after_failed).contains("\"diverged\""),
        "{}",
        stderr(&after_failed)
    );

    let after = spawn_run(&case, &full, &["--after-pilot", &pilot_dir])
        .wait_with_output()
        .unwrap();
    assert!(after.status.success(), "{}", stderr(&after));
    assert_eq!(summary(&full)["plan"], s["plan"]);
    let skipped = spawn_run(&case, &root.join("skipped"), &["--no-pilot", "--pilot-intervals", "3"])
        .wait_with_output()
        .unwrap();
    assert_eq!(skipped.status.code(), Some(2), "--pilot-intervals needs --pilot");
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn run_bounds_out_of_range_are_refused_before_any_work() {
    let (root, case, out) = setup("bounds");
    for (flags, expect) in [
        (vec!["--max-wall-seconds", "0"], "--max-wall-seconds"),
        (vec!["--max-wall-seconds=-5"], "--max-wall-seconds"),
        (vec!["--max-wall-seconds", "NaN"], "--max-wall-seconds"),
        (vec!["--max-wall-seconds", "inf"], "--max-wall-seconds"),
        (vec!["--watchdog-seconds", "0"], "--watchdog-seconds"),
        // Past what a timer holds (1.8e19 s): it panicked after writing.
        (vec!["--watchdog-seconds", "1e20"], "at most 1e12"),
        (vec!["--max-wall-seconds", "1e308"], "at most 1e12"),
        (vec!["--device", "7"], "--device"),
        (vec!["--pilot", "--pilot-intervals", "0"], "--pilot-intervals"),
    ] {
        let output = spawn_run(&case, &out, &flags).wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{flags:?}: {}", stderr(&output));
        assert!(stderr(&output).contains(expect), "{flags:?}: {}", stderr(&output));
        assert!(!out.exists(), "{flags:?} wrote something");
    }
    let beyond = (steps() + 1).to_string();
    let output = spawn_run(&case, &out, &["--pilot", "--pilot-intervals", &beyond])
        .wait_with_output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains(&format!("1 to {}", steps())),
        "{}",
        stderr(&output)
    );
    let bad_key = write_case(
        &root.join("bad-key"),
        &case_text().replace("checkpoint_every_intervals = 20", "checkpoint_every_intervals = 0"),
    );
    let output = spawn_run(&bad_key, &out, &[]).wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("run.checkpoint_every_intervals"),
        "{}",
        stderr(&output)
    );
    std::fs::remove_dir_all(root).unwrap();
}

/// The output directory moved while the run writes, and another directory
/// made by its old name (another run's, say): the run fails (exit 3) saying
/// where its directory went, writes nothing into the new one, and writes
/// its summary where its files are; the moved directory resumes to the
/// straight run's files.
#[test]
fn a_run_whose_directory_is_moved_fails_and_the_moved_one_resumes() {
    let (root, case, out) = setup("moved");
    let mut child = spawn_run(&case, &out, &[]);
    wait_for_checkpoint(&out, 20, &mut child);
    let moved = root.join("moved-out");
    std::fs::rename(&out, &moved).unwrap();
    std::fs::create_dir(&out).unwrap();
    let output = child.wait_with_output().unwrap();
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{message}");
    assert!(
        message.contains("was moved or removed while the run wrote into it")
            && message.contains(&format!("it is now {}", moved.display())),
        "{message}"
    );
    let anew: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
    assert!(anew.is_empty(), "written by its old name: {anew:?} {message}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(moved.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["ended"], "failed");
    assert!(
        summary["resume"]
            .as_str()
            .unwrap()
            .contains(&moved.display().to_string()),
        "{summary}"
    );
    let resumed = resume(&moved, &[]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert_identical(straight(), &moved);
    std::fs::remove_dir_all(root).unwrap();
}
