//! The `lbm` binary, fast: a short real case on the CPU backend, the outputs it
//! writes, and the errors it gives for bad input. The long runs are in
//! `tests/end_to_end.rs` (`cargo test --test cli` runs these alone).

mod common;

use common::{case_path, check_report, lbm, run_on_cpu, scratch, stderr, validate_on_cpu, workspace};

#[test]
fn run_writes_a_summary_and_refuses_to_overwrite_it() {
    let out = scratch("run");
    let out_arg = out.display().to_string();
    let case = case_path();
    let output = lbm(&["run", &case, "--backend", "cpu", "--out", &out_arg, "--steps", "30"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["steps"], 30);
    assert_eq!(summary["backend"], "cpu");
    assert!(summary["mlups"].as_f64().unwrap() > 0.0);
    // Stepping is part of the wall time, so its rate is at least the run's.
    let (stepping, wall) = (
        summary["stepping_seconds"].as_f64().unwrap(),
        summary["wall_seconds"].as_f64().unwrap(),
    );
    assert!(stepping > 0.0 && stepping <= wall, "{summary}");
    assert!(summary["stepping_mlups"].as_f64().unwrap() >= summary["mlups"].as_f64().unwrap());
    assert!(summary["mass_drift"].as_f64().unwrap().abs() < 1e-6);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        manifest["resolved"]["lattice"]["hierarchy"]["base"],
        serde_json::json!([64, 64])
    );

    let again = lbm(&["run", &case, "--backend", "cpu", "--out", &out_arg, "--steps", "1"]);
    assert!(!again.status.success());
    assert!(stderr(&again).contains("not empty"), "{}", stderr(&again));
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(kept["steps"], 30, "a refused run must leave the earlier outputs alone");
    // A run killed as it began leaves only its half-written start, which a
    // run into the directory clears; anything else there is not its own.
    std::fs::remove_dir_all(&out).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("manifest.json.tmp"), "{").unwrap();
    std::fs::write(out.join("case.toml.tmp"), "na").unwrap();
    let started = lbm(&["run", &case, "--backend", "cpu", "--out", &out_arg, "--steps", "1"]);
    assert!(started.status.success(), "{}", stderr(&started));
    assert!(!out.join("manifest.json.tmp").exists());
    std::fs::remove_dir_all(&out).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("manifest.json.tmp"), "{").unwrap();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let refused = lbm(&["run", &case, "--backend", "cpu", "--out", &out_arg, "--steps", "1"]);
    assert!(stderr(&refused).contains("not empty"), "{}", stderr(&refused));
    // Killed between its case.toml and its manifest.json: a case.toml that
    // may be the user's is not removed, but run and resume say what it is.
    std::fs::remove_dir_all(&out).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::copy(&case, out.join("case.toml")).unwrap();
    std::fs::write(out.join("manifest.json.tmp"), "{").unwrap();
    for command in [
        &["run", &case, "--backend", "cpu", "--out", &out_arg][..],
        &["resume", &out_arg],
    ] {
        let refused = lbm(command);
        assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
        assert!(
            stderr(&refused).contains("case.toml") && stderr(&refused).contains("before it wrote its manifest.json"),
            "{command:?}: {}",
            stderr(&refused)
        );
    }
    assert!(out.join("case.toml").exists());
    std::fs::remove_dir_all(out).unwrap();
}

#[test]
fn bad_input_is_named_before_any_work() {
    let dir = scratch("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(case_path()).unwrap();
    for (name, edit, expect) in [
        (
            "unknown-key",
            text.replace("density = 1.0", "density = 1.0\ncolour = 2"),
            "colour",
        ),
        (
            "viscosity",
            text.replace("viscosity = 0.01", "viscosity = -0.01"),
            "fluid.viscosity",
        ),
        (
            "patch",
            text.replace("[[0.25, 0.25, 0.75, 0.75]]", "[[0.01, 0.25, 0.75, 0.75]]"),
            "too close to the x_min edge",
        ),
        (
            "syntax",
            text.replace("density = 1.0", "density = = 1.0"),
            "syntax.toml: line 12, column",
        ),
        (
            "inlet-on-x-max",
            text.replace(
                "x_max = \"wall\"",
                "x_max = { inlet = { profile = \"uniform\", velocity = 0.1 } }",
            ),
            "x_max",
        ),
        (
            "one-sided-periodic",
            text.replace("x_max = \"wall\"", "x_max = \"periodic\""),
            "`boundaries.x_min` = wall: periodic, as its opposite side is",
        ),
        (
            "string-viscosity",
            text.replace("viscosity = 0.01", "viscosity = \"thin\""),
            "`fluid.viscosity`: invalid type: string \"thin\", expected a number",
        ),
        (
            "unknown-body-key",
            format!("{text}\n[[bodies]]\nshape = \"circle\"\ncenter = [0.5, 0.5]\nradius = 0.1\ncolour = 1\n"),
            "unknown field `colour`, expected `center` or `radius`, or `rotation` or `pivot`",
        ),
        (
            "nan-viscosity",
            text.replace("viscosity = 0.01", "viscosity = nan"),
            "`fluid.viscosity` = NaN: a finite number",
        ),
        (
            "infinite-lid",
            text.replace("moving_wall = [1.0, 0.0]", "moving_wall = [inf, 0.0]"),
            "`boundaries.y_max.moving_wall[0]` = inf",
        ),
        (
            "negative-patch",
            text.replace("[[0.25, 0.25, 0.75, 0.75]]", "[[-0.25, 0.25, 0.75, 0.75]]"),
            "refinement[0].patches[0]",
        ),
        (
            "zero-radius",
            format!("{text}\n[[bodies]]\nshape = \"circle\"\ncenter = [0.5, 0.5]\nradius = 0.0\n"),
            "bodies[0].radius",
        ),
        (
            "body-through-lid",
            format!("{text}\n[[bodies]]\nshape = \"circle\"\ncenter = [0.5, 0.98]\nradius = 0.05\n"),
            "through the y_max side (moving_wall): a body inside the domain",
        ),
        (
            "body-against-wall",
            format!("{text}\n[[bodies]]\nshape = \"circle\"\ncenter = [0.15, 0.07]\nradius = 0.05\n"),
            "`bodies[0]` = 1.28 cells of level 0 from the y_min side (wall): a body that touches or crosses a resting \
             wall or a free-slip side, or keeps at least 4 cells",
        ),
        (
            "overlapping-bodies",
            format!(
                "{text}\n[[bodies]]\nshape = \"circle\"\ncenter = [0.4, 0.5]\nradius = 0.05\n\
                 [[bodies]]\nshape = \"rectangle\"\nmin = [0.42, 0.45]\nmax = [0.5, 0.55]\n"
            ),
            "`bodies[1]` = overlapping or touching bodies[0]",
        ),
        (
            "flat-polygon",
            format!("{text}\n[[bodies]]\nshape = \"polygon\"\npoints = [[0.4, 0.4], [0.5, 0.5], [0.6, 0.6]]\n"),
            "enclosing an area",
        ),
        (
            "three-component-lid",
            text.replace("moving_wall = [1.0, 0.0]", "moving_wall = [1.0, 0.0, 5.0]"),
            "`boundaries.y_max.moving_wall` = 3 values: exactly 2 values",
        ),
        (
            "no-steps",
            text.replace("steps = 8000 ", "steps = 0 "),
            "`run.steps` = 0: at least 1 base interval",
        ),
        (
            "save-every-nothing",
            text.replace("every = 2.5 ", "every = 0.0 "),
            "`output.every` = 0",
        ),
        (
            "fast-lid",
            text.replace("moving_wall = [1.0, 0.0]", "moving_wall = [2.0, 0.0]"),
            "`boundaries.y_max.moving_wall` = lattice speed 0.2000, Mach 0.346",
        ),
        (
            "forced-box",
            text.replace(
                "lattice_velocity = 0.1 ",
                "lattice_velocity = 0.1\nacceleration = [0.0, -30.0] ",
            ),
            "`flow.acceleration` = lattice speed",
        ),
        (
            "old-key",
            text.replace("x_min = \"wall\"", "x_min = \"symmetry\""),
            "free_slip",
        ),
        (
            "outflow-off-x-max",
            text.replace("x_min = \"wall\"", "x_min = \"outflow\""),
            "`boundaries.x_min` = outflow",
        ),
    ] {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, edit).unwrap();
        let out = dir.join(format!("{name}-out"));
        let output = lbm(&[
            "run",
            &path.display().to_string(),
            "--backend",
            "cpu",
            "--out",
            &out.display().to_string(),
        ]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{name}: bad input exits 2: {}",
            stderr(&output)
        );
        assert!(stderr(&output).contains(expect), "{name}: {}", stderr(&output));
        // Every refusal of a case's keys names its file.
        assert!(
            stderr(&output).contains(&format!("case file {}", path.display())),
            "{name}: {}",
            stderr(&output)
        );
        assert!(
            !out.exists(),
            "{name}: refused input must not create the output directory"
        );
    }
    // An output directory whose files' paths would pass the system's limit
    // of 4096 bytes is refused before it is made, though its own path fits.
    let mut deep = dir.clone();
    while deep.as_os_str().len() < 4000 {
        deep.push("d".repeat(200));
    }
    let output = lbm(&[
        "run",
        &case_path(),
        "--backend",
        "cpu",
        "--out",
        &deep.display().to_string(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("the system's limit of 4096 bytes a path"),
        "{}",
        stderr(&output)
    );
    assert!(!dir.join("d".repeat(200)).exists());
    std::fs::remove_dir_all(dir).unwrap();
}

/// `n` point probes `p0`... in a row across x at height `y`, as a case's
/// `probes` entries.
fn probe_row(n: usize, y: f64) -> Vec<String> {
    (0..n)
        .map(|k| {
            format!(
                "{{ name = \"p{k}\", point = [{:.4}, {y}] }}",
                0.1 + 0.8 * k as f64 / n as f64
            )
        })
        .collect()
}

/// A refined cavity of 1.3 M cells writing every format and a checkpoint:
/// the process's peak resident set, which `summary.json` reports, stays
/// within `lbm check`'s estimate (device buffers and the host's peak; on the
/// CPU backend both are host memory), and the estimate is not loose either.
/// Before, the checkpoint's second copy of the state, the output ring and a
/// VTK file's growing buffer were left out: such runs held twice the
/// estimate.
#[test]
fn a_run_stays_within_the_memory_lbm_check_estimates() {
    let dir = scratch("memory-peak");
    std::fs::create_dir_all(&dir).unwrap();
    let cavity = std::fs::read_to_string(case_path()).unwrap();
    // The large grid saving at every interval (the writer's queue held
    // several save points' fields: 1.35 times the estimate), and a small
    // one whose 400 probes' histories grow over 1500 intervals (9 times).
    let probes = probe_row(400, 0.3);
    for (name, text, steps, tight) in [
        (
            "large",
            cavity
                .replace("resolution = 64 ", "resolution = 800 ")
                .replace("viscosity = 0.01 ", "viscosity = 1e-4 ")
                .replace("every = 2.5 ", "every_intervals = 1 "),
            "6",
            0.6,
        ),
        (
            "probes",
            cavity.replace(
                r#"probes = [{ name = "centre", point = [0.5, 0.5] }]"#,
                &format!("probes = [{}]", probes.join(", ")),
            ),
            "1500",
            0.3,
        ),
    ] {
        let case = dir.join(format!("{name}.toml"));
        std::fs::write(&case, &text).unwrap();
        let (_, _, resolved) = lbm::check::read_case(&case, Some(steps.parse().unwrap())).unwrap();
        let need = lbm::check::memory_need(&resolved, None).unwrap();
        let estimate = need.device.total() + need.host();
        let out = dir.join(name);
        let output = run_on_cpu(&case, &out, steps, &["--no-pilot"]);
        assert!(output.status.success(), "{}", stderr(&output));
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
        assert!(summary["checkpoint"].is_string(), "{summary}");
        let peak = summary["host_peak_bytes"].as_u64().expect("Linux reports the peak");
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        assert!(
            peak <= estimate && peak as f64 > tight * estimate as f64,
            "{name}: peak {:.1} MiB, estimate {:.1} MiB",
            mib(peak),
            mib(estimate)
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A case with 300 point probes keeps 300 CSV files open: under a soft
/// limit of 100 open files the run raises it and completes; where the hard
/// limit is 200 it is refused before any work, naming the probes and the
/// limit (it failed at its 1018th probe file with exit 3 before).
#[test]
fn a_run_that_would_pass_the_open_file_limit_is_refused_before_any_work() {
    let dir = scratch("open-files");
    std::fs::create_dir_all(&dir).unwrap();
    let probes = probe_row(300, 0.5);
    let text = std::fs::read_to_string(case_path()).unwrap().replace(
        r#"probes = [{ name = "centre", point = [0.5, 0.5] }]"#,
        &format!("probes = [{}]", probes.join(", ")),
    );
    let case = dir.join("probes.toml");
    std::fs::write(&case, text).unwrap();
    let binary = common::binary();
    let run = |limits: &str, out: &std::path::Path| {
        std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "{limits} && exec \"$0\" run \"$1\" --backend cpu --out \"$2\" --steps 2 --no-pilot"
            ))
            .arg(&binary)
            .arg(&case)
            .arg(out)
            .output()
            .unwrap()
    };
    // Raising needs a hard limit above what the run keeps open.
    let hard = std::process::Command::new("bash")
        .args(["-c", "ulimit -Hn"])
        .output()
        .unwrap();
    let hard = String::from_utf8_lossy(&hard.stdout)
        .trim()
        .parse::<u64>()
        .unwrap_or(u64::MAX);
    if hard >= 1024 {
        let raised = dir.join("raised");
        let output = run("ulimit -Sn 100", &raised);
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(raised.join("probes/p299.csv").exists());
    }
    let refused = dir.join("refused");
    let output = run("ulimit -n 200", &refused);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    for part in [
        "keeps 301 files open (300 point probes, 1 line)",
        "(200, `ulimit -n`",
        "output.probes",
        "raise the limit to 369",
    ] {
        assert!(message.contains(part), "`{part}` in {message}");
    }
    assert!(!refused.exists(), "refused before the output directory is made");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Legal but suspicious values get a warning from `lbm check`: an inlet
/// that draws fluid out beside an outflow (a negative table factor was
/// warned about, a negative velocity was not), an inlet of no speed, and
/// a save period that rounding to whole intervals moves by more than 1%.
#[test]
fn check_warns_about_a_reversed_inlet_and_a_rounded_period() {
    let dir = scratch("warnings");
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(workspace().join("cases/dfg-2d1.toml")).unwrap();
    let inlet = "parabolic\", velocity = 0.3";
    assert!(text.contains(inlet));
    for (edit, expect) in [
        (
            text.replace(inlet, "parabolic\", velocity = -0.3"),
            "boundaries.x_min.inlet.velocity is negative",
        ),
        (
            text.replace(inlet, "parabolic\", velocity = 0.0"),
            "boundaries.x_min.inlet.velocity is 0",
        ),
        (
            text.replace("[output]\n", "[output]\nforces_every = 0.0025\n"),
            "output.forces_every = 0.0025 s is 1.500 base intervals",
        ),
        (
            text.replace(inlet, "parabolic\", velocity = -0.3")
                .replace("x_max = \"outflow\"", "x_max = \"wall\""),
            "boundaries.x_min.inlet.velocity is negative and boundaries.x_max is wall",
        ),
    ] {
        let report = check_report(&dir.join("case.toml"), &edit);
        assert!(report.contains(&format!("warning: {expect}")), "{expect}: {report}");
    }
    // The shipped case, and a period under one interval (the documented way
    // to sample every interval), get none of them.
    let case = dir.join("case.toml");
    std::fs::write(&case, text.replace("[output]\n", "[output]\nforces_every = 1e-9\n")).unwrap();
    for path in [workspace().join("cases/dfg-2d1.toml"), case] {
        let output = lbm(&["check", &path.display().to_string()]);
        let report = String::from_utf8_lossy(&output.stdout);
        assert!(
            !report.contains("inlet.velocity is") && !report.contains("is taken as"),
            "{}: {report}",
            path.display()
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A cavity at 63000 base cells per metre with two refined levels: about
/// 3 TB, which no machine here has; refused with the estimate before the
/// output directory is made.
#[test]
fn a_case_larger_than_the_memory_is_refused_with_the_estimate() {
    let dir = scratch("memory");
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(case_path()).unwrap();
    let huge = text
        .replace("resolution = 64 ", "resolution = 63000 ")
        .replace("viscosity = 0.01 ", "viscosity = 1e-6 ")
        .replace(
            "patches = [[0.25, 0.25, 0.75, 0.75]]",
            "patches = [[0.25, 0.25, 0.75, 0.75]]\n[[refinement]]\npatches = [[0.3, 0.3, 0.7, 0.7]]",
        );
    let case = dir.join("huge.toml");
    std::fs::write(&case, huge).unwrap();
    let out = dir.join("out");
    let output = lbm(&[
        "run",
        &case.display().to_string(),
        "--backend",
        "cpu",
        "--out",
        &out.display().to_string(),
    ]);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    for part in [
        "the run needs about",
        "GiB of host memory (device buffers",
        "level 2",
        "a save point's fields",
        "is available; lower domain.resolution, shrink or drop [[refinement]] patches",
    ] {
        assert!(message.contains(part), "`{part}` in {message}");
    }
    assert!(!out.exists(), "refused before the output directory is made");
    let report = lbm(&["check", &case.display().to_string()]);
    let printed = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.status.success() && printed.contains("lbm run --backend cpu refuses it"),
        "{printed}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_run_of_no_steps_is_refused_naming_the_flag() {
    let out = scratch("no-steps");
    let output = lbm(&[
        "run",
        &case_path(),
        "--backend",
        "cpu",
        "--out",
        &out.display().to_string(),
        "--steps",
        "0",
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("invalid --steps 0: at least 1 base interval"),
        "{}",
        stderr(&output)
    );
    assert!(!out.exists());
}

#[test]
fn asking_for_cuda_without_a_device_is_a_bad_argument_not_a_panic() {
    if lbm_cuda::device_available() {
        return;
    }
    let out = scratch("cuda");
    // Refused before anything is written, naming the flag and what is
    // accepted here.
    let refused = |flags: &[&str], expect: &str| {
        let out_arg = out.display().to_string();
        let output = lbm(&[&["run", case_path().as_str()], flags, &["--out", out_arg.as_str()]].concat());
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        let message = stderr(&output);
        assert!(message.contains(expect) && !message.contains("panicked"), "{message}");
        assert!(!out.exists(), "nothing is written");
    };
    // A backend this machine lacks is a bad argument.
    refused(
        &["--backend", "cuda", "--steps", "1"],
        "invalid --backend cuda: auto or cpu: this machine has no usable CUDA device",
    );
    // Another device than the CPU backend's one, in plain words.
    refused(
        &["--backend", "cpu", "--device", "3"],
        "invalid --device 3: only 0 (the CPU backend is device 0, and no CUDA device is present)",
    );
}

#[test]
fn validate_refuses_bad_arguments_before_any_work() {
    let out = scratch("validate-bad");
    // Each flag's error gives its whole range for the case: 2D-1's finest
    // level reaches tau+ = 2.5 at 400 cells per diameter.
    for (args, expect) in [
        (
            &["dfg-2d1", "--resolution", "60"][..],
            "invalid --resolution 60: a multiple of 40 cells per diameter on the finest level with 2 refinement \
             levels, from 40 to 400 for this case",
        ),
        (&["dfg-2d1", "--levels", "3"], "invalid --levels 3: 0 to 2"),
        // The base level's tau+ - 1/2 reaches BGK's 0.01 at 0.025 (to the
        // rounding), and the inflow peak Mach 0.3 at 0.1732.
        (
            &["dfg-2d2", "--lattice-velocity", "0"],
            "invalid --lattice-velocity 0: above 0, from 0.025 to 0.1732 for this case at 80 cells per diameter",
        ),
        (
            &["dfg-2d2", "--lattice-velocity", "0.2"],
            "from 0.025 to 0.1732 for this case at 80 cells per diameter (the relaxation time's limits and Mach \
             0.3); at it, invalid parameter `flow.lattice_velocity` = lattice speed 0.2000, Mach 0.346",
        ),
        // 2D-2 with two levels at 40 cells per diameter puts the base level's
        // tau under BGK's limit: refused with the range and the cause.
        (
            &["dfg-2d2", "--resolution", "40"],
            "invalid --resolution 40: a multiple of 40 cells per diameter on the finest level with 2 refinement \
             levels, from 80 to 3320 for this case; at it, invalid parameter `level 0 relaxation time` = 0.50600",
        ),
    ] {
        let output = validate_on_cpu(args, &out);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).contains(expect), "{args:?}: {}", stderr(&output));
    }
    // A case variant must keep the benchmark's cylinder.
    let dir = scratch("validate-case");
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(workspace().join("cases/dfg-2d1.toml")).unwrap();
    let moved = dir.join("moved.toml");
    std::fs::write(&moved, text.replace("center = [0.2, 0.2]", "center = [0.3, 0.2]")).unwrap();
    let variant = validate_on_cpu(&["dfg-2d1", "--case", &moved.display().to_string()], &out);
    let message = stderr(&variant);
    assert!(
        !variant.status.success()
            && message.contains("--case bodies")
            && message.contains("a circle of radius 0.05 m at [0.3, 0.2] m: exactly the benchmark's cylinder")
            && message.contains("[0.2, 0.2]"),
        "{message}"
    );
    // Nor may it start the flow moving or drive it.
    for (extra, expect) in [
        (
            "\n[initial]\nvelocity = [\"0.3 * y\", 0]\n",
            "invalid --case initial = { velocity = [\"0.3 * y\", 0.0], pressure = 0.0 }: no [initial] table (the fluid at rest)",
        ),
        (
            "",
            "invalid --case flow.acceleration = [0.1, 0.0]: [0.0, 0.0]: the benchmark's flow",
        ),
        // A key at fault whatever the resolution is named, not --resolution.
        (
            "steps",
            "error: invalid parameter `run.steps` = 0: at least 1 base interval",
        ),
    ] {
        let variant = dir.join("variant.toml");
        let driven = match extra {
            "" => text.replace("[flow]\n", "[flow]\nacceleration = [0.1, 0.0]\n"),
            "steps" => text.replace("\nsteps = ", "\nsteps = 0\n# was "),
            _ => format!("{text}{extra}"),
        };
        assert_ne!(driven, text);
        std::fs::write(&variant, driven).unwrap();
        let refused = validate_on_cpu(&["dfg-2d1", "--case", &variant.display().to_string()], &out);
        assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
        assert!(stderr(&refused).contains(expect), "{}", stderr(&refused));
    }
    std::fs::remove_dir_all(dir).unwrap();
    assert!(!out.exists());
}

/// The DFG channel as one uniform grid at 640 cells per diameter: two
/// population sets (72 bytes a cell) and a flag byte, with the cylinder's
/// wall distances and links only where it has them, at most 75 bytes a cell
/// (nine wall-distance planes over every cell made it 109).
#[test]
fn check_reports_the_bytes_per_cell_of_a_uniform_channel() {
    let text = std::fs::read_to_string(workspace().join("cases/dfg-2d1.toml")).unwrap();
    let uniform: String = text
        .split("[[refinement]]")
        .enumerate()
        .map(|(k, part)| match k {
            0 => part.to_owned(),
            _ => part
                .split_once("\n\n")
                .map_or(String::new(), |(_, rest)| rest.to_owned()),
        })
        .collect::<String>()
        .replace("resolution = 10 ", "resolution = 640 ")
        .replace("lattice_velocity = 0.05 ", "lattice_velocity = 0.025 ");
    assert!(
        !uniform.contains("refinement") && uniform.contains("[[bodies]]"),
        "{uniform}"
    );
    let dir = scratch("check-bytes");
    std::fs::create_dir_all(&dir).unwrap();
    let case = dir.join("uniform.toml");
    std::fs::write(&case, uniform).unwrap();
    let output = lbm(&["check", &case.display().to_string()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        report.contains("  14080 x 2624") || report.contains("36945920"),
        "{report}"
    );
    let per_cell: f64 = report
        .split(" bytes per cell")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no bytes per cell in {report}"));
    assert!((73.0..=75.0).contains(&per_cell), "{per_cell} bytes per cell: {report}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn check_prints_each_level_and_refuses_what_run_refuses() {
    let output = lbm(&["check", &workspace().join("cases/dfg-2d1.toml").display().to_string()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(report.contains("Reynolds number U L / nu = 20.0000"), "{report}");
    for level in ["    0       1", "    1       1", "    2       1"] {
        assert!(report.contains(level), "{report}");
    }
    assert!(
        report.contains("device memory") && report.contains("save points (vtk, npy, png)"),
        "{report}"
    );
    assert!(
        !report.contains("domain.size"),
        "DFG's channel is whole cells: {report}"
    );
    let dir = scratch("check");
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(case_path()).unwrap();
    let fast = dir.join("fast.toml");
    std::fs::write(
        &fast,
        text.replace("lattice_velocity = 0.1 ", "lattice_velocity = 0.12 "),
    )
    .unwrap();
    let report = lbm(&["check", &fast.display().to_string()]);
    let printed = String::from_utf8_lossy(&report.stdout);
    assert!(printed.contains("warning: lattice Mach number 0.208"), "{printed}");
    // The warning names the fastest speed and what lowers it.
    assert!(
        printed.contains("the fastest speed is boundaries.y_max.moving_wall's: lower flow.lattice_velocity"),
        "{printed}"
    );
    // `lbm check` of `text` written as `name`, which it accepts: what it prints.
    let checked = |name: &str, text: String| -> String {
        let case = dir.join(name);
        std::fs::write(&case, text).unwrap();
        let report = lbm(&["check", &case.display().to_string()]);
        assert!(report.status.success(), "{name}: {}", stderr(&report));
        String::from_utf8_lossy(&report.stdout).into_owned()
    };
    // Level 1's tau+ is 1.65 here: in the warning band below the refusal at 2.5.
    let printed = checked("viscous.toml", text.replace("viscosity = 0.01 ", "viscosity = 0.03 "));
    assert!(
        printed.contains("warning: level 1 tau+ = 1.6520 is above 1.5"),
        "{printed}"
    );
    // A size that is not whole base cells is rounded: check says so, and by how much.
    let printed = checked("rounded.toml", text.replace("resolution = 64 ", "resolution = 64.5 "));
    assert!(
        printed.contains("warning: domain.size along x, 1 m, is 64.5000 base cells")
            && printed.contains("the grid has 65 cells, 1.007752 m"),
        "{printed}"
    );
    // An inlet that reverses drives flow in through the outflow.
    let dfg_text = std::fs::read_to_string(workspace().join("cases/dfg-2d1.toml")).unwrap();
    let reversed = dfg_text.replace(
        "amplitude = { ramp = { duration = 1.0 } }",
        "amplitude = { sine = { period = 2.0 } }",
    );
    assert_ne!(reversed, dfg_text);
    let printed = checked("sloshing.toml", reversed.clone());
    assert!(
        printed.contains("warning: boundaries.x_min.inlet.amplitude turns negative"),
        "{printed}"
    );
    // A channel with an inlet shows its acoustic period.
    assert!(
        printed.contains("acoustic period: ") && printed.contains("(4 L / c_s with c_s = "),
        "{printed}"
    );
    let printed = checked(
        "closed.toml",
        reversed.replace("x_max = \"outflow\"", "x_max = \"wall\""),
    );
    assert!(!printed.contains("turns negative"), "{printed}");
    // TRT with an inlet between walls at a cell Reynolds number over 10 is
    // warned about (0.3 m/s x 0.01 m / 2.5e-4 m^2/s: 12), BGK not.
    let coarse = dfg_text.replace("viscosity = 1e-3 ", "viscosity = 2.5e-4 ");
    assert_ne!(coarse, dfg_text);
    let printed = checked("coarse-trt.toml", coarse.clone());
    assert!(
        printed.contains("warning: the inlet's peak is at cell Re 12.0 on level 0 (U dx / nu) with TRT"),
        "{printed}"
    );
    assert!(!checked("dfg.toml", dfg_text.clone()).contains("cell Re 3.0 on level 0"));
    let bgk = coarse.replace(
        "lattice_velocity = 0.05 ",
        "lattice_velocity = 0.05\ncollision = { model = \"bgk\" }\n",
    );
    assert_ne!(bgk, coarse);
    assert!(!checked("coarse-bgk.toml", bgk.clone()).contains("with TRT"));
    // BGK with an outflow above cell Re 24 is warned about (the inlet's
    // peak 0.3 m/s x 0.01 m / 1.2e-4 m^2/s: 25, at lattice velocity 0.15),
    // below it not (1.5e-4: 20). The flow's speed, not the coefficients'
    // reference velocity (0.2 m/s here, which gave 16.7 and no warning for a
    // case of that kind that diverged).
    let fast = bgk.replace("lattice_velocity = 0.05\n", "lattice_velocity = 0.15\n");
    assert_ne!(fast, bgk);
    let printed = checked(
        "bgk-outflow-25.toml",
        fast.replace("viscosity = 2.5e-4 ", "viscosity = 1.2e-4 "),
    );
    assert!(
        printed.contains("warning: level 0's cell Re is 25.0 (U dx / nu) with BGK and an outflow"),
        "{printed}"
    );
    let printed = checked(
        "bgk-outflow-20.toml",
        fast.replace("viscosity = 2.5e-4 ", "viscosity = 1.5e-4 "),
    );
    assert!(!printed.contains("with BGK and an outflow"), "{printed}");
    // An inlet into a closed channel, and a sine near the channel's
    // acoustic period, are warned about.
    let printed = checked(
        "closed-inlet.toml",
        dfg_text.replace("x_max = \"outflow\"", "x_max = \"wall\""),
    );
    assert!(
        printed.contains("warning: boundaries.x_min is an inlet but boundaries.x_max is wall"),
        "{printed}"
    );
    assert!(
        printed.contains("(2 L / c_s"),
        "a closed channel rings as a half wave: {printed}"
    );
    let printed = checked(
        "resonant.toml",
        dfg_text.replace(
            "amplitude = { ramp = { duration = 1.0 } }",
            "amplitude = { sine = { period = 3.0 } }",
        ),
    );
    assert!(
        printed.contains("sine period, 3 s, is near the channel's acoustic period"),
        "{printed}"
    );
    assert!(!printed.contains("is an inlet but"), "{printed}");
    // TRT's large tau- beside refinement is warned about; BGK is not.
    let tandem = std::fs::read_to_string(workspace().join("cases/tandem-cylinders.toml")).unwrap();
    for (collision, warned) in [("", true), ("\ncollision = { model = \"bgk\" }", false)] {
        let text = tandem.replace(
            "lattice_velocity = 0.1 ",
            &format!("lattice_velocity = 0.08{collision} "),
        );
        assert_ne!(text, tandem);
        let printed = checked("slow-tandem.toml", text);
        assert_eq!(printed.contains("with refinement and TRT"), warned, "{printed}");
    }
    // A patch whose interface meets the lid once is warned about; one
    // spanning it, one meeting it twice (the junctions' errors cancel), or
    // the shipped centred one, is not.
    let lid = "[[refinement]]\npatches = [[0.25, 0.25, 0.75, 0.75]]";
    assert!(text.contains(lid));
    for (patch, warned) in [
        ("[0.0, 0.5, 0.5, 1.0]", true),
        ("[0.5, 0.5, 1.0, 1.0]", true),
        ("[0.25, 0.5, 0.75, 1.0]", false),
        ("[0.0, 0.5, 1.0, 1.0]", false),
        ("[0.25, 0.25, 0.75, 0.75]", false),
    ] {
        let printed = checked(
            "lid-patch.toml",
            text.replace(lid, &format!("[[refinement]]\npatches = [{patch}]")),
        );
        let warning = "warning: refinement[0].patches[0] touches the moving wall boundaries.y_max and one of its ends";
        assert_eq!(printed.contains(warning), warned, "{patch}: {printed}");
    }
    // At Re 400 with TRT's tau- above 5 a patch meeting the lid, once or
    // twice, can diverge or settle wrong: warned; with BGK, or spanning the
    // lid, it is not.
    let re400 = text
        .replace("viscosity = 0.01 ", "viscosity = 0.0025 ")
        .replace("resolution = 64 ", "resolution = 32 ");
    assert_ne!(re400, text);
    for (k, (patch, collision, warned)) in [
        ("[0.625, 0.625, 1.0, 1.0]", "", true),
        ("[0.25, 0.5, 0.75, 1.0]", "", true),
        ("[0.0, 0.5, 1.0, 1.0]", "", false),
        ("[0.25, 0.5, 0.75, 1.0]", "\ncollision = { model = \"bgk\" }", false),
    ]
    .into_iter()
    .enumerate()
    {
        let case = re400
            .replace(lid, &format!("[[refinement]]\npatches = [{patch}]"))
            .replace(
                "lattice_velocity = 0.1 ",
                &format!("lattice_velocity = 0.1{collision} "),
            );
        let printed = checked("lid-trt.toml", case);
        let warning = "meets the moving wall boundaries.y_max where it ends, with TRT at tau-";
        assert_eq!(printed.contains(warning), warned, "{patch} {collision}: {printed}");
        // `lbm run` says it too, before it steps.
        let out = dir.join(format!("lid-trt-run-{k}"));
        let ran = run_on_cpu(&dir.join("lid-trt.toml"), &out, "2", &["--quiet"]);
        assert!(ran.status.success(), "{}", stderr(&ran));
        let said = stderr(&ran);
        assert_eq!(said.contains(warning), warned, "{patch} {collision}: {said}");
    }
    let thick = dir.join("thick.toml");
    std::fs::write(&thick, text.replace("viscosity = 0.01 ", "viscosity = 0.053 ")).unwrap();
    let refused = lbm(&["check", &thick.display().to_string()]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused).contains("`level 1 relaxation time` = 2.53520: at most 2.5"),
        "{}",
        stderr(&refused)
    );
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, text.replace("viscosity = 0.01", "viscosity = 0")).unwrap();
    let refused = lbm(&["check", &bad.display().to_string()]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(stderr(&refused).contains("fluid.viscosity"), "{}", stderr(&refused));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A straight edge off the cell faces is warned about, naming the body,
/// the edge and the spacing to put it on; the shipped square has its edges
/// on faces, and a circle has no straight edge.
#[test]
fn check_warns_of_a_straight_edge_off_the_cell_faces() {
    let dir = scratch("edges");
    std::fs::create_dir_all(&dir).unwrap();
    let square = std::fs::read_to_string(workspace().join("cases/square-obstacle.toml")).unwrap();
    let checked = |name: &str, text: &str| check_report(&dir.join(name), text);
    let warning = "warning: bodies[0] has a straight edge along x at y = ";
    assert!(!checked("faces.toml", &square).contains(warning));
    // 0.195 m is 62.4 level-1 cells of 3.125 mm.
    let off = square.replace("min = [0.45, 0.19375]", "min = [0.45, 0.195]");
    assert_ne!(off, square);
    let printed = checked("off.toml", &off);
    assert!(
        printed.contains(&format!(
            "{warning}0.195 m, 0.40 of a level-1 cell from the nearest cell face"
        )) && printed.contains("dx = 0.003125 m on level 1"),
        "{printed}"
    );
    // Turned by a right angle, or by a hair (a sweep over the angle from
    // 0), the rectangle's edges still lie along the axes.
    for rotation in ["90.0", "0.01", "-1e-6"] {
        let turned = off.replace(
            "max = [0.55, 0.29375]",
            &format!("max = [0.55, 0.29375]\nrotation = {rotation}"),
        );
        assert!(
            checked("turned.toml", &turned).contains("bodies[0] has a straight edge along"),
            "{rotation}"
        );
    }
    let slanted = off.replace("max = [0.55, 0.29375]", "max = [0.55, 0.29375]\nrotation = 5.0");
    assert!(!checked("slanted.toml", &slanted).contains("straight edge"));
    // A block through the floor: its edge beyond the wall, off the faces,
    // bounds no fluid and is not warned about; its top is.
    let floor = square
        .replace("min = [0.45, 0.19375]", "min = [0.45, -0.0521]")
        .replace("max = [0.55, 0.29375]", "max = [0.55, 0.09375]");
    let printed = checked("floor.toml", &floor);
    assert!(!printed.contains("straight edge"), "{printed}");
    let top = checked(
        "top.toml",
        &floor.replace("max = [0.55, 0.09375]", "max = [0.55, 0.095]"),
    );
    assert!(top.contains(&format!("{warning}0.095 m")), "{top}");
    // Nor is an edge off the faces that lies across the domain but wholly
    // below the floor.
    let stepped = square.replace(
        "shape = \"rectangle\"\nmin = [0.45, 0.19375]\nmax = [0.55, 0.29375]",
        "shape = \"polygon\"\npoints = [[0.45, 0.09375], [0.45, -0.05], [0.5013, -0.05], [0.5013, -0.08], [0.55, -0.08], \
         [0.55, 0.09375]]",
    );
    assert_ne!(stepped, square);
    let printed = checked("stepped.toml", &stepped);
    assert!(!printed.contains("straight edge"), "{printed}");
    let dfg = std::fs::read_to_string(workspace().join("cases/dfg-2d1.toml")).unwrap();
    assert!(!checked("circle.toml", &dfg).contains("straight edge"));
    // Nor the facets of a curved outline (the shipped aerofoil's crest has
    // one along x, 4 cells long, 0.14 of a cell off the faces).
    let naca = std::fs::read_to_string(workspace().join("cases/naca0012.toml")).unwrap();
    assert!(!checked("naca.toml", &naca).contains("straight edge"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A body in a patch near the patch's interface is warned about, one near
/// the domain's wall the patch stands on is not, whichever way round the
/// sides are (a tester found the gaps paired with the wrong sides); a patch
/// edge off its parent's cell faces is warned about with where it moves.
#[test]
fn check_warns_of_a_body_near_its_patchs_interface_not_near_a_wall() {
    let dir = scratch("patch-edge");
    std::fs::create_dir_all(&dir).unwrap();
    let case = |min: &str, max: &str| {
        format!(
            "name = \"block\"\n[domain]\nsize = [1.0, 1.0]\nreference_length = 1.0\nresolution = 40\n\
             [fluid]\nviscosity = 0.01\n[flow]\nreference_velocity = 1.0\nlattice_velocity = 0.05\n\
             [boundaries]\nx_min = \"wall\"\nx_max = \"wall\"\ny_min = \"wall\"\ny_max = \"wall\"\n\
             [[refinement]]\npatches = [[0.25, 0.0, 0.75, 0.5]]\n[[bodies]]\nshape = \"rectangle\"\n\
             min = {min}\nmax = {max}\n[run]\nsteps = 10\n"
        )
    };
    let warning = "body 0 is within 8 cells of its patch's edge";
    // On the floor the patch stands on, 12 and more fine cells from its interfaces.
    let on_floor = check_report(&dir.join("floor.toml"), &case("[0.4, 0.0]", "[0.6, 0.3]"));
    assert!(!on_floor.contains(warning), "{on_floor}");
    // 6 fine cells from the patch's right interface.
    let near = check_report(&dir.join("near.toml"), &case("[0.4, 0.2]", "[0.675, 0.3]"));
    assert!(near.contains(warning), "{near}");
    // A patch edge between the base cells' faces (0.025 m apart) moves to
    // the nearest one, and check says where.
    let snapped = "refinement[0].patches[0] = [0.25, 0.0, 0.76, 0.5] m is not on level 0's cell faces \
                   (2.5e-2 m apart) and is taken as [0.25, 0, 0.75, 0.5] m";
    assert!(!near.contains("is not on level 0's cell faces"), "{near}");
    let off = check_report(
        &dir.join("off.toml"),
        &case("[0.4, 0.0]", "[0.6, 0.3]").replace("0.75, 0.5]]", "0.76, 0.5]]"),
    );
    assert!(off.contains(snapped), "{off}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A periodic array of cylinders driven by a body force: only the body
/// holds the flow, at a speed no estimate before the run gives. `lbm check`
/// and `lbm run` warn instead of refusing; a force too large for it runs
/// until it diverges, and the divergence names the force.
#[test]
fn a_body_force_only_the_bodies_hold_is_warned_about_not_refused() {
    let dir = scratch("array");
    std::fs::create_dir_all(&dir).unwrap();
    let case = |g: f64| {
        let path = dir.join(format!("array-{g}.toml"));
        std::fs::write(
            &path,
            format!(
                r#"
                name = "periodic array of cylinders"
                [domain]
                size = [1.0, 1.0]
                reference_length = 0.4
                resolution = 16
                [fluid]
                viscosity = 1.25e-3
                [flow]
                reference_velocity = 0.01
                lattice_velocity = 0.02
                acceleration = [{g}, 0.0]
                [boundaries]
                x_min = "periodic"
                x_max = "periodic"
                y_min = "periodic"
                y_max = "periodic"
                [[bodies]]
                shape = "circle"
                center = [0.5, 0.5]
                radius = 0.2
                [run]
                steps = 4000
                [output]
                formats = ["npy"]
                "#
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    let warning = "warning: flow.acceleration along x: no wall or inlet across that periodic axis, so only the \
                   bodies hold the flow";
    // Free acceleration over the 4000 intervals would reach Mach 0.35 (g
    // 5e-4) and 3.46 (g 5e-3): both above the refusal's 0.3.
    let gentle = case(5e-4);
    let report = lbm(&["check", &gentle]);
    assert!(report.status.success(), "{}", stderr(&report));
    let printed = String::from_utf8_lossy(&report.stdout);
    assert!(
        printed.contains(warning) && printed.contains("Mach 0.35 within it"),
        "{printed}"
    );
    let out = dir.join("gentle");
    let run = lbm(&[
        "run",
        &gentle,
        "--backend",
        "cpu",
        "--quiet",
        "--out",
        &out.display().to_string(),
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(stderr(&run).contains(warning), "{}", stderr(&run));
    // The flow settles where the body's drag takes up the force on the
    // fluid, rho g times the fluid's area (it is within 1% of it by the end).
    let forces = std::fs::read_to_string(out.join("forces.csv")).unwrap();
    let last = forces.lines().last().unwrap();
    let drag: f64 = last.split(',').nth(1).unwrap().parse().unwrap();
    let driving = 5e-4 * (1.0 - std::f64::consts::PI * 0.04);
    assert!((drag / driving - 1.0).abs() < 0.02, "drag {drag} against {driving}");
    // A sweep warns once, naming the members.
    let out = dir.join("swept");
    let sweep = lbm(&[
        "sweep",
        &gentle,
        "--set",
        "flow.acceleration=[6e-4, 0.0],[7e-4, 0.0]",
        "--steps",
        "3000",
        "--backend",
        "cpu",
        "--quiet",
        "--out",
        &out.display().to_string(),
    ]);
    assert!(sweep.status.success(), "{}", stderr(&sweep));
    assert_eq!(
        stderr(&sweep).matches("warning: members 0, 1").count(),
        1,
        "{}",
        stderr(&sweep)
    );
    let out = dir.join("strong");
    let run = lbm(&[
        "run",
        &case(5e-3),
        "--backend",
        "cpu",
        "--quiet",
        "--out",
        &out.display().to_string(),
    ]);
    assert_eq!(run.status.code(), Some(3), "{}", stderr(&run));
    assert!(
        stderr(&run).contains("diverged") && stderr(&run).contains("lower flow.acceleration"),
        "{}",
        stderr(&run)
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn check_shows_the_split_over_devices_and_refuses_an_impossible_one() {
    let cavity = workspace().join("cases/cavity-re100.toml").display().to_string();
    let output = lbm(&["check", &cavity, "--devices", "2"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report = String::from_utf8_lossy(&output.stdout);
    // The refined centre [16, 48) with its clearance leaves cuts in [4, 12]
    // and [52, 60]; the patch's work puts the second slab's edge at 12.
    assert!(report.contains("split over 2 devices"), "{report}");
    assert!(report.contains("device 0: base columns [0, 12)"), "{report}");
    assert!(report.contains("device 1: base columns [12, 64)"), "{report}");
    assert!(report.contains("1 cut(s) x 64 rows, 1.5 KiB per interval"), "{report}");
    for (devices, expect) in [
        ("0", "1 to 7 for this layout"),
        ("8", "patch L1.p0"),
        ("two", "invalid value"),
    ] {
        let refused = lbm(&["check", &cavity, "--devices", devices]);
        assert_eq!(refused.status.code(), Some(2), "{devices}");
        assert!(
            stderr(&refused).contains("--devices") || stderr(&refused).contains("'--devices"),
            "{}",
            stderr(&refused)
        );
        assert!(stderr(&refused).contains(expect), "{devices}: {}", stderr(&refused));
        assert!(
            refused.stdout.is_empty(),
            "{devices}: nothing printed before the refusal"
        );
    }
}

/// Every shipped case and every case `docs/VALIDATION.md` names is one
/// `lbm check` accepts, warnings aside: a change of the case format that
/// leaves one behind fails here.
#[test]
fn every_shipped_and_validation_case_is_accepted() {
    let mut checked = 0;
    for dir in ["cases", "docs/validation"] {
        for entry in std::fs::read_dir(workspace().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let output = lbm(&["check", &path.display().to_string()]);
                assert!(output.status.success(), "{}: {}", path.display(), stderr(&output));
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "{checked} cases");
}

#[test]
fn info_names_the_backends_and_the_ptx() {
    let output = lbm(&["info"]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("cpu backend:") && text.contains("cuda backend:"),
        "{text}"
    );
    let hash = text
        .lines()
        .find_map(|l| l.strip_prefix("embedded PTX (sm_90) sha256: "))
        .unwrap();
    assert_eq!(hash.len(), 64, "{text}");
}

#[test]
fn an_output_directory_that_is_a_file_or_under_one_is_refused() {
    let dir = scratch("outdir");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, "taken").unwrap();
    for (out, expect) in [(file.clone(), "it is a file"), (file.join("sub"), "cannot be created")] {
        let output = lbm(&[
            "run",
            &case_path(),
            "--backend",
            "cpu",
            "--out",
            &out.display().to_string(),
            "--steps",
            "1",
        ]);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).contains(expect), "{}", stderr(&output));
    }
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "taken",
        "the file is left alone"
    );
    // A name longer than a file system takes, under directories that do not
    // exist yet: refused, and the directories above it are not left behind.
    let long = dir.join("new").join("deeper").join("a".repeat(300));
    for command in [
        &["run", &case_path()][..],
        &["sweep", &case_path(), "--set", "fluid.viscosity=1e-3"],
    ] {
        let out = long.display().to_string();
        let output = lbm(&[command, &["--backend", "cpu", "--steps", "1", "--out", &out]].concat());
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).contains("cannot be created"), "{}", stderr(&output));
        assert!(
            !dir.join("new").exists(),
            "{command:?} left the directories above --out"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A completed run stays completed when its standard output or its standard
/// error is closed early (`lbm run ... | head -0`, `lbm run ... 2>&1 | head
/// -1`): no panic, exit 0, the summary written as completed. Progress is on,
/// so the closed standard error is written to on every tenth of the run.
#[test]
fn a_closed_standard_output_or_error_does_not_fail_a_completed_run() {
    use std::process::{Command, Stdio};
    for close_stderr in [false, true] {
        let out = scratch(if close_stderr { "pipe-err" } else { "pipe-out" });
        let binary = common::binary();
        let mut child = Command::new(binary)
            .args(["run", &case_path(), "--backend", "cpu", "--steps", "5", "--out"])
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if close_stderr {
            drop(child.stderr.take());
        } else {
            drop(child.stdout.take());
        }
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "closed stderr {close_stderr}: {}",
            stderr(&output)
        );
        assert!(!stderr(&output).contains("panicked"), "{}", stderr(&output));
        let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
        assert!(summary.contains("\"ended\": \"completed\""), "{summary}");
        std::fs::remove_dir_all(out).unwrap();
    }
}

/// `[initial]`: `lbm check` shows the field and its fastest cell; an
/// expression that does not parse, or is infinite at one fine cell's centre
/// only, is refused with exit code 2 by check and run alike, naming the key,
/// before anything is written; a sweep refuses such a member before its
/// first member runs.
#[test]
fn an_initial_field_is_shown_by_check_and_a_bad_one_refused_before_any_work() {
    let dir = scratch("initial");
    std::fs::create_dir_all(&dir).unwrap();
    let cavity = std::fs::read_to_string(case_path()).unwrap();
    let case = dir.join("case.toml");
    let report = check_report(
        &case,
        &format!("{cavity}\n[initial]\nvelocity = [\"0.5 * sin(pi * y)\", 0]\n"),
    );
    assert!(
        report.contains("initial: velocity [\"0.5 * sin(pi * y)\", \"0\"] m/s, pressure \"0\" Pa")
            && report.contains("fastest 0.5000 m/s at x = "),
        "{report}"
    );
    let out = dir.join("out");
    // The second is infinite at x = 70.5 / 128 m, a centre of the patch's
    // cells and of no base cell.
    for (pressure, says) in [
        (
            "exp(x",
            "`initial.pressure` = \"exp(x\": a number or an expression of x and y (m): at character 6: `)` expected \
             to close `exp(`",
        ),
        (
            "0.001 / (x - 0.55078125)",
            "`initial.pressure` = \"0.001 / (x - 0.55078125)\": an expression finite at every fluid cell centre (at \
             x = 0.5507 m",
        ),
    ] {
        std::fs::write(&case, format!("{cavity}\n[initial]\npressure = \"{pressure}\"\n")).unwrap();
        for args in [
            vec!["check", case.to_str().unwrap()],
            vec![
                "run",
                case.to_str().unwrap(),
                "--backend",
                "cpu",
                "--out",
                out.to_str().unwrap(),
            ],
        ] {
            let refused = lbm(&args);
            assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
            assert!(stderr(&refused).contains(says), "{}", stderr(&refused));
        }
        assert!(!out.exists());
    }
    std::fs::write(&case, format!("{cavity}\n[initial]\npressure = 0\n")).unwrap();
    let swept = lbm(&[
        "sweep",
        case.to_str().unwrap(),
        "--set",
        "initial.pressure=0,\"1 / (x - 0.55078125)\"",
        "--backend",
        "cpu",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(swept.status.code(), Some(2), "{}", stderr(&swept));
    assert!(stderr(&swept).contains("member 1"), "{}", stderr(&swept));
    assert!(!out.exists());
    std::fs::remove_dir_all(dir).unwrap();
}

/// `lbm check` and `lbm info` exist to print their report: one that cannot
/// be written (a full disk under `> plan.txt`) fails the command, exit 3.
#[test]
fn a_report_that_cannot_be_written_fails_the_command() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("not run: no /dev/full here");
        return;
    };
    let binary = common::binary();
    for args in [&["info"][..], &["check", &case_path()]] {
        let output = std::process::Command::new(&binary)
            .args(args)
            .stdout(full.try_clone().unwrap())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(3), "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).contains("could not be written"), "{}", stderr(&output));
    }
}

/// A run whose memory estimate passes what `ulimit -v` leaves is refused
/// before anything is written, naming the limit: it was killed (exit 134)
/// by its first allocation that failed, leaving a manifest and no summary.
#[test]
fn a_run_past_the_address_space_limit_is_refused_before_any_work() {
    let dir = scratch("ulimit-v");
    std::fs::create_dir_all(&dir).unwrap();
    // The cavity 4 m across at 600 cells a metre: about 1.4 GiB.
    let text = std::fs::read_to_string(workspace().join("cases/cavity-re100.toml"))
        .unwrap()
        .replace("size = [1.0, 1.0]", "size = [4.0, 4.0]")
        .replace("resolution = 64 ", "resolution = 600 ")
        .replace("viscosity = 0.01 ", "viscosity = 0.0005 ");
    let case = dir.join("big.toml");
    std::fs::write(&case, text).unwrap();
    let out = dir.join("out");
    let binary = common::binary();
    let output = std::process::Command::new("bash")
        .arg("-c")
        .arg("ulimit -v 600000 && exec \"$0\" run \"$1\" --backend cpu --steps 1 --no-pilot --out \"$2\"")
        .arg(&binary)
        .arg(&case)
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("`ulimit -v`-limited"), "{}", stderr(&output));
    assert!(!out.exists(), "refused before the output directory is made");
    std::fs::remove_dir_all(dir).unwrap();
}
