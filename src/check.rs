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

/// The case at `path`, read and resolved as `lbm run` would.
pub fn read_case(path: &Path, steps: Option<u64>) -> Result<(Case, Resolved), AppError> {
    let text = std::fs::read_to_string(path).map_err(|source| AppError::ReadCase {
        path: path.display().to_string(),
        source,
    })?;
    let mut case = Case::from_toml(&text).map_err(|source| AppError::Case {
        path: path.display().to_string(),
        source,
    })?;
    // The run length sets the save points too, so it is overridden before
    // the case resolves.
    if let Some(steps) = steps {
        if steps == 0 {
            return Err(AppError::Flag {
                flag: "--steps",
                value: steps.to_string(),
                accepted: "at least 1 base interval".into(),
            });
        }
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
    let updates: f64 = levels
        .iter()
        .map(|l| l.cells as f64 * 2f64.powi(l.level as i32))
        .sum::<f64>()
        * resolved.steps as f64;
    // About four launches per patch hop (stream-collide, and the coupling
    // of the finer levels).
    let launches: f64 = levels
        .iter()
        .map(|l| 4.0 * l.patches as f64 * 2f64.powi(l.level as i32))
        .sum::<f64>()
        * resolved.steps as f64;
    let _ = writeln!(
        out,
        "work: {:.3e} cell updates, roughly {:.0} s on the CPU backend, {:.1} s on an H200",
        updates,
        updates / CPU_UPDATES_PER_S,
        updates / CUDA_UPDATES_PER_S + launches * CUDA_LAUNCH_S
    );
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

/// τ⁺ above which `lbm check` warns: a band below the refusal at
/// [`lbm_core::config::MAX_TAU`].
const HIGH_TAU: f64 = 1.5;

/// What is legal but doubtful: τ near ½ or above [`HIGH_TAU`], a Mach number
/// above 0.1, a body close to its patch's edge.
fn warnings(resolved: &Resolved, levels: &[lbm_core::case::LevelParameters]) -> Vec<String> {
    let mut out = Vec::new();
    for l in levels {
        if l.tau_plus - 0.5 < 0.02 {
            out.push(format!(
                "level {} tau+ = {:.4} is near 1/2: accuracy and stability suffer; raise the resolution or the lattice velocity",
                l.level, l.tau_plus
            ));
        }
        if l.tau_plus > HIGH_TAU {
            out.push(format!(
                "level {} tau+ = {:.4} is above {HIGH_TAU}: accuracy degrades as tau grows (refused above {}); \
                 lower flow.lattice_velocity or domain.resolution, or drop a refinement level",
                l.level,
                l.tau_plus,
                lbm_core::config::MAX_TAU
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
