//! What `lbm run` writes, read back as users read it: the NPY arrays with
//! numpy, the `.vti`, `.vthb` and `.pvd` files with VTK's XML readers (through
//! `tests/read_outputs.py`), checked against the stepper's own fields; the
//! CSV files; and the refusals of bad `[output]` keys before any work.
//!
//! The readers need a Python with numpy and vtk: `LBM_PYTHON` names it
//! (`.ci/run` makes a venv and sets it). Without `LBM_PYTHON` the reader test
//! says it did not run; with it, a missing module is a failure.

mod common;

use common::{lbm, run_on_cpu, scratch, stderr, workspace};
use lbm_core::case::Case;
use lbm_core::{CpuDriver, ExecConfig, Stepper};

/// The refined cavity with every field saved twice in 200 intervals, a probe
/// and a line.
fn cavity_with_outputs() -> String {
    let text = std::fs::read_to_string(workspace().join("cases/cavity-re100.toml")).unwrap();
    let base = &text[..text.find("[output]").expect("the cavity case has an output table")];
    format!(
        "{base}[output]\nevery_intervals = 100\nfields = [\"pressure\", \"density\", \"velocity\", \"speed\", \"vorticity\"]\n\
         formats = [\"vtk\", \"npy\", \"png\"]\nprobes = [{{ name = \"centre\", point = [0.5, 0.5] }}]\n\
         lines = [{{ name = \"mid\", from = [0.0, 0.5], to = [1.0, 0.5], points = 11 }}]\n"
    )
}

fn run(case_text: &str, name: &str, steps: &str) -> (std::path::PathBuf, std::process::Output) {
    let dir = scratch(name);
    std::fs::create_dir_all(&dir).unwrap();
    let case = dir.join("case.toml");
    std::fs::write(&case, case_text).unwrap();
    let out = dir.join("out");
    let output = run_on_cpu(&case, &out, steps, &[]);
    (out, output)
}

/// The Python with numpy and vtk that `LBM_PYTHON` names, or `None` (the
/// reader tests then say they did not run).
fn python() -> Option<std::ffi::OsString> {
    let python = std::env::var_os("LBM_PYTHON");
    if python.is_none() {
        eprintln!("not run: set LBM_PYTHON to a Python with numpy and vtk (.ci/run does)");
    }
    python
}

/// The numbers the Python script `check` prints of run directory `out`,
/// with `python`'s numpy; a failing script fails the test.
fn numpy_check(python: &std::ffi::OsStr, check: &str, out: &std::path::Path) -> Vec<f64> {
    let read = std::process::Command::new(python)
        .args(["-c", check])
        .arg(out)
        .output()
        .expect("python runs");
    assert!(read.status.success(), "{}", stderr(&read));
    String::from_utf8_lossy(&read.stdout)
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect()
}

/// The summary `tests/read_outputs.py` prints of run directory `out`, read
/// with `python`'s numpy and VTK; a refusal of the files fails the test.
fn read_back(python: &std::ffi::OsStr, out: &std::path::Path) -> serde_json::Value {
    let read = std::process::Command::new(python)
        .arg(workspace().join("tests/read_outputs.py"))
        .arg(out)
        .output()
        .expect("python runs");
    assert!(
        read.status.success(),
        "the readers refused the files: {}",
        stderr(&read)
    );
    serde_json::from_slice(&read.stdout).unwrap()
}

#[test]
fn fields_read_back_with_numpy_and_vtk_equal_the_steppers() {
    let Some(python) = python() else {
        return;
    };
    let text = cavity_with_outputs();
    let (out, output) = run(&text, "fields", "200");
    assert!(output.status.success(), "{}", stderr(&output));
    let summary = read_back(&python, &out);
    assert_eq!(summary["pvd_times"].as_array().unwrap().len(), 2, "two save points");
    assert_eq!(
        summary["pictures"].as_array().unwrap().len(),
        4,
        "speed and vorticity twice"
    );
    // numpy reads the point probe's CSV by its column names: a row per
    // interval, the last one's values those the file holds.
    let centre = &summary["probes"]["centre"];
    assert_eq!(centre["rows"], 200, "{centre}");
    let file = std::fs::read_to_string(out.join("probes/centre.csv")).unwrap();
    let last: Vec<f64> = file
        .lines()
        .last()
        .unwrap()
        .split(',')
        .map(|v| v.parse().unwrap())
        .collect();
    let numpy: Vec<f64> = centre["last"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(numpy, last);
    assert!(last[2].abs() > 0.0, "the flow at the centre moves: {last:?}");
    // L0 cells under the refined patch are marked refined, no cell is solid.
    assert_eq!(summary["ghost"]["t000000200/L0_p0"]["refined"], 32 * 32);
    assert_eq!(summary["ghost"]["t000000200/L1_p0"]["refined"], 0);

    // The same case on the library: the middle cell of each array as numpy read it.
    let mut case = Case::from_toml(&text).unwrap();
    case.run.steps = 200;
    let resolved = case.resolve().unwrap();
    let exec = ExecConfig {
        tiles: resolved.tiles.clone(),
        ..ExecConfig::default()
    };
    let stepper = Stepper::new(CpuDriver::new(), resolved.lattice.clone(), exec).unwrap();
    stepper.step(200).unwrap();
    // Read by a direct download, where the run's files came through the ring.
    let patches = lbm::output::fields::physical(&stepper.hierarchy(), &resolved.units, &resolved.lattice, |_, p| {
        stepper.fields(p.level, p.index)
    })
    .unwrap();
    for p in &patches {
        let [nx, ny] = p.size;
        let (x, y) = (nx / 2, ny / 2);
        // numpy's f32 values, through JSON: equal once back in f32.
        let middle = |field: &str| -> Vec<f32> {
            let key = format!("t000000200/L{}_p{}_{field}.npy", p.level, p.patch);
            summary[&key]["middle"]
                .as_array()
                .unwrap_or_else(|| panic!("{key} missing"))
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect()
        };
        assert_eq!(middle("pressure"), [p.pressure[(y, x)]]);
        assert_eq!(middle("density"), [p.density[(y, x)]]);
        assert_eq!(middle("velocity"), [p.ux[(y, x)], p.uy[(y, x)]]);
        assert_eq!(middle("speed"), [p.ux[(y, x)].hypot(p.uy[(y, x)])]);
        assert!(middle("vorticity")[0].is_finite());
    }
    std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
}

/// Inside a body the NPY and VTK arrays hold NaN, in every component of
/// every field, and nowhere else: numpy and VTK read them so, and the
/// `solid` array marks the same cells.
#[test]
fn a_bodys_cells_read_as_nan_in_every_saved_array() {
    let Some(python) = python() else {
        return;
    };
    let text = "name = \"cylinder\"\n[domain]\nsize = [1.0, 0.4]\nreference_length = 0.1\nresolution = 8\n\
                [fluid]\nviscosity = 1e-3\n[flow]\nreference_velocity = 1.0\ncollision = { model = \"bgk\" }\n\
                [boundaries]\nx_min = { inlet = { profile = \"uniform\", velocity = 1.0 } }\nx_max = \"outflow\"\n\
                y_min = \"free_slip\"\ny_max = \"free_slip\"\n\
                [[refinement]]\npatches = [[0.15, 0.05, 0.6, 0.35]]\n\
                [[bodies]]\nshape = \"circle\"\ncenter = [0.3, 0.2]\nradius = 0.05\n\
                [run]\nsteps = 200\n[output]\nevery_intervals = 200\n\
                fields = [\"pressure\", \"velocity\", \"vorticity\"]\nformats = [\"vtk\", \"npy\"]\n";
    let (out, output) = run(text, "solid", "200");
    assert!(output.status.success(), "{}", stderr(&output));
    let summary = read_back(&python, &out);
    let mut solid_cells = 0;
    for block in ["L0_p0", "L1_p0"] {
        let solid = summary["ghost"][format!("t000000200/{block}")]["solid"]
            .as_u64()
            .unwrap();
        for (field, components) in [("pressure", 1), ("velocity", 2), ("vorticity", 1)] {
            let nan = &summary[format!("t000000200/{block}_{field}.npy")]["nan"];
            assert_eq!(nan.as_u64(), Some(components * solid), "{block} {field}");
        }
        solid_cells += solid;
    }
    // The cylinder lies on the refined level: about pi r^2 of its cells.
    assert!((250..350).contains(&solid_cells), "{solid_cells} solid cells");
    // numpy: a coarse cell under the patch is NaN exactly where any of the
    // 4 x 4 fine cells its value is restricted from is (solid cells read as
    // fluid biased it), more cells than the coarse centres in the circle,
    // which is what the mask was; elsewhere it is the fine cells' own value.
    let check = r#"
import json, sys, numpy as np
out = sys.argv[1]
index = {(e["level"], e["field"]): e for e in json.load(open(out + "/fields/index.json")) if e["step"] == 200}
coarse, fine = (index[(l, "pressure")] for l in (0, 1))
pc, pf = (np.load(out + "/fields/" + e["file"]) for e in (coarse, fine))
x0, y0 = (round(o / coarse["spacing_m"]) for o in fine["origin_m"])
ny, nx = pf.shape[0] // 2, pf.shape[1] // 2
padded = np.pad(np.isnan(pf), 1)
blocks = np.lib.stride_tricks.sliding_window_view(padded, (4, 4))[::2, ::2].any(axis=(2, 3))
under = np.isnan(pc[y0:y0 + ny, x0:x0 + nx])
mean = pf.reshape(ny, 2, nx, 2).mean(axis=(1, 3))
finite = ~under
bias = np.abs(pc[y0:y0 + ny, x0:x0 + nx][finite] - mean[finite]).max() / np.ptp(pf[~np.isnan(pf)])
h = coarse["spacing_m"]
yc, xc = np.mgrid[y0:y0 + ny, x0:x0 + nx]
centres = (((xc + 0.5) * h - 0.3) ** 2 + ((yc + 0.5) * h - 0.2) ** 2) < 0.05 ** 2
print(int((under != blocks).sum()), int(under.sum()), int(centres.sum()), int(np.isnan(pc).sum()), int(1e6 * bias))
"#;
    let counts: Vec<u64> = numpy_check(&python, check, &out)
        .into_iter()
        .map(|n| n as u64)
        .collect();
    let [mismatched, under, centres, everywhere, bias_ppm] = counts[..] else {
        panic!("{counts:?}")
    };
    assert_eq!(mismatched, 0, "coarse cells whose NaN differs from their fine cells'");
    assert!(
        under > centres,
        "{under} NaN coarse cells, {centres} centres in the body"
    );
    assert_eq!(everywhere, under, "NaN coarse cells outside the patch");
    // The cubic restriction against the block's mean: 0.23% of the pressure's
    // range at most; with the solid cells' rest state mixed in, 8%.
    assert!(
        bias_ppm < 10_000,
        "a coarse pressure {bias_ppm} ppm of the range off its fine cells' mean"
    );
    std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
}

/// A body's cells are at rest from the start, whatever `[initial]` gives
/// the flow around it: the vorticity beside the body, which takes the
/// body's cells at rest, reads so in numpy (they kept the initial velocity
/// and the cells around them were off by 0.1 / (2 dx)).
#[test]
fn a_bodys_cells_start_at_rest_under_an_initial_field() {
    let Some(python) = python() else {
        return;
    };
    let text = "name = \"square in a stream\"\n[domain]\nsize = [1.0, 1.0]\nreference_length = 0.25\nresolution = 8\n\
                [fluid]\nviscosity = 1e-3\n[flow]\nreference_velocity = 0.1\n\
                [boundaries]\nx_min = \"periodic\"\nx_max = \"periodic\"\ny_min = \"periodic\"\ny_max = \"periodic\"\n\
                [[bodies]]\nshape = \"rectangle\"\nmin = [0.375, 0.375]\nmax = [0.625, 0.625]\n\
                [initial]\nvelocity = [0.1, \"0.02 * sin(2 * pi * x)\"]\n\
                [run]\nsteps = 20\n[output]\nevery_intervals = 20\n\
                fields = [\"velocity\", \"vorticity\"]\nformats = [\"npy\"]\n";
    let (out, output) = run(text, "initial-body", "20");
    assert!(output.status.success(), "{}", stderr(&output));
    // The documented stencil: central differences, the body's cells at rest.
    let check = r#"
import json, sys, numpy as np
out = sys.argv[1]
index = {e["field"]: e for e in json.load(open(out + "/fields/index.json")) if e["step"] == 20}
u = np.load(out + "/fields/" + index["velocity"]["file"])
w = np.load(out + "/fields/" + index["vorticity"]["file"])
h = index["velocity"]["spacing_m"]
solid = np.isnan(u[..., 0])
u = np.where(np.isnan(u), 0.0, u)
doc = np.full(w.shape, np.nan)
doc[1:-1, 1:-1] = (u[1:-1, 2:, 1] - u[1:-1, :-2, 1] - u[2:, 1:-1, 0] + u[:-2, 1:-1, 0]) / (2 * h)
near = np.zeros(solid.shape, bool)
near[1:-1, 1:-1] = ~solid[1:-1, 1:-1] & (solid[1:-1, 2:] | solid[1:-1, :-2] | solid[2:, 1:-1] | solid[:-2, 1:-1])
print(int(near.sum()), int(solid.sum()), float(np.abs(w[near] - doc[near]).max()))
"#;
    let values = numpy_check(&python, check, &out);
    let [near, solid, difference] = values[..] else {
        panic!("{values:?}")
    };
    assert_eq!((near, solid), (32.0, 64.0), "cells beside the square, in it");
    assert!(difference < 1e-4, "vorticity beside the body off by {difference} 1/s");
    std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
}

/// Across a periodic side the vorticity takes central differences with the
/// opposite edge's cells, as inside; beside a wall, one-sided ones. Read in
/// numpy against both stencils over every cell of a channel periodic along
/// x (the edge columns were one-sided, 5% of the amplitude off).
#[test]
fn vorticity_wraps_across_a_periodic_side() {
    let Some(python) = python() else {
        return;
    };
    let text = "name = \"periodic strip\"\n[domain]\nsize = [1.0, 0.5]\nreference_length = 0.5\nresolution = 16\n\
                [fluid]\nviscosity = 1e-3\n[flow]\nreference_velocity = 0.1\n\
                [boundaries]\nx_min = \"periodic\"\nx_max = \"periodic\"\ny_min = \"wall\"\ny_max = \"wall\"\n\
                [initial]\nvelocity = [\"0.05 * sin(2 * pi * y)\", \"0.05 * sin(2 * pi * x)\"]\n\
                [run]\nsteps = 10\n[output]\nevery_intervals = 10\n\
                fields = [\"velocity\", \"vorticity\"]\nformats = [\"npy\"]\n";
    let (out, output) = run(text, "periodic-vorticity", "10");
    assert!(output.status.success(), "{}", stderr(&output));
    let check = r#"
import json, sys, numpy as np
out = sys.argv[1]
index = {e["field"]: e for e in json.load(open(out + "/fields/index.json")) if e["step"] == 10}
u = np.load(out + "/fields/" + index["velocity"]["file"]).astype(np.float64)
w = np.load(out + "/fields/" + index["vorticity"]["file"])
h = index["velocity"]["spacing_m"]
duy_dx = (np.roll(u[..., 1], -1, axis=1) - np.roll(u[..., 1], 1, axis=1)) / (2 * h)
dux_dy = np.gradient(u[..., 0], h, axis=0, edge_order=1)
doc = duy_dx - dux_dy
edges = np.abs(w[:, [0, -1]] - doc[:, [0, -1]]).max()
print(float(np.abs(w - doc).max()), float(edges), float(np.abs(doc).max()))
"#;
    let values = numpy_check(&python, check, &out);
    let [everywhere, edges, amplitude] = values[..] else {
        panic!("{values:?}")
    };
    assert!(amplitude > 0.5, "a vorticity of {amplitude} 1/s to compare");
    assert!(
        everywhere < 1e-5 * amplitude,
        "vorticity off the documented stencil by {everywhere} 1/s (the periodic edge columns by {edges})"
    );
    std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
}

/// A PNG as RGB rows: (width, height, bytes).
fn decode_png(path: &std::path::Path) -> (usize, usize, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut rgb = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut rgb).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb, "{}", path.display());
    (info.width as usize, info.height as usize, rgb)
}

/// The speed picture of the cavity, decoded: y is up (the lid's row, at the
/// top, is the fastest), the colour bar spans the range, the title is drawn.
#[test]
fn pictures_show_the_lid_at_the_top() {
    let (out, output) = run(&cavity_with_outputs(), "pictures", "200");
    assert!(output.status.success(), "{}", stderr(&output));
    for name in ["speed", "vorticity"] {
        let (w, height, rgb) = decode_png(&out.join(format!("pictures/{name}_t000000200.png")));
        assert!(w >= 512, "{name}: {w} pixels wide");
        if name == "speed" {
            let pixel = |x: usize, y: usize| &rgb[3 * (y * w + x)..3 * (y * w + x) + 3];
            // Viridis runs from dark blue to yellow: brightness tracks speed.
            let brightness = |y: usize| pixel(256, y).iter().map(|c| *c as u32).sum::<u32>();
            let (top, bottom) = (brightness(16), brightness(height - 4));
            assert!(
                top > bottom + 200,
                "the lid's row is not the brightest: top {top}, bottom {bottom}"
            );
        }
    }
    std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
}

/// Pictures alone: no `fields/` directory (it held an empty directory per
/// save point).
#[test]
fn pictures_alone_leave_no_fields_directory() {
    let text = cavity_with_outputs().replace("formats = [\"vtk\", \"npy\", \"png\"]", "formats = [\"png\"]");
    assert!(text.contains("formats = [\"png\"]"));
    let (out, output) = run(&text, "pictures-alone", "20");
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(out.join("pictures/speed_t000000020.png").is_file());
    assert!(!out.join("fields").exists() && !out.join("fields.pvd").exists());
    std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
}

#[test]
fn probes_and_lines_are_written_every_sample_and_save_point() {
    let (out, output) = run(&cavity_with_outputs(), "probes", "30");
    assert!(output.status.success(), "{}", stderr(&output));
    let centre = std::fs::read_to_string(out.join("probes/centre.csv")).unwrap();
    let rows: Vec<&str> = centre.lines().collect();
    assert_eq!(rows[0], "time_s,p_pa,ux_m_s,uy_m_s");
    assert_eq!(rows.len(), 1 + 30, "one row per base interval");
    let last: Vec<f64> = rows[30].split(',').map(|v| v.parse().unwrap()).collect();
    assert!(
        (last[0] - 30.0 * 1.5625e-3).abs() < 1e-12,
        "time of interval 30: {}",
        last[0]
    );
    // Between save points the probe is sampled from its own cells: one
    // small record per sample, and the patches' fields once, at the end.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    // Velocity's range is each component's: the lid's cavity turns both.
    let ranges = &summary["written"]["field_ranges"];
    for key in ["velocity_x [m/s]", "velocity_y [m/s]"] {
        let [low, high] = [0, 1].map(|k| ranges[key][k].as_f64().unwrap());
        assert!(low < 0.0 && high > 0.0, "{key}: {ranges}");
        assert_eq!(summary["written"]["field_non_finite"][key], 0);
    }
    let ring = &summary["ring"];
    let (records, bytes, whole) = (
        ring["records"].as_u64(),
        ring["bytes"].as_u64(),
        ring["capacity_bytes"].as_u64(),
    );
    assert_eq!(
        records,
        Some(29 + 2),
        "29 probe samples and two patches at the end: {ring}"
    );
    assert!(bytes.unwrap() < whole.unwrap() + 29 * 128, "{ring}");
    let line = std::fs::read_to_string(out.join("probes/mid.csv")).unwrap();
    assert_eq!(
        line.lines().count(),
        1 + 11,
        "one profile at the one save point, the end"
    );
    // The profile runs from wall to wall at mid-height: distance 0 to 1 m.
    let profile: Vec<Vec<f64>> = line
        .lines()
        .skip(1)
        .map(|r| r.split(',').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert!(
        profile.iter().all(|r| r.len() == 7 && r.iter().all(|v| v.is_finite())),
        "{line}"
    );
    assert_eq!((profile[0][1], profile[10][1], profile[10][2]), (0.0, 1.0, 1.0));
    // The one profile is the end's.
    assert!(
        profile.iter().all(|r| (r[0] - 30.0 * 1.5625e-3).abs() < 1e-12),
        "{line}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let files = summary["written"]["files"].as_array().unwrap();
    assert!(
        files.iter().any(|f| f.as_str().unwrap().ends_with("fields.pvd")),
        "{files:?}"
    );
    assert_eq!(summary["written"]["save_points"], 1);
    std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
}

#[test]
fn forces_csv_has_coefficients_per_body() {
    let text = std::fs::read_to_string(workspace().join("cases/dfg-2d1.toml")).unwrap();
    let (out, output) = run(&text, "forces", "40");
    assert!(output.status.success(), "{}", stderr(&output));
    let forces = std::fs::read_to_string(out.join("forces.csv")).unwrap();
    let mut rows = forces.lines();
    assert_eq!(
        rows.next(),
        Some(
            "time_s,body0_fx_n_per_m,body0_fy_n_per_m,body0_torque_n,body0_cd[U=0.2 m/s L=0.1 m],\
             body0_cl[U=0.2 m/s L=0.1 m]"
        )
    );
    let rows: Vec<Vec<f64>> = rows
        .map(|r| r.split(',').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 40);
    for r in &rows {
        assert!(r.iter().all(|v| v.is_finite()), "{r:?}");
        // cd = Fx / (½ ρ U² D) with the case's mean inflow U = 0.2 m/s, D = 0.1 m, ρ = 1.
        assert!((r[4] - r[1] / (0.5 * 0.2 * 0.2 * 0.1)).abs() < 1e-9 * r[4].abs().max(1.0));
    }
    // The last tenth's mean and range are of the samples whose windows lie
    // in it: intervals 37 to 40 (the sample at 36 is the mean of a window
    // before it).
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for (k, column) in [(0, 4), (1, 5)] {
        let tail: Vec<f64> = rows[36..].iter().map(|r| r[column]).collect();
        let range = &summary["coefficients_last_tenth_range"][0][k];
        let (low, high) = (range[0].as_f64().unwrap(), range[1].as_f64().unwrap());
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1e-12);
        assert!(
            close(low, tail.iter().copied().fold(f64::INFINITY, f64::min)),
            "{range} {tail:?}"
        );
        assert!(
            close(high, tail.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            "{range} {tail:?}"
        );
        let mean = summary["coefficients_last_tenth"][0][k].as_f64().unwrap();
        assert!(close(mean, tail.iter().sum::<f64>() / 4.0), "{mean} {tail:?}");
    }
    std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
}

#[test]
fn bad_output_keys_are_refused_before_any_work() {
    let base = cavity_with_outputs();
    let table = |body: &str| format!("{}[output]\n{body}\n", &base[..base.find("[output]").unwrap()]);
    for (name, text, expect) in [
        ("every-zero", table("every = 0"), "output.every"),
        ("every-negative", table("every = -1.0"), "output.every"),
        (
            "both",
            table("every = 1.0\nevery_intervals = 10"),
            "output.every_intervals",
        ),
        (
            "field",
            table("fields = [\"pressure\", \"temperature\"]"),
            "temperature",
        ),
        ("format", table("formats = [\"hdf5\"]"), "hdf5"),
        ("no-fields", table("fields = []"), "output.fields"),
        (
            "outside",
            table("probes = [{ name = \"p\", point = [1.5, 0.5] }]"),
            "output.probes[0].point",
        ),
        (
            "twice",
            table("probes = [{ name = \"p\", point = [0.5, 0.5] }, { name = \"p\", point = [0.4, 0.5] }]"),
            "output.probes[1].name",
        ),
        (
            "twice-but-case",
            table("probes = [{ name = \"wake\", point = [0.5, 0.5] }, { name = \"Wake\", point = [0.4, 0.5] }]"),
            "`output.probes[1].name` = Wake: a name no other probe or line has, letter case aside",
        ),
        (
            "line-points",
            table("lines = [{ name = \"l\", from = [0.1, 0.1], to = [0.9, 0.9], points = 1 }]"),
            "output.lines[0].points",
        ),
        (
            "field-twice",
            table("fields = [\"speed\", \"pressure\", \"speed\"]"),
            "`output.fields` = speed twice: each field once",
        ),
        (
            "format-twice",
            table("formats = [\"npy\", \"npy\"]"),
            "`output.formats` = npy twice",
        ),
        (
            "line-named-forces",
            table("lines = [{ name = \"forces\", from = [0.3, 0.2], to = [0.3, 0.8], points = 5 }]"),
            "`output.lines[0].name` = \"forces\": a name other than `forces`",
        ),
        (
            "long-name",
            table(&format!(
                "probes = [{{ name = \"{}\", point = [0.5, 0.5] }}]",
                "a".repeat(65)
            )),
            "1 to 64 letters, digits",
        ),
        (
            "line-of-no-length",
            table("lines = [{ name = \"l\", from = [0.3, 0.2], to = [0.3, 0.2], points = 5 }]"),
            "`output.lines[0].to`",
        ),
        (
            "line-outside",
            table("lines = [{ name = \"l\", from = [0.3, 0.2], to = [9.0, 0.2], points = 5 }]"),
            "`output.lines[0].to`",
        ),
        ("forces-every", table("forces_every = 0.0"), "output.forces_every"),
        (
            "reference",
            table("reference_velocity = -1.0"),
            "output.reference_velocity",
        ),
    ] {
        let (out, output) = run(&text, &format!("bad-{name}"), "10");
        assert_eq!(output.status.code(), Some(2), "{name}: {}", stderr(&output));
        assert!(stderr(&output).contains(expect), "{name}: {}", stderr(&output));
        assert!(
            !out.exists(),
            "{name}: refused input must not create the output directory"
        );
        std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
    }
    // A run so long that its save points or samples would not fit in memory
    // (each sample stays for the time averages): the key and the least
    // period that fits.
    for (name, text, expect) in [
        (
            "save-points",
            table("every_intervals = 50"),
            "`output.every_intervals` = 50: at most 100000 save points over the run's 1000000000 base intervals: every 10000 intervals or more",
        ),
        (
            "samples",
            table("probes = [{ name = \"p\", point = [0.5, 0.5] }]"),
            "`output.forces_every` = one base interval (the default): at most 10000000 force and probe samples",
        ),
    ] {
        let (out, output) = run(&text, &format!("long-{name}"), "1000000000");
        assert_eq!(output.status.code(), Some(2), "{name}: {}", stderr(&output));
        assert!(stderr(&output).contains(expect), "{name}: {}", stderr(&output));
        assert!(!out.exists());
        std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
    }
    // A probe inside a body.
    let dfg = std::fs::read_to_string(workspace().join("cases/dfg-2d1.toml")).unwrap();
    let text = dfg.replace("point = [0.4, 0.2]", "point = [0.2, 0.2]");
    assert_ne!(text, dfg, "the DFG case has a wake probe to move");
    let (out, output) = run(&text, "bad-in-body", "10");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("not inside a body"), "{}", stderr(&output));
    assert!(!out.exists());
    std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
}

/// A flow that blows up stops the run with an error naming the interval and
/// what went non-finite; what was written stays, and the summary says it
/// diverged, with the error.
#[test]
fn a_diverging_run_fails_and_keeps_what_it_wrote() {
    let text = std::fs::read_to_string(workspace().join("cases/square-obstacle.toml")).unwrap();
    // Ten cells per side leave tau+ at 0.52: the inlet's corner blows up
    // within the first second, which the device check finds first.
    // Forces sampled every half second, so that the device's check (every
    // 64 intervals) finds the blow-up before a force sample does.
    let unstable = text
        .replace("resolution = 16 ", "resolution = 10 ")
        .replace("[output]\n", "[output]\nforces_every = 0.5\n");
    assert!(unstable.contains("resolution = 10 ") && unstable.contains("forces_every = 0.5"));
    // Behind a square at Mach 0.29 and tau+ 0.505 the force goes first, at
    // a sample inside a chunk of intervals that ends later.
    let fast = r#"
        name = "a square at Mach 0.29"
        [domain]
        size = [0.8, 0.3]
        reference_length = 0.1
        resolution = 20
        [fluid]
        viscosity = 1e-4
        [flow]
        reference_velocity = 1.0
        lattice_velocity = 0.17
        collision = { model = "bgk" }
        [boundaries]
        x_min = { inlet = { profile = "uniform", velocity = 1.0 } }
        x_max = "outflow"
        y_min = "wall"
        y_max = "wall"
        [[bodies]]
        shape = "rectangle"
        min = [0.2, 0.1]
        max = [0.3, 0.2]
        [run]
        steps = 1000
        [output]
        every_intervals = 500
        probes = [{ name = "wake", point = [0.5, 0.15] }]
    "#;
    for (name, case, steps, force_first) in [
        ("diverging", unstable.as_str(), "1500", false),
        ("diverging-force", fast, "1000", true),
    ] {
        let (out, output) = run(case, name, steps);
        assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
        let message = stderr(&output);
        assert!(
            message.contains("the run diverged at interval") && message.contains(" patch 0, in the cell at x = "),
            "{message}"
        );
        assert!(
            message.contains(&out.display().to_string()),
            "the error says where the files are: {message}"
        );
        if name == "diverging" {
            // TRT with the inlet's peak at cell Re 15: the advice names it.
            assert!(
                message.contains("the inlet's peak is at cell Re 15.0 on level 0 with TRT"),
                "{message}"
            );
        }
        assert!(out.join("forces.csv").is_file() && out.join("manifest.json").is_file());
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
        assert_eq!(summary["ended"], "diverged");
        assert!(summary["error"].as_str().unwrap().contains("diverged"), "{summary}");
        assert!(summary["mass_drift"].is_null());
        // The interval named is the first sample that is not finite (a force
        // sample every interval: a row of forces.csv each), whichever chunk
        // it was taken in, or else the check's; the fields saved are of the
        // interval the run stopped at.
        let forces = std::fs::read_to_string(out.join("forces.csv")).unwrap();
        let rows: Vec<&str> = forces.lines().skip(1).collect();
        let finite = |row: &str| row.split(',').all(|v| v.parse::<f64>().unwrap().is_finite());
        let first_bad = rows.iter().position(|r| !finite(r)).map(|k| k as u64 + 1);
        assert_eq!(first_bad.is_some(), force_first, "{name}: {message}");
        assert!(
            first_bad.is_none_or(|k| k == rows.len() as u64),
            "no sample after the first bad one"
        );
        let step = summary["completed_intervals"].as_u64().unwrap();
        let named = first_bad.unwrap_or(step);
        assert!(
            message.contains(&format!("diverged at interval {named} ")),
            "{name}: {message}"
        );
        assert!(step >= named);
        assert!(out.join(format!("fields/t{step:09}")).is_dir(), "{summary}");
        if force_first {
            // The run steps on from the bad sample to the next divergence
            // check (every 64 intervals), save point or end, whatever its
            // chunks, and saves there; the samples end at the bad one, the
            // probe's row included.
            let stop = [named.div_ceil(64) * 64, 500, 1000]
                .into_iter()
                .filter(|s| *s >= named)
                .min();
            assert_eq!(Some(step), stop, "{message}");
            let probes = std::fs::read_to_string(out.join("probes/wake.csv")).unwrap();
            assert_eq!(probes.lines().count(), forces.lines().count(), "{probes}");
            // It never reached its last tenth: no mean there.
            assert_eq!(summary["coefficients_last_tenth"], serde_json::json!([[null, null]]));
            assert_eq!(
                summary["coefficients_last_tenth_range"],
                serde_json::json!([[[null, null], [null, null]]])
            );
        }
        if message.contains("a population is not finite") {
            assert!(
                message.contains("fluid cells of all levels are not finite"),
                "{message}"
            );
        }
        std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
    }
}

/// The issue's own case: a cavity at Re 9000 on 64 cells passes every check
/// and then turns NaN. The device check stops it, names the cell, and the
/// fields of that interval are written for inspection.
#[test]
fn a_cavity_far_beyond_its_resolution_is_stopped_as_diverged() {
    let text = std::fs::read_to_string(workspace().join("cases/cavity-re100.toml")).unwrap();
    let fast = text.replace("viscosity = 0.01 ", "viscosity = 1.1111e-4 ");
    assert_ne!(fast, text);
    let (out, output) = run(&fast, "re9000", "3000");
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["ended"], "diverged");
    let error = summary["error"].as_str().unwrap();
    assert!(
        error.contains("in the cell at x = ") && error.contains("level 0 patch 0"),
        "{error}"
    );
    let step = summary["completed_intervals"].as_u64().unwrap();
    assert!(step > 0 && step < 3000, "{summary}");
    assert!(error.contains(&format!("interval {step} ")), "{error}");
    assert!(
        out.join(format!("fields/t{step:09}")).is_dir(),
        "the fields at the divergence are written"
    );
    // Resumed, the same bits would diverge again.
    let resumed = lbm(&["resume", &out.display().to_string(), "--backend", "cpu"]);
    assert_eq!(resumed.status.code(), Some(2), "{}", stderr(&resumed));
    assert!(
        stderr(&resumed).contains("diverge again") && stderr(&resumed).contains(&format!("interval {step} ")),
        "{}",
        stderr(&resumed)
    );
    std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
}
