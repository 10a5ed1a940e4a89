//! Case files: a run described in physical units (m, s, kg/m^3, m^2/s), parsed
//! from TOML and resolved into a [`LatticeConfig`] plus a step count.
//!
//! Every key is checked before any work: unknown keys are refused by serde,
//! values out of range get an error naming the key and the accepted range. This
//! module does not run anything.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::config::{Amplitude, Boundary, InletSpec, LatticeConfig, Profile, Speed, TOUCHING};
use crate::domain::geometry::{BODY_CLEARANCE, Body, Shape};
use crate::domain::hierarchy::{Hierarchy, HierarchySpec, PARENT_MARGIN, Rect, SIDE_NAMES};
use crate::error::{Error, Result};
use crate::expression::Expression;
use crate::lattice::{Collision, Moments};
use crate::output::{CaseFrame, OutputPlan, OutputSpec};
use crate::units::UnitSystem;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    pub domain: Domain,
    pub fluid: Fluid,
    pub flow: Flow,
    pub boundaries: Boundaries,
    /// One entry per refined level, coarsest first.
    #[serde(default)]
    pub refinement: Vec<RefinementLevel>,
    #[serde(default)]
    pub bodies: Vec<BodyTable>,
    pub run: Run,
    /// What the run writes; without the table, fields at the end only.
    #[serde(default)]
    pub output: OutputSpec,
    /// The flow the run starts from; without the table, the fluid at rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial: Option<Initial>,
}

/// `[initial]`: the velocity (m/s) and pressure (Pa, against the fluid's
/// rest state) the run starts from, each a number or an expression of the
/// cell centre's x and y in m ([`crate::expression`]); what is left out is
/// zero. Every cell starts at the equilibrium of its values.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Initial {
    #[serde(default = "rest_velocity")]
    pub velocity: [InitialValue; 2],
    #[serde(default = "rest_pressure")]
    pub pressure: InitialValue,
}

fn rest_velocity() -> [InitialValue; 2] {
    [InitialValue::Number(0.0), InitialValue::Number(0.0)]
}

fn rest_pressure() -> InitialValue {
    InitialValue::Number(0.0)
}

/// A number, or an expression of x and y as a string.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum InitialValue {
    Number(f64),
    Expression(String),
}

impl<'de> Deserialize<'de> for InitialValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = InitialValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number or an expression of x and y (m) as a string, such as \"sin(2 * pi * x)\"")
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<InitialValue, E> {
                Ok(InitialValue::Number(v))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<InitialValue, E> {
                Ok(InitialValue::Number(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<InitialValue, E> {
                Ok(InitialValue::Number(v as f64))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<InitialValue, E> {
                Ok(InitialValue::Expression(v.to_string()))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl Initial {
    /// The field parsed, for a domain of `extent` base cells.
    fn field(&self, units: &UnitSystem, extent: [f64; 2]) -> Result<InitialField> {
        let parse = |key: &str, value: &InitialValue| match value {
            InitialValue::Number(v) => Ok(Expression::constant(*v)),
            InitialValue::Expression(text) => Expression::parse(text).map_err(|e| {
                Error::parameter(
                    key,
                    format!("{text:?}"),
                    &format!("a number or an expression of x and y (m): {e}"),
                )
            }),
        };
        let c = units.dx / units.dt;
        Ok(InitialField {
            velocity: [
                parse("initial.velocity[0]", &self.velocity[0])?,
                parse("initial.velocity[1]", &self.velocity[1])?,
            ],
            pressure: parse("initial.pressure", &self.pressure)?,
            dx: units.dx,
            velocity_scale: units.velocity_to_lattice(1.0),
            pressure_scale: 3.0 / (units.density * c * c),
            extent,
            fastest: InitialSpeed::default(),
        })
    }
}

/// Points along each axis at which the range scans of
/// [`Case::resolution_range`] and [`Case::lattice_velocity_range`] sample
/// the initial field (base cell centres); a whole resolve checks every cell.
const INITIAL_SAMPLES: u32 = 65;

/// How far the initial density may lie from the rest density, relative: the
/// method is weakly compressible (a flow at Mach 0.3 swings it by about 0.13).
pub const MAX_INITIAL_DENSITY_DEVIATION: f64 = 0.2;

/// The initial field of a resolved case, in lattice units at base lattice
/// points.
#[derive(Clone, Debug, Serialize)]
pub struct InitialField {
    /// m/s.
    pub velocity: [Expression; 2],
    /// Pa.
    pub pressure: Expression,
    /// Metres per base lattice unit.
    #[serde(skip)]
    dx: f64,
    /// Lattice velocity per m/s.
    #[serde(skip)]
    velocity_scale: f64,
    /// Lattice density deviation per Pa.
    #[serde(skip)]
    pressure_scale: f64,
    /// The domain in base lattice units.
    #[serde(skip)]
    extent: [f64; 2],
    /// The fastest fluid cell, once [`Case::resolve`] has checked them all.
    #[serde(skip)]
    pub fastest: InitialSpeed,
}

/// The fastest lattice speed of an initial field and the base lattice point
/// where it is.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct InitialSpeed {
    pub speed: f64,
    pub at: [f64; 2],
}

impl InitialField {
    /// The moments at base lattice point (x, y) inside the domain, or the
    /// refusal that names the key whose value there is not finite, or whose
    /// density lies beyond [`MAX_INITIAL_DENSITY_DEVIATION`].
    pub fn moments(&self, x: f64, y: f64) -> Result<Moments> {
        let point = [x * self.dx, y * self.dx];
        let at = || {
            format!(
                "at x = {} m, y = {} m",
                significant(point[0], false),
                significant(point[1], false)
            )
        };
        let value = |key: &str, e: &Expression| {
            let v = e.eval(point[0], point[1]);
            match v.is_finite() {
                true => Ok(v),
                false => Err(Error::parameter(
                    key,
                    format!("{:?}", e.text()),
                    &format!("an expression finite at every fluid cell centre ({} it is {v})", at()),
                )),
            }
        };
        let ux = value("initial.velocity[0]", &self.velocity[0])?;
        let uy = value("initial.velocity[1]", &self.velocity[1])?;
        let p = value("initial.pressure", &self.pressure)?;
        let delta_rho = p * self.pressure_scale;
        if delta_rho.abs() > MAX_INITIAL_DENSITY_DEVIATION {
            return Err(Error::parameter(
                "initial.pressure",
                format!("{:?}", self.pressure.text()),
                &format!(
                    "a pressure within {} Pa of the rest state, which keeps the density within {}% of the rest \
                     density (the method is weakly compressible; {} it is {} Pa)",
                    significant(MAX_INITIAL_DENSITY_DEVIATION / self.pressure_scale, false),
                    100.0 * MAX_INITIAL_DENSITY_DEVIATION,
                    at(),
                    significant(p, false)
                ),
            ));
        }
        Ok(Moments {
            delta_rho: delta_rho as f32,
            ux: (ux * self.velocity_scale) as f32,
            uy: (uy * self.velocity_scale) as f32,
        })
    }

    /// What a stepper starts a cell at base lattice point (x, y) of `level`
    /// at: its moments there, checked by [`InitialField::check_cells`]; a
    /// ghost cell (beyond the domain or around a patch), which the run
    /// overwrites before it reads it, takes the value at the nearest cell
    /// centre of the level inside the domain, or rest where that is not
    /// finite.
    pub fn start_moments(&self, level: usize, x: f64, y: f64) -> Moments {
        let half = 0.5f64.powi(level as i32 + 1);
        let inside = |v: f64, extent: f64| v.clamp(half, extent - half);
        self.moments(inside(x, self.extent[0]), inside(y, self.extent[1]))
            .unwrap_or_default()
    }

    /// The fastest speed among `points` (base lattice units), each checked
    /// as [`InitialField::moments`] does.
    fn fastest_among(&self, points: impl IntoIterator<Item = [f64; 2]>) -> Result<InitialSpeed> {
        let mut fastest = InitialSpeed::default();
        for at in points {
            let m = self.moments(at[0], at[1])?;
            let speed = (m.ux as f64).hypot(m.uy as f64);
            if speed > fastest.speed {
                fastest = InitialSpeed { speed, at };
            }
        }
        Ok(fastest)
    }

    /// The fastest speed over a sample of base cell centres outside `solid`.
    fn sampled_speed(&self, solid: impl Fn([f64; 2]) -> bool) -> Result<InitialSpeed> {
        let [nx, ny] = self.extent.map(|n| n as u32);
        let along = |n: u32| {
            let m = n.min(INITIAL_SAMPLES);
            (0..m).map(move |k| (k as u64 * n as u64 / m as u64) as f64 + 0.5)
        };
        let points = along(ny).flat_map(|y| along(nx).map(move |x| [x, y]));
        self.fastest_among(points.filter(|&at| !solid(at)))
    }

    /// Every fluid cell centre of every level's active cells, checked as
    /// [`InitialField::moments`] does (a row of cells at a time, side by
    /// side, the first refusal in row order); the fastest speed among them.
    pub fn check_cells(&self, hierarchy: &Hierarchy, bodies: &[Body]) -> Result<InitialSpeed> {
        let mut fastest = InitialSpeed::default();
        for (level, patches) in hierarchy.levels.iter().enumerate() {
            let scale = 0.5f64.powi(level as i32);
            for patch in patches {
                let [x0, y0, x1, y1] = patch.global_active();
                let rows: Vec<Result<InitialSpeed>> = (y0..y1)
                    .into_par_iter()
                    .map(|gy| {
                        let row = (x0..x1).map(|gx| [(gx as f64 + 0.5) * scale, (gy as f64 + 0.5) * scale]);
                        self.fastest_among(row.filter(|at| !bodies.iter().any(|b| b.shape.contains(*at))))
                    })
                    .collect();
                for row in rows {
                    let row = row?;
                    if row.speed > fastest.speed {
                        fastest = row;
                    }
                }
            }
        }
        Ok(fastest)
    }

    /// A base lattice point in metres, for a message.
    pub fn metres(&self, at: [f64; 2]) -> [f64; 2] {
        at.map(|v| v * self.dx)
    }
}

/// One `[[bodies]]` table: a shape, and optionally turned about a point
/// (what an angle-of-attack polar sweeps). The shape's own table refuses
/// unknown keys.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct BodyTable {
    #[serde(flatten)]
    pub shape: Shape,
    /// Degrees, counter-clockwise, about `pivot`. With the key a rectangle
    /// becomes the polygon of its corners (at any angle, 0 included, so that
    /// the members of a sweep over it have one kind of body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<f64>,
    /// The point turned about, m; without it the centre of the shape's
    /// bounding box.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pivot: Option<[f64; 2]>,
}

impl From<Shape> for BodyTable {
    fn from(shape: Shape) -> Self {
        BodyTable {
            shape,
            rotation: None,
            pivot: None,
        }
    }
}

impl BodyTable {
    /// The shape where it lies, turned when the table says so; refuses a
    /// rotation or pivot that is not finite, naming `bodies[b]`'s key.
    pub fn placed(&self, b: usize) -> Result<Shape> {
        let Some(degrees) = self.rotation else {
            return match self.pivot {
                Some(_) => Err(Error::parameter(
                    &format!("bodies[{b}].pivot"),
                    "given without a rotation",
                    "a pivot together with `rotation`",
                )),
                None => Ok(self.shape.clone()),
            };
        };
        if !degrees.is_finite() {
            return Err(Error::parameter(
                &format!("bodies[{b}].rotation"),
                degrees,
                "a finite angle, degrees",
            ));
        }
        // A rectangle turns into a polygon, which has no min and max left
        // to compare: the rectangle as written is checked first.
        if let Shape::Rectangle { min, max } = &self.shape
            && !(min[0] < max[0] && min[1] < max[1])
        {
            return Err(rectangle_error(b, min, max));
        }
        let [x0, y0, x1, y1] = self.shape.bounds();
        let pivot = self.pivot.unwrap_or([0.5 * (x0 + x1), 0.5 * (y0 + y1)]);
        if let Some(k) = (0..2).find(|k| !pivot[*k].is_finite()) {
            return Err(Error::parameter(
                &format!("bodies[{b}].pivot[{k}]"),
                pivot[k],
                "a finite number, m",
            ));
        }
        let (sin, cos) = degrees.to_radians().sin_cos();
        let turn = |p: &[f64; 2]| {
            let (dx, dy) = (p[0] - pivot[0], p[1] - pivot[1]);
            [pivot[0] + cos * dx - sin * dy, pivot[1] + sin * dx + cos * dy]
        };
        Ok(match &self.shape {
            Shape::Circle { center, radius } => Shape::Circle {
                center: turn(center),
                radius: *radius,
            },
            Shape::Rectangle { min, max } => Shape::Polygon {
                points: [[min[0], min[1]], [max[0], min[1]], [max[0], max[1]], [min[0], max[1]]]
                    .iter()
                    .map(turn)
                    .collect(),
            },
            Shape::Polygon { points } => Shape::Polygon {
                points: points.iter().map(turn).collect(),
            },
        })
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Domain {
    /// Width and height, m.
    pub size: [f64; 2],
    /// Length that `resolution` cells of the base grid span, m.
    pub reference_length: f64,
    /// Base cells per reference length.
    pub resolution: f64,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Fluid {
    /// Kinematic viscosity, m^2/s.
    pub viscosity: f64,
    /// kg/m^3.
    #[serde(default = "unit_density")]
    pub density: f64,
}

fn unit_density() -> f64 {
    1.0
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Flow {
    /// Velocity scale of the case, m/s.
    pub reference_velocity: f64,
    /// The reference velocity in lattice units; sets the time step.
    #[serde(default = "default_lattice_velocity")]
    pub lattice_velocity: f64,
    #[serde(default)]
    pub collision: Collision,
    /// Uniform body acceleration, m/s^2.
    #[serde(default)]
    pub acceleration: [f64; 2],
}

fn default_lattice_velocity() -> f64 {
    0.05
}

/// What one side of the domain is, in physical units.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum BoundarySpec {
    Periodic,
    Wall,
    /// A wall sliding with this velocity, m/s.
    MovingWall([f64; 2]),
    /// A velocity inlet (x_min only).
    Inlet(InletSide),
    /// A pressure outlet (x_max only).
    Outflow,
    /// A free-slip wall: no flow through it, no friction along it.
    FreeSlip,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InletSide {
    pub profile: Profile,
    /// Peak velocity of a parabolic profile, or the uniform velocity, m/s.
    pub velocity: f64,
    /// Time dependence of the velocity; times in s.
    #[serde(default)]
    pub amplitude: Amplitude,
    /// `[y0, y1]`, m: the part of the side the inlet covers, on base cell
    /// edges; a resting wall below and above. The whole side when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<[f64; 2]>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Boundaries {
    pub x_min: BoundarySpec,
    pub x_max: BoundarySpec,
    pub y_min: BoundarySpec,
    pub y_max: BoundarySpec,
}

impl Boundaries {
    /// The four sides in `SIDE_NAMES` order.
    pub fn sides(&self) -> [&BoundarySpec; 4] {
        [&self.x_min, &self.x_max, &self.y_min, &self.y_max]
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RefinementLevel {
    /// Rectangles `[x0, y0, x1, y1]` in m, snapped to the parent level's cells.
    pub patches: Vec<[f64; 4]>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    /// Base intervals to advance.
    pub steps: u64,
    /// Storage tile per level, `[tx, ty]`; missing levels use the whole allocation.
    #[serde(default)]
    pub tiles: Vec<[u32; 2]>,
    /// Whether a full run must follow a completed pilot of the same plan;
    /// missing: when the run is estimated to take over a minute.
    #[serde(default)]
    pub require_pilot: Option<bool>,
    /// Wall-clock seconds between checkpoints (default 600).
    #[serde(default)]
    pub checkpoint_every_seconds: Option<f64>,
    /// Base intervals between checkpoints, besides the wall-clock period.
    #[serde(default)]
    pub checkpoint_every_intervals: Option<u64>,
}

impl Run {
    /// Refuses a checkpoint period that is not a positive number.
    fn check(&self) -> Result<()> {
        if let Some(s) = self.checkpoint_every_seconds
            && !(s > 0.0 && s.is_finite())
        {
            return Err(Error::parameter(
                "run.checkpoint_every_seconds",
                s,
                "a finite number of seconds above 0",
            ));
        }
        if self.checkpoint_every_intervals == Some(0) {
            return Err(Error::parameter(
                "run.checkpoint_every_intervals",
                0,
                "at least 1 base interval",
            ));
        }
        Ok(())
    }
}

/// The longest case name: it titles pictures and plots.
pub const MAX_CASE_NAME: usize = 200;

/// The area below which an outline is flat, as a share of its perimeter
/// squared (a square's is 1/16): points on one line, up to round-off.
const FLAT_AREA: f64 = 1e-12;

/// A rectangle whose min is not below its max on both axes.
fn rectangle_error(b: usize, min: &[f64; 2], max: &[f64; 2]) -> Error {
    Error::parameter(
        &format!("bodies[{b}].min"),
        format!("{min:?} to {max:?}"),
        "min below max on both axes",
    )
}

/// What a side of the domain is, in the words of the case file.
pub fn side_kind(spec: &BoundarySpec) -> &'static str {
    match spec {
        BoundarySpec::Periodic => "periodic",
        BoundarySpec::Wall => "wall",
        BoundarySpec::MovingWall(_) => "moving_wall",
        BoundarySpec::Inlet(_) => "inlet",
        BoundarySpec::Outflow => "outflow",
        BoundarySpec::FreeSlip => "free_slip",
    }
}

/// The base rows `[j0, j1)` of an inlet's `span` (m) over a side `height` m
/// high of `ny` rows `dx` wide. Its ends must lie on cell edges: a row is
/// all inlet or all wall, so the profile's flux is that of its rows.
fn inlet_span(span: [f64; 2], height: f64, ny: u32, dx: f64) -> Result<[u32; 2]> {
    let key = "boundaries.x_min.inlet.span";
    let rows = span.map(|y| y / dx);
    let edges = rows.map(|r| r.round());
    let on_edges = rows.iter().zip(edges).all(|(r, e)| (r - e).abs() <= TOUCHING);
    if !(span.iter().all(|y| y.is_finite()) && span[0] >= 0.0 && span[0] < span[1] && span[1] <= height) {
        return Err(Error::parameter(
            key,
            format!("{span:?}"),
            &format!("[y0, y1] m with 0 <= y0 < y1 <= {height} (domain.size's height)"),
        ));
    }
    if !on_edges {
        let nearest = |r: f64| match (r.floor(), r.ceil()) {
            (low, high) if low == high => format!("{} m (an edge)", low * dx),
            (low, high) => format!("{} or {} m", low * dx, high * dx),
        };
        return Err(Error::parameter(
            key,
            format!("{span:?}"),
            &format!(
                "ends on base cell edges, multiples of dx = {dx} m, so that each row is all inlet or all wall; the \
                 nearest to y0: {}, to y1: {}",
                nearest(rows[0]),
                nearest(rows[1])
            ),
        ));
    }
    let [j0, j1] = edges.map(|e| e as u32);
    if j0 >= j1 || j1 > ny {
        return Err(Error::parameter(
            key,
            format!("{span:?}"),
            &format!("at least one base row ({dx} m) inside the side's {ny} rows"),
        ));
    }
    Ok([j0, j1])
}

/// Refuses a body with a coordinate that is not a number, of no size, a
/// degenerate polygon, one outside the domain, or one whose part in the
/// domain reaches through a side other than a resting wall or a free-slip
/// side, naming the side (the rasteriser does not wrap a body across a
/// periodic side, and an inlet or outflow has no rule for a row that is
/// solid). The body's own keys come first, so its error names its own
/// problem and not a patch it crosses.
fn check_body(b: usize, shape: &Shape, size: [f64; 2], sides: [&BoundarySpec; 4]) -> Result<()> {
    let key = format!("bodies[{b}]");
    let coordinates: Vec<(String, f64)> = match shape {
        Shape::Circle { center, radius } => vec![
            (format!("{key}.center[0]"), center[0]),
            (format!("{key}.center[1]"), center[1]),
            (format!("{key}.radius"), *radius),
        ],
        Shape::Rectangle { min, max } => (0..2)
            .flat_map(|k| [(format!("{key}.min[{k}]"), min[k]), (format!("{key}.max[{k}]"), max[k])])
            .collect(),
        Shape::Polygon { points } => points
            .iter()
            .enumerate()
            .flat_map(|(i, p)| (0..2).map(move |k| (format!("bodies[{b}].points[{i}][{k}]"), p[k])))
            .collect(),
    };
    if let Some((name, value)) = coordinates.into_iter().find(|(_, v)| !v.is_finite()) {
        return Err(Error::parameter(&name, value, "a finite number, m"));
    }
    match shape {
        Shape::Circle { radius, .. } if *radius <= 0.0 => {
            return Err(Error::parameter(
                &format!("{key}.radius"),
                radius,
                "a radius above 0, m",
            ));
        }
        Shape::Rectangle { min, max } if min[0] >= max[0] || min[1] >= max[1] => {
            return Err(rectangle_error(b, min, max));
        }
        Shape::Polygon { points } => {
            let area: f64 = (0..points.len())
                .map(|i| {
                    let (a, c) = (points[i], points[(i + 1) % points.len()]);
                    a[0] * c[1] - c[0] * a[1]
                })
                .sum::<f64>()
                / 2.0;
            // Crossing edges first where the points span an area: a
            // symmetric bow tie encloses no net area, and its crossing is
            // what to fix; points on one line are flat, not crossed.
            let spread: f64 = (1..points.len().saturating_sub(1))
                .map(|i| {
                    let (a, c) = (points[i], points[i + 1]);
                    ((a[0] - points[0][0]) * (c[1] - points[0][1]) - (c[0] - points[0][0]) * (a[1] - points[0][1]))
                        .abs()
                })
                .sum();
            // Areas against the outline's size: points on one line leave a
            // round-off area (2.8e-17 m^2 for three on a diagonal), which
            // gave a body with no inside and NaN torque.
            let perimeter: f64 = (0..points.len())
                .map(|i| {
                    let (a, c) = (points[i], points[(i + 1) % points.len()]);
                    (c[0] - a[0]).hypot(c[1] - a[1])
                })
                .sum();
            let flat = FLAT_AREA * perimeter * perimeter;
            let crossing = match points.len() >= 3 && spread > flat {
                true => crossing_edges(points),
                false => None,
            };
            if crossing.is_none() && (points.len() < 3 || area.abs() <= flat) {
                return Err(Error::parameter(
                    &format!("{key}.points"),
                    format!("{} points, area {area:e} m^2", points.len()),
                    "at least 3 points enclosing an area",
                ));
            }
            if let Some((i, j)) = crossing {
                let n = points.len();
                return Err(Error::parameter(
                    &format!("{key}.points"),
                    format!(
                        "an outline whose edge from point {i} to {} meets its edge from point {j} to {}",
                        (i + 1) % n,
                        (j + 1) % n
                    ),
                    "an outline that does not cross or touch itself (two bodies are two [[bodies]])",
                ));
            }
        }
        _ => {}
    }
    let [x0, y0, x1, y1] = shape.bounds();
    // Rounded to a nanometre: centre minus radius is 0.15000000000000002.
    let spanning = || {
        let [x0, y0, x1, y1] = [x0, y0, x1, y1].map(|v| (v * 1e9).round() / 1e9);
        format!("spanning [{x0}, {x1}] x [{y0}, {y1}] m")
    };
    let accepted = format!(
        "a body inside the domain, (0, {}) x (0, {}) m, {BODY_CLEARANCE} cells of its level clear of every side but a \
         resting wall or a free-slip side, which it may touch or cross",
        size[0], size[1]
    );
    // A radius of 1e-300 m leaves bounds of no extent: no place, not out of
    // the domain.
    if !(x1 > x0 && y1 > y0) {
        return Err(Error::parameter(
            &key,
            format!("{}, of no extent", spanning()),
            "a body of some width and height, large enough to hold a cell centre of its level",
        ));
    }
    // What of it lies in the domain, and which sides that part reaches.
    let inner = shape.bounds_within([0.0, 0.0, size[0], size[1]]);
    let Some([ix0, iy0, ix1, iy1]) = inner.filter(|[ix0, iy0, ix1, iy1]| ix1 > ix0 && iy1 > iy0) else {
        return Err(Error::parameter(
            &key,
            format!("{}, outside the domain", spanning()),
            &accepted,
        ));
    };
    let reached = [ix0 <= 0.0, ix1 >= size[0], iy0 <= 0.0, iy1 >= size[1]];
    let beyond = [x0 < 0.0, x1 > size[0], y0 < 0.0, y1 > size[1]];
    let crossed: [bool; 4] = std::array::from_fn(|s| beyond[s] && reached[s]);
    // The case file's words for `config::touches_walls`'s sides.
    let may_touch = |spec: &BoundarySpec| {
        matches!(
            spec,
            BoundarySpec::Wall | BoundarySpec::MovingWall([0.0, 0.0]) | BoundarySpec::FreeSlip
        )
    };
    if let Some(side) = (0..4).find(|s| crossed[*s] && !may_touch(sides[*s])) {
        return Err(Error::parameter(
            &key,
            format!(
                "{}, through the {} side ({})",
                spanning(),
                SIDE_NAMES[side],
                side_kind(sides[side])
            ),
            &accepted,
        ));
    }
    Ok(())
}

/// The dotted key of the first NaN or infinite float under `value`.
fn non_finite(value: &toml::Value, key: String) -> Option<(String, f64)> {
    match value {
        toml::Value::Float(f) if !f.is_finite() => Some((key, *f)),
        toml::Value::Table(table) => table.iter().find_map(|(k, v)| non_finite(v, join(&key, k))),
        toml::Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| non_finite(v, format!("{key}[{i}]"))),
        _ => None,
    }
}

/// `key` under `prefix`, dotted.
fn join(prefix: &str, key: &str) -> String {
    match prefix {
        "" => key.to_owned(),
        _ => format!("{prefix}.{key}"),
    }
}

/// The dotted key of the first array under `written` that `read` holds with
/// another length, with both lengths.
/// The case file's tables, each one table (not `[[...]]`, not a list).
const TABLES: [&str; 7] = ["domain", "fluid", "flow", "boundaries", "run", "output", "initial"];

/// A shape's key, whether a value is of its kind, and the kind in words.
type ShapeKey = (&'static str, fn(&toml::Value) -> bool, &'static str);

/// Each `[[bodies]]` table's shape and the kinds of its shape's keys,
/// named `bodies[i].key`: the reader takes a body's shape as one table with
/// a `shape` tag, and its own errors name only `bodies[i]`.
fn check_bodies(document: &toml::Value) -> Result<()> {
    let Some(toml::Value::Array(bodies)) = document.get("bodies") else {
        return Ok(());
    };
    fn number(v: &toml::Value) -> bool {
        matches!(v, toml::Value::Float(_) | toml::Value::Integer(_))
    }
    fn pair(v: &toml::Value) -> bool {
        matches!(v, toml::Value::Array(a) if a.len() == 2 && a.iter().all(number))
    }
    fn points(v: &toml::Value) -> bool {
        matches!(v, toml::Value::Array(a) if a.iter().all(pair))
    }
    for (i, body) in bodies.iter().enumerate() {
        let Some(table) = body.as_table() else {
            return Err(Error::parameter(
                &format!("bodies[{i}]"),
                body.to_string(),
                "a table: `[[bodies]]` with `shape = ...` and its keys",
            ));
        };
        let keys: &[ShapeKey] = match table.get("shape").and_then(|v| v.as_str()) {
            Some("circle") => &[("center", pair, "[x, y] in m"), ("radius", number, "a number, m")],
            Some("rectangle") => &[("min", pair, "[x, y] in m"), ("max", pair, "[x, y] in m")],
            Some("polygon") => &[("points", points, "[[x, y], ...] in m")],
            _ => {
                let written = table.get("shape").map_or("missing".to_string(), |v| v.to_string());
                return Err(Error::parameter(
                    &format!("bodies[{i}].shape"),
                    written,
                    "\"circle\" (center, radius), \"rectangle\" (min, max) or \"polygon\" (points)",
                ));
            }
        };
        for (key, fits, accepted) in keys {
            match table.get(*key) {
                Some(v) if fits(v) => {}
                written => {
                    return Err(Error::parameter(
                        &format!("bodies[{i}].{key}"),
                        written.map_or("missing".to_string(), |v| v.to_string()),
                        accepted,
                    ));
                }
            }
        }
    }
    Ok(())
}

fn as_array(key: &str) -> Error {
    Error::parameter(
        key,
        "an array",
        &format!("a table of named keys: `[{key}]` once, or `{{ ... }}` inline"),
    )
}

/// Where the case as written and as read back differ in shape.
enum Misread {
    /// An array read as a table: serde takes an array's values as the
    /// table's fields in order, which no case file should rely on.
    ArrayForTable(String),
    /// A fixed-length array cut to its length: (key, written, kept).
    CutArray(String, usize, usize),
}

/// The first key, in the written order, whose value the reader did not take
/// as written.
fn misread(written: &toml::Value, read: &toml::Value, key: String) -> Option<Misread> {
    match (written, read) {
        (toml::Value::Table(w), toml::Value::Table(r)) => w
            .iter()
            .find_map(|(k, v)| r.get(k).and_then(|read| misread(v, read, join(&key, k)))),
        (toml::Value::Array(_), toml::Value::Table(_)) => Some(Misread::ArrayForTable(key)),
        (toml::Value::Array(w), toml::Value::Array(r)) if w.len() != r.len() => {
            Some(Misread::CutArray(key, w.len(), r.len()))
        }
        (toml::Value::Array(w), toml::Value::Array(r)) => w
            .iter()
            .zip(r)
            .enumerate()
            .find_map(|(i, (w, r))| misread(w, r, format!("{key}[{i}]"))),
        _ => None,
    }
}

/// The error of the TOML reader with its line, column and the dotted key it
/// points at.
fn syntax_error(text: &str, e: &toml::de::Error) -> Error {
    let span = e.span();
    let (line, column) = span
        .as_ref()
        .map(|span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            (
                Some(line),
                Some(span.start - before.rfind('\n').map_or(0, |n| n + 1) + 1),
            )
        })
        .unwrap_or((None, None));
    // A key missing from the top level is reported at an empty span at the
    // document's start, where its first key is not the one at fault.
    let whole = span
        .as_ref()
        .is_some_and(|s| s.start == 0 && s.end == 0 && e.message().starts_with("missing field"));
    let key = span.filter(|_| !whole).and_then(|span| {
        let document = toml::de::DeTable::parse(text).ok()?;
        document
            .get_ref()
            .iter()
            .find_map(|(k, v)| key_at(k, v, String::new(), span.start))
    });
    // The reader's words for types are Rust's; a case file's are TOML's.
    let message = [
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("expected u32", "expected a whole number without a sign"),
        ("expected u64", "expected a whole number without a sign"),
        ("expected usize", "expected a whole number without a sign"),
        ("expected i64", "expected a whole number"),
        ("expected a sequence", "expected an array"),
    ]
    .iter()
    .fold(e.message().to_owned(), |m, (rust, toml)| m.replace(rust, toml));
    let mut message = readable(&message);
    // A body's shape table lists its own keys; the keys every shape takes
    // sit beside it (`BodyTable`).
    if key.as_deref().is_some_and(|k| k.starts_with("bodies[")) && message.starts_with("unknown field") {
        message += ", or `rotation` or `pivot`, which every shape takes";
    }
    if let Some(near) = nearest_key(&message) {
        message += &format!("; did you mean `{near}`?");
    }
    // A one-of table (a side, an amplitude, a collision) refused by its
    // shape alone: what it takes.
    let one_of = message.starts_with("wanted exactly 1 element")
        || message.starts_with("wanted string or table")
        || message.contains("expected a table")
        || message.contains("this table takes no other key")
        || message.starts_with("missing field `model`");
    if one_of && let Some(k) = key.as_deref() {
        let side = k
            .strip_prefix("boundaries.")
            .map(|rest| rest.split('.').collect::<Vec<_>>())
            .unwrap_or_default();
        let accepted = match side[..] {
            [_] => Some(
                "\"periodic\", \"wall\", \"outflow\", \"free_slip\", { moving_wall = [u, v] } or { inlet = { ... } }",
            ),
            [_, "inlet"] => Some(
                "{ profile = \"uniform\" or \"parabolic\", velocity = U, amplitude = ... (optional), span = [y0, y1] (optional) }",
            ),
            [_, "inlet", "amplitude"] => Some(
                "\"constant\", { ramp = { duration = s } }, { sine = { period = s } } or { table = { points = [[t, factor], ...] } }",
            ),
            [_, "inlet", "amplitude", "ramp"] => Some("{ duration = s }"),
            [_, "inlet", "amplitude", "sine"] => Some("{ period = s }"),
            [_, "inlet", "amplitude", "table"] => Some("{ points = [[t, factor], ...] }"),
            _ if k == "flow.collision" => Some("{ model = \"bgk\" } or { model = \"trt\", magic = ... }"),
            _ => None,
        };
        if let Some(accepted) = accepted {
            message += &format!("; `{k}` takes {accepted}");
        }
    }
    // A side's kind that takes no value, written as a table's key.
    if let Some(k) = key.as_deref()
        && let Some((side, kind)) = k.strip_prefix("boundaries.").and_then(|rest| rest.split_once('.'))
        && ["periodic", "wall", "outflow", "free_slip"].contains(&kind)
    {
        message += &format!("; `{kind}` takes no value: write `{side} = \"{kind}\"`");
    }
    // The reader names neither a key written twice nor a table opened
    // twice: both are the text at the span.
    if message.starts_with("duplicate key")
        && let Some(span) = e.span()
    {
        let written = text[span.start.min(text.len())..].lines().next().unwrap_or("");
        let name = written
            .split('=')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches(['[', ']'])
            .trim();
        if !name.is_empty() {
            message = format!("`{name}` is given twice; each key and table once");
        }
    }
    Error::CaseSyntax {
        line,
        column,
        key,
        message,
    }
}

/// A whole number TOML cannot hold, in a case file's words.
const BEYOND_TOML: &str =
    "beyond what TOML holds: whole numbers lie within ±9223372036854775807 (write a decimal, 1.8e19)";

/// The TOML reader's message in a case file's words: Rust's type names
/// (`struct Fluid`, `internally tagged enum Collision`) as tables, a whole
/// number past 64 bits as what it is, and no number in 300 digits.
fn readable(message: &str) -> String {
    let mut out = message
        .replace("as i128, expected any valid TOML value", BEYOND_TOML)
        // A whole number above 2^63 that still fits in 64 bits.
        .replace("u64 value was too large", BEYOND_TOML)
        .replace(", there are no fields", ": this table takes no other key")
        .replace(
            "invalid type: unit variant, expected newtype variant",
            "this kind takes a value: write it as an inline table, `{ kind = value }` (docs/CASES.md)",
        );
    for rust in ["internally tagged enum ", "struct variant ", "struct ", "enum "] {
        while let Some(at) = out.find(&format!("expected {rust}")) {
            let name = at + "expected ".len() + rust.len();
            let end = out[name..]
                .find(|c: char| !c.is_alphanumeric() && c != '_' && c != ':')
                .map_or(out.len(), |n| name + n);
            out.replace_range(at..end, "expected a table (see docs/CASES.md)");
        }
    }
    // Backticked numbers of more than 24 characters, in exponent form.
    let mut parts: Vec<String> = out.split('`').map(str::to_owned).collect();
    for part in parts.iter_mut().skip(1).step_by(2) {
        if part.len() > 24
            && let Ok(number) = part.parse::<f64>()
        {
            *part = format!("{number:e}");
        }
    }
    parts.join("`")
}

/// The accepted key closest to the unknown one in an `unknown field `x`,
/// expected ...` message, when it is a likely typo (a third of its letters
/// or fewer differ).
fn nearest_key(message: &str) -> Option<String> {
    if !message.starts_with("unknown field") {
        return None;
    }
    let quoted: Vec<&str> = message.split('`').skip(1).step_by(2).collect();
    let (unknown, accepted) = quoted.split_first()?;
    accepted
        .iter()
        .map(|k| (edit_distance(unknown, k), *k))
        // One edit in a short key, a third of a longer one: `lid` is not `fluid`.
        .filter(|(d, k)| *d > 0 && *d <= (unknown.len().max(k.len()) / 3).max(1))
        .min()
        .map(|(_, k)| k.to_owned())
}

/// Levenshtein distance of `a` and `b`, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The dotted key of the innermost key or value under `key = value` whose
/// span holds byte `at`. A table's span is its header only, so every table
/// is searched.
fn key_at(
    key: &toml::Spanned<toml::de::DeString>,
    value: &toml::Spanned<toml::de::DeValue>,
    prefix: String,
    at: usize,
) -> Option<String> {
    let name = join(&prefix, key.get_ref());
    if key.span().contains(&at) {
        return Some(name);
    }
    value_at(value, name, at)
}

fn value_at(value: &toml::Spanned<toml::de::DeValue>, name: String, at: usize) -> Option<String> {
    let inner = match value.get_ref() {
        toml::de::DeValue::Table(table) => table.iter().find_map(|(k, v)| key_at(k, v, name.clone(), at)),
        toml::de::DeValue::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| value_at(item, format!("{name}[{i}]"), at)),
        _ => None,
    };
    inner.or_else(|| value.span().contains(&at).then_some(name))
}

/// A case resolved to lattice units.
#[derive(Clone, Debug, Serialize)]
pub struct Resolved {
    pub lattice: LatticeConfig,
    pub units: UnitSystem,
    pub steps: u64,
    pub tiles: Vec<Option<[u32; 2]>>,
    pub output: OutputPlan,
    /// The fastest lattice speed the case prescribes or expects (its
    /// reference velocity), what the Mach number check used.
    pub lattice_speed: f64,
    /// The key of that speed and what lowers it (not part of the plan: it
    /// only words the warnings).
    #[serde(skip)]
    pub fastest: (String, String),
    /// The field the run starts from, where the case gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial: Option<InitialField>,
}

/// The most base cells a case may have (`domain.size` at `domain.resolution`).
pub const MAX_BASE_CELLS: f64 = 4e9;

impl Case {
    /// Reads a case file: valid TOML, every key known, no NaN or infinity,
    /// and every fixed-length array (a pair, a patch, a table row) of exactly
    /// its length. The error names the dotted key.
    pub fn from_toml(text: &str) -> Result<Case> {
        let syntax = |e: toml::de::Error| syntax_error(text, &e);
        let document = toml::Value::Table(text.parse::<toml::Table>().map_err(syntax)?);
        // NaN and infinity parse as floats; no key accepts them.
        if let Some((key, value)) = non_finite(&document, String::new()) {
            return Err(Error::parameter(&key, value, "a finite number"));
        }
        // `[[initial]]` or `flow = [1.0, 0.05]` would otherwise read as the
        // table's fields in order, or fail with an array's message.
        for key in TABLES {
            if let Some(toml::Value::Array(_)) = document.get(key) {
                return Err(as_array(key));
            }
        }
        check_bodies(&document)?;
        let case: Case = toml::from_str(text).map_err(syntax)?;
        // The TOML reader fills a fixed-length array from its first values
        // and drops the rest, and fills a table from an array's values in
        // order, so both are found by reading the case back: an array that
        // comes back shorter than it was written was cut, one that comes
        // back a table was read as one.
        let read = toml::Value::try_from(&case).map_err(|e| Error::CaseSyntax {
            line: None,
            column: None,
            key: None,
            message: format!("the case does not serialise back to TOML: {e}"),
        })?;
        match misread(&document, &read, String::new()) {
            Some(Misread::ArrayForTable(key)) => Err(as_array(&key)),
            Some(Misread::CutArray(key, written, length)) => Err(Error::parameter(
                &key,
                format!("{written} values"),
                &format!("exactly {length} values"),
            )),
            None => Ok(case),
        }
    }

    pub fn resolve(&self) -> Result<Resolved> {
        match self.resolve_within(Scope::Whole) {
            Ok(Some(resolved)) => Ok(resolved),
            Ok(None) => unreachable!("a whole resolve returns the resolved case"),
            Err(e) => Err(self.with_ranges(e)),
        }
    }

    /// Whether the relaxation times and the lattice speeds allow the case,
    /// the layout aside ([`Scope::Bounds`]).
    fn within_bounds(&self) -> bool {
        self.resolve_within(Scope::Bounds).is_ok()
    }

    /// A relaxation time out of its bounds is a derived quantity, no key: the
    /// refusal then also names the two keys that set it with the values this
    /// case accepts for each, every other key as it is.
    fn with_ranges(&self, e: Error) -> Error {
        match e {
            Error::Parameter { key, value, accepted } if key.ends_with("relaxation time") => {
                let within = |range: Option<[f64; 2]>, key: &str| match range {
                    Some([lo, hi]) => format!("`{key}` from {} to {}", significant(lo, true), significant(hi, false)),
                    None => format!("no value of `{key}`"),
                };
                let (resolutions, velocities) = (self.resolution_range(), self.lattice_velocity_range());
                // Neither helps: the flow's own scales are out of reach.
                let written = |v: f64| match v.to_string() {
                    long if long.len() > 12 => format!("{v:e}"),
                    plain => plain,
                };
                let neither = match (resolutions, velocities) {
                    (None, None) => format!(
                        "; the flow's own scales are then out of reach: `fluid.viscosity` = {} m^2/s against \
                         `flow.reference_velocity` = {} m/s and `domain.reference_length` = {} m",
                        written(self.fluid.viscosity),
                        written(self.flow.reference_velocity),
                        written(self.domain.reference_length),
                    ),
                    _ => String::new(),
                };
                Error::Parameter {
                    key,
                    value,
                    accepted: format!(
                        "{accepted}; with every other key as it is, the relaxation times and lattice speeds allow {} or {}{neither}",
                        within(resolutions, "domain.resolution") + " (base cells per domain.reference_length)",
                        within(velocities, "flow.lattice_velocity"),
                    ),
                }
            }
            // The lattice names its own keys; a case file has the collision
            // under [flow].
            Error::Parameter { key, value, accepted } if key == "collision.magic" => Error::Parameter {
                key: "flow.collision.magic".into(),
                value,
                accepted,
            },
            e => e,
        }
    }

    /// The case resolved as written; `Ok(None)` where `scope` is
    /// [`Scope::Bounds`] and its checks pass.
    fn resolve_within(&self, scope: Scope) -> Result<Option<Resolved>> {
        // The name titles the pictures and plots and heads the summaries.
        let blank = |c: char| c.is_whitespace() || matches!(c, '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}');
        // Direction overrides reorder what a terminal shows after them.
        let breaks = |c: char| {
            c.is_control()
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
        };
        if self.name.chars().all(blank) || self.name.chars().count() > MAX_CASE_NAME || self.name.chars().any(breaks) {
            return Err(Error::parameter(
                "name",
                format!("{:?}", self.name),
                &format!(
                    "1 to {MAX_CASE_NAME} characters, not all spaces, without control characters (line breaks, tabs, line separators, text direction overrides)"
                ),
            ));
        }
        self.run.check()?;
        let units = UnitSystem::new(
            self.domain.reference_length,
            self.domain.resolution,
            self.flow.reference_velocity,
            self.flow.lattice_velocity,
            self.fluid.density,
        )?;
        if !(self.fluid.viscosity > 0.0 && self.fluid.viscosity.is_finite()) {
            return Err(Error::parameter(
                "fluid.viscosity",
                self.fluid.viscosity,
                "a finite number above 0, m^2/s",
            ));
        }
        if self.run.steps == 0 {
            return Err(Error::parameter("run.steps", 0, "at least 1 base interval"));
        }
        if let BoundarySpec::Inlet(side) = &self.boundaries.x_min {
            side.amplitude
                .check("boundaries.x_min.inlet.amplitude", "s", units.dt)?;
        }
        let walls = self.boundaries.sides();
        for (side, spec) in walls.into_iter().enumerate() {
            if let BoundarySpec::MovingWall(velocity) = spec {
                // A wall moves along itself: bounce-back with a velocity
                // across the wall pushes mass through a closed side.
                let (normal, along) = if side < 2 { (0, "y") } else { (1, "x") };
                if !(velocity.iter().all(|v| v.is_finite()) && velocity[normal] == 0.0) {
                    return Err(Error::parameter(
                        &format!("boundaries.{}.moving_wall", SIDE_NAMES[side]),
                        format!("{velocity:?}"),
                        &format!(
                            "a finite velocity along the wall, m/s: its {} component 0 (the wall slides along {along}; \
                             for flow through the side use an inlet or an outflow)",
                            ["x", "y"][normal]
                        ),
                    ));
                }
            }
        }
        let [width, height] = self.domain.size;
        // A size of 1e308 m printed in 309 digits.
        let short = |v: f64| match v.to_string() {
            long if long.len() > 12 => format!("{v:e}"),
            plain => plain,
        };
        let nx = units.length_to_lattice(width).round();
        let ny = units.length_to_lattice(height).round();
        if !(nx >= 1.0 && ny >= 1.0) {
            return Err(Error::parameter(
                "domain.size",
                format!("{} x {} m ({nx} x {ny} cells)", short(width), short(height)),
                "at least one base cell each way",
            ));
        }
        if nx * ny > MAX_BASE_CELLS {
            return Err(Error::parameter(
                "domain.resolution",
                self.domain.resolution,
                &format!(
                    "a resolution that gives domain.size ({} x {} m) at most 4e9 base cells (it gives \
                     {nx:.3e} x {ny:.3e})",
                    short(width),
                    short(height)
                ),
            ));
        }
        // The outlet extrapolates its velocity and gradient from the cell
        // before the last: in a domain one cell long that is the inlet's,
        // and the flow came out wrong (a third of the inflow across it).
        if self.boundaries.x_max == BoundarySpec::Outflow && nx < 2.0 {
            return Err(Error::parameter(
                "domain.size",
                format!("{} x {} m ({nx} x {ny} cells)", short(width), short(height)),
                "at least 2 base cells along x with an outflow at x_max (it extrapolates from the cell before the \
                 last)",
            ));
        }
        let mut initial = self.initial.as_ref().map(|i| i.field(&units, [nx, ny])).transpose()?;
        let mut levels = Vec::new();
        for (k, level) in self.refinement.iter().enumerate() {
            if level.patches.is_empty() {
                return Err(Error::parameter(
                    &format!("refinement[{k}].patches"),
                    "[]",
                    "at least one [x0, y0, x1, y1] patch; drop the empty [[refinement]] table instead",
                ));
            }
            for (i, p) in level.patches.iter().enumerate() {
                let inside = p[0] >= 0.0 && p[1] >= 0.0 && p[2] <= width && p[3] <= height;
                if !(inside && p[0] < p[2] && p[1] < p[3]) {
                    return Err(Error::parameter(
                        &format!("refinement[{k}].patches[{i}]"),
                        format!("{p:?}"),
                        &format!("[x0, y0, x1, y1] m with 0 <= x0 < x1 <= {width} and 0 <= y0 < y1 <= {height}"),
                    ));
                }
            }
            let parent_dx = units.dx * 0.5f64.powi(k as i32);
            let rects = level
                .patches
                .iter()
                .map(|p| {
                    let snap = |v: f64| (v / parent_dx).round() as u32;
                    Rect::new(snap(p[0]), snap(p[1]), snap(p[2]), snap(p[3]))
                })
                .collect();
            levels.push(rects);
        }
        let hierarchy = HierarchySpec {
            base: [nx as u32, ny as u32],
            levels,
        };
        let validated = match scope {
            Scope::Whole => Some(hierarchy.validate(&[])?),
            Scope::Bounds => None,
        };
        let sides = self.boundaries.sides();
        let boundaries = sides.map(|s| match s {
            BoundarySpec::Periodic => Boundary::Periodic,
            BoundarySpec::Wall | BoundarySpec::MovingWall(_) => Boundary::Wall,
            BoundarySpec::Inlet(_) => Boundary::Inlet,
            BoundarySpec::Outflow => Boundary::Outflow,
            BoundarySpec::FreeSlip => Boundary::FreeSlip,
        });
        let wall_velocity = sides.map(|s| match s {
            BoundarySpec::MovingWall([u, v]) => [units.velocity_to_lattice(*u), units.velocity_to_lattice(*v)],
            _ => [0.0, 0.0],
        });
        let inlet = match &self.boundaries.x_min {
            BoundarySpec::Inlet(side) => Some(InletSpec {
                profile: side.profile,
                velocity: units.velocity_to_lattice(side.velocity),
                amplitude: side.amplitude.rescaled(1.0 / units.dt),
                span: match scope {
                    Scope::Whole => side
                        .span
                        .map(|span| inlet_span(span, height, ny as u32, units.dx))
                        .transpose()?,
                    Scope::Bounds => None,
                },
            }),
            _ => None,
        };
        let placed = self
            .bodies
            .iter()
            .enumerate()
            .map(|(b, table)| table.placed(b))
            .collect::<Result<Vec<Shape>>>()?;
        for (b, shape) in placed.iter().enumerate() {
            // Where it lies once turned.
            check_body(b, shape, [width, height], sides)?;
        }
        let mut bodies = Vec::new();
        for (b, shape) in placed.iter().enumerate() {
            let lattice_shape = shape.scaled(units.length_to_lattice(1.0));
            // The bounds ask only whether there is a body.
            let Some(validated) = &validated else {
                bodies.push(Body {
                    level: 0,
                    shape: lattice_shape,
                });
                continue;
            };
            let level = body_level(validated, &lattice_shape, b)?;
            if !covers_a_cell(validated, &lattice_shape, level) {
                return Err(Error::parameter(
                    &format!("bodies[{b}]"),
                    format!(
                        "a body that holds no cell centre of level {level}, whose cells are {} m wide",
                        units.dx * 0.5f64.powi(level as i32)
                    ),
                    "a body over at least one cell centre of the finest level over it: make it larger, raise \
                     domain.resolution or refine around it",
                ));
            }
            bodies.push(Body {
                level,
                shape: lattice_shape,
            });
        }
        // A range scan samples the initial field; a whole resolve checks
        // every fluid cell, so that a run starts from nothing it would refuse.
        let initial_speed = match (&initial, &validated) {
            (None, _) => None,
            (Some(field), Some(validated)) => Some(field.check_cells(validated, &bodies)?),
            (Some(field), None) => Some(field.sampled_speed(|at| bodies.iter().any(|b| b.shape.contains(at)))?),
        };
        if let (Some(field), Some(fastest)) = (&mut initial, initial_speed) {
            field.fastest = fastest;
        }
        let tiles: Vec<Option<[u32; 2]>> = self.run.tiles.iter().map(|t| Some(*t)).collect();
        let lattice = LatticeConfig {
            hierarchy,
            collision: self.flow.collision,
            tau: units.tau(self.fluid.viscosity),
            force: self.flow.acceleration.map(|g| units.acceleration_to_lattice(g)),
            boundaries,
            wall_velocity,
            inlet,
            bodies,
        };
        let speeds = self.speeds(&units, &lattice, initial.as_ref());
        lattice.check_stability(&speeds)?;
        if scope == Scope::Bounds {
            return Ok(None);
        }
        let fastest = speeds
            .iter()
            .max_by(|a, b| a.speed.total_cmp(&b.speed))
            .expect("the reference velocity is always a speed");
        let (speed, fastest) = (fastest.speed, (fastest.key.clone(), fastest.remedy.clone()));
        // Everything a stepper would refuse is refused here, before a run
        // writes anything.
        let (validated, _) = lattice.validate(&tiles)?;
        // A tile beyond the level's largest allocation only pads it, and a
        // huge one would reach the memory check unnamed.
        for (level, tile) in self.run.tiles.iter().enumerate() {
            let largest = validated.levels[level].iter().fold([0, 0], |m, p| {
                [m[0].max(p.active.x1 + p.active.x0), m[1].max(p.active.y1 + p.active.y0)]
            });
            if tile[0] > largest[0] || tile[1] > largest[1] {
                return Err(Error::parameter(
                    &format!("run.tiles[{level}]"),
                    format!("{tile:?}"),
                    &format!(
                        "tile sides of at most the level's largest allocation, {} x {} cells here",
                        largest[0], largest[1]
                    ),
                ));
            }
        }
        let frame = CaseFrame {
            steps: self.run.steps,
            size: self.domain.size,
            reference_velocity: self.flow.reference_velocity,
            reference_length: self.domain.reference_length,
        };
        let output = self.output.resolve(frame, &units, &lattice.bodies)?;
        Ok(Some(Resolved {
            lattice,
            units,
            steps: self.run.steps,
            tiles,
            output,
            lattice_speed: speed,
            fastest,
            initial,
        }))
    }
}

impl Case {
    /// Every speed the case prescribes or drives, lattice units, named by its
    /// key: the reference velocity (`flow.lattice_velocity` itself), the inlet
    /// at its amplitude's peak, each moving wall, the initial velocity's
    /// fastest fluid cell (`initial`), and what the acceleration can drive
    /// within the run ([`LatticeConfig::forced_speed`]).
    fn speeds(&self, units: &UnitSystem, lattice: &LatticeConfig, initial: Option<&InitialField>) -> Vec<Speed> {
        let scaled = "lower flow.lattice_velocity (every lattice speed scales with it), or raise \
                      flow.reference_velocity to the case's fastest speed";
        let mut speeds = vec![Speed {
            key: "flow.lattice_velocity".into(),
            speed: self.flow.lattice_velocity,
            remedy: "lower it (it is flow.reference_velocity in lattice units)".into(),
        }];
        if let Some(inlet) = &lattice.inlet {
            let peak = inlet.amplitude.peak();
            speeds.push(Speed {
                key: "boundaries.x_min.inlet.velocity".into(),
                speed: inlet.velocity.abs() * peak,
                remedy: match peak > 1.0 {
                    true => format!("at the amplitude's peak factor {peak}: {scaled}"),
                    false => scaled.into(),
                },
            });
        }
        let sides = self.boundaries.sides();
        for (side, spec) in sides.into_iter().enumerate() {
            if let BoundarySpec::MovingWall([u, v]) = spec {
                speeds.push(Speed {
                    key: format!("boundaries.{}.moving_wall", SIDE_NAMES[side]),
                    speed: units.velocity_to_lattice(u.hypot(*v)),
                    remedy: scaled.into(),
                });
            }
        }
        if let Some(field) = initial {
            let [x, y] = field.metres(field.fastest.at);
            speeds.push(Speed {
                key: "initial.velocity".into(),
                speed: field.fastest.speed,
                remedy: format!(
                    "at its fastest fluid cell, x = {} m, y = {} m: lower it there, or {scaled}",
                    significant(x, false),
                    significant(y, false)
                ),
            });
        }
        let forced = lattice.forced_speed(self.run.steps);
        speeds.push(Speed {
            key: "flow.acceleration".into(),
            speed: forced.speed,
            remedy: format!(
                "the speed it drives is estimated as {}; lower it, or flow.lattice_velocity",
                forced.bound
            ),
        });
        speeds
    }
}

/// How much of a case [`Case::resolve_within`] checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// Everything a run needs.
    Whole,
    /// Every check up to the relaxation times and the lattice speeds but the
    /// layout (the patches and bodies on the grid's cells, the inlet's span on
    /// its edges): a resolution can miss the layout by rounding where the
    /// values either side of it fit, so a range scanned over the whole resolve
    /// has holes and wrong ends.
    Bounds,
}

impl Case {
    /// The `flow.lattice_velocity` values that the relaxation times and the
    /// lattice speeds allow, every other key as it is: above 0, from the value
    /// at which the coarsest level's τ⁺ is no longer too close to ½ to the one
    /// at which a speed reaches the Mach limit or the finest level's τ⁺ reaches
    /// [`crate::config::MAX_TAU`]. `None` when no value does.
    pub fn lattice_velocity_range(&self) -> Option<[f64; 2]> {
        accepted_interval([1e-7, 1.0], |v| {
            let mut case = self.clone();
            case.flow.lattice_velocity = v;
            case.within_bounds()
        })
    }

    /// The `domain.resolution` values that the relaxation times and the
    /// lattice speeds allow, every other key as it is (the relaxation time
    /// bounds them from both sides, the domain's cell count from above); the
    /// layout, which rounding decides value by value, is not asked
    /// (the bounds a whole resolve checks first). `None` when no value does.
    pub fn resolution_range(&self) -> Option<[f64; 2]> {
        accepted_interval([1e-3, 1e7], |r| {
            let mut case = self.clone();
            case.domain.resolution = r;
            case.within_bounds()
        })
    }
}

/// `value` to four significant digits, rounded up or down so that it stays
/// inside the range it bounds.
pub fn significant(value: f64, up: bool) -> String {
    let scale = 10f64.powi(3 - value.abs().log10().floor() as i32);
    let rounded = match up {
        true => (value * scale).ceil(),
        false => (value * scale).floor(),
    } / scale;
    format!("{rounded}")
}

/// The first and last values within `search` that `accepts` takes, found on a
/// logarithmic scan and refined by bisection to a relative 1e-12. Meant for a
/// key whose every check bounds it from one side (τ⁺ − ½ and each lattice
/// speed grow with the lattice velocity), so that what is accepted is one
/// interval; a hole in it would go unseen.
pub fn accepted_interval(search: [f64; 2], accepts: impl Fn(f64) -> bool) -> Option<[f64; 2]> {
    const SCAN: usize = 400;
    let [low, high] = search;
    let at = |k: usize| low * (high / low).powf(k as f64 / SCAN as f64);
    let accepted: Vec<usize> = (0..=SCAN).filter(|&k| accepts(at(k))).collect();
    let (&first, &last) = (accepted.first()?, accepted.last()?);
    // Bisects between a refused `out` and an accepted `inside`, keeping the accepted end.
    let edge = |mut inside: f64, mut out: f64| {
        while (inside - out).abs() > 1e-12 * inside.abs() {
            let mid = 0.5 * (inside + out);
            match accepts(mid) {
                true => inside = mid,
                false => out = mid,
            }
        }
        inside
    };
    let lo = match first {
        0 => low,
        k => edge(at(k), at(k - 1)),
    };
    let hi = match last {
        SCAN => high,
        k => edge(at(k), at(k + 1)),
    };
    Some([lo, hi])
}

/// The finest level with a patch that holds the body and a margin of
/// `PARENT_MARGIN` cells of that level from its interfaces (a side on the
/// domain's boundary needs none); a body that crosses the edge of a finer patch
/// is refused because its links would span two levels.
/// The first two edges of the closed outline `points` (each named by its
/// first point) that cross or touch, other than neighbours at their shared
/// point; a point repeated next to itself (the closing one, say) is one
/// point.
fn crossing_edges(points: &[[f64; 2]]) -> Option<(usize, usize)> {
    let n = points.len();
    // Edges of non-zero length, by their first point.
    let edges: Vec<usize> = (0..n).filter(|&i| points[i] != points[(i + 1) % n]).collect();
    let m = edges.len();
    let segment = |k: usize| (points[edges[k]], points[(edges[k] + 1) % n]);
    let orient = |a: [f64; 2], b: [f64; 2], c: [f64; 2]| {
        let v = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]);
        (v > 0.0) as i8 - (v < 0.0) as i8
    };
    // c on the segment a-b, given that the three are collinear.
    let within = |a: [f64; 2], b: [f64; 2], c: [f64; 2]| {
        c[0] >= a[0].min(b[0]) && c[0] <= a[0].max(b[0]) && c[1] >= a[1].min(b[1]) && c[1] <= a[1].max(b[1])
    };
    for k in 0..m {
        for l in k + 1..m {
            let ((a, b), (c, d)) = (segment(k), segment(l));
            let (o1, o2, o3, o4) = (orient(a, b, c), orient(a, b, d), orient(c, d, a), orient(c, d, b));
            let neighbours = l == k + 1 || (k == 0 && l == m - 1);
            if neighbours {
                // They share a point; they meet elsewhere only when one
                // doubles back along the other.
                let (shared, other_k, other_l) = if b == c { (b, a, d) } else { (a, b, c) };
                let back = orient(other_k, shared, other_l) == 0
                    && (other_k[0] - shared[0]) * (other_l[0] - shared[0])
                        + (other_k[1] - shared[1]) * (other_l[1] - shared[1])
                        > 0.0;
                if back {
                    return Some((edges[k], edges[l]));
                }
                continue;
            }
            let proper = o1 * o2 < 0 && o3 * o4 < 0;
            let touching = (o1 == 0 && within(a, b, c))
                || (o2 == 0 && within(a, b, d))
                || (o3 == 0 && within(c, d, a))
                || (o4 == 0 && within(c, d, b));
            if proper || touching {
                return Some((edges[k], edges[l]));
            }
        }
    }
    None
}

/// The bounds of the part of `shape` (base lattice units) in the domain.
fn in_domain(hierarchy: &crate::domain::hierarchy::Hierarchy, shape: &Shape) -> [f64; 4] {
    let base = hierarchy.base().active;
    let domain = [0.0, 0.0, base.width() as f64, base.height() as f64];
    // `check_body` has refused a body with no part in the domain.
    shape.bounds_within(domain).unwrap_or(domain)
}

/// Whether `shape` (base lattice units) holds the centre of a cell of
/// `level` inside the domain: a body that holds none has no cell, no link and
/// no force.
fn covers_a_cell(hierarchy: &crate::domain::hierarchy::Hierarchy, shape: &Shape, level: usize) -> bool {
    let scale = 2f64.powi(level as i32);
    let [x0, y0, x1, y1] = in_domain(hierarchy, shape).map(|v| v * scale);
    // Cell i's centre is at i + 1/2 on the level's grid.
    let first = |lo: f64| (lo - 0.5).ceil().max(0.0) as u64;
    let last = |hi: f64| (hi - 0.5).floor();
    let (xs, ys) = (first(x0), first(y0));
    let (xe, ye) = (last(x1), last(y1));
    if xe < xs as f64 || ye < ys as f64 {
        return false;
    }
    (ys..=ye as u64)
        .any(|j| (xs..=xe as u64).any(|i| shape.contains([(i as f64 + 0.5) / scale, (j as f64 + 0.5) / scale])))
}

fn body_level(hierarchy: &crate::domain::hierarchy::Hierarchy, shape: &Shape, body: usize) -> Result<usize> {
    // The part inside the domain: a body may cross a wall.
    let [x0, y0, x1, y1] = in_domain(hierarchy, shape);
    let mut chosen = 0;
    for (level, patches) in hierarchy.levels.iter().enumerate().skip(1) {
        let scale = 2f64.powi(level as i32);
        let lo = [x0 * scale, y0 * scale];
        let hi = [x1 * scale, y1 * scale];
        let margin = PARENT_MARGIN as f64;
        for patch in patches {
            let [ax0, ay0, ax1, ay1] = patch.global_active().map(|v| v as f64);
            let gap = |side: usize| if patch.on_boundary[side] { 0.0 } else { margin };
            let inside =
                lo[0] >= ax0 + gap(0) && lo[1] >= ay0 + gap(2) && hi[0] <= ax1 - gap(1) && hi[1] <= ay1 - gap(3);
            // Outside, as far from the patch: the patch's ghost band and
            // its fill's stencil would reach the body, which the patch does
            // not see (a body touching a patch from outside drew the fine
            // level's flow through it: cd 4.7 for 2.6).
            let apart =
                hi[0] <= ax0 - gap(0) || hi[1] <= ay0 - gap(2) || lo[0] >= ax1 + gap(1) || lo[1] >= ay1 + gap(3);
            if inside {
                chosen = level;
            } else if !apart {
                // Named as the case file names both: the body is what a
                // user most often moved.
                return Err(Error::parameter(
                    &format!("bodies[{body}]"),
                    format!(
                        "a body across the edge of refinement[{}].patches[{}] or within {PARENT_MARGIN} of its \
                         level-{level} cells of that edge, inside or outside it",
                        level - 1,
                        patch.index
                    ),
                    &format!(
                        "a body wholly inside a patch or wholly outside it, {PARENT_MARGIN} of the patch's cells \
                         clear of each edge that is not a side of the domain: move the body, or enlarge or move \
                         the patch"
                    ),
                ));
            }
        }
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MAX_MACH;

    /// The case files of `cases/`.
    const CASE_FILES: [(&str, &str); 6] = [
        ("cavity-re100", include_str!("../../../cases/cavity-re100.toml")),
        ("dfg-2d1", include_str!("../../../cases/dfg-2d1.toml")),
        ("dfg-2d2", include_str!("../../../cases/dfg-2d2.toml")),
        ("naca0012", include_str!("../../../cases/naca0012.toml")),
        ("square-obstacle", include_str!("../../../cases/square-obstacle.toml")),
        ("tandem-cylinders", include_str!("../../../cases/tandem-cylinders.toml")),
    ];

    const CAVITY: &str = r#"
        name = "cavity"
        [domain]
        size = [1.0, 1.0]
        reference_length = 1.0
        resolution = 32
        [fluid]
        viscosity = 0.01
        [flow]
        reference_velocity = 1.0
        lattice_velocity = 0.1
        [boundaries]
        x_min = "wall"
        x_max = "wall"
        y_min = "wall"
        y_max = { moving_wall = [1.0, 0.0] }
        [[refinement]]
        patches = [[0.25, 0.25, 0.75, 0.75]]
        [run]
        steps = 10
    "#;

    /// The TOML reader's messages in a case file's words: a typo gets the
    /// nearest key, Rust's type names and 64-bit limits are not shown, a
    /// number is not printed in 300 digits, a missing `name` is not blamed on
    /// the first table, and a value of megabytes is shown by its start.
    #[test]
    fn the_readers_messages_are_in_a_case_files_words() {
        let flow = "lattice_velocity = 0.1";
        for (from, to, expect) in [
            (
                "viscosity = 0.01",
                "viscosty = 0.01",
                "`viscosty`, expected `viscosity` or `density`; did you mean `viscosity`?",
            ),
            (
                flow,
                "lattice_velocity = 0.1\ncollision = \"bgk\"",
                "`flow.collision`: invalid type: string \"bgk\", expected a table (see docs/CASES.md)",
            ),
            (
                flow,
                "lattice_velocity = 0.1\ncollision = { model = \"bgk\", magic = 0.2 }",
                "unknown field `magic`: this table takes no other key",
            ),
            (
                "viscosity = 0.01",
                "viscosity = 18446744073709551616",
                "beyond what TOML holds",
            ),
            ("steps = 10", "steps = 18446744073709551615", "beyond what TOML holds"),
            ("steps = 10", "steps = 9223372036854775808", "beyond what TOML holds"),
            (
                "steps = 10",
                &format!("steps = 1{}.0", "0".repeat(300)),
                "floating point `1e300`",
            ),
            ("name = \"cavity\"", "", "missing field `name`"),
            (
                "y_max = { moving_wall = [1.0, 0.0] }",
                "y_max = \"moving_wall\"",
                "this kind takes a value",
            ),
        ] {
            let e = Case::from_toml(&CAVITY.replace(from, to)).unwrap_err().to_string();
            assert!(e.contains(expect), "{e}");
            for rust in [
                "struct",
                "enum",
                "i128",
                "u64",
                "any valid TOML value",
                "no fields",
                "`domain`",
            ] {
                assert!(!e.contains(rust), "{e}");
            }
            assert!(e.len() < 300, "{e}");
        }
        // Nothing near: no suggestion.
        for typo in ["colour = 0.01", "visc = 0.01"] {
            let e = Case::from_toml(&CAVITY.replace("viscosity = 0.01", typo))
                .unwrap_err()
                .to_string();
            assert!(!e.contains("did you mean"), "{e}");
        }
        let long = "x".repeat(5_000_000);
        let shown = Case::from_toml(&CAVITY.replace("name = \"cavity\"", &format!("name = \"{long}\"")))
            .and_then(|c| c.resolve())
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            shown.contains("… (5000000 characters)") && shown.len() < 500,
            "{}",
            &shown[..500.min(shown.len())]
        );
    }

    #[test]
    fn a_cavity_resolves_to_lattice_units() {
        let resolved = Case::from_toml(CAVITY).unwrap().resolve().unwrap();
        let l = &resolved.lattice;
        assert_eq!(l.hierarchy.base, [32, 32]);
        assert_eq!(l.hierarchy.levels, vec![vec![Rect::new(8, 8, 24, 24)]]);
        assert!((l.wall_velocity[3][0] - 0.1).abs() < 1e-12);
        // nu_lat = 0.01 * dt / dx^2 with dx = 1/32 and dt = 0.1 dx.
        assert!((l.tau - (3.0 * 0.01 * 0.1 * 32.0 + 0.5)).abs() < 1e-12);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let e = Case::from_toml(&CAVITY.replace("viscosity = 0.01", "viscosity = 0.01\ncolour = 3"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("colour"), "{e}");
        let e = Case::from_toml(&CAVITY.replace("viscosity = 0.01", "viscosity = -1.0"))
            .unwrap()
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(e.contains("fluid.viscosity"), "{e}");
    }

    /// A channel with an inlet whose amplitude is `AMPLITUDE`.
    const CHANNEL: &str = r#"
        name = "channel"
        [domain]
        size = [2.0, 0.5]
        reference_length = 0.1
        resolution = 8
        [fluid]
        viscosity = 1e-3
        [flow]
        reference_velocity = 1.0
        lattice_velocity = 0.05
        [boundaries]
        x_min = { inlet = { profile = "parabolic", velocity = 1.0, amplitude = AMPLITUDE } }
        x_max = "outflow"
        y_min = "wall"
        y_max = "wall"
        [run]
        steps = 10
    "#;

    /// Checks that `text` resolves to an error containing every part of `expect`.
    fn refused(text: &str, expect: &[&str]) {
        let e = Case::from_toml(text)
            .and_then(|c| c.resolve())
            .map(|_| ())
            .expect_err(text)
            .to_string();
        for part in expect {
            assert!(e.contains(part), "`{e}` lacks `{part}`");
        }
    }

    /// An outflow extrapolates from the cell before the last, so the
    /// domain needs two cells along x; two pass.
    #[test]
    fn an_outflow_in_a_domain_one_cell_long_is_refused_with_the_size() {
        let channel = CHANNEL.replace("AMPLITUDE", "\"constant\"");
        refused(
            &channel.replace("size = [2.0, 0.5]", "size = [0.0125, 0.5]"),
            &[
                "`domain.size` = 0.0125 x 0.5 m (1 x 40 cells)",
                "at least 2 base cells along x with an outflow",
            ],
        );
        Case::from_toml(&channel.replace("size = [2.0, 0.5]", "size = [0.025, 0.5]"))
            .unwrap()
            .resolve()
            .unwrap();
    }

    /// An inlet's span becomes the base rows it covers; one whose ends miss
    /// the cell edges (dx 0.0125 m here), leave the side or hold no row is
    /// refused by its key, with what is accepted.
    #[test]
    fn an_inlet_span_resolves_to_whole_rows() {
        let channel = CHANNEL.replace("AMPLITUDE", "\"constant\", span = SPAN");
        let with = |span: &str| channel.replace("SPAN", span);
        let resolved = Case::from_toml(&with("[0.25, 0.5]")).unwrap().resolve().unwrap();
        assert_eq!(resolved.lattice.inlet.unwrap().span, Some([20, 40]));
        let key = "`boundaries.x_min.inlet.span`";
        refused(
            &with("[0.26, 0.5]"),
            &[
                key,
                "multiples of dx = 0.0125 m",
                "y0: 0.25 or 0.2625 m, to y1: 0.5 m (an edge)",
            ],
        );
        refused(&with("[0.3, 0.2]"), &[key, "0 <= y0 < y1 <= 0.5"]);
        refused(&with("[0.0, 0.6]"), &[key, "0 <= y0 < y1 <= 0.5"]);
        refused(&with("[-0.0125, 0.5]"), &[key, "0 <= y0 < y1 <= 0.5"]);
        refused(&with("[0.25, 0.2500000001]"), &[key, "at least one base row"]);
        refused(&with("[0.25]"), &["span"]);
    }

    /// A resolution that makes too many cells is named, with the count in
    /// a few digits (it was blamed on domain.size, with 300 of them).
    #[test]
    fn a_resolution_beyond_the_cell_limit_is_refused_naming_it() {
        let channel = CHANNEL.replace("AMPLITUDE", "\"constant\"");
        refused(
            &channel.replace("resolution = 8", "resolution = 1e300"),
            &[
                "`domain.resolution` = 1e300",
                "at most 4e9 base cells (it gives 2.000e301 x 5.000e300)",
            ],
        );
    }

    /// A coefficient's reference far from the flow's scales gave cd = -inf
    /// (½ ρ U² L underflowed), which the run took for a divergence.
    #[test]
    fn a_coefficient_reference_far_from_the_flow_is_refused() {
        for (line, key) in [
            ("reference_velocity = 1e-160", "`output.reference_velocity` = 1e-160"),
            ("reference_velocity = 1e7", "`output.reference_velocity` = 10000000"),
            ("reference_length = 5e-324", "`output.reference_length` = 5e-324"),
        ] {
            refused(
                &format!("{CAVITY}\n[output]\n{line}\n"),
                &[key, "within 1e-12 to 1e12 times the flow's"],
            );
        }
        for line in ["reference_velocity = 0.5", "reference_length = 1e3"] {
            Case::from_toml(&format!("{CAVITY}\n[output]\n{line}\n"))
                .unwrap()
                .resolve()
                .unwrap();
        }
    }

    #[test]
    fn times_of_no_length_and_empty_tables_are_refused_with_the_key() {
        let amplitude = |a: &str| CHANNEL.replace("AMPLITUDE", a);
        Case::from_toml(&amplitude("{ sine = { period = 0.5 } }"))
            .unwrap()
            .resolve()
            .unwrap();
        let ramp = "`boundaries.x_min.inlet.amplitude.ramp.duration`";
        refused(
            &amplitude("{ ramp = { duration = 0.0 } }"),
            &[ramp, "a time above 0 s, up to 1e12 time steps"],
        );
        // Beyond what f64 holds in time steps (it said `inlet.amplitude`,
        // inf and base intervals), and a sine sampled less than twice a
        // period.
        refused(
            &amplitude("{ ramp = { duration = 1e308 } }"),
            &[&format!("{ramp} = 1e308"), "up to 1e12 time steps"],
        );
        let sine = "`boundaries.x_min.inlet.amplitude.sine.period`";
        for period in ["1e-4", "5e-324", "1e308"] {
            refused(
                &amplitude(&format!("{{ sine = {{ period = {period} }} }}")),
                &[sine, "a period of at least two time steps"],
            );
        }
        refused(&amplitude("{ ramp = { duration = -1.0 } }"), &[ramp, "= -1"]);
        refused(
            &amplitude("{ sine = { period = 0.0 } }"),
            &["`boundaries.x_min.inlet.amplitude.sine.period` = 0"],
        );
        refused(
            &amplitude("{ table = { points = [] } }"),
            &["`boundaries.x_min.inlet.amplitude.table.points` = []", "at least one"],
        );
        refused(
            &amplitude("{ table = { points = [[0.0, 0.0], [1.0, 1.0], [0.5, 1.0]] } }"),
            &["`boundaries.x_min.inlet.amplitude.table.points[2]`", "ascending"],
        );
        let cavity = |from: &str, to: &str| {
            assert!(CAVITY.contains(from), "{from}");
            CAVITY.replace(from, to)
        };
        refused(&cavity("steps = 10", "steps = 0"), &["`run.steps` = 0", "at least 1"]);
        refused(
            &cavity("patches = [[0.25, 0.25, 0.75, 0.75]]", "patches = []"),
            &["`refinement[0].patches` = []"],
        );
        for (key, value, expect) in [
            ("every", "0.0", "`output.every` = 0"),
            ("every", "-2.5", "`output.every` = -2.5"),
            ("every_intervals", "0", "`output.every_intervals` = 0"),
            ("forces_every", "0.0", "`output.forces_every` = 0"),
            ("fields", "[]", "`output.fields` = []"),
            ("formats", "[]", "`output.formats` = []"),
        ] {
            refused(&format!("{CAVITY}\n[output]\n{key} = {value}\n"), &[expect]);
        }
    }

    #[test]
    fn an_outline_that_crosses_or_touches_itself_is_refused_naming_its_edges() {
        let polygon = |points: &str| format!("{CAVITY}\n[[bodies]]\nshape = \"polygon\"\npoints = {points}\n");
        let resolves = |points: &str| Case::from_toml(&polygon(points)).and_then(|c| c.resolve()).is_ok();
        // A bow tie (a signed area of -0.01 m^2).
        refused(
            &polygon("[[0.4, 0.4], [0.6, 0.6], [0.6, 0.4], [0.4, 0.5]]"),
            &[
                "`bodies[0].points`",
                "edge from point 0 to 1 meets its edge from point 2 to 3",
                "does not cross or touch itself",
            ],
        );
        // A symmetric bow tie encloses no net area: its crossing is named.
        refused(
            &polygon("[[0.4, 0.4], [0.6, 0.6], [0.6, 0.4], [0.4, 0.6]]"),
            &[
                "`bodies[0].points`",
                "edge from point 0 to 1 meets its edge from point 2 to 3",
            ],
        );
        // Two squares meeting at a corner, and a spike back along an edge.
        refused(
            &polygon("[[0.4, 0.4], [0.5, 0.5], [0.6, 0.4], [0.6, 0.6], [0.5, 0.5], [0.4, 0.6]]"),
            &["`bodies[0].points`", "meets"],
        );
        refused(
            &polygon("[[0.4, 0.4], [0.6, 0.4], [0.6, 0.6], [0.6, 0.5], [0.4, 0.6]]"),
            &["edge from point 1 to 2 meets its edge from point 2 to 3"],
        );
        // Points on one line, whose area is round-off (2.8e-17 m^2 here).
        refused(
            &polygon("[[0.6, 0.4], [0.7, 0.5], [0.8, 0.6]]"),
            &["`bodies[0].points`", "3 points", "at least 3 points enclosing an area"],
        );
        // Concave, clockwise, and closed by repeating the first point.
        assert!(resolves(
            "[[0.4, 0.4], [0.6, 0.4], [0.6, 0.6], [0.5, 0.45], [0.4, 0.6]]"
        ));
        assert!(resolves("[[0.4, 0.4], [0.4, 0.6], [0.6, 0.6], [0.6, 0.4]]"));
        assert!(resolves("[[0.4, 0.4], [0.6, 0.4], [0.6, 0.6], [0.4, 0.6], [0.4, 0.4]]"));
    }

    #[test]
    fn a_body_over_no_cell_centre_is_refused_naming_its_level() {
        // On level 1 (the patch), whose cells are 1/64 m: centres at odd
        // multiples of 1/128 m.
        let circle = |at: f64, r: f64| {
            format!("{CAVITY}\n[[bodies]]\nshape = \"circle\"\ncenter = [{at}, {at}]\nradius = {r}\n")
        };
        refused(
            &circle(0.5, 1e-4),
            &[
                "`bodies[0]`",
                "holds no cell centre of level 1, whose cells are 0.015625 m wide",
                "make it larger",
            ],
        );
        // The same radius over a centre (0.5 + 1/128 m) holds one.
        Case::from_toml(&circle(0.5 + 1.0 / 128.0, 1e-4))
            .and_then(|c| c.resolve())
            .unwrap();
    }

    /// The error of reading `edit` of the cavity, as text.
    fn read_error(edit: &str) -> String {
        Case::from_toml(edit).map(|_| ()).unwrap_err().to_string()
    }

    #[test]
    fn fixed_length_arrays_of_another_length_are_refused_with_the_key() {
        let lid = "moving_wall = [1.0, 0.0]";
        let e = read_error(&CAVITY.replace(lid, "moving_wall = [1.0, 0.0, 5.0]"));
        assert!(
            e.contains("`boundaries.y_max.moving_wall` = 3 values: exactly 2 values"),
            "{e}"
        );
        let e = read_error(&CAVITY.replace(lid, "moving_wall = [1.0]"));
        assert!(
            e.contains("`boundaries.y_max.moving_wall`: invalid length 1, expected an array of length 2"),
            "{e}"
        );
        let e = read_error(&CAVITY.replace("[[0.25, 0.25, 0.75, 0.75]]", "[[0.25, 0.25, 0.75, 0.75, 0.9]]"));
        assert!(e.contains("`refinement[0].patches[0]` = 5 values: exactly 4"), "{e}");
        let e = read_error(&CAVITY.replace("size = [1.0, 1.0]", "size = [1.0, 1.0, 1.0]"));
        assert!(e.contains("`domain.size` = 3 values"), "{e}");
        let polygon =
            format!("{CAVITY}\n[[bodies]]\nshape = \"polygon\"\npoints = [[0.4, 0.4], [0.6, 0.4, 1.0], [0.5, 0.6]]\n");
        // A body's keys are checked by kind before the reader takes the
        // table, so the key is named, not only the table.
        let e = read_error(&polygon);
        assert!(
            e.contains("`bodies[0].points` = [[0.4, 0.4], [0.6, 0.4, 1.0], [0.5, 0.6]]: [[x, y], ...] in m"),
            "{e}"
        );
        for (body, says) in [
            (
                "shape = \"circle\"\ncenter = [0.5, 0.5]\nradius = \"0.05\"",
                "`bodies[0].radius` = \"0.05\": a number",
            ),
            (
                "shape = \"circle\"\ncenter = [0.5]\nradius = 0.05",
                "`bodies[0].center` = [0.5]: [x, y] in m",
            ),
            ("shape = \"circle\"\nradius = 0.05", "`bodies[0].center` = missing"),
            (
                "shape = 1\nradius = 0.05",
                "`bodies[0].shape` = 1: \"circle\" (center, radius), \"rectangle\"",
            ),
            ("radius = 0.05", "`bodies[0].shape` = missing"),
        ] {
            let e = read_error(&format!("{CAVITY}\n[[bodies]]\n{body}\n"));
            assert!(e.contains(says), "{body}: {e}");
        }
        // Lists of any length keep it.
        assert!(Case::from_toml(&polygon.replace("0.4, 1.0]", "0.4]")).is_ok());
    }

    #[test]
    fn schema_errors_name_the_key_the_reader_points_at() {
        let side = |kind: &str| CAVITY.replace("x_min = \"wall\"", &format!("x_min = {kind}"));
        let inlet = |table: &str| side(&format!("{{ inlet = {table} }}"));
        for (text, says) in [
            (
                CAVITY.replace("viscosity = 0.01", "viscosity = 0.01\ncolour = 3"),
                "line 9, column 1: `fluid.colour`: unknown field `colour`",
            ),
            (
                CAVITY.replace("steps = 10", "steps = -10"),
                "`run.steps`: invalid value: integer `-10`",
            ),
            (side("\"glass\""), "`boundaries.x_min`: unknown variant `glass`"),
            // A one-of table refused by its shape says what it takes; deeper
            // in a side, each table its own forms, and no type's name.
            (
                side("{}"),
                "`boundaries.x_min` takes \"periodic\", \"wall\", \"outflow\", \"free_slip\"",
            ),
            (
                inlet("5"),
                "`boundaries.x_min.inlet` takes { profile = \"uniform\" or \"parabolic\", velocity = U",
            ),
            (
                inlet("{ profile = \"uniform\", velocity = 0.1, amplitude = { ramp = 1.0 } }"),
                "expected a table (see docs/CASES.md); `boundaries.x_min.inlet.amplitude.ramp` takes { duration = s }",
            ),
            (
                inlet("{ profile = \"uniform\", velocity = 0.1, amplitude = { sine = \"x\" } }"),
                "`boundaries.x_min.inlet.amplitude.sine` takes { period = s }",
            ),
            (
                inlet("{ profile = \"uniform\", velocity = 0.1, amplitude = 2 }"),
                "`boundaries.x_min.inlet.amplitude` takes \"constant\", { ramp",
            ),
            (
                side("{ wall = true }"),
                "`wall` takes no value: write `x_min = \"wall\"`",
            ),
            (
                CAVITY.replace("[boundaries]", "collision = { magic = 0.25 }\n[boundaries]"),
                "missing field `model`; `flow.collision` takes { model = \"bgk\" }",
            ),
            // A key or table given twice is named.
            (
                CAVITY.replace("steps = 10", "steps = 10\nsteps = 20"),
                "`steps` is given twice; each key and table once",
            ),
            (format!("{CAVITY}\n[run]\nsteps = 20\n"), "`run` is given twice"),
        ] {
            let e = read_error(&text);
            assert!(e.contains(says) && !e.contains("::"), "{says}: {e}");
        }
    }

    #[test]
    fn every_case_file_reads_back_unchanged() {
        for (name, text) in CASE_FILES {
            let case = Case::from_toml(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let again = Case::from_toml(&toml::to_string(&case).unwrap()).unwrap();
            assert_eq!(format!("{again:?}"), format!("{case:?}"), "{name}");
        }
    }

    /// The coefficients in forces.csv and the Reynolds number `lbm check`
    /// prints use the output's reference velocity and length: each case's
    /// name states its Reynolds number, and they must give it.
    #[test]
    fn every_case_files_reference_values_give_the_reynolds_number_its_name_states() {
        for (name, text) in CASE_FILES {
            let case = Case::from_toml(text).unwrap();
            let stated: f64 = case
                .name
                .split(", ")
                .find_map(|part| part.strip_prefix("Re ")?.parse().ok())
                .unwrap_or_else(|| panic!("{name}: no `Re N` in its name {:?}", case.name));
            let plan = case.resolve().unwrap().output;
            let reynolds = plan.reference_velocity * plan.reference_length / case.fluid.viscosity;
            assert!(
                (reynolds - stated).abs() <= 1e-9 * stated,
                "{name}: U L / nu = {reynolds} with its output's U = {} m/s, L = {} m; its name says Re {stated}",
                plan.reference_velocity,
                plan.reference_length
            );
        }
    }

    #[test]
    fn a_wall_moving_across_itself_is_refused_naming_the_component() {
        refused(
            &CAVITY.replace("moving_wall = [1.0, 0.0]", "moving_wall = [0.0, -1.0]"),
            &[
                "`boundaries.y_max.moving_wall` = [0.0, -1.0]",
                "its y component 0 (the wall slides along x",
            ],
        );
        let side = CAVITY
            .replace("{ moving_wall = [1.0, 0.0] }", "\"wall\"")
            .replace("x_min = \"wall\"", "x_min = { moving_wall = [0.5, 1.0] }");
        refused(
            &side,
            &["`boundaries.x_min.moving_wall` = [0.5, 1.0]", "its x component 0"],
        );
        // Along the side it lies on, either way.
        Case::from_toml(&side.replace("[0.5, 1.0]", "[0.0, -1.0]"))
            .and_then(|c| c.resolve())
            .unwrap();
    }

    #[test]
    fn a_speed_over_the_mach_limit_is_refused_naming_its_key() {
        refused(
            &CAVITY.replace("lattice_velocity = 0.1", "lattice_velocity = 0.2"),
            &[
                "`flow.lattice_velocity` = lattice speed 0.2000, Mach 0.346",
                "at most 0.3 (lattice speed 0.1732)",
            ],
        );
        refused(
            &CAVITY.replace("moving_wall = [1.0, 0.0]", "moving_wall = [1.8, 0.0]"),
            &[
                "`boundaries.y_max.moving_wall` = lattice speed 0.1800, Mach 0.312",
                "lower flow.lattice_velocity",
            ],
        );
        let inlet = CHANNEL.replace("AMPLITUDE", "\"constant\"");
        refused(
            &inlet.replace("velocity = 1.0, amplitude", "velocity = 4.0, amplitude"),
            &["`boundaries.x_min.inlet.velocity` = lattice speed 0.2000"],
        );
        let table = "{ table = { points = [[0.0, 0.0], [1.0, 4.0]] } }";
        refused(
            &CHANNEL.replace("AMPLITUDE", table),
            &["`boundaries.x_min.inlet.velocity`", "peak factor 4"],
        );
    }

    #[test]
    fn an_acceleration_is_refused_when_the_speed_it_drives_is_over_the_mach_limit() {
        // A periodic channel between walls, 64 base cells across, nu_lat =
        // 0.003: the Poiseuille peak g H^2 / (8 nu) in lattice units.
        let channel = |g: f64, y_sides: &str, steps: u64| {
            format!(
                r#"
                name = "forced"
                [domain]
                size = [1.0, 1.0]
                reference_length = 1.0
                resolution = 64
                [fluid]
                viscosity = 0.001
                [flow]
                reference_velocity = 1.0
                lattice_velocity = 0.05
                acceleration = [{g}, 0.0]
                [boundaries]
                x_min = "periodic"
                x_max = "periodic"
                y_min = {y_sides}
                y_max = {y_sides}
                [run]
                steps = {steps}
                "#
            )
        };
        let units = UnitSystem::new(1.0, 64.0, 1.0, 0.05, 1.0).unwrap();
        let nu = units.viscosity_to_lattice(0.001);
        // The largest acceleration whose Poiseuille peak stays at Mach 0.3.
        let limit = (MAX_MACH / 3f64.sqrt()) * 8.0 * nu / (64.0 * 64.0) / units.acceleration_to_lattice(1.0);
        // Ten viscous times H^2 / nu: the flow has reached its peak.
        let long = 10_000_000;
        let resolved = Case::from_toml(&channel(0.9 * limit, "\"wall\"", long))
            .unwrap()
            .resolve()
            .unwrap();
        assert!((resolved.lattice_speed * 3f64.sqrt() - 0.27).abs() < 1e-9);
        refused(
            &channel(1.1 * limit, "\"wall\"", long),
            &[
                "`flow.acceleration` = lattice speed 0.1905, Mach 0.330",
                "Poiseuille peak",
            ],
        );
        // The same force in a short run: it cannot get that fast.
        assert!(
            Case::from_toml(&channel(1.1 * limit, "\"wall\"", 100))
                .unwrap()
                .resolve()
                .is_ok()
        );
        // Nothing brakes a fully periodic box: the run's length bounds it.
        refused(
            &channel(1.1 * limit, "\"periodic\"", long),
            &["`flow.acceleration`", "F t: nothing holds the flow"],
        );
        // With a body in it (a periodic array of cylinders) the body holds
        // the flow at a speed no estimate gives before the run: not refused,
        // and the axis is named for lbm check's warning.
        let array = format!(
            "{}\n[[bodies]]\nshape = \"circle\"\ncenter = [0.5, 0.5]\nradius = 0.2\n",
            channel(1.1 * limit, "\"periodic\"", long)
        );
        let resolved = Case::from_toml(&array).unwrap().resolve().unwrap();
        let forced = resolved.lattice.forced_speed(resolved.steps);
        assert_eq!(forced.speed, 0.0);
        let held = forced.held_by_bodies.unwrap();
        assert_eq!(held.axes, [true, false]);
        let free = resolved.lattice.force[0] * long as f64;
        assert!((held.speed - free).abs() < 1e-9 * free);
        // Walls across the axis still bound it, body or not.
        let walled = array
            .replace("y_min = \"periodic\"", "y_min = \"wall\"")
            .replace("y_max = \"periodic\"", "y_max = \"wall\"");
        refused(&walled, &["`flow.acceleration`", "Poiseuille peak"]);
        // An absurd force's speed in a power of ten, not in 644 digits.
        let absurd = CAVITY.replace("[flow]", "[flow]\nacceleration = [1e308, 0.0]");
        assert_ne!(absurd, CAVITY);
        refused(
            &absurd,
            &["`flow.acceleration` = lattice speed 3.1250e305, Mach 5.413e305"],
        );
        // A run too short to get that fast: nothing to warn of.
        let short = array.replace(&format!("steps = {long}"), "steps = 100");
        let resolved = Case::from_toml(&short).unwrap().resolve().unwrap();
        assert_eq!(resolved.lattice.forced_speed(resolved.steps).held_by_bodies, None);
        // Along both axes the whole speed decides (each axis alone below the
        // limit, together above it), and both axes are named; a stronger
        // force is never refused where a weaker one passed.
        let per_axis = 0.25 / 3f64.sqrt() / long as f64 / resolved.lattice.force[0] * 1.1 * limit;
        for factor in [1.0, 1.7] {
            let g = per_axis * factor;
            let both = array.replace(
                &format!("acceleration = [{}, 0.0]", 1.1 * limit),
                &format!("acceleration = [{g}, {g}]"),
            );
            assert_ne!(both, array);
            let resolved = Case::from_toml(&both).unwrap().resolve().unwrap();
            let held = resolved.lattice.forced_speed(resolved.steps).held_by_bodies.unwrap();
            assert_eq!(held.axes, [true, true]);
            assert!(
                (held.speed * 3f64.sqrt() - 0.25 * 2f64.sqrt() * factor).abs() < 1e-6,
                "{held:?}"
            );
        }
    }

    #[test]
    fn unstable_cases_are_refused_with_the_level_and_the_remedy() {
        let thin = CAVITY.replace("viscosity = 0.01", "viscosity = 1e-6");
        let e = Case::from_toml(&thin).unwrap().resolve().unwrap_err().to_string();
        assert!(e.contains("level 0") && e.contains("raise the resolution"), "{e}");
        let bgk = CAVITY.replace(
            "lattice_velocity = 0.1",
            "lattice_velocity = 0.1\ncollision = { model = \"bgk\" }",
        );
        let nearly = bgk.replace("viscosity = 0.01", "viscosity = 0.0005");
        let e = Case::from_toml(&nearly).unwrap().resolve().unwrap_err().to_string();
        assert!(e.contains("0.510") && e.contains("BGK collision"), "{e}");
        // Level 1 of the cavity has tau = 0.5 + 2 (tau0 - 0.5) = 0.5 + 19.2 nu.
        refused(
            &CAVITY.replace("viscosity = 0.01", "viscosity = 0.105"),
            &[
                "`level 1 relaxation time` = 2.51600",
                "at most 2.5",
                "lower the lattice velocity or the resolution",
                // The keys that set it, with what this case accepts: tau1 -
                // 1/2 = 2.016 scales with both and must be at most 2 (32 x
                // 2 / 2.016 cells, 0.1 x 2 / 2.016), tau0 - 1/2 = 1.008 at
                // least 0.002 (0.1 x 0.002 / 1.008); below half a cell the
                // domain has no cell. The layout (below 14.5 cells the patch
                // no longer keeps 4 cells from the walls) is its own refusal.
                "with every other key as it is, the relaxation times and lattice speeds allow \
                 `domain.resolution` from 0.5001 to 31.74 (base cells per domain.reference_length) or \
                 `flow.lattice_velocity` from 0.0001985 to 0.0992",
            ],
        );
        assert!(
            Case::from_toml(&CAVITY.replace("viscosity = 0.01", "viscosity = 0.104"))
                .unwrap()
                .resolve()
                .is_ok()
        );
        // No resolution or lattice velocity helps: the flow's scales are named.
        refused(
            &CAVITY.replace("viscosity = 0.01", "viscosity = 1e308"),
            &[
                "no value of `flow.lattice_velocity`; the flow's own scales are then out of reach: \
               `fluid.viscosity` = 1e308 m^2/s against `flow.reference_velocity` = ",
            ],
        );
        refused(
            &CAVITY.replace(
                "lattice_velocity = 0.1",
                "lattice_velocity = 0.1\ncollision = { model = \"trt\", magic = 0.0 }",
            ),
            &["`flow.collision.magic` = 0: above 0"],
        );
        let collision = |table: &str| {
            CAVITY.replace(
                "lattice_velocity = 0.1",
                &format!("lattice_velocity = 0.1\ncollision = {table}"),
            )
        };
        refused(
            &collision("{ model = \"trt\", magic = 1e12 }"),
            &["`flow.collision.magic` = 1000000000000: above 0 and at most 1"],
        );
        assert!(
            Case::from_toml(&collision("{ model = \"trt\", magic = 1.0 }"))
                .unwrap()
                .resolve()
                .is_ok()
        );
        let e = read_error(&collision("{ model = \"bgk\", magic = 0.25 }"));
        assert!(e.contains("unknown field `magic`"), "{e}");
        assert!(
            Case::from_toml(&nearly.replace("{ model = \"bgk\" }", "{ model = \"trt\" }"))
                .unwrap()
                .resolve()
                .is_ok()
        );
    }

    /// The cavity (32 base cells of 1/32 m) with these `[[bodies]]` tables.
    fn cavity_with(bodies: &[&str]) -> String {
        bodies
            .iter()
            .fold(CAVITY.to_owned(), |text, b| format!("{text}\n[[bodies]]\n{b}\n"))
    }

    #[test]
    fn bodies_keep_clear_of_the_sides_and_of_each_other() {
        let circle = |x: f64, y: f64, r: f64| format!("shape = \"circle\"\ncenter = [{x}, {y}]\nradius = {r}");
        // 4 base cells from y_min are accepted, 2 refused (4 of the
        // patch's cells below the centre patch).
        assert!(
            Case::from_toml(&cavity_with(&[&circle(0.2, 0.15625, 0.03125)]))
                .unwrap()
                .resolve()
                .is_ok()
        );
        refused(
            &cavity_with(&[&circle(0.2, 0.09375, 0.03125)]),
            &[
                "`bodies[0]` = 2.00 cells of level 0 from the y_min side (wall)",
                "touches or crosses a resting wall or a free-slip side, or keeps at least 4 cells",
            ],
        );
        // A resting wall a body may touch or cross (a step, a bump on a
        // floor); the lid it may not, nor leave the domain.
        for body in [
            circle(0.2, 0.03, 0.05),
            circle(0.2, 0.0, 0.05),
            "shape = \"rectangle\"\nmin = [0.2, 0.0]\nmax = [0.3, 0.1]".to_owned(),
            "shape = \"rectangle\"\nmin = [0.0, 0.0]\nmax = [0.1, 0.1]".to_owned(),
        ] {
            let resolved = Case::from_toml(&cavity_with(&[&body])).unwrap().resolve();
            assert!(resolved.is_ok(), "{body}: {}", resolved.err().unwrap());
        }
        // Half a disc on a free-slip side (a symmetry line).
        let symmetric = cavity_with(&[&circle(1.0, 0.2, 0.05)]).replace("x_max = \"wall\"", "x_max = \"free_slip\"");
        let resolved = Case::from_toml(&symmetric).unwrap().resolve();
        assert!(resolved.is_ok(), "{}", resolved.err().unwrap());
        refused(
            &cavity_with(&[&circle(0.2, 0.98, 0.05)]),
            &[
                "`bodies[0]`",
                "through the y_max side (moving_wall)",
                "every side but a resting wall or a free-slip side, which it may touch or cross",
            ],
        );
        refused(
            &cavity_with(&["shape = \"rectangle\"\nmin = [0.2, 0.9]\nmax = [0.3, 1.0]"]),
            &["`bodies[0]` = touching or crossing the y_max side (moving_wall)"],
        );
        refused(
            &cavity_with(&[&circle(0.2, -0.1, 0.05)]),
            &["`bodies[0]` = spanning [0.15, 0.25] x [-0.15, -0.05] m, outside the domain"],
        );
        refused(
            &format!("{CAVITY}\n[[bodies]]\nshape = \"circle\"\ncenter = [0.6, 0.25]\nradius = 1e-300\n"),
            &["`bodies[0]` = spanning [0.6, 0.6] x [0.25, 0.25] m, of no extent"],
        );
        // Outside a patch, a body keeps 4 of the patch's cells clear of it
        // too: the patch does not see it, and its ghost band would reach it.
        refused(
            &cavity_with(&[&circle(0.21875, 0.5, 0.03125)]),
            &["`bodies[0]`", "refinement[0].patches[0]", "inside or outside it"],
        );
        assert!(
            Case::from_toml(&cavity_with(&[&circle(0.15625, 0.5, 0.03125)]))
                .unwrap()
                .resolve()
                .is_ok()
        );
        // A body across the domain from wall to wall cuts it in two.
        refused(
            &cavity_with(&["shape = \"rectangle\"\nmin = [0.0, 0.125]\nmax = [1.0, 0.175]"]),
            &[
                "`bodies[0]` = touching both the x_min and the x_max side",
                "cut the domain in two",
            ],
        );
        refused(
            &cavity_with(&["shape = \"rectangle\"\nmin = [0.15, 0.05]\nmax = [0.18, 0.95]"]),
            &["`bodies[0]` = 1.60 cells of level 0 from the y_min side"],
        );
        // A periodic side is no way through either: the rasteriser does not wrap.
        let periodic = cavity_with(&[&circle(0.02, 0.15, 0.05)])
            .replace("x_min = \"wall\"", "x_min = \"periodic\"")
            .replace("x_max = \"wall\"", "x_max = \"periodic\"");
        refused(&periodic, &["through the x_min side (periodic)"]);
        // A bump: a circle centred below the floor whose whole circle passes
        // the periodic sides, while its part in the domain keeps clear of them.
        let bump = cavity_with(&[&circle(0.5, -0.5, 0.6)])
            .replace("x_min = \"wall\"", "x_min = \"periodic\"")
            .replace("x_max = \"wall\"", "x_max = \"periodic\"");
        let resolved = Case::from_toml(&bump).unwrap().resolve();
        assert!(resolved.is_ok(), "{}", resolved.err().unwrap());
        // Bodies apart, touching or overlapping; on the refined level (64
        // cells per metre) 4 cells are 1/16 m.
        assert!(
            Case::from_toml(&cavity_with(&[&circle(0.4, 0.5, 0.05), &circle(0.57, 0.5, 0.05)]))
                .unwrap()
                .resolve()
                .is_ok()
        );
        refused(
            &cavity_with(&[&circle(0.4, 0.5, 0.05), &circle(0.525, 0.5, 0.05)]),
            &["`bodies[1]` = 1.60 cells of level 1 from bodies[0]"],
        );
        refused(
            &cavity_with(&[&circle(0.4, 0.5, 0.05), &circle(0.45, 0.5, 0.05)]),
            &[
                "`bodies[1]` = overlapping or touching bodies[0]",
                "make a compound body one polygon",
            ],
        );
    }

    #[test]
    fn a_body_turns_about_its_pivot_and_a_rectangle_becomes_a_polygon() {
        let square = "shape = \"rectangle\"\nmin = [0.45, 0.45]\nmax = [0.55, 0.55]";
        let bodies = |text: &str| {
            Case::from_toml(&cavity_with(&[text]))
                .unwrap()
                .resolve()
                .unwrap()
                .lattice
                .bodies
        };
        let plain = bodies(square);
        assert!(matches!(plain[0].shape, Shape::Rectangle { .. }), "no key: as written");
        let Shape::Polygon { points } = &bodies(&format!("{square}\nrotation = 0.0"))[0].shape else {
            panic!("with the key a rectangle is a polygon");
        };
        assert_eq!(points.len(), 4);
        assert_eq!(
            plain[0].shape.bounds(),
            Shape::Polygon { points: points.clone() }.bounds()
        );
        // Lattice units per m, from the square as written.
        let [px0, _, px1, _] = plain[0].shape.bounds();
        let scale = (px1 - px0) / 0.1;
        let near = |a: f64, b: f64| (a - b * scale).abs() < 1e-9;
        // A quarter turn about the lower-left corner moves the square left.
        let turned = bodies(&format!("{square}\nrotation = 90.0\npivot = [0.45, 0.45]"));
        let [x0, y0, x1, y1] = turned[0].shape.bounds();
        assert!(
            near(x0, 0.35) && near(x1, 0.45) && near(y0, 0.45) && near(y1, 0.55),
            "{:?}",
            turned[0].shape
        );
        // A circle turns its centre about the pivot.
        let circle =
            bodies("shape = \"circle\"\ncenter = [0.5, 0.5]\nradius = 0.05\nrotation = 180.0\npivot = [0.47, 0.5]");
        let Shape::Circle { center, .. } = circle[0].shape else {
            panic!("a circle stays a circle")
        };
        assert!(near(center[0], 0.44) && near(center[1], 0.5), "{center:?}");
        // A pivot alone, an unknown key, a body turned out of the domain.
        refused(
            &cavity_with(&[&format!("{square}\npivot = [0.5, 0.5]")]),
            &["`bodies[0].pivot`", "rotation"],
        );
        refused(&cavity_with(&[&format!("{square}\nangle = 5.0")]), &["angle"]);
        // A rectangle turned is still a rectangle as written: min below max.
        let inverted = "shape = \"rectangle\"\nmin = [0.55, 0.45]\nmax = [0.45, 0.55]\nrotation = 0.0";
        refused(&cavity_with(&[inverted]), &["`bodies[0].min`", "min below max"]);
        refused(
            &cavity_with(&[&format!("{square}\nrotation = 90.0\npivot = [0.02, 0.5]")]),
            &["bodies[0]"],
        );
    }

    #[test]
    fn a_body_error_names_the_body_own_key_first() {
        // A NaN radius (a case built in code; a file's NaN is refused when
        // read) says the radius, not that the body crosses a patch edge.
        let mut case = Case::from_toml(&cavity_with(&[
            "shape = \"circle\"\ncenter = [0.25, 0.5]\nradius = 0.05",
        ]))
        .unwrap();
        case.bodies[0] = Shape::Circle {
            center: [0.25, 0.5],
            radius: f64::NAN,
        }
        .into();
        let e = case.resolve().map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("`bodies[0].radius` = NaN: a finite number"), "{e}");
        // A body through a wall inside a patch that touches it is on the
        // patch's level; through the lid it is refused, naming the lid.
        let text = cavity_with(&["shape = \"circle\"\ncenter = [0.5, 0.01]\nradius = 0.05"])
            .replace("[[0.25, 0.25, 0.75, 0.75]]", "[[0.25, 0.0, 0.75, 0.75]]");
        let resolved = Case::from_toml(&text).unwrap().resolve().unwrap();
        assert_eq!(resolved.lattice.bodies[0].level, 1);
        let text = cavity_with(&["shape = \"circle\"\ncenter = [0.5, 0.99]\nradius = 0.05"])
            .replace("[[0.25, 0.25, 0.75, 0.75]]", "[[0.25, 0.25, 0.75, 1.0]]");
        refused(&text, &["through the y_max side (moving_wall)"]);
    }

    #[test]
    fn the_accepted_ranges_of_a_key_are_the_bounds_of_its_checks() {
        let cavity = Case::from_toml(CAVITY).unwrap();
        // tau0 - 1/2 = 3 nu v / (U dx) = 0.96 v must be at least 0.002 (TRT);
        // the lid, at the reference velocity, must stay at Mach 0.3.
        let [lo, hi] = cavity.lattice_velocity_range().unwrap();
        assert!((lo / (0.002 / 0.96) - 1.0).abs() < 1e-9, "{lo}");
        assert!((hi / (MAX_MACH / 3f64.sqrt()) - 1.0).abs() < 1e-9, "{hi}");
        // Level 1's tau - 1/2, 6 nu v N / U = 0.006 N, must be at most 2;
        // level 0's, 0.003 N, at least 0.002. Below 14.5 cells the patch no
        // longer keeps 4 cells from the walls: the layout's own refusal, not
        // the bounds'.
        let [lo, hi] = cavity.resolution_range().unwrap();
        assert!((lo / (0.002 / 0.003) - 1.0).abs() < 1e-9, "{lo}");
        assert!((hi / (2.0 / 0.006) - 1.0).abs() < 1e-9, "{hi}");
        let mut coarse = cavity.clone();
        coarse.domain.resolution = 14.0;
        assert!(matches!(coarse.resolve(), Err(Error::Layout { .. })));
        // Unrefined, tau0 - 1/2 = 0.003 N bounds it from both sides.
        let mut uniform = cavity.clone();
        uniform.refinement.clear();
        let [lo, hi] = uniform.resolution_range().unwrap();
        assert!((lo / (0.002 / 0.003) - 1.0).abs() < 1e-9, "{lo}");
        assert!((hi / (2.0 / 0.003) - 1.0).abs() < 1e-9, "{hi}");
        // Nothing resolves with a negative viscosity.
        let mut broken = cavity.clone();
        broken.fluid.viscosity = -1.0;
        assert_eq!(broken.lattice_velocity_range(), None);
    }

    /// The cavity with an `[initial]` table of `body` appended.
    fn initially(body: &str) -> String {
        format!("{CAVITY}\n[initial]\n{body}\n")
    }

    #[test]
    fn an_initial_field_is_read_in_physical_units_at_each_point() {
        let case = Case::from_toml(&initially(
            "velocity = [\"0.5 * sin(2 * pi * x) * cos(2 * pi * y)\", -0.25]\npressure = 2",
        ))
        .unwrap();
        let resolved = case.resolve().unwrap();
        let initial = resolved.initial.as_ref().unwrap();
        let u = resolved.units;
        // Base lattice point (8, 0) is x = 0.25 m, y = 0: the sine's peak.
        let m = initial.moments(8.0, 0.0).unwrap();
        assert_eq!(m.ux, u.velocity_to_lattice(0.5) as f32);
        assert_eq!(m.uy, u.velocity_to_lattice(-0.25) as f32);
        assert!((u.pressure_to_physical(m.delta_rho as f64) / 2.0 - 1.0).abs() < 1e-6);
        // Ghost cells beyond the domain take the nearest centre's values of
        // their level.
        assert_eq!(
            initial.start_moments(0, -0.5, 40.0),
            initial.moments(0.5, 31.5).unwrap()
        );
        assert_eq!(
            initial.start_moments(1, -0.25, 3.0),
            initial.moments(0.25, 3.0).unwrap()
        );
        // What is left out is zero; no table, no field.
        let still = Case::from_toml(&initially("pressure = \"x\""))
            .unwrap()
            .resolve()
            .unwrap();
        let m = still.initial.unwrap().moments(16.0, 3.0).unwrap();
        assert_eq!((m.ux, m.uy), (0.0, 0.0));
        assert!(Case::from_toml(CAVITY).unwrap().resolve().unwrap().initial.is_none());
        // The case as run keeps the table as written, with its defaults.
        let back = toml::to_string(&case).unwrap();
        assert_eq!(Case::from_toml(&back).unwrap().initial, case.initial);
        let empty = toml::to_string(&Case::from_toml(&initially("")).unwrap()).unwrap();
        assert!(
            empty.contains("[initial]\nvelocity = [0.0, 0.0]\npressure = 0.0"),
            "{empty}"
        );
    }

    /// A logarithmic profile above the floor: infinite at the wall, finite at
    /// every cell centre. Only fluid cells are checked: the ghost cells
    /// beyond the wall start at the first row's values, the cells inside a
    /// body are not asked.
    #[test]
    fn an_initial_field_need_only_be_finite_and_slow_at_fluid_cell_centres() {
        let log = initially("velocity = [\"0.1 * ln(y / 0.001)\", 0]");
        let resolved = Case::from_toml(&log).unwrap().resolve().unwrap();
        let initial = resolved.initial.unwrap();
        assert_eq!(
            initial.start_moments(1, 3.0, -0.25),
            initial.moments(3.0, 0.25).unwrap()
        );
        // Potential flow around a cylinder of radius 0.1 m at (0.5, 0.5):
        // fast towards its centre, which is solid.
        let field = "[initial]\nvelocity = [\"0.5 * (1 - 0.01 * ((x - 0.5)^2 - (y - 0.5)^2) / ((x - 0.5)^2 + \
                     (y - 0.5)^2)^2)\", 0]\n";
        let body = "[[bodies]]\nshape = \"circle\"\ncenter = [0.5, 0.5]\nradius = 0.1\n";
        let resolved = Case::from_toml(&format!("{CAVITY}\n{body}{field}"))
            .unwrap()
            .resolve()
            .unwrap();
        let fastest = resolved.initial.unwrap().fastest;
        assert!(fastest.speed < resolved.units.velocity_to_lattice(1.01), "{fastest:?}");
        // Without the body the centre's cells count, and refuse it there.
        refused(
            &format!("{CAVITY}\n{field}"),
            &["`initial.velocity`", "at its fastest fluid cell, x = 0.4", "y = 0.4"],
        );
    }

    #[test]
    fn a_bad_initial_field_is_refused_naming_its_key() {
        refused(
            &initially("velocity = [\"sin(2 * pi * x\", 0]"),
            &[
                "`initial.velocity[0]`",
                "at character 15",
                "`)` expected to close `sin(`",
            ],
        );
        refused(
            &initially("pressure = \"r * 2\""),
            &[
                "`initial.pressure`",
                "unknown name `r`",
                "the variables are x and y (m)",
            ],
        );
        refused(
            &initially("velocity = [0, \"sqrt(x - 0.5)\"]"),
            &[
                "`initial.velocity[1]`",
                "finite at every fluid cell centre (at x = 0.01562 m, y = 0.01562 m it is NaN)",
            ],
        );
        refused(
            &initially("velocity = [0, 0, 0]"),
            &["`initial.velocity`", "exactly 2 values"],
        );
        refused(
            &initially("density = 1"),
            &["`initial.density`: unknown field", "expected `velocity` or `pressure`"],
        );
        refused(
            &initially("velocity = [true, 0]"),
            &["a number or an expression of x and y"],
        );
        refused(
            &initially("velocity = [[1, 2], 0]"),
            &["a number or an expression of x and y"],
        );
        // Mach 0.3 at lattice velocity 0.1 is 1.73 m/s here; the fastest
        // cell is the last column's on the base grid (x = 0.984 m).
        refused(
            &initially("velocity = [\"2 * x\", 0]"),
            &[
                "`initial.velocity`",
                "at its fastest fluid cell, x = 0.9843 m, y = 0.01562 m: lower it there",
            ],
        );
        Case::from_toml(&initially("velocity = [\"1.5 * x\", 0]"))
            .unwrap()
            .resolve()
            .unwrap();
        // The density stays within 20% of rest: rho c^2 / 3 times 0.2, with
        // c = dx / dt = 10 m/s here, is 6.67 Pa.
        refused(
            &initially("pressure = -7"),
            &["`initial.pressure`", "within 6.666 Pa of the rest state", "it is -7 Pa"],
        );
        Case::from_toml(&initially("pressure = \"6.6 * x\""))
            .unwrap()
            .resolve()
            .unwrap();
        // A cell only the patch has: x = 35.5 / 64 m at level 1 of the
        // 32-cell base (no base centre lies there).
        refused(
            &initially("pressure = \"0.001 / (x - 0.5546875)\""),
            &["`initial.pressure`", "at x = 0.5546 m"],
        );
        // A table is a table.
        refused(
            &format!("initial = [[0.1, \"0.2 * x\"], \"0.5\"]\n{CAVITY}"),
            &["`initial` = an array", "a table of named keys: `[initial]` once"],
        );
        refused(
            &format!("{CAVITY}\n[[initial]]\npressure = 1\n"),
            &["`initial` = an array", "a table of named keys"],
        );
        let listed = format!("run = [10]\n{}", CAVITY.replace("[run]\n        steps = 10", ""));
        assert_ne!(listed, CAVITY);
        refused(&listed, &["`run` = an array"]);
        let inline = CAVITY.replace("x_min = \"wall\"", "x_min = { inlet = [\"uniform\", 1.0] }");
        assert_ne!(inline, CAVITY);
        refused(&inline, &["`boundaries.x_min.inlet` = an array"]);
    }

    #[test]
    fn the_resolution_range_of_a_relaxation_time_refusal_holds_at_its_ends() {
        // DFG 2D-1 at a hundredth of its viscosity: level 0's tau - 1/2 is
        // 5e-5 N, at least 0.002 from N = 40 on. Resolutions just above 40
        // (40.1, say) round the patches too close to the walls, so a scan of the whole
        // resolve started its range at 40.43 where 40 runs.
        let (_, text) = CASE_FILES[1];
        let case = Case::from_toml(&text.replacen("viscosity = 1e-3", "viscosity = 1e-5", 1)).unwrap();
        let [lo, hi] = case.resolution_range().unwrap();
        assert!((lo / 40.0 - 1.0).abs() < 1e-9, "{lo}");
        let at = |r: f64| {
            let mut c = case.clone();
            c.domain.resolution = r;
            c.resolve()
        };
        at(40.0).unwrap();
        assert!(matches!(at(40.1), Err(Error::Layout { .. })));
        at(hi.floor()).unwrap();
        let refusal = at(39.0).unwrap_err().to_string();
        assert!(refusal.contains("allow `domain.resolution` from 40 to "), "{refusal}");
        // A span on the inlet's side fits only resolutions that put its ends
        // on cell edges; the range is still the bounds'.
        let spanned = Case::from_toml(&text.replacen("viscosity = 1e-3", "viscosity = 1e-5", 1).replacen(
            "profile = \"parabolic\",",
            "profile = \"parabolic\", span = [0.1, 0.3],",
            1,
        ))
        .unwrap();
        assert_eq!(spanned.resolution_range(), Some([lo, hi]));
    }

    #[test]
    fn a_tile_beyond_its_levels_allocation_is_refused_naming_it() {
        let tiled = |tiles: &str| CAVITY.replacen("steps = 10", &format!("steps = 10\ntiles = {tiles}"), 1);
        assert_ne!(tiled("[]"), CAVITY);
        Case::from_toml(&tiled("[[8, 8], [16, 4]]")).unwrap().resolve().unwrap();
        refused(
            &tiled("[[100000, 4]]"),
            &["`run.tiles[0]`", "at most the level's largest allocation"],
        );
        refused(&tiled("[[8, 8], [4, 100000]]"), &["`run.tiles[1]`"]);
        refused(&tiled("[[0, 8]]"), &["`run.tiles[0]`", "at least 1 cell"]);
    }

    #[test]
    fn a_case_name_is_a_title() {
        // As TOML writes them, escapes and all.
        for bad in [
            r#""""#,
            r#""   ""#,
            r#""two\nlines""#,
            r#""tab\there""#,
            r#""a\u2028b""#,
            r#""\u200b""#,
            r#""evil\u202Eexe.txt""#,
            r#""mark\u200Fhere""#,
        ] {
            let text = CAVITY.replacen("name = \"cavity\"", &format!("name = {bad}"), 1);
            assert_ne!(text, CAVITY);
            refused(&text, &["`name`", "control characters"]);
        }
        let long = CAVITY.replacen("name = \"cavity\"", &format!("name = \"{}\"", "x".repeat(201)), 1);
        refused(&long, &["`name`", "1 to 200 characters"]);
        let fine = CAVITY.replacen("name = \"cavity\"", "name = \"Hohlraum, Re 100 (ü)\"", 1);
        Case::from_toml(&fine).unwrap().resolve().unwrap();
    }

    #[test]
    fn a_body_goes_to_the_finest_level_that_holds_it() {
        let with_body = format!("{CAVITY}\n[[bodies]]\nshape = \"circle\"\ncenter = [0.5, 0.5]\nradius = 0.05\n");
        let resolved = Case::from_toml(&with_body).unwrap().resolve().unwrap();
        assert_eq!(resolved.lattice.bodies[0].level, 1);
        let crossing = with_body.replace("center = [0.5, 0.5]", "center = [0.25, 0.5]");
        let e = Case::from_toml(&crossing).unwrap().resolve().unwrap_err().to_string();
        assert!(
            e.contains("`bodies[0]`") && e.contains("refinement[0].patches[0]"),
            "{e}"
        );
    }
}

/// One level of a resolved case in the units a user checks: spacing, time
/// step, relaxation times, lattice Mach number, cells.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LevelParameters {
    pub level: usize,
    pub patches: usize,
    /// Active cells over the level's patches.
    pub cells: u64,
    pub dx_m: f64,
    pub dt_s: f64,
    pub tau_plus: f64,
    pub tau_minus: f64,
    /// The fastest prescribed or reference speed over c_s; the same on every
    /// level under acoustic scaling.
    pub mach: f64,
}

impl Resolved {
    /// [`LevelParameters`] of every level, coarsest first.
    pub fn levels(&self) -> Result<Vec<LevelParameters>> {
        let hierarchy = self.lattice.hierarchy.validate(&self.tiles)?;
        Ok(hierarchy
            .levels
            .iter()
            .enumerate()
            .map(|(level, patches)| {
                let relaxation = self.lattice.level_physics(level).relaxation;
                let scale = 0.5f64.powi(level as i32);
                LevelParameters {
                    level,
                    patches: patches.len(),
                    cells: patches.iter().map(|p| p.active.cells() as u64).sum(),
                    dx_m: self.units.dx * scale,
                    dt_s: self.units.dt * scale,
                    tau_plus: relaxation.tau_plus,
                    tau_minus: relaxation.tau_minus,
                    mach: self.lattice_speed * 3f64.sqrt(),
                }
            })
            .collect())
    }
}
