//! `lbm check CASE.toml` and `lbm info`: what a case resolves to and what
//! this machine offers, printed without running anything.
//!
//! `check` reads and resolves the case exactly as `lbm run` does, so it
//! refuses the same bad input with the same error; it allocates nothing on a
//! device and writes no file.

use std::fmt::Write as _;
use std::path::Path;

use lbm_core::case::{Case, Resolved};
use lbm_core::domain::hierarchy::GHOST;
use lbm_core::lattice::Q;
use lbm_core::output::Format;

use crate::AppError;
use crate::backend::{Device, ptx_sha256};

/// Cell updates per second each backend sustains on refined cases here
/// (docs/PERFORMANCE.md: 24 MLUPS for DFG 2D-1 on two cores, 29 G cell
/// updates/s for large grids on an H200), and the cost of one launch on a
/// GPU, where small refined cases are launch-bound: the run-time estimate.
const CPU_UPDATES_PER_S: f64 = 25e6;
const CUDA_UPDATES_PER_S: f64 = 15e9;
const CUDA_LAUNCH_S: f64 = 10e-6;

/// A run that is estimated to take longer needs a pilot unless the case
/// says otherwise (`run.require_pilot`).
const PILOT_ABOVE_S: f64 = 60.0;

/// The text of the case file at `path`.
pub fn read_case_text(path: &Path) -> Result<String, AppError> {
    std::fs::read_to_string(path).map_err(|source| AppError::ReadCase {
        path: path.display().to_string(),
        source,
    })
}

/// The case at `path`, read and resolved as `lbm run` would.
pub fn read_case(path: &Path, steps: Option<u64>) -> Result<(Case, Resolved), AppError> {
    let text = read_case_text(path)?;
    let mut case = Case::from_toml(&text).map_err(|source| AppError::Case {
        path: path.display().to_string(),
        source,
    })?;
    // The run length sets the save points too, so it is overridden before
    // the case resolves.
    if let Some(steps) = steps {
        case.run.steps = steps;
    }
    let resolved = case.resolve()?;
    Ok((case, resolved))
}

/// The report of `lbm check`.
pub fn check(path: &Path) -> Result<String, AppError> {
    let (case, resolved) = read_case(path, None)?;
    let levels = resolved.levels()?;
    let hierarchy = resolved.lattice.hierarchy.validate(&resolved.tiles)?;
    let mut out = String::new();
    let plan = &resolved.output;
    let (velocity, length) = (plan.reference_velocity, plan.reference_length);
    let reynolds = velocity * length / case.fluid.viscosity;
    let _ = writeln!(out, "{}", case.name);
    let _ = writeln!(
        out,
        "Reynolds number U L / nu = {reynolds:.4} (U = {} m/s, L = {} m); {} base intervals of {:.4e} s = {:.4} s",
        velocity,
        length,
        resolved.steps,
        resolved.units.dt,
        resolved.steps as f64 * resolved.units.dt
    );
    let _ = writeln!(
        out,
        "{:>5} {:>7} {:>11} {:>11} {:>11} {:>8} {:>8} {:>6} {:>10}",
        "level", "patches", "cells", "dx [m]", "dt [s]", "tau+", "tau-", "Mach", "cell Re"
    );
    for l in &levels {
        let cell_reynolds = velocity * l.dx_m / case.fluid.viscosity;
        let _ = writeln!(
            out,
            "{:>5} {:>7} {:>11} {:>11.4e} {:>11.4e} {:>8.5} {:>8.5} {:>6.3} {:>10.4}",
            l.level, l.patches, l.cells, l.dx_m, l.dt_s, l.tau_plus, l.tau_minus, l.mach, cell_reynolds
        );
    }
    // Two population buffers, flags and (with bodies) wall distances per
    // allocated cell, ghost bands included.
    let bytes: u64 = hierarchy
        .patches()
        .map(|p| {
            let cells = p.layout.plane_cells() as u64;
            let walls = resolved.lattice.bodies.iter().any(|b| b.level == p.level) as u64;
            cells * (2 * Q as u64 * 4 + 1 + walls * Q as u64 * 4)
        })
        .sum();
    let _ = writeln!(out, "device memory: about {:.1} MiB", bytes as f64 / (1 << 20) as f64);
    let updates = cell_updates(&levels, resolved.steps);
    let _ = writeln!(
        out,
        "work: {:.3e} cell updates, roughly {:.0} s on the CPU backend, {:.1} s on an H200",
        updates,
        estimate_seconds(&levels, resolved.steps, false),
        estimate_seconds(&levels, resolved.steps, true)
    );
    let hashed = crate::plan::Plan::of("run", &resolved)?;
    let _ = writeln!(out, "plan sha256: {}", hashed.sha256);
    for (backend, cuda) in [("the CPU backend", false), ("an H200", true)] {
        let _ = match pilot_required(&case, &resolved, cuda)? {
            Some(reason) => writeln!(out, "pilot: required on {backend} ({reason})"),
            None => writeln!(out, "pilot: not required on {backend}"),
        };
    }
    let cells: u64 = levels.iter().map(|l| l.cells).sum();
    let values: u64 = plan.fields.iter().map(|f| f.components() as u64).sum::<u64>() * cells;
    let per_save = plan
        .formats
        .iter()
        .map(|f| match f {
            // float32 values; VTK adds 3-vector velocity and two byte masks.
            Format::Npy => 4 * values,
            Format::Vtk => 4 * values + 4 * cells + 2 * cells,
            Format::Png => 0,
        })
        .sum::<u64>();
    let _ = writeln!(
        out,
        "output: {} save points ({:?}), about {:.1} MiB of fields each; forces and probes every {} intervals",
        plan.save_points.len(),
        plan.formats,
        per_save as f64 / (1 << 20) as f64,
        plan.forces_every
    );
    if updates / CPU_UPDATES_PER_S > 600.0 {
        let _ = writeln!(
            out,
            "note: this case is GPU work: about {:.0} min on the CPU backend",
            updates / CPU_UPDATES_PER_S / 60.0
        );
    }
    for warning in warnings(&resolved, &levels) {
        let _ = writeln!(out, "warning: {warning}");
    }
    Ok(out)
}

/// Every level's cell updates over `steps` base intervals.
fn cell_updates(levels: &[lbm_core::case::LevelParameters], steps: u64) -> f64 {
    levels
        .iter()
        .map(|l| l.cells as f64 * 2f64.powi(l.level as i32))
        .sum::<f64>()
        * steps as f64
}

/// Rough seconds `steps` base intervals take on the CPU backend or an H200.
pub fn estimate_seconds(levels: &[lbm_core::case::LevelParameters], steps: u64, cuda: bool) -> f64 {
    let updates = cell_updates(levels, steps);
    match cuda {
        false => updates / CPU_UPDATES_PER_S,
        true => {
            // About four launches per patch hop (stream-collide, and the
            // coupling of the finer levels).
            let launches: f64 = levels
                .iter()
                .map(|l| 4.0 * l.patches as f64 * 2f64.powi(l.level as i32))
                .sum::<f64>()
                * steps as f64;
            updates / CUDA_UPDATES_PER_S + launches * CUDA_LAUNCH_S
        }
    }
}

/// Why a full run of the case needs a pilot first, or `None` when it does
/// not: `run.require_pilot` when the case sets it, else whether the run is
/// estimated to take over a minute on the backend.
pub fn pilot_required(case: &Case, resolved: &Resolved, cuda: bool) -> Result<Option<String>, AppError> {
    pilot_required_for(case.run.require_pilot, &resolved.levels()?, resolved.steps, cuda)
}

/// [`pilot_required`] for `steps` intervals of `levels`.
pub fn pilot_required_for(
    required: Option<bool>,
    levels: &[lbm_core::case::LevelParameters],
    steps: u64,
    cuda: bool,
) -> Result<Option<String>, AppError> {
    let estimate = estimate_seconds(levels, steps, cuda);
    Ok(match required {
        Some(true) => Some("the case sets run.require_pilot = true".into()),
        Some(false) => None,
        None => (estimate > PILOT_ABOVE_S).then(|| {
            format!(
                "it is estimated at {estimate:.0} s, over {PILOT_ABOVE_S:.0} s; run.require_pilot = false in the case waives that"
            )
        }),
    })
}

/// What is legal but doubtful: τ near ½, a Mach number above 0.1, a body
/// close to its patch's edge.
fn warnings(resolved: &Resolved, levels: &[lbm_core::case::LevelParameters]) -> Vec<String> {
    let mut out = Vec::new();
    for l in levels {
        if l.tau_plus - 0.5 < 0.02 {
            out.push(format!(
                "level {} tau+ = {:.4} is near 1/2: accuracy and stability suffer; raise the resolution or the lattice velocity",
                l.level, l.tau_plus
            ));
        }
    }
    if let Some(l) = levels.first()
        && l.mach > 0.1
    {
        out.push(format!(
            "lattice Mach number {:.3} is above 0.1: compressibility errors grow as Mach^2; lower flow.lattice_velocity",
            l.mach
        ));
    }
    if let Ok(hierarchy) = resolved.lattice.hierarchy.validate(&resolved.tiles) {
        for (b, body) in resolved.lattice.bodies.iter().enumerate().filter(|(_, b)| b.level > 0) {
            let scale = 2f64.powi(body.level as i32);
            let [x0, y0, x1, y1] = body.shape.bounds();
            for p in &hierarchy.levels[body.level] {
                let [ax0, ay0, ax1, ay1] = p.global_active().map(|v| v as f64);
                let gaps = [x0 * scale - ax0, y0 * scale - ay0, ax1 - x1 * scale, ay1 - y1 * scale];
                let inside = gaps.iter().all(|g| *g >= 0.0);
                let near = gaps
                    .iter()
                    .zip(p.on_boundary)
                    .any(|(g, on_boundary)| !on_boundary && *g < 2.0 * GHOST as f64);
                if inside && near {
                    out.push(format!(
                        "body {b} is within {} cells of its patch's edge: its wake reaches the coupling early",
                        2 * GHOST
                    ));
                }
            }
        }
    }
    out
}

/// The report of `lbm info`.
pub fn info() -> String {
    let mut out = String::new();
    let _ = writeln!(out, "lbm {}", env!("CARGO_PKG_VERSION"));
    let host = Device::host();
    let _ = writeln!(
        out,
        "cpu backend: {}, {:.1} GiB",
        host.name,
        host.memory_bytes as f64 / (1u64 << 30) as f64
    );
    match lbm_cuda::CudaDriver::new(0) {
        Ok(driver) => {
            let memory = driver.total_memory().unwrap_or(0);
            let _ = writeln!(
                out,
                "cuda backend: {}, {:.1} GiB",
                driver.device_name(),
                memory as f64 / (1u64 << 30) as f64
            );
        }
        Err(e) => {
            let _ = writeln!(out, "cuda backend: unavailable ({e})");
        }
    }
    let _ = writeln!(out, "embedded PTX (sm_90) sha256: {}", ptx_sha256());
    out
}
