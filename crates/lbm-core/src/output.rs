//! The `[output]` table of a case file and the [`OutputPlan`] it resolves to:
//! when fields are saved and which, in which formats, the probes, and how
//! often the body forces are sampled. Every key is checked before any work.
//!
//! This module decides what is written and when; it writes nothing (the `lbm`
//! crate's writers do).

use serde::{Deserialize, Serialize};

use crate::domain::geometry::Body;
use crate::error::{Error, Result};
use crate::units::UnitSystem;

/// A field saved at every save point, in physical units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldName {
    /// Pressure relative to the rest state, Pa (`c_s² ρ₀ Δρ` in lattice terms).
    Pressure,
    /// Density, kg/m³.
    Density,
    /// Velocity (u_x, u_y), m/s.
    Velocity,
    /// Speed |u|, m/s.
    Speed,
    /// Vorticity ∂u_y/∂x − ∂u_x/∂y, 1/s.
    Vorticity,
}

impl FieldName {
    /// The unit written beside the field's name.
    pub fn unit(self) -> &'static str {
        match self {
            FieldName::Pressure => "Pa",
            FieldName::Density => "kg/m^3",
            FieldName::Velocity | FieldName::Speed => "m/s",
            FieldName::Vorticity => "1/s",
        }
    }

    /// Components per cell.
    pub fn components(self) -> usize {
        match self {
            FieldName::Velocity => 2,
            _ => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FieldName::Pressure => "pressure",
            FieldName::Density => "density",
            FieldName::Velocity => "velocity",
            FieldName::Speed => "speed",
            FieldName::Vorticity => "vorticity",
        }
    }
}

/// A file format fields are saved in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// VTK XML for ParaView: `.vti` blocks in a `.vthb` overlapping-AMR file
    /// per save point, and a `.pvd` time series.
    Vtk,
    /// One `.npy` array per level, patch and field, with `index.json`.
    Npy,
    /// PNG pictures of speed and vorticity over the whole domain.
    Png,
}

impl Format {
    /// The name a case file's `output.formats` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Vtk => "vtk",
            Format::Npy => "npy",
            Format::Png => "png",
        }
    }
}

fn default_fields() -> Vec<FieldName> {
    vec![FieldName::Pressure, FieldName::Velocity, FieldName::Vorticity]
}

fn default_formats() -> Vec<Format> {
    vec![Format::Vtk, Format::Npy, Format::Png]
}

/// A point probe: p, u_x, u_y at every force sample.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PointProbe {
    pub name: String,
    /// m.
    pub point: [f64; 2],
}

/// A line probe: a profile of p, u_x, u_y at `points` evenly spaced points
/// from `from` to `to`, at every save point.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LineProbe {
    pub name: String,
    /// m.
    pub from: [f64; 2],
    /// m.
    pub to: [f64; 2],
    pub points: u32,
}

/// The `[output]` table as written in a case file.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    /// Save interval, s of simulated time; fields are also saved at the end.
    #[serde(default)]
    pub every: Option<f64>,
    /// Save interval in base intervals, instead of `every`.
    #[serde(default)]
    pub every_intervals: Option<u64>,
    #[serde(default = "default_fields")]
    pub fields: Vec<FieldName>,
    #[serde(default = "default_formats")]
    pub formats: Vec<Format>,
    #[serde(default)]
    pub probes: Vec<PointProbe>,
    #[serde(default)]
    pub lines: Vec<LineProbe>,
    /// Sample period of the body forces and point probes, s (default: every
    /// base interval).
    #[serde(default)]
    pub forces_every: Option<f64>,
    /// Velocity the force coefficients are made with, m/s (default:
    /// `flow.reference_velocity`; DFG's coefficients use the mean inflow).
    #[serde(default)]
    pub reference_velocity: Option<f64>,
    /// Length the force coefficients are made with, m (default:
    /// `domain.reference_length`).
    #[serde(default)]
    pub reference_length: Option<f64>,
}

impl Default for OutputSpec {
    fn default() -> Self {
        OutputSpec {
            every: None,
            every_intervals: None,
            fields: default_fields(),
            formats: default_formats(),
            probes: Vec::new(),
            lines: Vec::new(),
            forces_every: None,
            reference_velocity: None,
            reference_length: None,
        }
    }
}

/// A probe point, checked against the domain and the bodies.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResolvedProbe {
    pub name: String,
    /// Physical position, m.
    pub point: [f64; 2],
}

/// A line probe resolved to its points.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResolvedLine {
    pub name: String,
    pub points: Vec<ResolvedProbe>,
}

/// What a run writes and when, in base intervals.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutputPlan {
    /// Intervals at which fields are saved, ascending, the last one the end.
    pub save_points: Vec<u64>,
    pub fields: Vec<FieldName>,
    pub formats: Vec<Format>,
    pub probes: Vec<ResolvedProbe>,
    pub lines: Vec<ResolvedLine>,
    /// Base intervals per force and point-probe sample.
    pub forces_every: u64,
    /// What force coefficients are made with: `cd = F / (½ ρ U² L)`, m/s and m.
    pub reference_velocity: f64,
    pub reference_length: f64,
}

impl OutputPlan {
    /// Whether a save point writes files under `fields/` (NPY or VTK); with
    /// pictures alone it writes none, and no `fields/` directory is made.
    pub fn writes_field_files(&self) -> bool {
        self.formats.iter().any(|f| matches!(f, Format::Npy | Format::Vtk))
    }
}

/// What an output plan needs to know of the rest of the case.
#[derive(Clone, Copy, Debug)]
pub struct CaseFrame {
    /// Base intervals of the run.
    pub steps: u64,
    /// Width and height of the domain, m.
    pub size: [f64; 2],
    /// `flow.reference_velocity`, m/s.
    pub reference_velocity: f64,
    /// `domain.reference_length`, m.
    pub reference_length: f64,
}

/// The longest probe or line name: it names files.
pub const MAX_NAME: usize = 64;

/// The most save points a run may have: each is a directory of files.
pub const MAX_SAVE_POINTS: u64 = 100_000;

/// The most force and probe samples a run may take: each stays in memory and
/// in every checkpoint for the run's time averages.
pub const MAX_SAMPLES: u64 = 10_000_000;

/// Seconds of simulated time as whole base intervals (at least one), or the
/// error naming `key`.
fn intervals(key: &str, seconds: f64, units: &UnitSystem) -> Result<u64> {
    if !(seconds > 0.0 && seconds.is_finite()) {
        return Err(Error::parameter(key, seconds, "a positive number of seconds"));
    }
    Ok(((seconds / units.dt).round() as u64).max(1))
}

/// How far the coefficients' reference (½ ρ U² L) may lie from the flow's
/// own, either way: beyond it a coefficient of any real force is below
/// 1e-12 or above 1e12 times its size in the flow's scales.
const MAX_REFERENCE_RATIO: f64 = 1e12;

impl OutputSpec {
    /// The plan for a run in `case`'s frame with `bodies` (base lattice
    /// units); refuses a save interval that is not
    /// positive, both `every` and `every_intervals`, an empty field or format
    /// list, duplicate or unnamed probes, and probe points outside the domain
    /// or inside a body.
    pub fn resolve(&self, case: CaseFrame, units: &UnitSystem, bodies: &[Body]) -> Result<OutputPlan> {
        let CaseFrame {
            steps,
            size,
            reference_velocity,
            reference_length,
        } = case;
        let positive = |key: &str, value: Option<f64>, default: f64| -> Result<f64> {
            match value {
                None => Ok(default),
                Some(v) if v > 0.0 && v.is_finite() => Ok(v),
                Some(v) => Err(Error::parameter(key, v, "a positive number")),
            }
        };
        let flow = [reference_velocity, reference_length];
        let reference_velocity = positive("output.reference_velocity", self.reference_velocity, reference_velocity)?;
        let reference_length = positive("output.reference_length", self.reference_length, reference_length)?;
        // A coefficient divides by ½ ρ U² L: a reference far from the
        // flow's own scales makes every coefficient overflow or vanish.
        let ratio = (reference_velocity / flow[0]).powi(2) * (reference_length / flow[1]);
        if !(1.0 / MAX_REFERENCE_RATIO..=MAX_REFERENCE_RATIO).contains(&ratio) {
            let (key, value) = match self.reference_velocity {
                Some(v) => ("output.reference_velocity", v),
                None => ("output.reference_length", reference_length),
            };
            return Err(Error::parameter(
                key,
                value,
                &format!(
                    "a reference whose dynamic force ½ ρ U² L (output.reference_velocity, \
                     output.reference_length) lies within {:e} to {MAX_REFERENCE_RATIO:e} times the flow's \
                     (flow.reference_velocity, domain.reference_length); it is {ratio:e} times it",
                    1.0 / MAX_REFERENCE_RATIO
                ),
            ));
        }
        let every = match (self.every, self.every_intervals) {
            (Some(_), Some(_)) => {
                return Err(Error::parameter(
                    "output.every_intervals",
                    "given with output.every",
                    "one of output.every (s) and output.every_intervals",
                ));
            }
            (Some(s), None) => Some(intervals("output.every", s, units)?),
            (None, Some(0)) => {
                return Err(Error::parameter(
                    "output.every_intervals",
                    0,
                    "at least 1 base interval",
                ));
            }
            (None, n) => n,
        };
        if let Some(n) = every
            && steps / n > MAX_SAVE_POINTS
        {
            let key = match self.every {
                Some(_) => "output.every",
                None => "output.every_intervals",
            };
            return Err(Error::parameter(
                key,
                self.every.map_or(n.to_string(), |s| s.to_string()),
                &format!(
                    "at most {MAX_SAVE_POINTS} save points over the run's {steps} base intervals: every {} \
                     intervals or more ({} s)",
                    steps.div_ceil(MAX_SAVE_POINTS),
                    crate::case::significant(steps.div_ceil(MAX_SAVE_POINTS) as f64 * units.dt, true),
                ),
            ));
        }
        let mut save_points: Vec<u64> = match every {
            Some(n) => (1..=steps / n).map(|k| k * n).collect(),
            None => Vec::new(),
        };
        if save_points.last() != Some(&steps) && steps > 0 {
            save_points.push(steps);
        }
        if let Some(twice) = self
            .fields
            .iter()
            .enumerate()
            .find(|(k, f)| self.fields[..*k].contains(f))
        {
            return Err(Error::parameter(
                "output.fields",
                format!("{} twice", twice.1.name()),
                "each field once",
            ));
        }
        if let Some(twice) = self
            .formats
            .iter()
            .enumerate()
            .find(|(k, f)| self.formats[..*k].contains(f))
        {
            return Err(Error::parameter(
                "output.formats",
                format!("{} twice", twice.1.name()),
                "each format once",
            ));
        }
        if self.fields.is_empty() {
            return Err(Error::parameter(
                "output.fields",
                "[]",
                "at least one of pressure, density, velocity, speed, vorticity",
            ));
        }
        if self.formats.is_empty() {
            return Err(Error::parameter(
                "output.formats",
                "[]",
                "at least one of vtk, npy, png",
            ));
        }
        let forces_every = match self.forces_every {
            Some(s) => intervals("output.forces_every", s, units)?,
            None => 1,
        };
        // Every sample stays in the run's history (and its checkpoints) for
        // the time averages; only a run with bodies or probes samples.
        if (!bodies.is_empty() || !self.probes.is_empty()) && steps / forces_every > MAX_SAMPLES {
            let every = steps.div_ceil(MAX_SAMPLES);
            return Err(Error::parameter(
                "output.forces_every",
                self.forces_every
                    .map_or("one base interval (the default)".to_owned(), |s| s.to_string()),
                &format!(
                    "at most {MAX_SAMPLES} force and probe samples over the run's {steps} base intervals: \
                     {} s or more ({every} intervals)",
                    crate::case::significant(every as f64 * units.dt, true),
                ),
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        let scale = units.length_to_lattice(1.0);
        // A point probe must lie in the fluid; a line may cross a body, whose
        // points then read as solid.
        let resolve_point = |key: String, name: &str, point: [f64; 2], in_fluid: bool| -> Result<ResolvedProbe> {
            let inside = (0..2).all(|k| point[k] >= 0.0 && point[k] <= size[k] && point[k].is_finite());
            if !inside {
                return Err(Error::parameter(
                    &key,
                    format!("{point:?}"),
                    &format!("a point inside the domain, [0, {}] x [0, {}] m", size[0], size[1]),
                ));
            }
            if in_fluid && bodies.iter().any(|b| b.shape.contains(point.map(|v| v * scale))) {
                return Err(Error::parameter(
                    &key,
                    format!("{point:?}"),
                    "a point in the fluid, not inside a body",
                ));
            }
            Ok(ResolvedProbe {
                name: name.to_owned(),
                point,
            })
        };
        let mut check_name = |key: String, name: &str| -> Result<()> {
            let valid = !name.is_empty()
                && name.len() <= MAX_NAME
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid {
                return Err(Error::parameter(
                    &key,
                    format!("{name:?}"),
                    &format!("1 to {MAX_NAME} letters, digits, _ and - (it names a file)"),
                ));
            }
            // A line's profile is plotted as plots/NAME.png, beside the forces'.
            if name.eq_ignore_ascii_case("forces") {
                return Err(Error::parameter(
                    &key,
                    format!("{name:?}"),
                    "a name other than `forces`, which names the forces' files",
                ));
            }
            // Compared without case: on a case-insensitive file system (macOS,
            // Windows) `Wake` and `wake` would write one file.
            if !names.insert(name.to_ascii_lowercase()) {
                return Err(Error::parameter(
                    &key,
                    name,
                    "a name no other probe or line has, letter case aside (names are file names)",
                ));
            }
            Ok(())
        };
        let mut probes = Vec::new();
        for (k, p) in self.probes.iter().enumerate() {
            check_name(format!("output.probes[{k}].name"), &p.name)?;
            probes.push(resolve_point(
                format!("output.probes[{k}].point"),
                &p.name,
                p.point,
                true,
            )?);
        }
        let mut lines = Vec::new();
        for (k, l) in self.lines.iter().enumerate() {
            check_name(format!("output.lines[{k}].name"), &l.name)?;
            if !(2..=100_000).contains(&l.points) {
                return Err(Error::parameter(
                    &format!("output.lines[{k}].points"),
                    l.points,
                    "2 to 100000",
                ));
            }
            let from = resolve_point(format!("output.lines[{k}].from"), &l.name, l.from, false)?.point;
            resolve_point(format!("output.lines[{k}].to"), &l.name, l.to, false)?;
            if l.to == from {
                return Err(Error::parameter(
                    &format!("output.lines[{k}].to"),
                    format!("{:?}", l.to),
                    "a point other than `from` (a line of no length samples one point: use `output.probes`)",
                ));
            }
            let mut points = Vec::new();
            for i in 0..l.points {
                let s = i as f64 / (l.points - 1) as f64;
                let at = [0, 1].map(|c| l.from[c] + s * (l.to[c] - l.from[c]));
                points.push(resolve_point(
                    format!("output.lines[{k}] point {i}"),
                    &l.name,
                    at,
                    false,
                )?);
            }
            lines.push(ResolvedLine {
                name: l.name.clone(),
                points,
            });
        }
        Ok(OutputPlan {
            save_points,
            fields: self.fields.clone(),
            formats: self.formats.clone(),
            probes,
            lines,
            forces_every,
            reference_velocity,
            reference_length,
        })
    }
}
