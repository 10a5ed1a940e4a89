//! `lbm sweep` end to end on the CPU backend: one member equal to a plain
//! `lbm run` of its case, a cartesian product with its CSV and plots, the
//! refusals before any work, and shards joined by `--merge`.

mod common;

use common::{lbm, scratch, stderr, workspace};

fn dfg() -> String {
    workspace().join("cases/dfg-2d1.toml").display().to_string()
}

fn json_of(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn csv_rows(path: &std::path::Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split(',').map(str::to_owned).collect())
        .collect()
}

#[test]
fn a_one_member_sweep_is_a_plain_run_of_its_case() {
    let (sweep, plain) = (scratch("sweep-one"), scratch("sweep-one-plain"));
    let args = ["--backend", "cpu", "--steps", "120", "--quiet"];
    let output = lbm(&[
        &[
            "sweep",
            &dfg(),
            "--set",
            "fluid.viscosity=2e-3",
            "--out",
            &sweep.display().to_string(),
        ],
        &args[..],
    ]
    .concat());
    assert!(output.status.success(), "{}", stderr(&output));
    // The same case with the key set by hand.
    let text = std::fs::read_to_string(dfg())
        .unwrap()
        .replace("viscosity = 1e-3", "viscosity = 2e-3");
    let case = scratch("sweep-one-case.toml");
    std::fs::write(&case, text).unwrap();
    let output = lbm(&[
        &[
            "run",
            &case.display().to_string(),
            "--out",
            &plain.display().to_string(),
        ],
        &args[..],
    ]
    .concat());
    assert!(output.status.success(), "{}", stderr(&output));
    let member = sweep.join("members/000");
    for file in ["forces.csv", "probes/wake.csv"] {
        assert_eq!(
            std::fs::read(member.join(file)).unwrap(),
            std::fs::read(plain.join(file)).unwrap(),
            "{file} of the member and of the plain run"
        );
    }
    let rows = csv_rows(&sweep.join("sweep.csv"));
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0][..4], ["member", "fluid.viscosity", "ended", "mlups"]);
    assert_eq!(rows[1][..3], ["0", "2e-3", "completed"]);
    // Its final cd is the plain run's last forces.csv row.
    let forces = std::fs::read_to_string(plain.join("forces.csv")).unwrap();
    let header: Vec<&str> = forces.lines().next().unwrap().split(',').collect();
    let last: Vec<&str> = forces.lines().last().unwrap().split(',').collect();
    let at = header.iter().position(|h| h.starts_with("body0_cd")).unwrap();
    let col = rows[0].iter().position(|h| h == "body0_cd").unwrap();
    let (swept, run): (f64, f64) = (rows[1][col].parse().unwrap(), last[at].parse().unwrap());
    assert!(
        (swept - run).abs() <= 1e-9 * run.abs().max(1.0),
        "{swept} against {run}"
    );
    // Its point probe's last value and its mean over the second half of the
    // samples are those of the plain run's probes/wake.csv.
    let wake = csv_rows(&plain.join("probes/wake.csv"));
    let samples = &wake[1..];
    for (c, name) in ["p_pa", "ux_m_s", "uy_m_s"].into_iter().enumerate() {
        let column = |suffix: &str| {
            let key = format!("probe_wake_{name}{suffix}");
            let at = rows[0]
                .iter()
                .position(|h| *h == key)
                .unwrap_or_else(|| panic!("{key} in {:?}", rows[0]));
            rows[1][at].parse::<f64>().unwrap()
        };
        let value = |row: &Vec<String>| row[c + 1].parse::<f64>().unwrap();
        let half = &samples[samples.len() / 2..];
        let mean = half.iter().map(value).sum::<f64>() / half.len() as f64;
        let last = value(samples.last().unwrap());
        let scale = half.iter().map(|r| value(r).abs()).fold(1e-12, f64::max);
        for (swept, run) in [(column(""), last), (column("_mean"), mean)] {
            assert!((swept - run).abs() <= 1e-8 * scale, "{name}: {swept} against {run}");
        }
    }
    // One member is one point: drawn as a marker (7 x 7 pixels of the
    // curve's colour), which a line alone would not show.
    let path = sweep.join("plots/probe_wake_ux_m_s_mean.png");
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut rgb = vec![0; reader.output_buffer_size().unwrap()];
    reader.next_frame(&mut rgb).unwrap();
    let curve = rgb.chunks(3).filter(|p| *p == [31, 119, 180]).count();
    assert!(curve >= 49, "{curve} pixels of the curve's colour");
    for dir in [sweep, plain] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn a_cartesian_product_runs_every_member_and_shards_merge_into_it() {
    let whole = scratch("sweep-whole");
    let sets = [
        "--set",
        "fluid.viscosity=1e-3,2e-3",
        "--set",
        "boundaries.x_min.inlet.velocity=0.3,0.45",
    ];
    let args = ["--backend", "cpu", "--steps", "60", "--quiet"];
    let output = lbm(&[
        &["sweep", &dfg(), "--out", &whole.display().to_string()],
        &sets[..],
        &args[..],
    ]
    .concat());
    assert!(output.status.success(), "{}", stderr(&output));
    let rows = csv_rows(&whole.join("sweep.csv"));
    assert_eq!(rows.len(), 5, "a header and 2 x 2 members");
    let params: Vec<(&str, &str)> = rows[1..].iter().map(|r| (r[1].as_str(), r[2].as_str())).collect();
    assert_eq!(
        params,
        [("1e-3", "0.3"), ("1e-3", "0.45"), ("2e-3", "0.3"), ("2e-3", "0.45")]
    );
    for k in 0..4 {
        assert!(whole.join(format!("members/{k:03}/summary.json")).exists());
    }
    // A faster inflow drags harder, at either viscosity.
    let cd = rows[0].iter().position(|h| h == "body0_cd_mean").unwrap();
    let value = |r: usize| rows[r][cd].parse::<f64>().unwrap();
    assert!(value(2) > value(1) && value(4) > value(3), "{rows:?}");
    let png = std::fs::read(whole.join("plots/body0_cd_mean.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // What a user's numpy reads of sweep.csv is what was written.
    match std::env::var_os("LBM_PYTHON") {
        None => eprintln!("numpy read-back not run: set LBM_PYTHON to a Python with numpy (.ci/run does)"),
        Some(python) => {
            let script = "import sys, numpy as np\n\
                          t = np.genfromtxt(sys.argv[1], delimiter=',', names=True, dtype=None, encoding='utf-8')\n\
                          print(len(t), ' '.join(repr(float(v)) for v in t['body0_cd_mean']))\n\
                          print(' '.join(str(v) for v in t['ended']))\n\
                          for n in [n for n in t.dtype.names if n.startswith('probe_')]: print(n, ' '.join(repr(float(v)) for v in t[n]))";
            let read = std::process::Command::new(python)
                .args(["-c", script])
                .arg(whole.join("sweep.csv"))
                .output()
                .expect("python runs");
            assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
            let text = String::from_utf8(read.stdout).unwrap();
            let mut lines = text.lines();
            let mut first = lines.next().unwrap().split(' ');
            assert_eq!(first.next(), Some("4"));
            let numpy: Vec<f64> = first.map(|v| v.parse().unwrap()).collect();
            assert_eq!(numpy, (1..5).map(value).collect::<Vec<_>>());
            assert_eq!(lines.next(), Some("completed completed completed completed"));
            // Every point probe column, as numpy names and reads it.
            let probes: Vec<&str> = lines.collect();
            let expected: Vec<usize> = (0..rows[0].len())
                .filter(|&c| rows[0][c].starts_with("probe_"))
                .collect();
            assert_eq!(probes.len(), expected.len(), "{text}");
            assert!(probes.len() >= 6, "p, ux, uy of the wake probe, last and mean: {text}");
            for (line, &c) in probes.iter().zip(&expected) {
                let mut words = line.split(' ');
                assert_eq!(words.next(), Some(rows[0][c].as_str()));
                let numpy: Vec<f64> = words.map(|v| v.parse().unwrap()).collect();
                let ours: Vec<f64> = rows[1..].iter().map(|r| r[c].parse().unwrap()).collect();
                assert_eq!(numpy, ours, "{}", rows[0][c]);
            }
        }
    }

    let shards: Vec<_> = (0..2).map(|k| scratch(&format!("sweep-shard{k}"))).collect();
    for (k, dir) in shards.iter().enumerate() {
        let shard = format!("{k}/2");
        let output = lbm(&[
            &["sweep", &dfg(), "--shard", &shard, "--out", &dir.display().to_string()],
            &sets[..],
            &args[..],
        ]
        .concat());
        assert!(output.status.success(), "{}", stderr(&output));
        let ran: Vec<String> = csv_rows(&dir.join("sweep.csv"))[1..]
            .iter()
            .map(|r| r[0].clone())
            .collect();
        assert_eq!(
            ran,
            [k.to_string(), (k + 2).to_string()],
            "shard {k}/2 runs members {k} and {}",
            k + 2
        );
    }
    let merged = scratch("sweep-merged");
    let merge = || {
        lbm(&[
            "sweep",
            "--merge",
            &merged.display().to_string(),
            &shards[0].display().to_string(),
            &shards[1].display().to_string(),
        ])
    };
    // An OUT that is a file is refused naming --merge, which gave it.
    std::fs::write(&merged, "a file").unwrap();
    let output = merge();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("invalid --merge") && !stderr(&output).contains("--out"),
        "{}",
        stderr(&output)
    );
    std::fs::remove_file(&merged).unwrap();
    let output = merge();
    assert!(output.status.success(), "{}", stderr(&output));
    let mut mine = csv_rows(&merged.join("sweep.csv"));
    let mut full = csv_rows(&whole.join("sweep.csv"));
    // Each row names its member's directory in its shard, from the merge's.
    let out = full[0].iter().position(|h| h == "out").unwrap();
    for row in &mine[1..] {
        let member: usize = row[0].parse().unwrap();
        let dir = merged.join(&row[out]);
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
        assert_eq!(
            dir.canonicalize().unwrap(),
            shards[member % 2].join(&full[member + 1][out]).canonicalize().unwrap()
        );
        assert_eq!(summary["ended"], "completed");
    }
    // Everything else but the speed is the whole sweep's.
    let mlups = full[0].iter().position(|h| h == "mlups").unwrap();
    for r in mine.iter_mut().chain(full.iter_mut()) {
        r.truncate(out);
        r.remove(mlups);
    }
    assert_eq!(mine, full);
    // A merge is the sweep's results, not a run: resuming it or merging it
    // again says so.
    let resumed = lbm(&["resume", &merged.display().to_string()]);
    assert_eq!(resumed.status.code(), Some(2), "{}", stderr(&resumed));
    assert!(
        stderr(&resumed).contains("it is a merge of shards (`lbm sweep --merge`)"),
        "{}",
        stderr(&resumed)
    );
    let again = scratch("sweep-merged-again");
    let remerged = lbm(&[
        "sweep",
        "--merge",
        &again.display().to_string(),
        &merged.display().to_string(),
    ]);
    assert_eq!(remerged.status.code(), Some(2), "{}", stderr(&remerged));
    assert!(
        stderr(&remerged).contains("it is a merge already"),
        "{}",
        stderr(&remerged)
    );
    assert!(!again.exists());

    // Shards of another sweep, or a member twice, are refused.
    let other = scratch("sweep-other");
    let output = lbm(&[
        &[
            "sweep",
            &dfg(),
            "--set",
            "fluid.viscosity=3e-3",
            "--out",
            &other.display().to_string(),
        ],
        &args[..],
    ]
    .concat());
    assert!(output.status.success(), "{}", stderr(&output));
    for (second, expect) in [(&other, "another sweep"), (&shards[0], "also in shard")] {
        let target = scratch("sweep-bad-merge");
        let output = lbm(&[
            "sweep",
            "--merge",
            &target.display().to_string(),
            &shards[0].display().to_string(),
            &second.display().to_string(),
        ]);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).contains(expect), "{}", stderr(&output));
        assert!(!target.join("sweep.csv").exists());
    }
    // A shard whose sweep.json was edited: a row outside what its hash
    // covers (a member's parameters, its directory, the member count), or
    // a swept value and its rows alike, which its hash no longer gives.
    let record = shards[0].join("sweep.json");
    let original = std::fs::read_to_string(&record).unwrap();
    let json: serde_json::Value = serde_json::from_str(&original).unwrap();
    let (param, value, rows) = ("/results/0/parameters/0/1", "/sweeps/0/values/0", "/members");
    for (expect, edits) in [
        ("is not a member of its sweep", vec![(param, serde_json::json!("999"))]),
        (
            "where the sweep wrote members/000",
            vec![("/results/0/out", serde_json::json!("/etc"))],
        ),
        ("members where its sweeps make", vec![(rows, serde_json::json!(5))]),
        (
            "do not give its sweep_sha256",
            vec![
                (value, serde_json::json!("1.5e-3")),
                (param, serde_json::json!("1.5e-3")),
            ],
        ),
    ] {
        let mut edited = json.clone();
        for (pointer, v) in edits {
            *edited.pointer_mut(pointer).unwrap() = v;
        }
        std::fs::write(&record, edited.to_string()).unwrap();
        let target = scratch("sweep-edited-merge");
        let output = lbm(&[
            "sweep",
            "--merge",
            &target.display().to_string(),
            &shards[0].display().to_string(),
            &shards[1].display().to_string(),
        ]);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).contains(expect), "{expect}: {}", stderr(&output));
        assert!(!target.join("sweep.csv").exists());
    }
    std::fs::write(&record, original).unwrap();
    // A merge runs nothing: a run's flags beside it are refused, not ignored.
    for flag in [
        &["--out", "elsewhere"][..],
        &["--max-wall-seconds", "5"],
        &["--backend", "cpu"],
        &["--quiet"],
    ] {
        let target = scratch("sweep-flag-merge");
        let mut args = vec!["sweep", "--merge"];
        let target_text = target.display().to_string();
        let shard = shards[0].display().to_string();
        args.extend([target_text.as_str(), shard.as_str()]);
        args.extend(flag);
        let output = lbm(&args);
        assert_eq!(output.status.code(), Some(2), "{flag:?}: {}", stderr(&output));
        assert!(stderr(&output).contains(flag[0]), "{flag:?}: {}", stderr(&output));
        assert!(!target.join("sweep.csv").exists());
    }
    for dir in shards.iter().chain([&whole, &merged, &other]) {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn bad_members_are_refused_before_any_work_naming_member_and_key() {
    let out = scratch("sweep-bad");
    let out_arg = out.display().to_string();
    for (set, expect) in [
        ("fluid.viscosity=1e-3,-1e-3", "sweep member 1 (fluid.viscosity = -1e-3)"),
        ("fluid.colour=1,2", "colour"),
        (
            "domain.resolution=10,20",
            "differs from member 0's (base grid 440 x 82 cells; level 1 patches x 10..240 y 0..82",
        ),
        (
            "boundaries.y_max=\"wall\",\"free_slip\"",
            "y_min wall, y_max free_slip against x_min inlet",
        ),
        ("bodies.4.radius=0.05", "entry 4"),
        (
            "bodies.x.radius=0.05",
            "`bodies` is an array: index its entries with a whole number from 0 (`bodies.0`), not `x`",
        ),
        // The time step follows the reference velocity: the members' samples
        // would be at other times.
        ("flow.reference_velocity=0.3,0.6", "its time step is"),
        (
            "output.probes=[{name=\"a\",point=[0.4,0.2]}],[{name=\"b\",point=[0.4,0.2]}]",
            "its probes and lines are named [\"b\", \"wake_profile\"] where member 0's are [\"a\", \"wake_profile\"]",
        ),
        ("fluid.viscosity", "--set"),
        ("fluid.viscosity=abc", "not a TOML value"),
        (
            "fluid.viscosity=1979-05-27",
            "`1979-05-27` is a TOML date or time, which no case key takes",
        ),
        // A comment would reach sweep.csv as part of the value.
        (
            "fluid.viscosity=1e-3,2e-3 # c",
            "`2e-3 # c` is not a TOML value (quote strings; no comment or newline)",
        ),
        // Members step together: one run length, with --steps or without.
        (
            "run.steps=10,20",
            "invalid --set run.steps=10,20: a key other than run.steps: a sweep's members step together",
        ),
        // Named as a case names them, not as Rust prints them.
        (
            "run.tiles=[[8,8],[8,8],[8,8]],[[16,16],[16,16],[16,16]]",
            "storage tile shape differs from member 0's (level 0 [16, 16], level 1 [16, 16], level 2 [16, 16] \
             against level 0 [8, 8]",
        ),
    ] {
        let output = lbm(&[
            "sweep",
            &dfg(),
            "--set",
            set,
            "--backend",
            "cpu",
            "--out",
            &out_arg,
            "--steps",
            "10",
        ]);
        assert_eq!(output.status.code(), Some(2), "{set}: {}", stderr(&output));
        assert!(stderr(&output).contains(expect), "{set}: {}", stderr(&output));
        // No line of the member's generated text, which the user never sees.
        assert!(!stderr(&output).contains("line "), "{set}: {}", stderr(&output));
        assert!(!out.exists(), "{set}: nothing is written");
    }
    // A key of 100 000 characters is refused as no key, shown by its start.
    let long = format!("{}=1", "a".repeat(100_000));
    let output = lbm(&["sweep", &dfg(), "--set", &long, "--backend", "cpu", "--out", &out_arg]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("of at most 200 characters") && message.contains("(100002 characters)") && message.len() < 600,
        "{message}"
    );
    // A fused batch needs one grid: another resolution is refused.
    let output = lbm(&[
        "sweep",
        &dfg(),
        "--set",
        "domain.resolution=10,12",
        "--fused",
        "--steps",
        "10",
        "--backend",
        "cpu",
        "--out",
        &out_arg,
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("sweep member 1") && message.contains("hierarchy"),
        "{message}"
    );
    // Refused as a whole sweep, before any member runs and anything is written.
    let case = dfg();
    let refused = |flags: &[&str], expect: &str| {
        let output = lbm(&[&["sweep", case.as_str()], flags, &["--out", out_arg.as_str()]].concat());
        assert_eq!(output.status.code(), Some(2), "{flags:?}: {}", stderr(&output));
        assert!(stderr(&output).contains(expect), "{flags:?}: {}", stderr(&output));
        assert!(!out.exists(), "{flags:?}: nothing is written");
    };
    refused(&["--set", "fluid.viscosity=1e-3,2e-3", "--shard", "2/2"], "--shard");
    // A table amplitude beside another kind has a buffer the other lacks,
    // named as the case asks for it.
    refused(
        &[
            "--set",
            "boundaries.x_min.inlet.amplitude={table={points=[[0.0,1.0]]}},\"constant\"",
            "--fused",
            "--steps",
            "10",
            "--backend",
            "cpu",
        ],
        "an inlet amplitude given as `{ table = ... }` in some members and not in others",
    );
    // One key in two --set, which would overwrite each other in every member.
    refused(
        &["--set", "fluid.viscosity=1e-3", "--set", "fluid.viscosity=2e-3"],
        "swept twice",
    );
    // Without --steps another time step also changes the run's length in
    // intervals: the time step is what is named.
    refused(&["--set", "flow.lattice_velocity=0.05,0.06"], "its time step is");
    // A product beyond what one sweep takes is refused at once, before a
    // member is checked.
    let values = |n: usize, from: f64| {
        (0..n)
            .map(|k| format!("{}", from * (1.0 + k as f64 * 1e-3)))
            .collect::<Vec<_>>()
            .join(",")
    };
    let (viscosity, density) = (
        format!("fluid.viscosity={}", values(101, 1e-3)),
        format!("fluid.density={}", values(100, 1.0)),
    );
    let started = std::time::Instant::now();
    refused(
        &["--set", &viscosity, "--set", &density],
        "invalid --set 101 x 100 values (10100 members): lists whose product is at most 10000",
    );
    assert!(started.elapsed().as_secs_f64() < 5.0, "refused at once");
}

#[test]
fn a_fused_sweep_writes_what_a_lockstep_sweep_writes() {
    let (fused, lockstep) = (scratch("sweep-fused"), scratch("sweep-lockstep"));
    for (out, mode) in [(&fused, "--fused"), (&lockstep, "--lockstep")] {
        let output = lbm(&[
            "sweep",
            &dfg(),
            "--set",
            "fluid.viscosity=1e-3,1.5e-3",
            mode,
            "--backend",
            "cpu",
            "--steps",
            "60",
            "--quiet",
            "--out",
            &out.display().to_string(),
        ]);
        assert!(output.status.success(), "{mode}: {}", stderr(&output));
    }
    for member in ["members/000", "members/001"] {
        for file in ["forces.csv", "probes/wake.csv"] {
            assert_eq!(
                std::fs::read(fused.join(member).join(file)).unwrap(),
                std::fs::read(lockstep.join(member).join(file)).unwrap(),
                "{member}/{file}: fused and lockstep"
            );
        }
    }
    assert_eq!(
        rows_but_speed(&fused.join("sweep.csv")),
        rows_but_speed(&lockstep.join("sweep.csv")),
        "the same rows but for the speed"
    );
    for dir in [fused, lockstep] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// DFG 2D-1 swept over two viscosities for 200 intervals on the CPU, into
/// `out`, with the flags `extra`.
fn two_member_sweep(out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let (out, case) = (out.display().to_string(), dfg());
    let mut args = vec![
        "sweep",
        &case,
        "--set",
        "fluid.viscosity=1e-3,1.5e-3",
        "--backend",
        "cpu",
        "--steps",
        "200",
        "--quiet",
        "--out",
        &out,
    ];
    args.extend_from_slice(extra);
    lbm(&args)
}

fn resume_on_cpu(dir: &std::path::Path) -> std::process::Output {
    lbm(&["resume", &dir.display().to_string(), "--backend", "cpu", "--quiet"])
}

/// `out`'s sweep gave `whole`'s results: its table but for the speed, and
/// each member's forces and probe, byte for byte.
fn assert_same_results(out: &std::path::Path, whole: &std::path::Path, what: &str) {
    assert_eq!(
        rows_but_speed(&out.join("sweep.csv")),
        rows_but_speed(&whole.join("sweep.csv")),
        "{what}: and whole"
    );
    // The same plots: none left over from the results before a resume.
    let plots = |dir: &std::path::Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir.join("plots"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(plots(out), plots(whole), "{what}: plots");
    for member in ["members/000", "members/001"] {
        for file in ["forces.csv", "probes/wake.csv"] {
            assert_eq!(
                std::fs::read(out.join(member).join(file)).unwrap(),
                std::fs::read(whole.join(member).join(file)).unwrap(),
                "{what} {member}/{file}: and whole"
            );
        }
    }
}

/// Rows of a `sweep.csv` without the speed column, which no two runs share.
fn rows_but_speed(path: &std::path::Path) -> Vec<Vec<String>> {
    let rows = csv_rows(path);
    let mlups = rows[0].iter().position(|h| h == "mlups").unwrap();
    rows.into_iter()
        .map(|mut r| {
            r.remove(mlups);
            r
        })
        .collect()
}

#[test]
fn a_sweep_stopped_at_its_wall_limit_or_killed_resumes_to_the_results_of_one_that_was_not() {
    let sweep = |out: &std::path::Path, mode: &str, extra: &[&str]| two_member_sweep(out, &[&[mode], extra].concat());
    let whole = scratch("sweep-resume-whole");
    let output = sweep(&whole, "--lockstep", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    for mode in ["--lockstep", "--fused"] {
        let out = scratch(&format!("sweep-resume{mode}"));
        // Past the members' start, short of their end (checked below).
        let output = sweep(&out, mode, &["--max-wall-seconds", "1.5"]);
        assert_eq!(output.status.code(), Some(0), "{mode}: {}", stderr(&output));
        let stopped = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
        assert_eq!(stopped.matches(",wall limit,").count(), 2, "{mode}: {stopped}");
        assert!(
            String::from_utf8_lossy(&output.stdout).contains("lbm resume"),
            "{mode}: the way on is named"
        );
        // A shard that has not ended is no result to merge.
        let merged = scratch(&format!("sweep-resume-merge{mode}"));
        let output = lbm(&[
            "sweep",
            "--merge",
            &merged.display().to_string(),
            &out.display().to_string(),
        ]);
        assert_eq!(output.status.code(), Some(2), "{mode}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("has not ended (wall limit)"),
            "{}",
            stderr(&output)
        );
        if mode == "--fused" {
            // As a kill leaves it: the record of members still running, no table.
            let record = out.join("sweep.json");
            let text = std::fs::read_to_string(&record).unwrap();
            std::fs::write(&record, text.replace("\"wall limit\"", "\"running\"")).unwrap();
            std::fs::remove_file(out.join("sweep.csv")).unwrap();
        }
        // A plot of a quantity the finished results lack (a Strouhal number
        // from a stopped member's short lift record): the resumed sweep
        // must not leave it, and must leave a file of the user's.
        assert!(
            !whole.join("plots/body0_strouhal.png").exists(),
            "the short members' lift does not oscillate"
        );
        std::fs::copy(out.join("plots/body0_cd.png"), out.join("plots/body0_strouhal.png")).unwrap();
        std::fs::write(out.join("plots/mine.png"), b"a user's figure").unwrap();
        let output = resume_on_cpu(&out);
        assert!(output.status.success(), "{mode}: {}", stderr(&output));
        assert_eq!(std::fs::read(out.join("plots/mine.png")).unwrap(), b"a user's figure");
        std::fs::remove_file(out.join("plots/mine.png")).unwrap();
        assert_same_results(&out, &whole, mode);
        for member in ["members/000", "members/001"] {
            let manifest = std::fs::read_to_string(out.join(member).join("manifest.json")).unwrap();
            assert!(manifest.contains("from_interval"), "{mode} {member} was resumed");
        }
        let output = resume_on_cpu(&out);
        assert_eq!(output.status.code(), Some(2), "{mode}: {}", stderr(&output));
        assert!(stderr(&output).contains("nothing to resume"), "{}", stderr(&output));
        std::fs::remove_dir_all(out).unwrap();
    }
    std::fs::remove_dir_all(whole).unwrap();
}

/// A member that fails (here on a write error: a file where its last save
/// point's folder goes) is continued from its checkpoint by the sweep's
/// resume once the cause is gone, as a plain run is, and the sweep's
/// results then hold it; one resumed on its own comes back into them at
/// the sweep's next resume. Either way they are an unbroken sweep's.
#[test]
fn a_failed_member_goes_on_with_the_sweeps_resume() {
    let (sweep, resume) = (two_member_sweep, resume_on_cpu);
    let whole = scratch("sweep-failed-whole");
    assert!(sweep(&whole, &[]).status.success());
    for on_its_own in [false, true] {
        let out = scratch(&format!("sweep-failed-{on_its_own}"));
        let output = sweep(&out, &["--max-wall-seconds", "1.5"]);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let stopped = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
        assert_eq!(stopped.matches(",wall limit,").count(), 2, "{stopped}");
        let blocker = out.join("members/001/fields/t000000200");
        std::fs::write(&blocker, "in the way").unwrap();
        let output = resume(&out);
        assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
        // The member's cause, naming the file in the way.
        assert!(
            stderr(&output).contains("(member 1: failed (") && stderr(&output).contains(&blocker.display().to_string()),
            "{}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("failed and can go on continue with: lbm resume"),
            "{}",
            stderr(&output)
        );
        let failed = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
        assert_eq!(failed.matches(",failed,").count(), 1, "{failed}");
        std::fs::remove_file(&blocker).unwrap();
        if on_its_own {
            let output = resume(&out.join("members/001"));
            assert!(output.status.success(), "{}", stderr(&output));
        }
        let output = resume(&out);
        assert!(output.status.success(), "{}", stderr(&output));
        let what = if on_its_own {
            "member resumed on its own"
        } else {
            "sweep resumed"
        };
        assert_same_results(&out, &whole, what);
        let output = resume(&out);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        std::fs::remove_dir_all(out).unwrap();
    }
    std::fs::remove_dir_all(whole).unwrap();
}

#[test]
fn a_sweep_turns_a_body_by_its_rotation_key() {
    let out = scratch("sweep-rotation");
    let case = workspace().join("cases/square-obstacle.toml").display().to_string();
    let output = lbm(&[
        "sweep",
        &case,
        "--set",
        "bodies.0.rotation=0,10",
        "--backend",
        "cpu",
        "--steps",
        "300",
        "--quiet",
        "--out",
        &out.display().to_string(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let rows = csv_rows(&out.join("sweep.csv"));
    assert_eq!(rows[0][1], "bodies.0.rotation");
    assert_eq!((rows[1][1].as_str(), rows[2][1].as_str()), ("0", "10"));
    // Each member's case holds its angle, and the turned square feels
    // another force.
    let member = std::fs::read_to_string(out.join("members/001/case.toml")).unwrap();
    assert!(member.contains("rotation = 10"), "{member}");
    let cd = rows[0].iter().position(|h| h == "body0_cd").unwrap();
    assert_ne!(rows[1][cd], rows[2][cd]);
    // Fused, the two squares have wall links and lists of their own lengths,
    // and the same results as in lockstep, bit for bit.
    let fused = scratch("sweep-rotation-fused");
    let lockstep = scratch("sweep-rotation-lockstep");
    let output = lbm(&[
        "sweep",
        &case,
        "--set",
        "bodies.0.rotation=0,10",
        "--fused",
        "--backend",
        "cpu",
        "--steps",
        "20",
        "--out",
        &fused.display().to_string(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = lbm(&[
        "sweep",
        &case,
        "--set",
        "bodies.0.rotation=0,10",
        "--lockstep",
        "--backend",
        "cpu",
        "--steps",
        "20",
        "--out",
        &lockstep.display().to_string(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    // Every column but the speed.
    let results = |dir: &std::path::Path| -> Vec<Vec<String>> {
        let text = std::fs::read_to_string(dir.join("sweep.csv")).unwrap();
        let mut rows: Vec<Vec<String>> = text
            .lines()
            .map(|l| l.split(',').map(str::to_owned).collect())
            .collect();
        let mlups = rows[0].iter().position(|h| h == "mlups").unwrap();
        rows.iter_mut().for_each(|r| {
            r.remove(mlups);
        });
        rows
    };
    assert_eq!(results(&fused), results(&lockstep));
    for m in ["000", "001"] {
        let read = |dir: &std::path::Path| std::fs::read(dir.join(format!("members/{m}/forces.csv"))).unwrap();
        assert_eq!(read(&fused), read(&lockstep), "member {m}'s forces");
    }
    for dir in [out, fused, lockstep] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn a_member_that_diverges_is_reported_and_the_others_complete() {
    let out = scratch("sweep-diverge");
    let cavity = workspace().join("cases/cavity-re100.toml").display().to_string();
    // At a hundredth of the viscosity the lid's corner blows up (around
    // interval 420); the first member is the case as written.
    let short = ["--steps", "500", "--backend", "cpu", "--quiet", "--out"];
    // The sweep into `dir`, with `extra` flags (a shard).
    let sweep = |dir: &std::path::Path, extra: &[&str]| {
        let sets = [
            "sweep",
            &cavity,
            "--set",
            "fluid.viscosity=0.01,1e-4",
            "--set",
            "flow.lattice_velocity=0.17",
        ];
        lbm(&[&sets[..], extra, &short[..], &[&dir.display().to_string()]].concat())
    };
    let output = sweep(&out, &[]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(stderr(&output).contains("member 1: diverged"), "{}", stderr(&output));
    let rows = csv_rows(&out.join("sweep.csv"));
    let ended = rows[0].iter().position(|h| h == "ended").unwrap();
    assert_eq!(
        (rows[1][ended].as_str(), rows[2][ended].as_str()),
        ("completed", "diverged")
    );
    let summary = json_of(&out.join("members/001/summary.json"));
    assert_eq!(summary["ended"], "diverged");
    assert!(summary["completed_intervals"].as_u64().unwrap() < 500);
    let done = json_of(&out.join("members/000/summary.json"));
    assert_eq!(done["completed_intervals"], 500, "the healthy member ran to the end");
    // A plain run of the member's case diverges where the member did, though
    // the sweep's chunks end elsewhere, and says so alike.
    let text = std::fs::read_to_string(&cavity)
        .unwrap()
        .replace("viscosity = 0.01 ", "viscosity = 1e-4 ")
        .replace("lattice_velocity = 0.1 ", "lattice_velocity = 0.17 ");
    let case = scratch("sweep-diverge-case.toml");
    std::fs::write(&case, text).unwrap();
    let plain = scratch("sweep-diverge-plain");
    let output = lbm(&[
        &["run", &case.display().to_string()],
        &short[..],
        &[&plain.display().to_string()],
    ]
    .concat());
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let alone = json_of(&plain.join("summary.json"));
    let at = |s: &serde_json::Value| {
        let e = s["error"].as_str().unwrap().to_owned();
        e[..e.find(':').unwrap()].to_owned()
    };
    assert_eq!(at(&alone), at(&summary), "{alone}\n{summary}");
    assert_eq!(alone["completed_intervals"], summary["completed_intervals"]);
    assert_eq!(
        std::fs::read(plain.join("probes/centre.csv")).unwrap(),
        std::fs::read(out.join("members/001/probes/centre.csv")).unwrap()
    );
    // The fields at the divergence are of the interval the run stopped at,
    // the same in both, and sweep.csv's speed is the member's own.
    let step = summary["completed_intervals"].as_u64().unwrap();
    assert!(out.join(format!("members/001/fields/t{step:09}.vthb")).exists());
    assert_eq!(
        std::fs::read(plain.join("fields/index.json")).unwrap(),
        std::fs::read(out.join("members/001/fields/index.json")).unwrap()
    );
    let mlups = rows[0].iter().position(|h| h == "mlups").unwrap();
    assert_eq!(
        rows[2][mlups].parse::<f64>().unwrap(),
        summary["mlups"].as_f64().unwrap()
    );
    // The same sweep in two shards: their merge writes the same table and
    // fails as the sweep did, naming the member.
    let shards: Vec<_> = (0..2).map(|k| scratch(&format!("sweep-diverge-shard{k}"))).collect();
    for (k, shard) in shards.iter().enumerate() {
        sweep(shard, &["--shard", &format!("{k}/2")]);
    }
    let merged = scratch("sweep-diverge-merged");
    let paths: Vec<String> = [&merged, &shards[0], &shards[1]]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let output = lbm(&[
        &["sweep", "--merge"][..],
        &paths.iter().map(String::as_str).collect::<Vec<_>>(),
    ]
    .concat());
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(stderr(&output).contains("member 1: diverged"), "{}", stderr(&output));
    let merged_rows = csv_rows(&merged.join("sweep.csv"));
    let column = |rows: &[Vec<String>], name: &str| {
        let k = rows[0].iter().position(|h| h == name).unwrap();
        rows.iter().map(|r| r[k].clone()).collect::<Vec<_>>()
    };
    for name in ["ended", "fluid.viscosity"] {
        assert_eq!(column(&merged_rows, name), column(&rows, name), "{name}");
    }
    for dir in [out, plain, merged].into_iter().chain(shards) {
        std::fs::remove_dir_all(dir).unwrap();
    }
    std::fs::remove_file(case).unwrap();
}

#[test]
fn a_batch_larger_than_the_memory_is_refused_before_any_work() {
    let dir = scratch("sweep-memory");
    std::fs::create_dir_all(&dir).unwrap();
    // The refined cavity at 20000 base cells per metre: tens of GB a member.
    let text = std::fs::read_to_string(workspace().join("cases/cavity-re100.toml"))
        .unwrap()
        .replace("resolution = 64 ", "resolution = 20000 ")
        .replace("viscosity = 0.01 ", "viscosity = 1e-5 ");
    let case = dir.join("big.toml");
    std::fs::write(&case, text).unwrap();
    let out = dir.join("out");
    let output = lbm(&[
        "sweep",
        &case.display().to_string(),
        "--set",
        "fluid.viscosity=1e-5,2e-5,3e-5",
        "--backend",
        "cpu",
        "--out",
        &out.display().to_string(),
    ]);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert!(
        message.contains("the run needs about")
            && message.contains("3 members' device buffers")
            && message.contains("the program 32.0 MiB and 3 members' host peaks"),
        "{message}"
    );
    assert!(!out.exists(), "refused before the output directory is made");
    std::fs::remove_dir_all(dir).unwrap();
}

/// `lbm sweep CASE ARGS... --backend cpu --quiet --out OUT`.
fn sweep_on_cpu(case: &std::path::Path, args: &[&str], out: &std::path::Path) -> std::process::Output {
    let (case, out) = (case.display().to_string(), out.display().to_string());
    let mut all = vec!["sweep", case.as_str()];
    all.extend_from_slice(args);
    all.extend(["--backend", "cpu", "--quiet", "--out", out.as_str()]);
    lbm(&all)
}

/// The refined cavity of `cases/` at 32 base cells, `steps` long.
fn small_cavity(name: &str, steps: u32) -> std::path::PathBuf {
    let text = std::fs::read_to_string(workspace().join("cases/cavity-re100.toml"))
        .unwrap()
        .replace("resolution = 64 ", "resolution = 32 ")
        .replace("steps = 8000 ", &format!("steps = {steps} "));
    let case = scratch(&format!("{name}.toml"));
    std::fs::write(&case, text).unwrap();
    case
}

/// A stall ends the sweep with every member that had not ended written as
/// stalled, in its summary, sweep.json and sweep.csv, and `lbm resume`
/// finishes it; a member that fails early is watched no longer, so it does
/// not stall a sweep whose other members go on past the watchdog's period.
#[test]
fn a_stalled_sweep_is_recorded_and_a_failed_member_is_not_a_stall() {
    let case = small_cavity("sweep-stall-case", 200);
    let out = scratch("sweep-stall");
    let output = sweep_on_cpu(
        &case,
        &["--set", "fluid.viscosity=0.01,0.02", "--watchdog-seconds", "0.001"],
        &out,
    );
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("the sweep stalled: member(s) 0, 1"),
        "{}",
        stderr(&output)
    );
    let record = json_of(&out.join("sweep.json"));
    for (k, result) in record["results"].as_array().unwrap().iter().enumerate() {
        assert_eq!(result["ended"], "stalled", "{record}");
        assert_eq!(
            json_of(&out.join(format!("members/{k:03}/summary.json")))["ended"],
            "stalled"
        );
    }
    let rows = csv_rows(&out.join("sweep.csv"));
    let ended = rows[0].iter().position(|h| h == "ended").unwrap();
    assert_eq!(
        (rows[1][ended].as_str(), rows[2][ended].as_str()),
        ("stalled", "stalled")
    );
    let resumed = lbm(&["resume", &out.display().to_string(), "--backend", "cpu", "--quiet"]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    // Member 1 diverges at interval 320 (the lid at Mach 0.29 over a
    // twentieth of the viscosity); member 0 steps on to 12000, for several
    // times the watchdog's 3 s (about 7 s on two idle cores), which leaves
    // a loaded machine's member 0 room between its beats.
    let out2 = scratch("sweep-stall-failed");
    let long = small_cavity("sweep-stall-long", 12000);
    let output = sweep_on_cpu(
        &long,
        &[
            "--set",
            "fluid.viscosity=0.01,5e-4",
            "--set",
            "flow.lattice_velocity=0.17",
            "--watchdog-seconds",
            "3",
        ],
        &out2,
    );
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(!stderr(&output).contains("stalled"), "{}", stderr(&output));
    let rows = csv_rows(&out2.join("sweep.csv"));
    let ended = rows[0].iter().position(|h| h == "ended").unwrap();
    assert_eq!(
        (rows[1][ended].as_str(), rows[2][ended].as_str()),
        ("completed", "diverged")
    );
    // Every column of the case stays, whatever the members' endings.
    assert!(rows[0].iter().any(|h| h == "probe_centre_p_pa"), "{:?}", rows[0]);
    std::fs::remove_dir_all(out).unwrap();
    std::fs::remove_dir_all(out2).unwrap();
    std::fs::remove_file(case).unwrap();
    std::fs::remove_file(long).unwrap();
}

/// A member's case.toml edited after the sweep stopped is refused by the
/// sweep's resume; `--merge` refuses a set of shards that misses a member.
#[test]
fn resume_refuses_an_edited_member_and_merge_a_missing_one() {
    let case = small_cavity("sweep-edit-case", 3000);
    let out = scratch("sweep-edit");
    let output = sweep_on_cpu(
        &case,
        &["--set", "fluid.viscosity=0.01,0.02", "--max-wall-seconds", "1"],
        &out,
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let member = out.join("members/000/case.toml");
    let text = std::fs::read_to_string(&member).unwrap();
    std::fs::write(&member, text.replace("viscosity = 0.01", "viscosity = 0.03")).unwrap();
    let refused = lbm(&["resume", &out.display().to_string(), "--backend", "cpu", "--quiet"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("members/000/case.toml is not the case the sweep wrote"),
        "{}",
        stderr(&refused)
    );
    std::fs::remove_dir_all(&out).unwrap();
    // Shard 0 of 2 alone is not the sweep.
    let shard = scratch("sweep-edit-shard");
    let short = small_cavity("sweep-edit-short", 20);
    let output = sweep_on_cpu(
        &short,
        &["--set", "fluid.viscosity=0.01,0.02", "--shard", "0/2"],
        &shard,
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let merged = scratch("sweep-edit-merged");
    let refused = lbm(&[
        "sweep",
        "--merge",
        &merged.display().to_string(),
        &shard.display().to_string(),
    ]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("member(s) 1 of the sweep's 2 are in none of these shards"),
        "{}",
        stderr(&refused)
    );
    assert!(!merged.exists());
    // A shard's record edited: an ending no run writes, a shard no --shard
    // makes, its rows gone. Merge and resume refuse each, naming it.
    let record_path = shard.join("sweep.json");
    let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&record_path).unwrap()).unwrap();
    for (edit, says) in [
        ("/results/0/ended", "ended `banana`, which no run writes"),
        ("/shard", "shard 5/3 of 2 members, which no `--shard` makes"),
        ("/results", "has rows for 0 member(s) where its shard 0/2 runs 1"),
    ] {
        let mut edited = record.clone();
        *edited.pointer_mut(edit).unwrap() = match edit {
            "/shard" => serde_json::json!([5, 3]),
            "/results" => serde_json::json!([]),
            _ => serde_json::json!("banana"),
        };
        std::fs::write(&record_path, serde_json::to_string(&edited).unwrap()).unwrap();
        let dir = shard.display().to_string();
        for command in [
            &["sweep", "--merge", &merged.display().to_string(), &dir][..],
            &["resume", &dir, "--backend", "cpu", "--quiet"],
        ] {
            let refused = lbm(command);
            assert_eq!(refused.status.code(), Some(2), "{command:?}: {}", stderr(&refused));
            assert!(stderr(&refused).contains(says), "{command:?}: {}", stderr(&refused));
        }
        assert!(!merged.exists());
    }
    std::fs::remove_dir_all(shard).unwrap();
    for f in [case, short] {
        std::fs::remove_file(f).unwrap();
    }
}
