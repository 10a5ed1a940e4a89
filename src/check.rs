//! `lbm check CASE.toml` and `lbm info`: what a case resolves to and what
//! this machine offers, printed without running anything.
//!
//! `check` reads and resolves the case exactly as `lbm run` does, so it
//! refuses the same bad input with the same error; it allocates nothing on a
//! device and writes no file.

use std::fmt::Write as _;
use std::path::Path;

use lbm_core::case::{BoundarySpec, Case, Resolved};
use lbm_core::cpu::host_memory;
use lbm_core::domain::hierarchy::GHOST;
use lbm_core::domain::hierarchy::SIDE_NAMES;
use lbm_core::lattice::Q;
use lbm_core::ledger::MemoryLedger;
use lbm_core::output::{FieldName, Format};
use lbm_core::{Driver, ExecConfig};

use crate::AppError;
use crate::backend::{Device, ptx_sha256};
use crate::output::picture;

/// The CPU backend's stepping time on two cores, fitted to the stepping
/// seconds of a tester's twenty runs of refined and uniform cases, with and
/// without bodies (2026-12-05, after the ghost fill's inner layer: 0.6–1.5
/// of the time taken): a rate of cell updates, a cost per base interval
/// (the forces, probes and threads' hand-offs) and one per hop of a refined
/// patch (its coupling), which dominates small refined cases. The fit of
/// 2026-12-04 (110 M a second, 30 and 360 µs) had come to 0.65–2.6 times
/// the time taken.
const CPU_UPDATES_PER_S: f64 = 160e6;
const CPU_BASE_HOP_S: f64 = 40e-6;
const CPU_PATCH_HOP_S: f64 = 130e-6;

/// Cell updates per second a GPU sustains on refined cases (docs/PERFORMANCE.md:
/// 29 G cell updates/s for large grids on an H200), and the cost of one
/// launch, where small refined cases are launch-bound.
const CUDA_UPDATES_PER_S: f64 = 15e9;
const CUDA_LAUNCH_S: f64 = 10e-6;

/// A run that is estimated to take longer needs a pilot unless the case
/// says otherwise (`run.require_pilot`).
const PILOT_ABOVE_S: f64 = 60.0;

/// The largest case file read: cases are a few kB, and a path to an endless
/// device (`/dev/zero`) would otherwise be read until memory runs out.
const MAX_CASE_BYTES: u64 = 16 << 20;

/// The text of the case file at `path` (a pipe too: `<(sed ... case.toml)`),
/// refused past [`MAX_CASE_BYTES`].
pub(crate) fn read_case_text(path: &Path) -> Result<String, AppError> {
    use std::io::Read as _;
    let refuse = |source| AppError::ReadCase {
        path: path.display().to_string(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_CASE_BYTES + 1).read_to_string(&mut text))
        .map_err(refuse)?;
    if text.len() as u64 > MAX_CASE_BYTES {
        return Err(refuse(std::io::Error::other(format!(
            "it is longer than {} MiB, which no case file is",
            MAX_CASE_BYTES >> 20
        ))));
    }
    Ok(text)
}

/// The case at `path` as written (one read, so that what a run keeps is
/// what it ran), read and resolved as `lbm run` would.
pub fn read_case(path: &Path, steps: Option<u64>) -> Result<(String, Case, Resolved), AppError> {
    let text = read_case_text(path)?;
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
    let resolved = case.resolve().map_err(|source| AppError::Case {
        path: path.display().to_string(),
        source,
    })?;
    Ok((text, case, resolved))
}

/// The report of `lbm check`.
pub fn check(path: &Path, devices: Option<usize>) -> Result<String, AppError> {
    let (_, case, resolved) = read_case(path, None)?;
    let levels = resolved.levels()?;
    let hierarchy = resolved.lattice.hierarchy.validate(&resolved.tiles)?;
    // Refused before anything is printed.
    let split = devices
        .map(|g| lbm_core::domain::decompose::Decomposition::plan(&hierarchy, &resolved.lattice, g))
        .transpose()?;
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
    if let Some(initial) = &resolved.initial {
        let fastest = initial.fastest.speed / resolved.units.velocity_to_lattice(1.0);
        let [x, y] = initial.metres(initial.fastest.at);
        let _ = writeln!(
            out,
            "initial: velocity [{:?}, {:?}] m/s, pressure {:?} Pa (the equilibrium of each cell's values); fastest \
             {fastest:.4} m/s at x = {x:.4} m, y = {y:.4} m",
            initial.velocity[0].text(),
            initial.velocity[1].text(),
            initial.pressure.text()
        );
    }
    let _ = writeln!(
        out,
        "{:>5} {:>7} {:>11} {:>11} {:>11} {:>8} {:>8} {:>6} {:>10}",
        "level", "patches", "cells", "dx [m]", "dt [s]", "tau+", "tau-", "Mach", "cell Re"
    );
    // The fastest speed the case sets, as the Mach column's.
    let fastest = fastest_speed(&resolved);
    for l in &levels {
        let cell_reynolds = cell_reynolds(&case, l, fastest);
        let _ = writeln!(
            out,
            "{:>5} {:>7} {:>11} {:>11.4e} {:>11.4e} {:>8.5} {:>8.5} {:>6.3} {:>10.4}",
            l.level, l.patches, l.cells, l.dx_m, l.dt_s, l.tau_plus, l.tau_minus, l.mach, cell_reynolds
        );
    }
    let need = memory_need(&resolved, None)?;
    let per_level: Vec<String> = (0..hierarchy.n_levels())
        .map(|l| format!("level {l} {}", human_bytes(need.device.level(l))))
        .collect();
    let cells: u64 = levels.iter().map(|l| l.cells).sum::<u64>().max(1);
    let ring = need.device.entries.get(RING_LABEL).copied().unwrap_or(0);
    let _ = writeln!(
        out,
        "device memory: about {} ({}, the output ring {}), {:.1} bytes per cell and the ring's {:.1}",
        human_bytes(need.device.total()),
        per_level.join(", "),
        human_bytes(ring),
        (need.device.total() - ring) as f64 / cells as f64,
        ring as f64 / cells as f64
    );
    let host = host_memory();
    let _ = writeln!(
        out,
        "host memory: about {} at the peak ({}){}; the CPU backend adds the device memory",
        human_bytes(need.host()),
        need.host_parts(),
        host.map_or(String::new(), |(a, limited)| format!(
            ", {} available here{}",
            human_bytes(a),
            if limited { " (what `ulimit -v` leaves)" } else { "" }
        ))
    );
    let updates = cell_updates(&levels, resolved.steps);
    let probes_cpu = probe_seconds(&resolved, false);
    let saving = save_seconds(&resolved, &levels);
    let cpu_seconds = estimate_seconds(&levels, resolved.steps, false) + probes_cpu + saving;
    let mut parts = Vec::new();
    if probes_cpu >= 0.5 {
        parts.push(format!(
            "the point probes' samples about {probes_cpu:.0} s of it on the CPU"
        ));
    }
    if saving >= 0.5 {
        parts.push(format!("writing the save points about {saving:.0} s on either"));
    }
    let _ = writeln!(
        out,
        "work: {:.3e} cell updates, roughly {:.0} s on the CPU backend, {:.1} s on an H200{}",
        updates,
        cpu_seconds,
        estimate_seconds(&levels, resolved.steps, true) + probe_seconds(&resolved, true) + saving,
        match parts.is_empty() {
            true => String::new(),
            false => format!(" ({})", parts.join("; ")),
        }
    );
    if let Some(Acoustic { period, waves, sound }) = acoustic(&case, &resolved) {
        let _ = writeln!(
            out,
            "acoustic period: {period:.4} s ({waves} L / c_s with c_s = {sound:.4} m/s, the lattice's sound), and the \
             run spans {:.1} of them: the inlet's start rings between the channel's ends until a ramp of several \
             periods or a run of many lets it die out; summary.json's last-tenth range of cd and cl shows whether \
             it has",
            resolved.steps as f64 * resolved.units.dt / period
        );
    }
    if let Some(split) = &split {
        let dx = resolved.units.dx;
        let _ = writeln!(
            out,
            "split over {}: slabs along x, cuts {} base cells clear of patches and bodies",
            plural(split.slabs.len(), "device"),
            lbm_core::domain::decompose::CUT_CLEARANCE
        );
        let total: u64 = split.slabs.iter().map(|s| s.cell_updates).sum();
        for (d, s) in split.slabs.iter().enumerate() {
            let _ = writeln!(
                out,
                "  device {d}: base columns [{}, {}) = x in [{:.4}, {:.4}) m, {} cell updates per interval ({:.1}%)",
                s.x0,
                s.x1,
                s.x0 as f64 * dx,
                s.x1 as f64 * dx,
                s.cell_updates,
                100.0 * s.cell_updates as f64 / total as f64
            );
        }
        let _ = writeln!(
            out,
            "  imbalance (most loaded over the mean): {:.3}; halo exchange: {} cut(s) x {} rows, {:.1} KiB per interval",
            split.imbalance(),
            split.cuts,
            split.rows,
            split.halo_bytes_per_interval() as f64 / 1024.0
        );
    }
    let hashed = crate::plan::Plan::of("run", &resolved)?;
    let _ = writeln!(out, "plan sha256: {}", hashed.sha256);
    for (backend, cuda) in [("the CPU backend", false), ("an H200", true)] {
        let _ = match pilot_required(&case, &resolved, cuda)? {
            Some(reason) => writeln!(out, "pilot: required on {backend} ({reason})"),
            None => writeln!(out, "pilot: not required on {backend}"),
        };
    }
    let per_save = save_point_bytes(&resolved, &levels);
    let _ = writeln!(
        out,
        "output: {} save points ({}), about {:.1} MiB of fields each; forces and probes every {} intervals",
        plan.save_points.len(),
        plan.formats.iter().map(|f| f.name()).collect::<Vec<_>>().join(", "),
        per_save as f64 / (1 << 20) as f64,
        plan.forces_every
    );
    if cpu_seconds > 600.0 {
        let _ = writeln!(
            out,
            "note: this case is GPU work: about {:.0} min on the CPU backend",
            cpu_seconds / 60.0
        );
    }
    for warning in warnings(&case, &resolved, &levels) {
        let _ = writeln!(out, "warning: {warning}");
    }
    if let Some((available, _)) = host
        && need.host() + need.device.total() > available
    {
        let _ = writeln!(
            out,
            "warning: on the CPU backend the run needs about {} of the {} available here: lbm run --backend cpu \
             refuses it",
            human_bytes(need.host() + need.device.total()),
            human_bytes(available)
        );
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

/// Rough seconds `steps` base intervals take on the CPU backend (on this
/// machine's cores: the two-core fit scaled by the threads, up to eight,
/// beyond which the memory's bandwidth rather than the cores bounds it) or
/// an H200.
pub fn estimate_seconds(levels: &[lbm_core::case::LevelParameters], steps: u64, cuda: bool) -> f64 {
    let updates = cell_updates(levels, steps);
    let hops = |refined: bool| -> f64 {
        levels
            .iter()
            .filter(|l| (l.level > 0) == refined)
            .map(|l| l.patches as f64 * 2f64.powi(l.level as i32))
            .sum::<f64>()
            * steps as f64
    };
    match cuda {
        false => {
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8) as f64;
            updates / (CPU_UPDATES_PER_S * threads / 2.0) + hops(false) * CPU_BASE_HOP_S + hops(true) * CPU_PATCH_HOP_S
        }
        // About four launches per patch hop (stream-collide, and the
        // coupling of the finer levels).
        true => updates / CUDA_UPDATES_PER_S + 4.0 * (hops(false) + hops(true)) * CUDA_LAUNCH_S,
    }
}

/// Bytes of one save point's field files (NPY and VTK; the pictures aside).
fn save_point_bytes(resolved: &Resolved, levels: &[lbm_core::case::LevelParameters]) -> u64 {
    let plan = &resolved.output;
    let cells: u64 = levels.iter().map(|l| l.cells).sum();
    let values: u64 = plan.fields.iter().map(|f| f.components() as u64).sum::<u64>() * cells;
    plan.formats
        .iter()
        .map(|f| match f {
            // float32 values; VTK adds 3-vector velocity and two byte masks.
            Format::Npy => 4 * values,
            Format::Vtk => 4 * values + 4 * cells + 2 * cells,
            Format::Png => 0,
        })
        .sum()
}

/// The rate at which the host computes and writes a save point's files, in
/// bytes of field files, their pictures counted as [`PICTURE_CELL_BYTES`] a
/// cell: a tester's 1024² cavity with a 512² patch wrote six save points of
/// 108 MiB in all three formats in 6 s on two cores (2026-12-05), where the
/// stepping took 0.2 s.
const SAVE_BYTES_PER_S: f64 = 100.0 * (1 << 20) as f64;
const PICTURE_CELL_BYTES: u64 = 8;

/// Rough host seconds a run's save points take (the same on either
/// backend: the host writes them).
pub fn save_seconds(resolved: &Resolved, levels: &[lbm_core::case::LevelParameters]) -> f64 {
    let plan = &resolved.output;
    let cells: u64 = levels.iter().map(|l| l.cells).sum();
    let pictures = if plan.formats.contains(&Format::Png) {
        PICTURE_CELL_BYTES * cells
    } else {
        0
    };
    let bytes = save_point_bytes(resolved, levels) + pictures;
    plan.save_points.len() as f64 * bytes as f64 / SAVE_BYTES_PER_S
}

/// Host seconds one point probe's sample costs (its CSV row, and on the CPU
/// backend its few cells): 50 probes sampled every interval added 0.65 s
/// to 4000 intervals on two cores. On CUDA each is a launch besides.
const PROBE_SAMPLE_S: f64 = 3.5e-6;

/// Rough seconds the point probes' samples add to a run of `resolved`.
pub fn probe_seconds(resolved: &Resolved, cuda: bool) -> f64 {
    let plan = &resolved.output;
    let samples = resolved.steps / plan.forces_every.max(1) + 1;
    let per_sample = PROBE_SAMPLE_S + if cuda { CUDA_LAUNCH_S } else { 0.0 };
    plan.probes.len() as f64 * samples as f64 * per_sample
}

/// Why a full run of the case needs a pilot first, or `None` when it does
/// not: `run.require_pilot` when the case sets it, else whether the run is
/// estimated to take over a minute on the backend.
pub fn pilot_required(case: &Case, resolved: &Resolved, cuda: bool) -> Result<Option<String>, AppError> {
    let levels = resolved.levels()?;
    pilot_required_for(
        case.run.require_pilot,
        &levels,
        resolved.steps,
        cuda,
        probe_seconds(resolved, cuda) + save_seconds(resolved, &levels),
        "run.require_pilot = false in the case waives that",
    )
}

/// [`pilot_required`] for `steps` intervals of `levels` and `sampling`
/// seconds of probe samples and saving besides; `waiver` says how the caller's user
/// turns the requirement off.
pub fn pilot_required_for(
    required: Option<bool>,
    levels: &[lbm_core::case::LevelParameters],
    steps: u64,
    cuda: bool,
    sampling: f64,
    waiver: &str,
) -> Result<Option<String>, AppError> {
    let estimate = estimate_seconds(levels, steps, cuda) + sampling;
    Ok(match required {
        Some(true) => Some("the case sets run.require_pilot = true".into()),
        Some(false) => None,
        None => (estimate > PILOT_ABOVE_S)
            .then(|| format!("it is estimated at {estimate:.0} s, over {PILOT_ABOVE_S:.0} s; {waiver}")),
    })
}

/// How far a period in s may move when rounded to whole base intervals
/// before `lbm check` warns (a share of the period).
const PERIOD_ROUNDING: f64 = 0.01;

/// Bytes of one sampled number in a checkpoint's JSON: up to 17
/// significant digits, a sign, an exponent and the separators.
const JSON_BYTES_PER_NUMBER: u64 = 26;

/// What one point of a line costs the host over a run: the resolved case
/// holds it, the plan's canonical JSON and the manifest spell it out, and
/// its last profile stays for the plot (a line of 100000 points took 66
/// MiB).
const LINE_POINT_BYTES: u64 = 1024;

/// The output ring's share of [`MemoryNeed::device`].
pub const RING_LABEL: &str = "output.ring";

/// The program itself: its code, its threads' stacks and the small
/// allocations no estimate itemises.
const PROCESS_BYTES: u64 = 32 << 20;

/// What a run needs in memory, found before anything is allocated: its device
/// buffers (lbm-core's estimate, the same ledger the stepper keeps) and the
/// host's working memory at its two peaks.
pub struct MemoryNeed {
    /// Every device buffer by label.
    pub device: MemoryLedger,
    /// The stepper's setup of the largest patch: the solid flags, the owner
    /// of each cell and the wall distances as the rasteriser builds them, or
    /// the populations uploaded at the start, whichever is larger.
    pub setup: u64,
    /// A save point's gathered fields of every patch (also what a point
    /// probe's sample gathers), in physical units with their masks.
    pub fields: u64,
    /// What is held beside them while they are gathered and written: the
    /// download of the largest patch, or the largest working copy of a
    /// writer (an NPY array and its file, a VTK block and its file, a
    /// picture's values, pixels and PNG).
    pub working: u64,
    /// A checkpoint's state, downloaded whole and streamed to its file (and
    /// read back the same way by `lbm resume`): both population sets of
    /// every patch and the ledgers beside them, and a copy of the histories
    /// with their JSON.
    pub checkpoint: u64,
    /// The output ring's pinned staging, held for the whole run.
    pub staging: u64,
    /// The force and probe histories at the run's end and the lines'
    /// points and last profiles, held for the whole run (a checkpoint's copy and JSON of
    /// them are in [`MemoryNeed::checkpoint`]).
    pub histories: u64,
}

impl MemoryNeed {
    /// The host's peak, bytes: the setup, a save point or a checkpoint.
    /// The run writes a save point's fields before it downloads a
    /// checkpoint's state, but the allocator may still hold their pages
    /// then (glibc keeps freed memory for later; `malloc_trim` after each
    /// returns most of it, not all: a refined cavity saving every interval
    /// peaked 9% over an estimate that left them out).
    pub fn host(&self) -> u64 {
        let save_point = self.fields + self.working;
        PROCESS_BYTES + self.staging + self.histories + self.setup.max(save_point).max(self.checkpoint + save_point)
    }

    /// The host's parts in words.
    pub fn host_parts(&self) -> String {
        format!(
            "the program {}, the output ring's staging {}, the samples' histories {} and the largest of: setup {}; a save point's fields {} and working copies {}; a checkpoint {} beside them",
            human_bytes(PROCESS_BYTES),
            human_bytes(self.staging),
            human_bytes(self.histories),
            human_bytes(self.setup),
            human_bytes(self.fields),
            human_bytes(self.working),
            human_bytes(self.checkpoint)
        )
    }
}

/// The memory `resolved` needs, with pictures `picture_width` pixels wide
/// (`None`: the default). The sizes follow the buffers and arrays the stepper
/// and the writers of `crate::output` make.
pub fn memory_need(resolved: &Resolved, picture_width: Option<u32>) -> Result<MemoryNeed, AppError> {
    memory_need_of(resolved, picture_width, None)
}

/// [`memory_need`] of the part of the domain `slab` holds (its device
/// buffers; the host's peaks are the whole run's).
fn memory_need_of(
    resolved: &Resolved,
    picture_width: Option<u32>,
    slab: Option<lbm_core::domain::decompose::SlabWindow>,
) -> Result<MemoryNeed, AppError> {
    let lattice = &resolved.lattice;
    // The run observes the exchange window; validation the raw exchange
    // too: a few bytes per body, counted for both.
    let bodies = !lattice.bodies.is_empty();
    let exec = ExecConfig {
        tiles: resolved.tiles.clone(),
        observe_raw_exchange: bodies,
        observe_window_exchange: bodies,
        slab,
        ..ExecConfig::default()
    };
    let device = lattice.memory_estimate(&exec)?;
    let hierarchy = lattice.hierarchy.validate(&resolved.tiles)?;
    let plan = &resolved.output;
    let f32_bytes = std::mem::size_of::<f32>() as u64;
    let populations = |plane: u64| Q as u64 * f32_bytes * plane;
    let setup = hierarchy
        .patches()
        .map(|p| {
            let plane = p.layout.plane_cells() as u64;
            let walls = match lattice.bodies.iter().any(|b| b.level == p.level) {
                true => populations(plane),
                false => 0,
            };
            let raster = plane * (1 + std::mem::size_of::<Option<usize>>() as u64) + walls;
            raster.max(populations(plane))
        })
        .max()
        .unwrap_or(0);
    let active = |p: &lbm_core::domain::hierarchy::Patch| p.active.cells() as u64;
    let cells: u64 = hierarchy.patches().map(active).sum();
    let largest = hierarchy.patches().map(active).max().unwrap_or(0);
    // `fields::PatchFields`: pressure, density, u_x, u_y and two masks.
    let fields = cells * (4 * f32_bytes + 2 * std::mem::size_of::<bool>() as u64);
    // `Stepper::fields` downloads a patch's populations and makes three arrays.
    let gather = hierarchy
        .patches()
        .map(|p| populations(p.layout.plane_cells() as u64) + 3 * f32_bytes * active(p))
        .max()
        .unwrap_or(0);
    let components = |vtk: bool| {
        plan.fields
            .iter()
            .map(|f| match (f, vtk) {
                (FieldName::Velocity, true) => 3,
                _ => f.components() as u64,
            })
            .collect::<Vec<_>>()
    };
    let writers = plan
        .formats
        .iter()
        .map(|format| match format {
            // One field's values and the file's bytes.
            Format::Npy => 2 * f32_bytes * largest * components(false).into_iter().max().unwrap_or(1),
            // Every array of a block (3-vector velocity, two byte masks) and the file.
            Format::Vtk => 2 * largest * (f32_bytes * components(true).into_iter().sum::<u64>() + 2),
            // A field's values on every patch, the RGB pixels and the PNG.
            Format::Png => {
                let finest = resolved.units.dx / 2f64.powi(hierarchy.n_levels() as i32 - 1);
                let [w, h] = picture::image_size(
                    domain_size(resolved),
                    picture::pixels_per_metre(domain_size(resolved), finest, picture_width),
                );
                f32_bytes * cells + 2 * 3 * (w * h) as u64
            }
        })
        .max()
        .unwrap_or(0);
    // What grows with the run: every force and probe sample stays in the
    // run's histories (for the time averages and the plots), the last
    // profile of each line with them, and a checkpoint holds a copy and
    // their JSON (serde_json's growing buffer up to twice its length).
    let bodies_n = lattice.bodies.len() as u64;
    let probes_n = plan.probes.len() as u64;
    let samples = match bodies_n + probes_n {
        0 => 0,
        _ => resolved.steps / plan.forces_every.max(1) + 1,
    };
    let line_points: u64 = plan.lines.iter().map(|l| l.points.len() as u64).sum();
    let sampled = samples * (2 * (16 * bodies_n + 32) + 32 * probes_n + 32);
    let histories = sampled + LINE_POINT_BYTES * line_points;
    let numbers = samples * (4 * bodies_n + 3 * probes_n + 2) + 3 * line_points;
    let checkpoint = device.state() + sampled + 2 * JSON_BYTES_PER_NUMBER * numbers;
    // The output ring's arena and ring beside the stepper's buffers, sized
    // by each patch's plane (its active cells and the ghost band around
    // them, an upper bound that holds for a slab's own share too).
    let planes: Vec<usize> = device
        .entries
        .iter()
        .filter(|(label, _)| label.ends_with(".f.a"))
        .map(|(_, bytes)| *bytes as usize / (Q * f32_bytes as usize))
        .collect();
    let windows: Vec<u64> = device
        .entries
        .iter()
        .filter(|(label, _)| label.ends_with(".exchange.window"))
        .map(|(_, bytes)| *bytes)
        .collect();
    let (ring, staging) = crate::output::ring::ring_memory(&planes, plan.probes.len(), &windows);
    let mut device = device;
    device.add(RING_LABEL, ring);
    Ok(MemoryNeed {
        device,
        setup,
        fields,
        working: gather.max(writers),
        checkpoint,
        staging,
        histories,
    })
}

/// The domain's size, m: the base grid's, within half a cell of the case's.
fn domain_size(resolved: &Resolved) -> [f64; 2] {
    let [nx, ny] = resolved.lattice.hierarchy.base;
    [nx as f64 * resolved.units.dx, ny as f64 * resolved.units.dx]
}

/// Refuses, before any output is written, a run whose memory (as
/// [`memory_need`] estimates it) exceeds what `driver` has free or, for the
/// host's share, what the host has available (`MemAvailable`; not checked
/// where that cannot be read). The CPU backend's device memory is host memory.
pub fn check_memory<D: Driver + ?Sized>(
    resolved: &Resolved,
    driver: &D,
    picture_width: Option<u32>,
) -> Result<MemoryNeed, AppError> {
    check_slab_memory(resolved, driver, picture_width, None)
}

/// [`check_memory`] of the part of the domain `slab` holds.
fn check_slab_memory<D: Driver + ?Sized>(
    resolved: &Resolved,
    driver: &D,
    picture_width: Option<u32>,
    slab: Option<lbm_core::domain::decompose::SlabWindow>,
) -> Result<MemoryNeed, AppError> {
    let need = memory_need_of(resolved, picture_width, slab)?;
    check_batch_memory(
        std::slice::from_ref(&need),
        resolved.lattice.hierarchy.levels.len() + 1,
        driver,
    )?;
    Ok(need)
}

/// [`check_memory`] of each slab of `split` on its own device (none: of
/// the one device).
pub fn check_split_memory(
    resolved: &Resolved,
    opened: &[crate::backend::Opened],
    split: Option<&lbm_core::domain::decompose::Decomposition>,
    picture_width: Option<u32>,
) -> Result<(), AppError> {
    for (k, (driver, _)) in opened.iter().enumerate() {
        check_slab_memory(resolved, driver, picture_width, split.map(|s| s.window(k)))?;
    }
    Ok(())
}

/// [`check_memory`] for members that are all resident at once (a sweep):
/// their device buffers add up, and so do their host peaks (each member's
/// writer may hold a save point while the others do). `levels` is the
/// members' level count.
pub fn check_batch_memory<D: Driver + ?Sized>(needs: &[MemoryNeed], levels: usize, driver: &D) -> Result<(), AppError> {
    let device: u64 = needs.iter().map(|n| n.device.total()).sum();
    let on_host = driver.backend() == lbm_core::cpu::BACKEND;
    let per_level: Vec<String> = (0..levels)
        .map(|l| {
            format!(
                "level {l} {}",
                human_bytes(needs.iter().map(|n| n.device.level(l)).sum())
            )
        })
        .collect();
    let members = match needs.len() {
        1 => String::new(),
        n => format!("{n} members' "),
    };
    let buffers = format!(
        "{members}device buffers {}: {}",
        human_bytes(device),
        per_level.join(", ")
    );
    if !on_host
        && let Ok(free) = driver.free_memory()
        && device > free
    {
        return Err(AppError::Memory {
            what: "device",
            needed: device,
            available: free,
            parts: buffers,
        });
    }
    // One program holds every member: its own share counts once.
    let member_peaks: u64 = needs.iter().map(|n| n.host() - PROCESS_BYTES).sum();
    let host_peaks = PROCESS_BYTES + member_peaks;
    let host_parts = match needs {
        [one] => one.host_parts(),
        _ => format!(
            "the program {} and {} members' host peaks {}",
            human_bytes(PROCESS_BYTES),
            needs.len(),
            human_bytes(member_peaks)
        ),
    };
    let (host, parts) = match on_host {
        true => (device + host_peaks, format!("{buffers}; {host_parts}")),
        false => (host_peaks, host_parts),
    };
    if let Some((available, limited)) = host_memory()
        && host > available
    {
        return Err(AppError::Memory {
            what: if limited { "host (`ulimit -v`-limited)" } else { "host" },
            needed: host,
            available,
            parts,
        });
    }
    Ok(())
}

/// Files the program holds open besides its runs' CSV files: the standard
/// streams, a device's driver handles, a sweep's own files.
const OTHER_OPEN_FILES: u64 = 64;

/// Files each run (a sweep's member) holds besides its CSV files: its
/// directory's lock, the file its writer thread is writing, a checkpoint
/// or summary being written (a 60-member sweep failed with 1 each).
const MEMBER_OPEN_FILES: u64 = 4;

/// Refuses, before any output is written, members (one for a run) whose CSV
/// files, open for the whole run, would pass the process's limit on open
/// files once raised as far as it may be: `forces.csv` (with bodies), one
/// per point probe and one per line.
pub fn check_open_files<'a>(members: impl IntoIterator<Item = &'a Resolved>) -> Result<(), AppError> {
    let (mut members_n, mut files) = (0u64, 0u64);
    let mut parts = Vec::new();
    for resolved in members {
        let plan = &resolved.output;
        let csv = u64::from(!resolved.lattice.bodies.is_empty()) + (plan.probes.len() + plan.lines.len()) as u64;
        if members_n == 0 {
            parts.push(format!(
                "{}, {}{}",
                plural(plan.probes.len(), "point probe"),
                plural(plan.lines.len(), "line"),
                if resolved.lattice.bodies.is_empty() {
                    ""
                } else {
                    " and forces.csv"
                }
            ));
        }
        members_n += 1;
        files += csv;
    }
    if members_n > 1 {
        parts.push(format!("over {members_n} members at once"));
    }
    let wanted = files + OTHER_OPEN_FILES + MEMBER_OPEN_FILES * members_n;
    match lbm_core::cpu::raise_open_file_limit(wanted) {
        Some(limit) if limit < wanted => Err(AppError::OpenFiles {
            needed: files,
            limit,
            parts: parts.join(", "),
            remedy: match (files, members_n) {
                // Nothing of the case's to sample less of: the program's own.
                (0, _) => format!("raise the limit to at least {wanted}"),
                (_, 1) => format!("sample fewer output.probes or output.lines, or raise the limit to {wanted}"),
                _ => format!(
                    "sample fewer output.probes or output.lines, run fewer members at once (--shard K/N), or raise \
                     the limit to {wanted}"
                ),
            },
        }),
        _ => Ok(()),
    }
}

/// `bytes` in MiB or GiB, as a reader wants them.
pub fn human_bytes(bytes: u64) -> String {
    match bytes as f64 / (1u64 << 30) as f64 {
        gib if gib >= 1.0 => format!("{gib:.1} GiB"),
        _ => format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64),
    }
}

/// The fastest speed the case sets (its reference velocity, the inlet's
/// peak, a moving wall, the initial field's fastest cell, a body force's
/// speed), m/s: what the Mach column and the cell Reynolds numbers take.
fn fastest_speed(resolved: &Resolved) -> f64 {
    resolved.lattice_speed / resolved.units.velocity_to_lattice(1.0)
}

/// `speed` (m/s) times the level's spacing over the viscosity: the cell
/// Reynolds number `lbm check` prints and its warnings compare.
fn cell_reynolds(case: &Case, level: &lbm_core::case::LevelParameters, speed: f64) -> f64 {
    speed * level.dx_m / case.fluid.viscosity
}

/// Level 0's cell Reynolds number above which `lbm check` warns a BGK case
/// with an outflow: a uniform stream held at 22.9 and diverged from the
/// outlet at 28.6.
const OUTFLOW_BGK_CELL_RE: f64 = 24.0;

/// The cell Reynolds number of the inlet's peak on level 0 above which
/// `lbm check` warns a TRT case whose inlet meets a wall: measured in a
/// channel 20 cells high, it held at 10 and diverged at 11.5.
const INLET_TRT_CELL_RE: f64 = 10.0;

/// How far (in cells of its level) a body's straight edge along an axis may
/// lie from a cell face before `lbm check` warns: its links' wall distance q
/// is then outside 0.4 to 0.6.
const EDGE_OFF_FACE: f64 = 0.1;

/// The share of a body's outline a straight edge must make for that
/// warning: a shorter one is a facet of a curved outline (an aerofoil's
/// crest), whose few links err in both directions along the curve.
const EDGE_OUTLINE_SHARE: f64 = 0.1;

/// Level 0's cell Reynolds number of the inlet's peak (U dx / nu, at the
/// amplitude's peak factor) when a TRT case's inlet meets a wall and it is
/// above `INLET_TRT_CELL_RE` (10): what `lbm check` warns of and a divergence's
/// advice names.
pub fn inlet_trt_cell_reynolds(resolved: &Resolved) -> Option<f64> {
    let lattice = &resolved.lattice;
    let inlet = lattice.inlet.as_ref()?;
    let trt = matches!(lattice.collision, lbm_core::lattice::Collision::Trt { .. });
    // A moving wall is a wall here, with its velocity; so is the inlet's
    // side beyond a span shorter than it.
    let ny = lattice.hierarchy.base[1];
    let walled = [2, 3]
        .iter()
        .any(|&s| lattice.boundaries[s] == lbm_core::Boundary::Wall)
        || inlet.span.is_some_and(|[j0, j1]| j0 > 0 || j1 < ny);
    let cell_reynolds = inlet.velocity.abs() * inlet.amplitude.peak() / ((lattice.tau - 0.5) / 3.0);
    (trt && walled && cell_reynolds > INLET_TRT_CELL_RE).then_some(cell_reynolds)
}

/// τ⁺ above which `lbm check` warns: a band below the refusal at
/// [`lbm_core::config::MAX_TAU`].
const HIGH_TAU: f64 = 1.5;

/// The warning for a body force along a periodic axis that only the bodies
/// hold ([`lbm_core::config::ForcedSpeed::held_by_bodies`]): the run is not
/// refused, since a flow through an array of bodies settles at a speed no
/// estimate before the run gives, and the user learns what to watch.
pub fn held_by_bodies(resolved: &Resolved) -> Option<String> {
    let held = resolved.lattice.forced_speed(resolved.steps).held_by_bodies?;
    let limit = lbm_core::config::MAX_MACH / 3f64.sqrt();
    let limit_m_s = limit * resolved.units.dx / resolved.units.dt;
    Some(format!(
        "flow.acceleration along {}: no wall or inlet across {}, so only the bodies hold the flow, and how fast it \
         settles is not known before the run (free acceleration would reach Mach {:.2} within it); Mach 0.3 is {} \
         m/s here: if summary.json's written.field_ranges show the velocity beyond it, compressibility errors \
         grow as Mach^2, so lower flow.acceleration",
        held_axes(held.axes),
        match held.axes {
            [true, true] => "either periodic axis",
            _ => "that periodic axis",
        },
        held.speed * 3f64.sqrt(),
        lbm_core::case::significant(limit_m_s, false),
    ))
}

/// "x", "y" or "x and y".
pub fn held_axes(axes: [bool; 2]) -> &'static str {
    match axes {
        [true, true] => "x and y",
        [true, false] => "x",
        _ => "y",
    }
}

/// The warnings for patches whose interface meets a moving wall: with TRT
/// and τ⁻ above [`crate::run::REFINED_TRT_TAU_MINUS`] a flow there can settle
/// wrong without a sign, so `lbm run` prints them too.
pub fn moving_wall_junctions(
    case: &Case,
    resolved: &Resolved,
    levels: &[lbm_core::case::LevelParameters],
) -> Vec<String> {
    let mut out = Vec::new();
    let tau_minus = crate::run::refined_trt_tau_minus(resolved, levels);
    let Ok(hierarchy) = resolved.lattice.hierarchy.validate(&resolved.tiles) else {
        return out;
    };
    for patch in hierarchy.levels.iter().skip(1).flatten() {
        for (side, spec) in case.boundaries.sides().into_iter().enumerate() {
            let BoundarySpec::MovingWall(velocity) = spec else {
                continue;
            };
            // A patch that spans a moving wall has no interface there.
            // With two junctions (a patch on the wall's middle) their
            // errors largely cancel: 0.1% in the same cavity.
            let across = if side < 2 { [2, 3] } else { [0, 1] };
            let junctions = across.iter().filter(|&&s| !patch.on_boundary[s]).count();
            if !(velocity.iter().any(|v| *v != 0.0) && patch.on_boundary[side] && junctions > 0) {
                continue;
            }
            let (level, index, wall) = (patch.level - 1, patch.index, SIDE_NAMES[side]);
            match (tau_minus, junctions) {
                (Some(tau_minus), _) => out.push(format!(
                    "refinement[{level}].patches[{index}] meets the moving wall boundaries.{wall} where it \
                     ends, with TRT at tau- {tau_minus:.2} (above {}): there the \
                     coupling's rebuilt odd non-equilibrium is large, and the flow can diverge or settle to a \
                     wrong one (a Re-400 cavity with a patch in the lid's corner settled with its centreline \
                     velocities 0.2 to 0.6 U off at tau- 8 to 16, and one on the lid's middle diverged); \
                     collision = {{ model = \"bgk\" }} held there, or span the wall from side to side, or keep \
                     the patch 4 parent cells away from it",
                    crate::run::REFINED_TRT_TAU_MINUS
                )),
                (None, 1) => out.push(format!(
                    "refinement[{level}].patches[{index}] touches the moving wall boundaries.{wall} and one of \
                     its ends: where its interface meets the wall the coupling's mass correction is large, and \
                     it shifts the pressure of the coarse cells along the whole interface (0.5 to 0.9% of rho \
                     U^2 in a Re-100 cavity, several times the grid's own error there) and the velocities a \
                     little (the centrelines 0.011 U from the finer grid's, 0.007 U without the patch); span \
                     the wall from side to side, or keep the patch 4 parent cells away from it"
                )),
                (None, _) => {}
            }
        }
    }
    out
}

/// What is legal but doubtful: τ near ½ or above [`HIGH_TAU`], a Mach number
/// above 0.1, a body close to its patch's edge.
fn warnings(case: &Case, resolved: &Resolved, levels: &[lbm_core::case::LevelParameters]) -> Vec<String> {
    let mut out = Vec::new();
    // The grid spans whole base cells: a size that is not a whole number of
    // them is rounded, and the domain the run simulates differs from the
    // case's.
    for (axis, length) in ["x", "y"].iter().zip(case.domain.size) {
        let cells = resolved.units.length_to_lattice(length);
        if (cells - cells.round()).abs() > 1e-6 * cells.max(1.0) {
            out.push(format!(
                "domain.size along {axis}, {length} m, is {cells:.4} base cells at domain.resolution {}: \
                 the grid has {} cells, {:.6} m; choose a size and resolution whose cells come out whole",
                case.domain.resolution,
                cells.round(),
                cells.round() * resolved.units.dx
            ));
        }
    }
    // A patch's edges lie on its parent's cell faces: an edge between them
    // moves, and with it what the case meant by it (a body's clearance).
    for (k, level) in case.refinement.iter().enumerate() {
        let parent_dx = resolved.units.dx * 0.5f64.powi(k as i32);
        for (i, patch) in level.patches.iter().enumerate() {
            let cells = patch.map(|v| v / parent_dx);
            if cells.iter().any(|c| (c - c.round()).abs() > 1e-6 * c.abs().max(1.0)) {
                // Nine digits, without the float's last-bit noise.
                let snapped = cells.map(|c| format!("{}", (c.round() * parent_dx * 1e9).round() / 1e9));
                out.push(format!(
                    "refinement[{k}].patches[{i}] = {patch:?} m is not on level {k}'s cell faces ({parent_dx:e} m \
                     apart) and is taken as [{}] m; give edges on those faces",
                    snapped.join(", ")
                ));
            }
        }
    }
    // Periods in s become whole base intervals: one far from a whole number
    // of them samples at another rate than the case asks.
    let dt = resolved.units.dt;
    for (key, asked) in [
        ("output.every", case.output.every),
        ("output.forces_every", case.output.forces_every),
    ] {
        // Shorter than an interval is the documented way to ask for every
        // interval.
        if let Some(asked) = asked.filter(|a| *a >= dt) {
            let intervals = (asked / dt).round();
            if (intervals * dt / asked - 1.0).abs() > PERIOD_ROUNDING {
                out.push(format!(
                    "{key} = {asked} s is {:.3} base intervals of {dt:.4e} s and is taken as {intervals}, {:.4e} s \
                     ({:+.1}%); choose a whole number of intervals",
                    asked / dt,
                    intervals * dt,
                    (intervals * dt / asked - 1.0) * 100.0
                ));
            }
        }
    }
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
    if case.boundaries.x_max == BoundarySpec::Outflow
        && matches!(resolved.lattice.collision, lbm_core::lattice::Collision::Bgk {})
        && let Some(l) = levels.first()
    {
        // The flow's own speed: output.reference_velocity only scales the
        // coefficients (a case that diverged passed with it set low).
        let cell_reynolds = cell_reynolds(case, l, fastest_speed(resolved));
        if cell_reynolds > OUTFLOW_BGK_CELL_RE {
            out.push(format!(
                "level 0's cell Re is {cell_reynolds:.1} (U dx / nu) with BGK and an outflow: above \
                 {OUTFLOW_BGK_CELL_RE} a transverse mode can grow in the outlet's last columns (a uniform stream \
                 diverged there at 28.6 and held at 22.9): a finer domain.resolution lowers the cell Reynolds \
                 number"
            ));
        }
    }
    if let Some(tau_minus) = crate::run::refined_trt_tau_minus(resolved, levels) {
        out.push(format!(
            "tau- reaches {tau_minus:.2} with refinement and TRT: the coupling rebuilds the odd non-equilibrium in \
             proportion to tau-, and a wake that crosses a patch edge can grow unstable (a cylinder at Re 100 with \
             tau- 7.8 diverged where BGK held): collision = {{ model = \"bgk\" }} holds there, and a finer \
             domain.resolution or a larger flow.lattice_velocity raises tau+ and lowers tau-"
        ));
    }
    for (b, body) in resolved.lattice.bodies.iter().enumerate() {
        let scale = 2f64.powi(body.level as i32);
        // How far each straight edge along an axis lies from the nearest
        // cell face of the body's level, in its cells, at both ends; an edge
        // within a tenth of a cell of an axis over its length counts (a turn
        // by a hair leaves it on the same rows of centres).
        let off_face = |at: f64| (at * scale - (at * scale).round()).abs();
        // An edge beyond a wall the body crosses, across it or along it,
        // bounds no fluid.
        let size = resolved.lattice.hierarchy.base.map(f64::from);
        let in_domain =
            |axis: usize, at: f64, [lo, hi]: [f64; 2]| at > 0.0 && at < size[axis] && hi > 0.0 && lo < size[1 - axis];
        let shortest = EDGE_OUTLINE_SHARE * body.shape.perimeter();
        let worst = body
            .shape
            .axis_edges(EDGE_OFF_FACE / scale)
            .into_iter()
            .filter(|&(axis, a, _, span)| in_domain(axis, a, span) && span[1] - span[0] >= shortest)
            .flat_map(|(axis, a, b, _)| [(axis, a, off_face(a)), (axis, b, off_face(b))])
            .max_by(|p, q| p.2.total_cmp(&q.2));
        if let Some((axis, at, off)) = worst
            && off > EDGE_OFF_FACE + 1e-9
        {
            let dx = resolved.units.dx / scale;
            out.push(format!(
                "bodies[{b}] has a straight edge along {} at {} = {} m, {off:.2} of a level-{} cell from the \
                 nearest cell face: interpolated bounce-back places such an edge with an error of first order in \
                 the spacing, largest where an edge lies on a row of cell centres (a square of 15 cells a side \
                 had its drag at Re 40 3% low or 3% high as its edges lay just inside or outside the centres, \
                 half that at twice the resolution; on cell faces, within 0.7% of the fine grid's); make the \
                 edges lie on cell faces, at whole multiples of dx = {} m on level {} (the size and position \
                 together, or domain.resolution)",
                ["y", "x"][axis],
                ["x", "y"][axis],
                lbm_core::case::significant(at * resolved.units.dx, false),
                body.level,
                lbm_core::case::significant(dx, false),
                body.level,
            ));
        }
    }
    if let Some(message) = held_by_bodies(resolved) {
        out.push(message);
    }
    if let Some(l) = levels.first()
        && l.mach > 0.1
    {
        let (key, remedy) = &resolved.fastest;
        out.push(format!(
            "lattice Mach number {:.3} is above 0.1: compressibility errors grow as Mach^2; the fastest speed is \
             {key}'s: {remedy}",
            l.mach
        ));
    }
    if let BoundarySpec::Inlet(inlet) = &case.boundaries.x_min {
        if let Some(cell_reynolds) = inlet_trt_cell_reynolds(resolved) {
            out.push(format!(
                "the inlet's peak is at cell Re {cell_reynolds:.1} on level 0 (U dx / nu) with TRT: where the inlet \
                     meets a wall its odd non-equilibrium barely relaxes, and channels diverged from the inlet's \
                     corners above cell Re {INLET_TRT_CELL_RE} (a uniform inlet at 11.5, a parabolic one at 12.5; \
                     BGK held at 15): collision = {{ model = \"bgk\" }} holds there, or a finer domain.resolution \
                     lowers the cell Reynolds number"
            ));
        }
        let outflow = case.boundaries.x_max == BoundarySpec::Outflow;
        let negative = inlet.velocity < 0.0;
        let reverses = negative || inlet.amplitude.reverses();
        if outflow && reverses {
            let what = match negative {
                true => "boundaries.x_min.inlet.velocity is negative (the inlet draws fluid out of the domain)",
                false => {
                    "boundaries.x_min.inlet.amplitude turns negative (a sine's second half-period, a table's \
                     negative rows)"
                }
            };
            out.push(format!(
                "{what}: the flow then enters through the outflow at x_max, which the pressure outlet does not \
                 hold (such runs can diverge at modest Reynolds numbers, at any resolution); a wall at x_max, or \
                 an inflow of one sign, keep the flow leaving through it"
            ));
        }
        if inlet.velocity == 0.0 {
            out.push("boundaries.x_min.inlet.velocity is 0: no fluid enters, and the inlet is a resting wall".into());
        } else if !outflow && negative && !inlet.amplitude.reverses() {
            out.push(format!(
                "boundaries.x_min.inlet.velocity is negative and boundaries.x_max is {}: the inlet draws fluid out \
                 that nothing replaces, so the density and pressure fall as long as it runs; make x_max an outflow",
                lbm_core::case::side_kind(&case.boundaries.x_max)
            ));
        } else if !outflow && !reverses {
            out.push(format!(
                "boundaries.x_min is an inlet but boundaries.x_max is {}: the fluid the inlet brings has nowhere to \
                 go, so the density and pressure rise as long as it runs; make x_max an outflow",
                lbm_core::case::side_kind(&case.boundaries.x_max)
            ));
        }
        if let (lbm_core::config::Amplitude::Sine { period }, Some(Acoustic { period: acoustic, .. })) =
            (&inlet.amplitude, acoustic(case, resolved))
            && (0.5..2.0).contains(&(period / acoustic))
        {
            out.push(format!(
                "boundaries.x_min.inlet.amplitude's sine period, {period} s, is near the channel's acoustic period, \
                 {acoustic:.4} s: the inlet drives the channel's ringing at resonance; keep the period several \
                 times the acoustic one (a smaller flow.lattice_velocity makes the lattice's sound faster and its \
                 period shorter)"
            ));
        }
    }
    out.extend(moving_wall_junctions(case, resolved, levels));
    if let Ok(hierarchy) = resolved.lattice.hierarchy.validate(&resolved.tiles) {
        for (b, body) in resolved.lattice.bodies.iter().enumerate().filter(|(_, b)| b.level > 0) {
            let scale = 2f64.powi(body.level as i32);
            // Its part in the domain: a body may cross a wall.
            let [nx, ny] = resolved.lattice.hierarchy.base.map(f64::from);
            let [x0, y0, x1, y1] = body
                .shape
                .bounds_within([0.0, 0.0, nx, ny])
                .unwrap_or([0.0, 0.0, nx, ny]);
            for p in &hierarchy.levels[body.level] {
                let [ax0, ay0, ax1, ay1] = p.global_active().map(|v| v as f64);
                // In the order of the sides, as `on_boundary` is.
                let gaps = [x0 * scale - ax0, ax1 - x1 * scale, y0 * scale - ay0, ay1 - y1 * scale];
                let inside = gaps.iter().all(|g| *g >= 0.0);
                let near = gaps
                    .iter()
                    .zip(p.on_boundary)
                    .any(|(g, on_boundary)| !on_boundary && *g < 2.0 * GHOST as f64);
                if inside && near {
                    out.push(format!(
                        "body {b} is within {} cells of its patch's edge: the flow around it reaches the coupling \
                         (a cylinder at Re 40 with 4 cells to the upstream edge lost 2.6% of its cd with TRT, 0.7% \
                         with BGK, and with 4 cells to a side edge took a steady cl of 0.02 to 0.04; keep bodies \
                         {} cells or more inside their patch)",
                        2 * GHOST,
                        2 * GHOST
                    ));
                }
            }
        }
    }
    out
}

/// `n` and `word`, with an s for any count but one.
pub fn plural(n: usize, word: &str) -> String {
    match n {
        1 => format!("1 {word}"),
        _ => format!("{n} {word}s"),
    }
}

/// The channel between an inlet and the far side, a resonator for the
/// method's sound: open (a quarter wave) at an outflow, closed (a half
/// wave) otherwise.
struct Acoustic {
    /// s.
    period: f64,
    /// Channel lengths a period: 4 or 2.
    waves: f64,
    /// The lattice's speed of sound, m/s.
    sound: f64,
}

fn acoustic(case: &Case, resolved: &Resolved) -> Option<Acoustic> {
    let BoundarySpec::Inlet(_) = &case.boundaries.x_min else {
        return None;
    };
    let sound = resolved.units.dx / resolved.units.dt / 3f64.sqrt();
    let waves = if case.boundaries.x_max == BoundarySpec::Outflow {
        4.0
    } else {
        2.0
    };
    Some(Acoustic {
        period: waves * case.domain.size[0] / sound,
        waves,
        sound,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use mock_driver::MockDriver;

    #[test]
    fn the_memory_check_refuses_what_the_device_lacks_with_the_estimate() {
        let resolved = Case::from_toml(include_str!("../cases/dfg-2d1.toml"))
            .unwrap()
            .resolve()
            .unwrap();
        let driver = MockDriver::new();
        let need = check_memory(&resolved, &driver, None).unwrap();
        // What `lbm check` prints is what the stepper allocates.
        let exec = ExecConfig {
            tiles: resolved.tiles.clone(),
            observe_raw_exchange: true,
            observe_window_exchange: true,
            ..ExecConfig::default()
        };
        let mock = MockDriver::new();
        mock.handle().set_capacity(1 << 40);
        let stepper = lbm_core::Stepper::new(mock, resolved.lattice.clone(), exec).unwrap();
        let free = || stepper.with_device(|driver, _| driver.free_memory()).unwrap();
        let allocated = stepper.memory_ledger().total();
        let ring_estimate = need.device.entries[RING_LABEL];
        assert!(((need.device.total() - ring_estimate) as f64 / allocated as f64 - 1.0).abs() < 0.001);
        // The output ring: an upper bound (it counts each patch's ghost
        // band), within 10%.
        let before = free();
        let _ring = crate::output::ring::OutputRing::new(&stepper, None, &[]).unwrap();
        let ring = before - free();
        assert!(
            ring <= ring_estimate && (ring_estimate as f64) < 1.1 * ring as f64,
            "{ring} {ring_estimate}"
        );
        driver.handle().set_capacity(need.device.total() - 1);
        match check_memory(&resolved, &driver, None) {
            Err(AppError::Memory {
                what: "device",
                needed,
                available,
                parts,
            }) => {
                assert_eq!((needed, available), (need.device.total(), need.device.total() - 1));
                assert!(parts.contains("level 2"), "{parts}");
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    /// Small refined patches cost per hop, not only per cell: the same cell
    /// updates spread over more patch hops take longer on the CPU (a single
    /// rate estimated the refined cavity at half its time and the square
    /// obstacle at 2.8 times its own).
    #[test]
    fn the_cpu_estimate_charges_each_patch_hop() {
        let level = |level, patches, cells| lbm_core::case::LevelParameters {
            level,
            patches,
            cells,
            dx_m: 1.0,
            dt_s: 1.0,
            tau_plus: 0.6,
            tau_minus: 0.6,
            mach: 0.1,
        };
        let one = [level(0, 1, 40_000)];
        let refined = [level(0, 1, 20_000), level(1, 2, 10_000)];
        assert_eq!(cell_updates(&one, 100), cell_updates(&refined, 100));
        let (flat, fine) = (
            estimate_seconds(&one, 100, false),
            estimate_seconds(&refined, 100, false),
        );
        // Level 1's two patches, two hops each an interval.
        let refined_hops = 100.0 * 2.0 * 2.0;
        assert!(
            (fine - flat - refined_hops * CPU_PATCH_HOP_S).abs() < 1e-9 * fine,
            "{flat} s and {fine} s"
        );
    }

    /// Point probes cost per sample, whatever the grid: a small channel
    /// run long with 50 probes every interval, whose cell updates alone are
    /// estimated under the pilot's minute, spends over a minute on its
    /// samples (a probe found such a case skipping its pilot, estimated at
    /// a twentieth of its run).
    #[test]
    fn the_pilot_rule_counts_each_probe_sample() {
        let probes: String = (0..50)
            .map(|i| format!("{{ name = \"p{i}\", point = [{}, 0.1] }},", 0.5 + 0.005 * i as f64))
            .collect();
        let text = format!(
            "name = \"probed\"\n[domain]\nsize = [1.0, 0.4]\nreference_length = 0.1\nresolution = 10\n\
             [fluid]\nviscosity = 1e-3\n[flow]\nreference_velocity = 0.5\n[boundaries]\n\
             x_min = {{ inlet = {{ profile = \"parabolic\", velocity = 0.5 }} }}\nx_max = \"outflow\"\n\
             y_min = \"wall\"\ny_max = \"wall\"\n[run]\nsteps = 400000\n[output]\nformats = [\"npy\"]\n\
             probes = [{probes}]\n"
        );
        let case = Case::from_toml(&text).unwrap();
        let resolved = case.resolve().unwrap();
        let levels = resolved.levels().unwrap();
        let cells_alone = pilot_required_for(None, &levels, resolved.steps, false, 0.0, "").unwrap();
        assert!(cells_alone.is_none(), "{cells_alone:?}");
        assert!(probe_seconds(&resolved, false) > PILOT_ABOVE_S);
        let reason = pilot_required(&case, &resolved, false).unwrap();
        assert!(reason.is_some_and(|r| r.contains("it is estimated at")));
    }

    /// Save points cost the host their files' writing, whatever the
    /// backend: a short run of a large grid saving every interval, whose
    /// stepping is estimated at seconds, writes for minutes (a tester's such
    /// case was estimated at 0 s and took 6).
    #[test]
    fn the_pilot_rule_counts_the_save_points() {
        let text = "name = \"saved\"\n[domain]\nsize = [1.0, 1.0]\nreference_length = 1.0\nresolution = 1024\n\
                    [fluid]\nviscosity = 1e-3\n[flow]\nreference_velocity = 1.0\nlattice_velocity = 0.1\n\
                    [boundaries]\nx_min = \"wall\"\nx_max = \"wall\"\ny_min = \"wall\"\n\
                    y_max = { moving_wall = [1.0, 0.0] }\n[run]\nsteps = 100\n[output]\nevery_intervals = 1\n\
                    fields = [\"pressure\", \"density\", \"velocity\", \"speed\", \"vorticity\"]\n";
        let case = Case::from_toml(text).unwrap();
        let resolved = case.resolve().unwrap();
        let levels = resolved.levels().unwrap();
        assert!(estimate_seconds(&levels, resolved.steps, false) < 10.0);
        // 101 save points of 5 x 1024² values in three formats.
        assert!(save_seconds(&resolved, &levels) > PILOT_ABOVE_S);
        for cuda in [false, true] {
            let reason = pilot_required(&case, &resolved, cuda).unwrap();
            assert!(reason.is_some_and(|r| r.contains("it is estimated at")), "cuda {cuda}");
        }
    }
}
