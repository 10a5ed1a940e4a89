//! What a run writes into its output directory besides the manifest and the
//! summary: fields at the save points (`fields/`, as NPY with `index.json`
//! and VTK XML with `fields.pvd` and `patches.pvd`), `forces.csv`, and
//! `probes/NAME.csv`.
//!
//! Whole files are written to a temporary name and renamed, so a reader never
//! sees half a file; the CSV files grow a line per sample and are flushed at
//! once, so a run that fails keeps what it had measured. This module decides
//! file names and layouts; the numbers come from [`fields`].

pub mod fields;
pub mod npy;
pub mod picture;
pub mod plot;
pub mod ring;
pub mod thread;
pub mod vtk;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use lbm_core::case::{Case, Resolved};
use lbm_core::ledger::ExchangeRecord;
use lbm_core::output::{FieldName, Format, OutputPlan};
use lbm_core::units::UnitSystem;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::plan::hex;

use crate::AppError;
use fields::{PatchFields, finest_at};

/// Appends `values` to `out` as little-endian f32, as NPY and VTK store them.
fn extend_le(out: &mut Vec<u8>, values: &[f32]) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// `bytes` at `path`, through a temporary file in the same directory renamed
/// into place: a reader, a crash or a full disk never leaves half a file
/// under `path`, and what was there before stays until the new one is whole.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), AppError> {
    write_atomic_with(path, |file| file.write_all(bytes))
}

/// [`write_atomic`] of what `write` puts into the file: a large file goes to
/// disk without a second copy of it in memory.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<(), AppError> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or_default()
    ));
    let written = std::fs::File::create(&tmp)
        .and_then(|file| {
            let mut file = std::io::BufWriter::new(file);
            write(&mut file)?;
            file.into_inner().map(drop).map_err(|e| e.into_error())
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    thread::WRITTEN.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    written.map_err(|source| {
        // The partial file helps nobody and may hold the space that ran out.
        let _ = std::fs::remove_file(&tmp);
        AppError::Write {
            path: path.display().to_string(),
            source,
        }
    })
}

/// `path` relative to the output directory `out`, as `summary.json` lists it.
fn relative(out: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(out).unwrap_or(path).to_owned()
}

/// Makes the directory `path` in its existing parent (one there already is
/// kept). Never the parents: an output directory moved or removed while
/// the run writes is not made anew by its old name, and the write fails.
pub(crate) fn create_dir(path: &Path) -> Result<(), AppError> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        made => made.map_err(|source| AppError::Write {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// A CSV file that grows a flushed line per sample.
struct Csv {
    path: PathBuf,
    file: std::fs::File,
    /// Bytes written so far: where a resumed run cuts the file back to.
    len: u64,
    /// The SHA-256 of those bytes so far: a resume checks that they are
    /// what the run wrote ([`verify_outputs`]).
    hash: Sha256,
}

impl Csv {
    fn create(path: PathBuf, header: &str) -> Result<Csv, AppError> {
        let file = std::fs::File::create(&path).map_err(|source| AppError::Write {
            path: path.display().to_string(),
            source,
        })?;
        let mut csv = Csv {
            path,
            file,
            len: 0,
            hash: Sha256::new(),
        };
        csv.line(header)?;
        Ok(csv)
    }

    /// The file cut back to its first `len` bytes (the rows a checkpoint
    /// had seen) and opened to append.
    fn reopen(path: PathBuf, len: u64) -> Result<Csv, AppError> {
        let failed = |source| AppError::Write {
            path: path.display().to_string(),
            source,
        };
        let file = match std::fs::OpenOptions::new().read(true).write(true).open(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(AppError::Resume {
                    dir: path.display().to_string(),
                    reason: format!(
                        "it is missing, and the checkpoint continues its first {len} bytes: the run \
                         directory is incomplete; run the case again into another directory"
                    ),
                });
            }
            opened => opened.map_err(failed)?,
        };
        let on_disk = file.metadata().map_err(failed)?.len();
        if on_disk < len {
            return Err(AppError::Resume {
                dir: path.display().to_string(),
                reason: format!("it holds {on_disk} bytes, fewer than the {len} the checkpoint saw"),
            });
        }
        file.set_len(len).map_err(failed)?;
        let mut hash = Sha256::new();
        let mut file = file;
        std::io::copy(
            &mut std::io::Read::take(std::io::Read::by_ref(&mut file), len),
            &mut hash,
        )
        .map_err(failed)?;
        std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0)).map_err(failed)?;
        Ok(Csv { path, file, len, hash })
    }

    fn line(&mut self, text: &str) -> Result<(), AppError> {
        // One write per line: a run killed between two leaves whole rows.
        let line = format!("{text}\n");
        let written = self.file.write_all(line.as_bytes()).and_then(|()| self.file.flush());
        if let Err(source) = written {
            // A write that failed partway (a full disk, a file-size limit)
            // leaves part of the row: cut back to the whole rows, so the
            // failed run's file holds what it had written, nothing torn.
            let _ = self.file.set_len(self.len);
            let _ = std::io::Seek::seek(&mut self.file, std::io::SeekFrom::Start(self.len));
            return Err(AppError::Write {
                path: self.path.display().to_string(),
                source,
            });
        }
        self.len += line.len() as u64;
        self.hash.update(line.as_bytes());
        Ok(())
    }
}

/// The SHA-256 of the first `len` bytes of `path`, in hex; `None` when it
/// holds fewer or cannot be read.
fn prefix_sha256(path: &Path, len: u64) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let mut hash = Sha256::new();
    let copied = std::io::copy(&mut std::io::Read::take(file, len), &mut hash).ok()?;
    (copied == len).then(|| hex(&hash.finalize()))
}

/// Whether a run directory still holds what a checkpoint saw written
/// (`state`): every CSV's first bytes as they were, and every field file
/// and picture at its size; the reason it does not, else. Rows after the
/// checkpoint and the files rewritten whole at each save point (the index,
/// the `.pvd` series, the plots) a resume writes anew; a checkpoint of an
/// older lbm, which kept neither, passes.
pub fn verify_outputs(out: &Path, state: &WriterState) -> Result<(), String> {
    // The CSV files head the written files, in the order of their lengths.
    let csvs = state
        .written
        .files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "csv"));
    for ((file, len), digest) in csvs.zip(&state.csv_lengths).zip(&state.csv_sha256) {
        if prefix_sha256(&out.join(file), *len).as_deref() != Some(digest.as_str()) {
            return Err(format!(
                "{} is not what the run had written by its checkpoint (its first {len} bytes differ: edited or \
                 damaged since)",
                file.display()
            ));
        }
    }
    for (file, bytes) in &state.file_bytes {
        match std::fs::metadata(out.join(file)) {
            Ok(m) if m.len() != *bytes => {
                return Err(format!(
                    "{} holds {} bytes where the run wrote {bytes} (cut short or replaced since)",
                    file.display(),
                    m.len()
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// One NPY array in `fields/index.json`.
#[derive(Clone, Serialize, Deserialize)]
struct IndexEntry {
    file: String,
    field: String,
    unit: String,
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
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Written {
    pub save_points: usize,
    /// Each saved field's smallest and largest finite value over the fluid
    /// cells no finer patch covers, over every save point (velocity: each
    /// component, `velocity_x` and `velocity_y`).
    pub field_ranges: std::collections::BTreeMap<String, [f64; 2]>,
    /// The values of the same cells that were not finite, per key of
    /// `field_ranges` (a diverged run's last fields).
    #[serde(default)]
    pub field_non_finite: std::collections::BTreeMap<String, u64>,
    /// Relative to the output directory.
    pub files: Vec<PathBuf>,
}

/// What a writer has accumulated over a run, besides the files themselves:
/// what a checkpoint keeps so that a resumed run writes the same bytes.
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct WriterState {
    series: Vec<(f64, String)>,
    index: Vec<IndexEntry>,
    /// (time, each body's cd and cl) of every force sample, for the plot.
    coefficient_history: Vec<(f64, Vec<[f64; 2]>)>,
    /// Each line probe's last profile: (s, p, u_x) per point, NaN at a point
    /// in a body (JSON has no NaN: null in a checkpoint).
    #[serde(with = "nan_as_null")]
    last_profiles: Vec<Vec<[f64; 3]>>,
    written: Written,
    /// Bytes of `forces.csv`, then each probe's and each line's CSV.
    csv_lengths: Vec<u64>,
    /// The SHA-256 of those bytes of each, in hex.
    #[serde(default)]
    csv_sha256: Vec<String>,
    /// The size of each file a save point writes once (fields and
    /// pictures; not the index, the series or the plots, rewritten whole).
    #[serde(default)]
    file_bytes: std::collections::BTreeMap<PathBuf, u64>,
}

/// A line's profile through JSON, which has no NaN: serde_json writes one as
/// null and then refuses to read null as a number, which made every
/// checkpoint of a run whose line crosses a body unreadable.
mod nan_as_null {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    type Profiles = Vec<Vec<[f64; 3]>>;

    pub fn serialize<S: Serializer>(profiles: &Profiles, serializer: S) -> Result<S::Ok, S::Error> {
        let some = |v: f64| (!v.is_nan()).then_some(v);
        let optional: Vec<Vec<[Option<f64>; 3]>> = profiles
            .iter()
            .map(|profile| profile.iter().map(|point| point.map(some)).collect())
            .collect();
        optional.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Profiles, D::Error> {
        let optional = Vec::<Vec<[Option<f64>; 3]>>::deserialize(deserializer)?;
        Ok(optional
            .into_iter()
            .map(|profile| {
                profile
                    .into_iter()
                    .map(|point| point.map(|v| v.unwrap_or(f64::NAN)))
                    .collect()
            })
            .collect())
    }
}

/// Writes a run's outputs; see the module documentation.
pub struct Writer {
    out: PathBuf,
    /// `out`'s identity when the writer opened ([`dir_identity`]): a file
    /// is not created by that name once another directory is there.
    identity: Option<(u64, u64)>,
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
    state: WriterState,
}

/// Physical units and the dynamic force `½ ρ U² L` of a run's coefficients.
#[derive(Clone, Copy, Debug)]
pub struct ForceScale {
    units: UnitSystem,
    /// `½ ρ U² L`, N/m.
    dynamic_force: f64,
}

impl ForceScale {
    /// (fx, fy) N/m, torque N, cd, cl of one body's exchange record.
    pub fn load(&self, r: &ExchangeRecord) -> [f64; 5] {
        let [fx, fy] = r.mean_force().map(|f| self.units.force_to_physical(r.level, f));
        let span = (r.time_end - r.time_start) as f64;
        let lever = self.units.dx * 0.5f64.powi(r.level as i32);
        let torque = self.units.force_to_physical(r.level, r.torque / span) * lever;
        let [cd, cl] = [fx, fy].map(|f| f / self.dynamic_force);
        [fx, fy, torque, cd, cl]
    }

    /// Each body's (cd, cl).
    pub fn coefficients(&self, records: &[ExchangeRecord]) -> Vec<[f64; 2]> {
        records.iter().map(|r| self.load(r)).map(|l| [l[3], l[4]]).collect()
    }
}

impl WriterState {
    /// What had been written when the state was taken.
    pub fn written(&self) -> &Written {
        &self.written
    }
}

/// Opens a run's CSV files: created with their header, or, resuming, cut
/// back to the length the checkpoint saw.
struct CsvOpener {
    resumed: Option<std::vec::IntoIter<u64>>,
}

impl CsvOpener {
    fn open(&mut self, path: PathBuf, header: &str) -> Result<Csv, AppError> {
        match self.resumed.as_mut() {
            None => Csv::create(path, header),
            Some(lengths) => match lengths.next() {
                Some(len) => Csv::reopen(path, len),
                None => Err(AppError::Resume {
                    dir: path.display().to_string(),
                    reason: "the checkpoint knows fewer CSV files than the case writes".into(),
                }),
            },
        }
    }
}

/// The device and inode of the directory at `dir`, where it can be read.
pub fn dir_identity(dir: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(dir).ok().map(|m| identity(&m))
}

/// The device and inode `metadata` gives.
pub fn identity(metadata: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (metadata.dev(), metadata.ino())
}

/// Refuses to go on writing by the name `out` once the directory there is
/// not the one of `identity` (moved, removed, or another one made there
/// since): what is written by that name would go into another directory,
/// perhaps another run's.
pub fn check_identity(out: &Path, identity: Option<(u64, u64)>) -> Result<(), AppError> {
    match identity.is_some() && dir_identity(out) != identity {
        true => Err(AppError::OutputMoved {
            path: out.display().to_string(),
        }),
        false => Ok(()),
    }
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
        Writer::open(out, case, resolved, picture_width, None)
    }

    /// The writer of a run resumed from a checkpoint that held `state`: its
    /// CSV files lose the rows written after the checkpoint, and everything
    /// rewritten whole (index, time series, plots) starts from `state`.
    pub fn resume(
        out: &Path,
        case: &Case,
        resolved: &Resolved,
        picture_width: Option<u32>,
        state: WriterState,
    ) -> Result<Writer, AppError> {
        Writer::open(out, case, resolved, picture_width, Some(state))
    }

    fn open(
        out: &Path,
        case: &Case,
        resolved: &Resolved,
        picture_width: Option<u32>,
        resumed: Option<WriterState>,
    ) -> Result<Writer, AppError> {
        let plan = resolved.output.clone();
        let mut opener = CsvOpener {
            resumed: resumed.as_ref().map(|s| s.csv_lengths.clone().into_iter()),
        };
        let mut files = Vec::new();
        if plan.writes_field_files() {
            create_dir(&out.join("fields"))?;
        }
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
                files.push(PathBuf::from("forces.csv"));
                Some(opener.open(out.join("forces.csv"), &header)?)
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
            let path = Path::new("probes").join(format!("{}.csv", p.name));
            probes.push(opener.open(out.join(&path), "time_s,p_pa,ux_m_s,uy_m_s")?);
            files.push(path);
        }
        let mut lines = Vec::new();
        for l in &plan.lines {
            let path = Path::new("probes").join(format!("{}.csv", l.name));
            lines.push(opener.open(out.join(&path), "time_s,s_m,x_m,y_m,p_pa,ux_m_s,uy_m_s")?);
            files.push(path);
        }
        let state = resumed.unwrap_or_else(|| WriterState {
            written: Written {
                files,
                ..Written::default()
            },
            ..WriterState::default()
        });
        Ok(Writer {
            out: out.to_owned(),
            identity: dir_identity(out),
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
            state,
        })
    }

    /// What a checkpoint keeps of this writer now (see [`WriterState::written`]).
    pub fn state(&self) -> WriterState {
        let mut state = self.state.clone();
        let csvs: Vec<&Csv> = self.forces.iter().chain(&self.probes).chain(&self.lines).collect();
        state.csv_lengths = csvs.iter().map(|c| c.len).collect();
        state.csv_sha256 = csvs.iter().map(|c| hex(&c.hash.clone().finalize())).collect();
        state
    }

    pub fn plan(&self) -> &OutputPlan {
        &self.plan
    }

    /// What turns a body's exchange into forces and coefficients, apart from
    /// the writer so that the run can judge them before they are written.
    pub fn force_scale(&self) -> ForceScale {
        ForceScale {
            units: self.units,
            dynamic_force: self.dynamic_force,
        }
    }

    /// One row of `forces.csv` from each body's exchange over the last sample
    /// period.
    pub fn forces(&mut self, time: f64, records: &[ExchangeRecord]) -> Result<(), AppError> {
        let scale = self.force_scale();
        let Some(csv) = self.forces.as_mut() else {
            return Ok(());
        };
        let mut row = format!("{time:.9e}");
        let mut coefficients = Vec::new();
        for r in records {
            let [fx, fy, torque, cd, cl] = scale.load(r);
            row.push_str(&format!(",{fx:.9e},{fy:.9e},{torque:.9e},{cd:.9e},{cl:.9e}"));
            coefficients.push([cd, cl]);
        }
        csv.line(&row)?;
        self.state.coefficient_history.push((time, coefficients));
        Ok(())
    }

    /// One row of each point probe's CSV from its (p, u_x, u_y): NaN where
    /// the probe has none (it reads a solid cell, or no patch holds it).
    pub fn probes(&mut self, time: f64, values: &[Option<[f64; 3]>]) -> Result<(), AppError> {
        for (value, csv) in values.iter().zip(&mut self.probes) {
            let [p, ux, uy] = value.unwrap_or([f64::NAN; 3]);
            csv.line(&format!("{time:.9e},{p:.9e},{ux:.9e},{uy:.9e}"))?;
        }
        Ok(())
    }

    /// Writes `bytes` to `path`, a file a save point writes once (a field
    /// file, a picture), and keeps it in the written files with its size,
    /// which a resume checks ([`verify_outputs`]).
    fn write_once(&mut self, path: &Path, bytes: &[u8]) -> Result<(), AppError> {
        write_atomic(path, bytes)?;
        let file = relative(&self.out, path);
        self.state.file_bytes.insert(file.clone(), bytes.len() as u64);
        self.state.written.files.push(file);
        Ok(())
    }

    /// Saves the fields at `step`: NPY and VTK as the plan asks, the line
    /// probes' profiles, and the index and time series rewritten whole.
    pub fn save(&mut self, step: u64, patches: &[PatchFields]) -> Result<(), AppError> {
        check_identity(&self.out, self.identity)?;
        // The CSVs' ten significant digits, so that a save point's time
        // matches their rows' (7.5, not 7.500000000000001).
        let time: f64 = format!("{:.9e}", step as f64 * self.units.dt)
            .parse()
            .expect("a formatted number parses");
        let stamp = format!("t{step:09}");
        let dir = self.out.join("fields").join(&stamp);
        if self.plan.writes_field_files() {
            create_dir(&dir)?;
        }
        let name = |p: &PatchFields| format!("L{}_p{}", p.level, p.patch);
        if self.plan.formats.contains(&Format::Npy) {
            for p in patches {
                for field in self.plan.fields.clone() {
                    let file = format!("{}_{}.npy", name(p), field.name());
                    let [nx, ny] = p.size;
                    let shape = match field.components() {
                        1 => vec![ny, nx],
                        c => vec![ny, nx, c],
                    };
                    let path = dir.join(&file);
                    self.write_once(&path, &npy::encode(&shape, &p.saved_values(field)))?;
                    self.state.index.push(IndexEntry {
                        file: format!("{stamp}/{file}"),
                        field: field.name().to_owned(),
                        unit: field.unit().to_owned(),
                        level: p.level,
                        patch: p.patch,
                        step,
                        time_s: time,
                        shape,
                        origin_m: p.origin,
                        spacing_m: p.spacing,
                    });
                }
            }
            let index = serde_json::to_string_pretty(&self.state.index).expect("plain data serialises");
            let path = self.out.join("fields").join("index.json");
            write_atomic(&path, index.as_bytes())?;
        }
        if self.plan.formats.contains(&Format::Vtk) {
            for p in patches {
                let path = dir.join(format!("{}.vti", name(p)));
                self.write_once(&path, &vtk::image(p, &self.plan.fields))?;
            }
            let amr = vtk::overlapping_amr(patches, |p| format!("{stamp}/{}.vti", name(p)));
            let path = self.out.join("fields").join(format!("{stamp}.vthb"));
            self.write_once(&path, amr.as_bytes())?;
            let blocks = vtk::multiblock(patches, |p| format!("{stamp}/{}.vti", name(p)));
            let path = self.out.join("fields").join(format!("{stamp}.vtm"));
            self.write_once(&path, blocks.as_bytes())?;
            self.state.series.push((time, format!("fields/{stamp}.vthb")));
            let pvd = self.out.join("fields.pvd");
            write_atomic(&pvd, vtk::collection(&self.state.series).as_bytes())?;
            // The same series over the multiblock files.
            let multiblock: Vec<(f64, String)> = self
                .state
                .series
                .iter()
                .map(|(t, file)| (*t, Path::new(file).with_extension("vtm").display().to_string()))
                .collect();
            write_atomic(&self.out.join("patches.pvd"), vtk::collection(&multiblock).as_bytes())?;
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
                self.write_once(&path, &image.png())?;
            }
        }
        self.state.last_profiles.clear();
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
            self.state.last_profiles.push(profile);
        }
        for &field in &self.plan.fields {
            let unit = field.unit();
            // Velocity by component; every other field whole.
            type Component = fn(&PatchFields) -> &ndarray::Array2<f32>;
            let parts: Vec<(String, Option<Component>)> = match field {
                FieldName::Velocity => vec![
                    (format!("velocity_x [{unit}]"), Some(|p| &p.ux)),
                    (format!("velocity_y [{unit}]"), Some(|p| &p.uy)),
                ],
                _ => vec![(format!("{} [{unit}]", field.name()), None)],
            };
            for (key, component) in parts {
                let written = &mut self.state.written;
                let range = written
                    .field_ranges
                    .entry(key.clone())
                    .or_insert([f64::INFINITY, f64::NEG_INFINITY]);
                let non_finite = written.field_non_finite.entry(key).or_insert(0);
                for p in patches {
                    let values: Vec<f32> = match component {
                        Some(array) => array(p).iter().copied().collect(),
                        None => p.values(field),
                    };
                    for (i, v) in values.iter().enumerate() {
                        let at = (i / p.size[0], i % p.size[0]);
                        if !p.solid[at] && !p.covered[at] {
                            if v.is_finite() {
                                range[0] = range[0].min(*v as f64);
                                range[1] = range[1].max(*v as f64);
                            } else {
                                *non_finite += 1;
                            }
                        }
                    }
                }
            }
        }
        self.state.written.save_points += 1;
        Ok(())
    }

    /// What was written, the index, the time series and (with pictures) the
    /// plots of the coefficients and the line probes' last profiles included;
    /// called once, at the end of a run's segment.
    pub fn finish(&mut self) -> Result<Written, AppError> {
        check_identity(&self.out, self.identity)?;
        if self.plan.formats.contains(&Format::Png) {
            let mut plots = Vec::new();
            if !self.state.coefficient_history.is_empty() {
                let mut series = Vec::new();
                let bodies = self.state.coefficient_history[0].1.len();
                for b in 0..bodies {
                    for (k, name) in ["cd", "cl"].iter().enumerate() {
                        series.push(plot::Series {
                            title: format!("body {b} {name}"),
                            points: self
                                .state
                                .coefficient_history
                                .iter()
                                .map(|(t, c)| [*t, c[b][k]])
                                .collect(),
                            markers: false,
                        });
                    }
                }
                plots.push(("forces".to_owned(), plot::render(&series, "time [s]")));
            }
            for (line, profile) in self.plan.lines.iter().zip(&self.state.last_profiles) {
                let series = [
                    plot::Series {
                        title: format!("{} u_x [m/s]", line.name),
                        points: profile.iter().map(|[s, _, ux]| [*s, *ux]).collect(),
                        markers: false,
                    },
                    plot::Series {
                        title: format!("{} p [Pa]", line.name),
                        points: profile.iter().map(|[s, p, _]| [*s, *p]).collect(),
                        markers: false,
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
                self.state.written.files.push(relative(&self.out, &path));
            }
        }
        if self.plan.formats.contains(&Format::Npy) && !self.state.index.is_empty() {
            self.state.written.files.push(Path::new("fields").join("index.json"));
        }
        if !self.state.series.is_empty() {
            self.state.written.files.push("fields.pvd".into());
            self.state.written.files.push("patches.pvd".into());
        }
        Ok(self.state.written.clone())
    }

    /// What was written so far.
    pub fn written(&self) -> Written {
        self.state.written.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full disk (the temporary file leads to /dev/full): the error names
    /// the file, the old contents stay, and no partial file is left.
    #[test]
    fn a_full_disk_leaves_the_previous_file_whole() {
        let dir = std::env::temp_dir().join(format!("lbm-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("summary.json");
        write_atomic(&path, b"{\"ended\": \"completed\"}\n").unwrap();
        std::os::unix::fs::symlink("/dev/full", dir.join("summary.json.tmp")).unwrap();
        let error = write_atomic(&path, &[b'x'; 4096]).unwrap_err();
        assert!(error.to_string().contains("summary.json"), "{error}");
        assert!(error.to_string().contains("No space left"), "{error}");
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"ended\": \"completed\"}\n");
        assert!(!dir.join("summary.json.tmp").exists() && dir.join("summary.json.tmp").symlink_metadata().is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
