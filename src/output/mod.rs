//! What a run writes into its output directory besides the manifest and the
//! summary: fields at the save points (`fields/`, as NPY with `index.json`
//! and VTK XML with `fields.pvd`), `forces.csv`, and `probes/NAME.csv`.
//!
//! Whole files are written to a temporary name and renamed, so a reader never
//! sees half a file; the CSV files grow a line per sample and are flushed at
//! once, so a run that fails keeps what it had measured. This module decides
//! file names and layouts; the numbers come from [`fields`].

pub mod fields;
pub mod npy;
pub mod picture;
pub mod plot;
pub mod vtk;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use lbm_core::case::{Case, Resolved};
use lbm_core::ledger::ExchangeRecord;
use lbm_core::output::{FieldName, Format, OutputPlan};
use lbm_core::units::UnitSystem;
use serde::Serialize;

use crate::AppError;
use fields::{PatchFields, finest_at};

/// `bytes` at `path`, through a temporary file renamed into place.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), AppError> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or_default()
    ));
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|source| AppError::Write {
            path: path.display().to_string(),
            source,
        })
}

fn create_dir(path: &Path) -> Result<(), AppError> {
    std::fs::create_dir_all(path).map_err(|source| AppError::Write {
        path: path.display().to_string(),
        source,
    })
}

/// A CSV file that grows a flushed line per sample.
struct Csv {
    path: PathBuf,
    file: std::fs::File,
}

impl Csv {
    fn create(path: PathBuf, header: &str) -> Result<Csv, AppError> {
        let file = std::fs::File::create(&path).map_err(|source| AppError::Write {
            path: path.display().to_string(),
            source,
        })?;
        let mut csv = Csv { path, file };
        csv.line(header)?;
        Ok(csv)
    }

    fn line(&mut self, text: &str) -> Result<(), AppError> {
        writeln!(self.file, "{text}")
            .and_then(|()| self.file.flush())
            .map_err(|source| AppError::Write {
                path: self.path.display().to_string(),
                source,
            })
    }
}

/// One NPY array in `fields/index.json`.
#[derive(Serialize)]
struct IndexEntry {
    file: String,
    field: &'static str,
    unit: &'static str,
    level: usize,
    patch: usize,
    step: u64,
    time_s: f64,
    /// `[ny, nx]` or `[ny, nx, 2]`: row 0 is the bottom of the patch.
    shape: Vec<usize>,
    /// Physical position of the lower-left corner of cell `[0, 0]`, m.
    origin_m: [f64; 2],
    spacing_m: f64,
}

/// What a run has written, for `summary.json`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Written {
    pub save_points: usize,
    /// Each saved field's smallest and largest value over the fluid cells
    /// no finer patch covers, over every save point (velocity: its magnitude).
    pub field_ranges: std::collections::BTreeMap<String, [f64; 2]>,
    pub files: Vec<PathBuf>,
}

/// Writes a run's outputs; see the module documentation.
pub struct Writer {
    out: PathBuf,
    plan: OutputPlan,
    units: UnitSystem,
    /// `½ ρ U² L`, N/m: what a force is divided by to give a coefficient.
    dynamic_force: f64,
    /// Width and height of the domain, m.
    domain: [f64; 2],
    /// Pixels across the domain in pictures; `None`: the finest level's
    /// resolution within the bounds of [`picture::pixels_per_metre`].
    picture_width: Option<u32>,
    forces: Option<Csv>,
    probes: Vec<Csv>,
    lines: Vec<Csv>,
    series: Vec<(f64, String)>,
    index: Vec<IndexEntry>,
    /// (time, each body's cd and cl) of every force sample, for the plot.
    coefficient_history: Vec<(f64, Vec<[f64; 2]>)>,
    /// Each line probe's last profile: (s, p, u_x) per point.
    last_profiles: Vec<Vec<[f64; 3]>>,
    written: Written,
}

impl Writer {
    /// Creates `fields/`, `probes/` and the CSV headers; bodies get the
    /// force columns, named `body{i}_...`.
    pub fn create(
        out: &Path,
        case: &Case,
        resolved: &Resolved,
        picture_width: Option<u32>,
    ) -> Result<Writer, AppError> {
        let plan = resolved.output.clone();
        let mut written = Written::default();
        create_dir(&out.join("fields"))?;
        let forces = match resolved.lattice.bodies.len() {
            0 => None,
            n => {
                // The coefficients' reference velocity and length are in their names.
                let reference = format!("[U={} m/s L={} m]", plan.reference_velocity, plan.reference_length);
                let mut header = String::from("time_s");
                for b in 0..n {
                    header.push_str(&format!(
                        ",body{b}_fx_n_per_m,body{b}_fy_n_per_m,body{b}_torque_n,body{b}_cd{reference},body{b}_cl{reference}"
                    ));
                }
                written.files.push(out.join("forces.csv"));
                Some(Csv::create(out.join("forces.csv"), &header)?)
            }
        };
        if plan.formats.contains(&Format::Png) {
            create_dir(&out.join("pictures"))?;
        }
        if !plan.probes.is_empty() || !plan.lines.is_empty() {
            create_dir(&out.join("probes"))?;
        }
        let mut probes = Vec::new();
        for p in &plan.probes {
            let path = out.join("probes").join(format!("{}.csv", p.name));
            written.files.push(path.clone());
            probes.push(Csv::create(path, "time_s,p_pa,ux_m_s,uy_m_s")?);
        }
        let mut lines = Vec::new();
        for l in &plan.lines {
            let path = out.join("probes").join(format!("{}.csv", l.name));
            written.files.push(path.clone());
            lines.push(Csv::create(path, "time_s,s_m,x_m,y_m,p_pa,ux_m_s,uy_m_s")?);
        }
        Ok(Writer {
            out: out.to_owned(),
            dynamic_force: 0.5
                * resolved.units.density
                * plan.reference_velocity
                * plan.reference_velocity
                * plan.reference_length,
            domain: case.domain.size,
            picture_width,
            plan,
            units: resolved.units,
            forces,
            probes,
            lines,
            series: Vec::new(),
            index: Vec::new(),
            coefficient_history: Vec::new(),
            last_profiles: Vec::new(),
            written,
        })
    }

    pub fn plan(&self) -> &OutputPlan {
        &self.plan
    }

    /// One row of `forces.csv` from each body's exchange over the last sample
    /// period; returns each body's (cd, cl).
    pub fn forces(&mut self, time: f64, records: &[ExchangeRecord]) -> Result<Vec<[f64; 2]>, AppError> {
        let Some(csv) = self.forces.as_mut() else {
            return Ok(Vec::new());
        };
        let mut row = format!("{time:.9e}");
        let mut coefficients = Vec::new();
        for r in records {
            let [fx, fy] = r.mean_force().map(|f| self.units.force_to_physical(r.level, f));
            let span = (r.time_end - r.time_start) as f64;
            let lever = self.units.dx * 0.5f64.powi(r.level as i32);
            let torque = self.units.force_to_physical(r.level, r.torque / span) * lever;
            let [cd, cl] = [fx, fy].map(|f| f / self.dynamic_force);
            row.push_str(&format!(",{fx:.9e},{fy:.9e},{torque:.9e},{cd:.9e},{cl:.9e}"));
            coefficients.push([cd, cl]);
        }
        csv.line(&row)?;
        self.coefficient_history.push((time, coefficients.clone()));
        Ok(coefficients)
    }

    /// One row of each point probe's CSV: NaN where the probe reads a solid
    /// cell.
    pub fn probes(&mut self, time: f64, patches: &[PatchFields]) -> Result<(), AppError> {
        for (probe, csv) in self.plan.probes.iter().zip(&mut self.probes) {
            let [p, ux, uy] = finest_at(patches, probe.point)
                .and_then(|f| f.sample(probe.point))
                .unwrap_or([f64::NAN; 3]);
            csv.line(&format!("{time:.9e},{p:.9e},{ux:.9e},{uy:.9e}"))?;
        }
        Ok(())
    }

    /// Saves the fields at `step`: NPY and VTK as the plan asks, the line
    /// probes' profiles, and the index and time series rewritten whole.
    pub fn save(&mut self, step: u64, patches: &[PatchFields]) -> Result<(), AppError> {
        let time = step as f64 * self.units.dt;
        let stamp = format!("t{step:09}");
        let dir = self.out.join("fields").join(&stamp);
        create_dir(&dir)?;
        let name = |p: &PatchFields| format!("L{}_p{}", p.level, p.patch);
        if self.plan.formats.contains(&Format::Npy) {
            for p in patches {
                for &field in &self.plan.fields {
                    let file = format!("{}_{}.npy", name(p), field.name());
                    let [nx, ny] = p.size;
                    let shape = match field.components() {
                        1 => vec![ny, nx],
                        c => vec![ny, nx, c],
                    };
                    let path = dir.join(&file);
                    write_atomic(&path, &npy::encode(&shape, &p.values(field)))?;
                    self.index.push(IndexEntry {
                        file: format!("{stamp}/{file}"),
                        field: field.name(),
                        unit: field.unit(),
                        level: p.level,
                        patch: p.patch,
                        step,
                        time_s: time,
                        shape,
                        origin_m: p.origin,
                        spacing_m: p.spacing,
                    });
                    self.written.files.push(path);
                }
            }
            let index = serde_json::to_string_pretty(&self.index).expect("plain data serialises");
            let path = self.out.join("fields").join("index.json");
            write_atomic(&path, index.as_bytes())?;
        }
        if self.plan.formats.contains(&Format::Vtk) {
            for p in patches {
                let path = dir.join(format!("{}.vti", name(p)));
                write_atomic(&path, &vtk::image(p, &self.plan.fields))?;
                self.written.files.push(path);
            }
            let amr = vtk::overlapping_amr(patches, |p| format!("{stamp}/{}.vti", name(p)));
            let path = self.out.join("fields").join(format!("{stamp}.vthb"));
            write_atomic(&path, amr.as_bytes())?;
            self.written.files.push(path);
            self.series.push((time, format!("fields/{stamp}.vthb")));
            let pvd = self.out.join("fields.pvd");
            write_atomic(&pvd, vtk::collection(&self.series).as_bytes())?;
        }
        if self.plan.formats.contains(&Format::Png) {
            let finest = patches.iter().map(|p| p.spacing).fold(f64::INFINITY, f64::min);
            let density = picture::pixels_per_metre(self.domain, finest, self.picture_width);
            for (name, unit, field, diverging) in [
                ("speed", "m/s", FieldName::Speed, false),
                ("vorticity", "1/s", FieldName::Vorticity, true),
            ] {
                let scalar = picture::Scalar {
                    title: name,
                    unit,
                    values: patches.iter().map(|p| p.values(field)).collect(),
                    diverging,
                };
                let image = picture::render(patches, &scalar, self.domain, density);
                let path = self.out.join("pictures").join(format!("{name}_{stamp}.png"));
                write_atomic(&path, &image.png())?;
                self.written.files.push(path);
            }
        }
        self.last_profiles.clear();
        for (line, csv) in self.plan.lines.iter().zip(&mut self.lines) {
            let start = line.points[0].point;
            let mut profile = Vec::new();
            for point in &line.points {
                let s = (point.point[0] - start[0]).hypot(point.point[1] - start[1]);
                let [p, ux, uy] = finest_at(patches, point.point)
                    .and_then(|f| f.sample(point.point))
                    .unwrap_or([f64::NAN; 3]);
                let [x, y] = point.point;
                csv.line(&format!("{time:.9e},{s:.9e},{x:.9e},{y:.9e},{p:.9e},{ux:.9e},{uy:.9e}"))?;
                profile.push([s, p, ux]);
            }
            self.last_profiles.push(profile);
        }
        for &field in &self.plan.fields {
            let shown = if field == FieldName::Velocity {
                FieldName::Speed
            } else {
                field
            };
            let range = self
                .written
                .field_ranges
                .entry(format!("{} [{}]", field.name(), field.unit()))
                .or_insert([f64::INFINITY, f64::NEG_INFINITY]);
            for p in patches {
                for (i, v) in p.values(shown).iter().enumerate() {
                    let at = (i / p.size[0], i % p.size[0]);
                    if !p.solid[at] && !p.covered[at] {
                        range[0] = range[0].min(*v as f64);
                        range[1] = range[1].max(*v as f64);
                    }
                }
            }
        }
        self.written.save_points += 1;
        Ok(())
    }

    /// What was written, the index, the time series and (with pictures) the
    /// plots of the coefficients and the line probes' last profiles included.
    pub fn finish(mut self) -> Result<Written, AppError> {
        if self.plan.formats.contains(&Format::Png) {
            let mut plots = Vec::new();
            if !self.coefficient_history.is_empty() {
                let mut series = Vec::new();
                let bodies = self.coefficient_history[0].1.len();
                for b in 0..bodies {
                    for (k, name) in ["cd", "cl"].iter().enumerate() {
                        series.push(plot::Series {
                            title: format!("body {b} {name}"),
                            points: self.coefficient_history.iter().map(|(t, c)| [*t, c[b][k]]).collect(),
                        });
                    }
                }
                plots.push(("forces".to_owned(), plot::render(&series, "time [s]")));
            }
            for (line, profile) in self.plan.lines.iter().zip(&self.last_profiles) {
                let series = [
                    plot::Series {
                        title: format!("{} u_x [m/s]", line.name),
                        points: profile.iter().map(|[s, _, ux]| [*s, *ux]).collect(),
                    },
                    plot::Series {
                        title: format!("{} p [Pa]", line.name),
                        points: profile.iter().map(|[s, p, _]| [*s, *p]).collect(),
                    },
                ];
                plots.push((line.name.clone(), plot::render(&series, "distance along the line [m]")));
            }
            if !plots.is_empty() {
                create_dir(&self.out.join("plots"))?;
            }
            for (name, image) in plots {
                let path = self.out.join("plots").join(format!("{name}.png"));
                write_atomic(&path, &image.png())?;
                self.written.files.push(path);
            }
        }
        if self.plan.formats.contains(&Format::Npy) && !self.index.is_empty() {
            self.written.files.push(self.out.join("fields").join("index.json"));
        }
        if !self.series.is_empty() {
            self.written.files.push(self.out.join("fields.pvd"));
        }
        Ok(self.written)
    }
}
