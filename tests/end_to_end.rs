//! The `lbm` binary on whole benchmark runs: slow (minutes on two cores), so
//! apart from the fast CLI tests; `cargo test --workspace` runs both.

mod common;

use common::{scratch, stderr, validate_on_cpu};

/// DFG 2D-1 at half the default resolution (40 cells per diameter, about 90
/// s on two cores where the default takes five minutes) on the CPU meets
/// its target: drag within 1% and the pressure difference within 2% of the
/// benchmark (measured: cd -0.30%, cl -0.19%, delta_p -0.95%). cd and
/// delta_p fall outside the benchmark's narrow intervals at this
/// resolution, so `validate` exits 4 and names them (cl did too, at -5.5%,
/// until the inlet restored its odd non-equilibrium; cd was inside, at
/// -0.14%, while the restriction beside an interface read the ghost band or
/// used a one-sided 3-point stencil). Off its default and estimated at over
/// a minute, it needs its pilot first.
#[test]
fn validate_dfg_2d1_at_40_cells_per_diameter_is_close_to_the_benchmark() {
    let out = scratch("validate");
    let pilot = scratch("validate-pilot");
    let refused = validate_on_cpu(&["dfg-2d1", "--resolution", "40"], &out);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("needs a pilot first"), "{}", stderr(&refused));
    // The built-in benchmark has no case file to edit: the waiver names --case.
    assert!(
        stderr(&refused).contains("a --case file with run.require_pilot = false waives that"),
        "{}",
        stderr(&refused)
    );
    // The command it gives to run the pilot is this one, its flags kept.
    assert!(
        stderr(&refused).contains("`lbm validate dfg-2d1 --resolution 40 --backend cpu --pilot --out PILOT_DIR`"),
        "{}",
        stderr(&refused)
    );
    assert!(!out.exists(), "a refused validation writes nothing");
    let piloted = validate_on_cpu(&["dfg-2d1", "--resolution", "40", "--pilot"], &pilot);
    assert!(piloted.status.success(), "{}", stderr(&piloted));
    let pilot_dir = pilot.display().to_string();
    let output = validate_on_cpu(&["dfg-2d1", "--resolution", "40", "--after-pilot", &pilot_dir], &out);
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("error: cd, delta_p outside the benchmark's interval"),
        "{}",
        stderr(&output)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["case"], "dfg-2d1");
    assert_eq!(report["converged"], true);
    // What the run was: the built-in case, its lattice velocity and
    // collision, the plan's hash and the version.
    assert!(report["case_file"].is_null(), "{report}");
    assert_eq!(report["lattice_velocity"], 0.05);
    assert_eq!(report["collision"]["model"], "trt", "{report}");
    assert_eq!(report["plan_sha256"].as_str().map(str::len), Some(64), "{report}");
    assert_eq!(report["version"], env!("CARGO_PKG_VERSION"));
    for q in report["quantities"].as_array().unwrap() {
        let (name, value, reference) = (
            &q["name"],
            q["value"].as_f64().unwrap(),
            q["reference"].as_f64().unwrap(),
        );
        let tolerance = match name.as_str() {
            Some("cd") => 0.01,
            Some("delta_p") => 0.02,
            _ => continue,
        };
        assert!(
            (value / reference - 1.0).abs() < tolerance,
            "{name} = {value}, reference {reference}"
        );
    }
    assert!(
        std::fs::read_to_string(out.join("report.md"))
            .unwrap()
            .contains("| cd |")
    );
    let series = std::fs::read_to_string(out.join("series.csv")).unwrap();
    let mut rows = series.lines();
    assert_eq!(rows.next(), Some("time_s,cd,cl,delta_p_pa"));
    let last: Vec<f64> = rows.last().unwrap().split(',').map(|v| v.parse().unwrap()).collect();
    let cd = report["quantities"][0]["value"].as_f64().unwrap();
    assert_eq!(last[1], cd, "the reported cd is the last window's");
    std::fs::remove_dir_all(out).unwrap();
    std::fs::remove_dir_all(pilot).unwrap();
}

/// Ghia, Ghia & Shin (1982), Re 100: u_x along the vertical centreline of the
/// lid-driven cavity, (y, u / U_lid), their Table I without the lid's row.
const GHIA_RE100_U: [(f64, f64); 15] = [
    (0.9766, 0.84123),
    (0.9688, 0.78871),
    (0.9609, 0.73722),
    (0.9531, 0.68717),
    (0.8516, 0.23151),
    (0.7344, 0.00332),
    (0.6172, -0.13641),
    (0.5, -0.20581),
    (0.4531, -0.21090),
    (0.2813, -0.15662),
    (0.1719, -0.10150),
    (0.1016, -0.06434),
    (0.0703, -0.04775),
    (0.0625, -0.04192),
    (0.0547, -0.03717),
];

/// The shipped refined cavity, at half its resolution (32 base cells, its
/// centre patch at 64) for the same 12.5 lid travel times, against Ghia et
/// al.: its centreline line's last profile, interpolated linearly to their
/// points, within 0.03 of the lid speed everywhere (measured: 0.023 next to
/// the lid, 0.012 or less below y = 0.97; the case as shipped, at 64 base
/// cells, is within 0.006).
#[test]
fn the_refined_cavity_matches_ghia_et_al_at_re_100() {
    let dir = scratch("ghia");
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(common::workspace().join("cases/cavity-re100.toml")).unwrap();
    let half = text
        .replace("resolution = 64 ", "resolution = 32 ")
        .replace("steps = 8000 ", "steps = 4000 ")
        .replace("points = 65", "points = 33");
    assert!(half.contains("resolution = 32 ") && half.contains("steps = 4000 ") && half.contains("points = 33"));
    let case = dir.join("cavity.toml");
    std::fs::write(&case, half).unwrap();
    let out = dir.join("out");
    let output = run_on_cpu(&case, &out);
    assert!(output.status.success(), "{}", stderr(&output));
    let csv = std::fs::read_to_string(out.join("probes/centreline.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (t, y, u) = (column("time_s"), column("y_m"), column("ux_m_s"));
    let rows: Vec<Vec<f64>> = lines
        .map(|l| l.split(',').map(|v| v.parse().unwrap()).collect())
        .collect();
    let end = rows.last().unwrap()[t];
    assert_eq!(end, 12.5, "the profile at the end");
    let profile: Vec<(f64, f64)> = rows.iter().filter(|r| r[t] == end).map(|r| (r[y], r[u])).collect();
    assert_eq!(profile.len(), 33);
    for (at, reference) in GHIA_RE100_U {
        let k = profile.iter().position(|(y, _)| *y >= at).unwrap();
        let ((y0, u0), (y1, u1)) = (profile[k - 1], profile[k]);
        let value = u0 + (u1 - u0) * (at - y0) / (y1 - y0);
        assert!(
            (value - reference).abs() < 0.03,
            "u({at}) = {value:.5}, Ghia {reference}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A uniform stream between free-slip sides leaving through the outflow,
/// BGK at τ 0.51 (cell Re 15): the anti-bounce-back reflected the odd
/// non-equilibrium, whose sign the collision flips at ω > 1, at nearly full
/// strength, and a transverse mode grew in the last columns until the run
/// diverged at interval 3840. The outflow drops that part where ω⁻ > 1.
#[test]
fn a_uniform_stream_leaves_through_the_outflow_with_bgk_near_tau_one_half() {
    let dir = scratch("bgk-outflow");
    std::fs::create_dir_all(&dir).unwrap();
    let case = dir.join("stream.toml");
    std::fs::write(
        &case,
        r#"name = "uniform stream, BGK at tau 0.51"
[domain]
size = [3.0, 1.0]
reference_length = 1.0
resolution = 20
[fluid]
viscosity = 0.003333333333333336
[flow]
reference_velocity = 1.0
lattice_velocity = 0.05
collision = { model = "bgk" }
[boundaries]
x_min = { inlet = { profile = "uniform", velocity = 1.0, amplitude = { ramp = { duration = 2.0 } } } }
x_max = "outflow"
y_min = "free_slip"
y_max = "free_slip"
[run]
steps = 16000
[output]
every_intervals = 16000
fields = ["velocity"]
formats = ["npy"]
"#,
    )
    .unwrap();
    let out = dir.join("out");
    let output = run_on_cpu(&case, &out);
    assert!(output.status.success(), "{}", stderr(&output));
    let [ux, uy] = velocity_ranges(&out);
    assert!(
        (ux[0] - 1.0).abs() < 0.01 && (ux[1] - 1.0).abs() < 0.01 && uy[0].abs().max(uy[1].abs()) < 0.01,
        "velocity_x in {ux:?}, velocity_y in {uy:?} m/s"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A still fluid under gravity across the channel, closed at x_min, open
/// at the outflow (TRT at τ 0.52 and BGK at 0.8): it stays still. The
/// outlet held rest density in every row where the fluid's is hydrostatic,
/// and its reflection turned the force's odd part around; the flow it drove
/// through the last column diverged (TRT, at interval 640) or reached 0.13
/// m/s (BGK). Measured now: under 2e-3 and 1e-5 m/s.
#[test]
fn a_still_fluid_under_gravity_stays_still_beside_the_outflow() {
    let dir = scratch("gravity-outflow");
    std::fs::create_dir_all(&dir).unwrap();
    for (collision, viscosity) in [("trt", 0.006666666667), ("bgk", 0.1)] {
        let case = dir.join(format!("{collision}.toml"));
        std::fs::write(
            &case,
            format!(
                r#"name = "still fluid under gravity, {collision}"
[domain]
size = [3.0, 1.0]
reference_length = 1.0
resolution = 20
[fluid]
viscosity = {viscosity}
[flow]
reference_velocity = 1.0
lattice_velocity = 0.05
collision = {{ model = "{collision}" }}
acceleration = [0, -0.2]
[boundaries]
x_min = "wall"
x_max = "outflow"
y_min = "wall"
y_max = "wall"
[run]
steps = 8000
[output]
every_intervals = 8000
fields = ["velocity"]
formats = ["npy"]
"#
            ),
        )
        .unwrap();
        let out = dir.join(format!("{collision}-out"));
        let output = run_on_cpu(&case, &out);
        assert!(output.status.success(), "{collision}: {}", stderr(&output));
        for (component, range) in ["x", "y"].iter().zip(velocity_ranges(&out)) {
            let fastest = range[0].abs().max(range[1].abs());
            assert!(
                fastest < 5e-3,
                "{collision}: velocity_{component} reaches {fastest:.2e} m/s"
            );
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// `lbm run CASE --backend cpu --quiet --no-pilot --out OUT`.
fn run_on_cpu(case: &std::path::Path, out: &std::path::Path) -> std::process::Output {
    common::lbm(&[
        "run",
        &case.display().to_string(),
        "--backend",
        "cpu",
        "--quiet",
        "--no-pilot",
        "--out",
        &out.display().to_string(),
    ])
}

/// The smallest and largest finite velocity_x and velocity_y a run saved, from
/// its summary.json, m/s.
fn velocity_ranges(out: &std::path::Path) -> [[f64; 2]; 2] {
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    ["velocity_x [m/s]", "velocity_y [m/s]"].map(|name| {
        let range = &summary["written"]["field_ranges"][name];
        [range[0].as_f64().unwrap(), range[1].as_f64().unwrap()]
    })
}

/// The summary's `coefficients_last_tenth` and `coefficients_last_tenth_range`
/// of each body: (mean cd, mean cl, cl's smallest and largest).
fn last_tenth(out: &std::path::Path) -> Vec<(f64, f64, [f64; 2])> {
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let means = summary["coefficients_last_tenth"].as_array().unwrap();
    let ranges = summary["coefficients_last_tenth_range"].as_array().unwrap();
    means
        .iter()
        .zip(ranges)
        .map(|(m, r)| {
            let cl = [r[1][0].as_f64().unwrap(), r[1][1].as_f64().unwrap()];
            (m[0].as_f64().unwrap(), m[1].as_f64().unwrap(), cl)
        })
        .collect()
}

/// The shipped square obstacle runs to its end and sheds with the drag its
/// comment gives. It diverged at interval 6528 at the refined patch's
/// upstream corner on the floor when the restriction beside an interface
/// used a one-sided 3-point stencil, which passed half of the fine grid's
/// checkerboard mode to the coarse level (about 70 s on two cores).
#[test]
fn the_shipped_square_obstacle_runs_to_its_end_and_sheds() {
    let out = scratch("square-obstacle");
    let output = run_on_cpu(&common::workspace().join("cases/square-obstacle.toml"), &out);
    assert!(output.status.success(), "{}", stderr(&output));
    let [(cd, _, cl)] = last_tenth(&out)[..] else {
        panic!("one body")
    };
    assert!((3.0..3.2).contains(&cd), "mean cd {cd}");
    assert!(cl[0] < -0.3 && cl[1] > 0.3, "cl swings over {cl:?}: no shedding");
}

/// The shipped tandem cylinders run to their end (they diverged at interval
/// 5248 with the same stencil), the downstream cylinder in the upstream
/// one's wake with a tenth of its drag (about 100 s on two cores).
#[test]
fn the_shipped_tandem_cylinders_run_to_their_end() {
    let out = scratch("tandem-cylinders");
    let output = run_on_cpu(&common::workspace().join("cases/tandem-cylinders.toml"), &out);
    assert!(output.status.success(), "{}", stderr(&output));
    let [(upstream, _, _), (downstream, _, _)] = last_tenth(&out)[..] else {
        panic!("two bodies")
    };
    assert!((2.2..2.5).contains(&upstream), "upstream cd {upstream}");
    assert!(
        downstream > 0.0 && downstream < 0.15 * upstream,
        "downstream cd {downstream} against {upstream}"
    );
}

/// A Taylor–Green vortex at Re 100 started from its field (`[initial]`),
/// on a uniform 32² periodic box and with a patch around a probe: the
/// velocity there decays as exp(-2 nu k^2 t) (Taylor & Green 1937). Measured
/// between 0.2 s and 1 s, past the first steps' adjustment from an
/// equilibrium start: uniform -0.3% of the exact rate; with the patch +4.3%
/// (+1.0% at 64 cells), the restriction's two-cell average beside the
/// interfaces damping the vortex.
#[test]
fn a_taylor_green_vortex_started_from_its_field_decays_at_the_exact_rate() {
    let dir = scratch("taylor-green");
    std::fs::create_dir_all(&dir).unwrap();
    let (nu, k) = (0.01, 2.0 * std::f64::consts::PI);
    for patch in ["", "[[refinement]]\npatches = [[0.375, 0.25, 0.875, 0.75]]\n"] {
        let text = format!(
            "name = \"taylor-green\"\n[domain]\nsize = [1.0, 1.0]\nreference_length = 1.0\nresolution = 32\n\
             [fluid]\nviscosity = {nu}\n[flow]\nreference_velocity = 1.0\nlattice_velocity = 0.05\n\
             [boundaries]\nx_min = \"periodic\"\nx_max = \"periodic\"\ny_min = \"periodic\"\ny_max = \"periodic\"\n\
             {patch}[initial]\n\
             velocity = [\"sin(2 * pi * x) * cos(2 * pi * y)\", \"-cos(2 * pi * x) * sin(2 * pi * y)\"]\n\
             pressure = \"0.25 * (cos(4 * pi * x) + cos(4 * pi * y))\"\n\
             [run]\nsteps = 640\n[output]\nprobes = [{{ name = \"peak\", point = [0.75, 0.5] }}]\n"
        );
        let case = dir.join("case.toml");
        std::fs::write(&case, text).unwrap();
        let out = dir.join(if patch.is_empty() { "uniform" } else { "refined" });
        let output = run_on_cpu(&case, &out);
        assert!(output.status.success(), "{}", stderr(&output));
        let csv = std::fs::read_to_string(out.join("probes/peak.csv")).unwrap();
        let rows: Vec<[f64; 2]> = csv
            .lines()
            .skip(1)
            .map(|l| {
                let v: Vec<f64> = l.split(',').map(|v| v.parse().unwrap()).collect();
                [v[0], v[2]]
            })
            .collect();
        let at = |t: f64| {
            rows.iter()
                .min_by(|a, b| (a[0] - t).abs().total_cmp(&(b[0] - t).abs()))
                .unwrap()
        };
        let ([t0, u0], [t1, u1]) = (*at(0.2), *at(1.0));
        // u = sin(3 pi / 2) cos(pi) = 1 at the probe, less the bilinear
        // average's cos(pi / 32) where it falls between cell centres.
        assert!(u0 > 0.8 && u0 < 1.0, "u({t0}) = {u0}");
        let rate = (u0 / u1).ln() / (t1 - t0);
        let exact = 2.0 * nu * k * k;
        let tolerance = if patch.is_empty() { 0.01 } else { 0.06 };
        assert!(
            (rate / exact - 1.0).abs() < tolerance,
            "{}: decay rate {rate} against {exact}",
            out.display()
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}
