//! `lbm run`: resolve a case, pick a backend, advance, write the outputs.
//!
//! Outputs go to a directory that must be new or empty, so a run never mixes its
//! files with an earlier one's. `manifest.json` is written before stepping so a
//! failed run still says what it was; `summary.json` only after success.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use lbm_core::case::{Case, LevelParameters, Resolved};
use lbm_core::{Driver, ExecConfig, Stepper};

use crate::AppError;
use crate::backend::{BackendChoice, Device, ptx_sha256};
use crate::output::{Writer, Written, fields, write_atomic};
use crate::progress::Progress;

pub struct RunOptions {
    pub case: PathBuf,
    pub backend: BackendChoice,
    pub out: PathBuf,
    pub steps: Option<u64>,
    /// No progress on stderr.
    pub quiet: bool,
    /// Pixels across the domain in pictures (default: the finest level's
    /// resolution, 512 to 1600).
    pub picture_width: Option<u32>,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub case: String,
    pub backend: String,
    pub steps: u64,
    pub wall_seconds: f64,
    /// Million lattice cell updates per second, counting every level's hops.
    pub mlups: f64,
    pub cell_updates: u64,
    /// Total mass at the end relative to the start, minus one.
    pub mass_drift: f64,
    /// Cell updates per second had every level been as fine as the finest,
    /// over the whole domain: what a uniform grid would have needed, millions.
    pub mlups_finest_equivalent: f64,
    /// Each body's (cd, cl) over the last force sample.
    pub coefficients: Vec<[f64; 2]>,
    /// Each body's (cd, cl) averaged over the samples of the last 10% of the run.
    pub coefficients_last_tenth: Vec<[f64; 2]>,
    pub written: Written,
    #[serde(skip)]
    pub out: PathBuf,
}

#[derive(Serialize)]
struct Manifest<'a> {
    case: &'a Case,
    resolved: &'a Resolved,
    levels: Vec<LevelParameters>,
    code_version: &'a str,
    ptx_sha256: String,
    backend: &'a str,
    device: &'a Device,
    command_line: Vec<String>,
    started_utc: String,
}

fn diverged(step: u64, time: f64, what: String, out: &Path) -> AppError {
    AppError::Diverged {
        step,
        time,
        what,
        out: out.display().to_string(),
    }
}

/// Now as `YYYY-MM-DDThh:mm:ssZ`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil from days (H. Hinnant's algorithm), proleptic Gregorian.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

pub fn run_case(options: &RunOptions) -> Result<Summary, AppError> {
    if let Some(w) = options.picture_width
        && !(64..=8192).contains(&w)
    {
        return Err(AppError::Flag {
            flag: "--picture-width",
            value: w.to_string(),
            accepted: "64 to 8192 pixels".into(),
        });
    }
    let (case, resolved) = crate::check::read_case(&options.case, options.steps)?;
    let (driver, device) = options.backend.open()?;
    crate::check::check_memory(&resolved, &driver, options.picture_width)?;
    prepare_output(&options.out)?;
    advance(driver, &device, &case, &resolved, options)
}

/// Creates the output directory, refusing one that already holds files.
pub fn prepare_output(out: &Path) -> Result<(), AppError> {
    let refuse = |reason: String| AppError::OutputDir {
        path: out.display().to_string(),
        reason,
    };
    if out.exists() {
        if !out.is_dir() {
            return Err(refuse("it is a file, not a directory".into()));
        }
        let mut entries = std::fs::read_dir(out).map_err(|e| refuse(format!("it cannot be read ({e})")))?;
        if entries.next().is_some() {
            return Err(AppError::OutputNotEmpty {
                path: out.display().to_string(),
            });
        }
    }
    std::fs::create_dir_all(out).map_err(|e| refuse(format!("it cannot be created ({e})")))?;
    // A directory that exists but refuses files is found now, before any work.
    let probe = out.join(".lbm-write-check");
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| refuse(format!("it is not writable ({e})")))
}

pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), AppError> {
    let text = serde_json::to_string_pretty(value).expect("plain data serialises");
    write_atomic(path, (text + "\n").as_bytes())
}

fn advance<D: Driver>(
    driver: D,
    device: &Device,
    case: &Case,
    resolved: &Resolved,
    options: &RunOptions,
) -> Result<Summary, AppError> {
    let out = options.out.as_path();
    let backend = driver.backend();
    write_json(
        &out.join("manifest.json"),
        &Manifest {
            case,
            resolved,
            levels: resolved.levels()?,
            code_version: env!("CARGO_PKG_VERSION"),
            ptx_sha256: ptx_sha256(),
            backend,
            device,
            command_line: std::env::args().collect(),
            started_utc: utc_now(),
        },
    )?;
    let bodies = &resolved.lattice.bodies;
    let exec = ExecConfig {
        tiles: resolved.tiles.clone(),
        observe_window_exchange: !bodies.is_empty(),
        ..ExecConfig::default()
    };
    let stepper = Stepper::new(driver, resolved.lattice.clone(), exec)?;
    let mut writer = Writer::create(out, case, resolved, options.picture_width)?;
    let hierarchy = stepper.hierarchy();
    let updates_per_interval: u64 = hierarchy
        .patches()
        .map(|p| p.active.cells() as u64 * (1u64 << p.level))
        .sum();
    let mass_start = stepper.total_mass()?;
    let mut progress = Progress::new(resolved.steps, resolved.units.dt, updates_per_interval, options.quiet);
    let start = Instant::now();
    let plan = writer.plan().clone();
    let sample = plan.forces_every;
    let samples_needed = !bodies.is_empty() || !plan.probes.is_empty();
    if !bodies.is_empty() {
        stepper.start_exchange_window()?;
    }
    let mut saves = plan.save_points.iter().copied().peekable();
    let mut coefficients = Vec::new();
    let mut history: Vec<(u64, Vec<[f64; 2]>)> = Vec::new();
    let mut done = 0;
    while done < resolved.steps {
        let next_sample = if samples_needed {
            (done / sample + 1) * sample
        } else {
            u64::MAX
        };
        let next = next_sample.min(*saves.peek().unwrap_or(&u64::MAX)).min(resolved.steps);
        stepper.step(next - done)?;
        done = next;
        let time = done as f64 * resolved.units.dt;
        if samples_needed && (done % sample == 0 || done == resolved.steps) {
            if !bodies.is_empty() {
                let records = (0..bodies.len())
                    .map(|b| stepper.read_exchange_window(b))
                    .collect::<lbm_core::Result<Vec<_>>>()?;
                coefficients = writer.forces(time, &records)?;
                history.push((done, coefficients.clone()));
                if let Some(b) = coefficients.iter().position(|c| !c.iter().all(|v| v.is_finite())) {
                    return Err(diverged(done, time, format!("the force on body {b}"), out));
                }
                stepper.start_exchange_window()?;
            }
            if !plan.probes.is_empty() {
                writer.probes(time, &fields::gather(&stepper, &resolved.units, bodies)?)?;
            }
        }
        if saves.peek() == Some(&done) {
            saves.next();
            let patches = fields::gather(&stepper, &resolved.units, bodies)?;
            // What was computed is written first, so the blow-up can be looked at.
            writer.save(done, &patches)?;
            if let Some(p) = patches
                .iter()
                .find(|p| !(p.ux.iter().chain(&p.uy).chain(&p.pressure)).all(|v| v.is_finite()))
            {
                return Err(diverged(
                    done,
                    time,
                    format!("the flow on level {} patch {}", p.level, p.patch),
                    out,
                ));
            }
        }
        progress.update(done, &coefficients);
    }
    progress.finish();
    let wall_seconds = start.elapsed().as_secs_f64();
    let mass_end = stepper.total_mass()?;
    stepper.close()?;
    let cell_updates = updates_per_interval * resolved.steps;
    let finest = hierarchy.n_levels() - 1;
    let base = hierarchy.base().active.cells() as u64;
    let finest_equivalent = (base << (2 * finest)) * (1u64 << finest) * resolved.steps;
    let tail: Vec<&Vec<[f64; 2]>> = history
        .iter()
        .filter(|(step, _)| 10 * step >= 9 * resolved.steps)
        .map(|(_, c)| c)
        .collect();
    let coefficients_last_tenth = (0..bodies.len())
        .map(|b| [0, 1].map(|k| tail.iter().map(|c| c[b][k]).sum::<f64>() / tail.len().max(1) as f64))
        .collect();
    let summary = Summary {
        case: case.name.clone(),
        backend: backend.to_owned(),
        steps: resolved.steps,
        wall_seconds,
        mlups: cell_updates as f64 / wall_seconds.max(1e-9) / 1e6,
        cell_updates,
        mass_drift: mass_end / mass_start - 1.0,
        mlups_finest_equivalent: finest_equivalent as f64 / wall_seconds.max(1e-9) / 1e6,
        coefficients,
        coefficients_last_tenth,
        written: writer.finish()?,
        out: out.to_owned(),
    };
    write_json(&out.join("summary.json"), &summary)?;
    Ok(summary)
}
