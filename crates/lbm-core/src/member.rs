//! What a stepper offers an ensemble: the [`Member`] trait, the
//! [`FixedSchedule`] every member of a batch shares, the statistics a member
//! can be asked for ([`StatsSpec`]) and what it reports ([`MemberObservation`],
//! [`MemberIdentity`]).
//!
//! A batch runner (the `lockstep` crate) takes ownership of members built
//! independently, checks that their identities agree, and advances them on
//! their shared schedule. Members may differ in physical parameters
//! (viscosity, inflow amplitude, a body's position or angle) but in nothing
//! that changes the shape of what is allocated or observed, which is what
//! [`MemberIdentity`] holds. [`Stepper`] is a member.
//!
//! What it does not do: run anything itself, or decide what a difference
//! means; the runner refuses, naming the member and the difference.

use std::collections::BTreeMap;

use ndarray::{ArrayD, IxDyn};
use serde::{Deserialize, Serialize};

use crate::config::{Boundary, ExecConfig, LatticeConfig};
use crate::device::Driver;
use crate::domain::geometry::Shape;
use crate::domain::hierarchy::HierarchySpec;
use crate::error::{Error, Result};
use crate::ledger::{ExchangeRecord, MemoryLedger};
use crate::stepper::Stepper;

/// Base intervals to advance, the save points, and how often each member's
/// diagnostic norm is taken, in base intervals since the start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixedSchedule {
    intervals: u64,
    save_points: Vec<u64>,
    diagnostics_every: u64,
}

impl FixedSchedule {
    /// `intervals` base intervals with a save every `save_every` intervals and
    /// always at the end; the diagnostic norm at every save point.
    pub fn new(intervals: u64, save_every: u64) -> Result<Self> {
        if intervals == 0 {
            return Err(Error::parameter("schedule.intervals", intervals, "at least 1"));
        }
        if save_every == 0 || save_every > intervals {
            return Err(Error::parameter(
                "schedule.save_every",
                save_every,
                &format!("1..={intervals} (the schedule's intervals)"),
            ));
        }
        let mut save_points: Vec<u64> = (1..=intervals / save_every).map(|k| k * save_every).collect();
        if save_points.last() != Some(&intervals) {
            save_points.push(intervals);
        }
        Ok(FixedSchedule {
            intervals,
            save_points,
            diagnostics_every: save_every,
        })
    }

    /// The same schedule with the diagnostic norm taken every `every`
    /// intervals (and at the end).
    pub fn with_diagnostics_every(mut self, every: u64) -> Result<Self> {
        if every == 0 || every > self.intervals {
            return Err(Error::parameter(
                "schedule.diagnostics_every",
                every,
                &format!("1..={} (the schedule's intervals)", self.intervals),
            ));
        }
        self.diagnostics_every = every;
        Ok(self)
    }

    pub fn intervals(&self) -> u64 {
        self.intervals
    }

    pub fn save_points(&self) -> &[u64] {
        &self.save_points
    }

    pub fn diagnostics_every(&self) -> u64 {
        self.diagnostics_every
    }

    /// The intervals that end with a diagnostic norm: every
    /// `diagnostics_every`-th and the last.
    pub fn diagnostic_points(&self) -> Vec<u64> {
        let every = self.diagnostics_every;
        let mut points: Vec<u64> = (1..=self.intervals / every).map(|k| k * every).collect();
        if points.last() != Some(&self.intervals) {
            points.push(self.intervals);
        }
        points
    }

    /// Every interval a runner stops at (a save point, a diagnostic point or
    /// both), ascending, ending with the last.
    pub fn stops(&self) -> Vec<u64> {
        let mut stops = self.diagnostic_points();
        stops.extend_from_slice(&self.save_points);
        stops.sort_unstable();
        stops.dedup();
        stops
    }

    /// The runs of intervals between consecutive save points, in order; each is
    /// one `step(n)` call with one wait.
    pub fn segments(&self) -> impl Iterator<Item = u64> + '_ {
        let starts = std::iter::once(0).chain(self.save_points.iter().copied());
        starts.zip(self.save_points.iter()).map(|(a, b)| b - a)
    }
}

/// A field a member can report, on one patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FieldQuantity {
    DeltaRho,
    Ux,
    Uy,
}

impl FieldQuantity {
    fn name(self) -> &'static str {
        match self {
            FieldQuantity::DeltaRho => "delta_rho",
            FieldQuantity::Ux => "ux",
            FieldQuantity::Uy => "uy",
        }
    }
}

/// One statistic of a member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Statistic {
    /// The total mass in base cells, shape `[1]`.
    Mass,
    /// A field on patch `patch` of `level`, shape `[rows, columns]` of its
    /// active region.
    Field {
        level: usize,
        patch: usize,
        quantity: FieldQuantity,
    },
    /// The momentum exchange on `body` over the last interval (`Fx`, `Fy`,
    /// torque: the raw exchange ledger, which the member must observe),
    /// shape `[3]`.
    Exchange { body: usize },
}

impl Statistic {
    /// The statistic's key in a [`Member::stats`] map.
    pub fn name(&self) -> String {
        match self {
            Statistic::Mass => "mass".into(),
            Statistic::Field { level, patch, quantity } => format!("L{level}.p{patch}.{}", quantity.name()),
            Statistic::Exchange { body } => format!("body{body}.exchange"),
        }
    }
}

/// What statistics a member reports at each save point; a batch's members
/// must ask for the same.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsSpec {
    pub statistics: Vec<Statistic>,
}

/// What must be the same for every member of a batch: the shapes of what is
/// allocated, stepped and observed. Physical parameters are not here.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemberIdentity {
    pub hierarchy: HierarchySpec,
    pub tiles: Vec<Option<[u32; 2]>>,
    /// Each base side's kind (x-min, x-max, y-min, y-max).
    pub boundaries: [Boundary; 4],
    /// Each body's level and shape kind, in order; their positions, sizes
    /// and angles may differ.
    pub bodies: Vec<(usize, &'static str)>,
    pub observe_raw_exchange: bool,
    pub observe_window_exchange: bool,
    pub schedule: Option<FixedSchedule>,
    pub stats: StatsSpec,
}

impl MemberIdentity {
    /// The identity of a member built from `lattice` and `exec`.
    pub fn of(lattice: &LatticeConfig, exec: &ExecConfig) -> MemberIdentity {
        MemberIdentity {
            hierarchy: lattice.hierarchy.clone(),
            tiles: exec.tiles.clone(),
            boundaries: lattice.boundaries,
            bodies: lattice.bodies.iter().map(|b| (b.level, shape_kind(&b.shape))).collect(),
            observe_raw_exchange: exec.observe_raw_exchange,
            observe_window_exchange: exec.observe_window_exchange,
            schedule: exec.schedule.clone(),
            stats: exec.stats.clone(),
        }
    }

    /// The first difference between `self` and `other`: what differs, and
    /// both values as text (`self`'s first).
    pub fn difference(&self, other: &MemberIdentity) -> Option<(&'static str, String, String)> {
        /// `what` with `a` and `b` shown by `show`, where they differ.
        fn differs<T: PartialEq>(
            what: &'static str,
            a: &T,
            b: &T,
            show: impl Fn(&T) -> String,
        ) -> Option<(&'static str, String, String)> {
            (a != b).then(|| (what, show(a), show(b)))
        }
        let debug = |v: &dyn std::fmt::Debug| format!("{v:?}");
        // A part of the schedule, or `no schedule` for a member without one.
        let scheduled = |part: Option<String>| part.unwrap_or_else(|| "no schedule".to_owned());
        let part = |s: &MemberIdentity, f: &dyn Fn(&FixedSchedule) -> String| s.schedule.as_ref().map(f);
        let bodies = |bodies: &Vec<(usize, &'static str)>| match bodies.is_empty() {
            true => "none".to_owned(),
            false => bodies
                .iter()
                .map(|(level, shape)| format!("a {shape} on level {level}"))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let intervals = |s: &FixedSchedule| s.intervals.to_string();
        let saves = |s: &FixedSchedule| format!("{:?}", s.save_points);
        let every = |s: &FixedSchedule| s.diagnostics_every.to_string();
        differs(
            "hierarchy (base grid and refinement patches)",
            &self.hierarchy,
            &other.hierarchy,
            |h| h.to_string(),
        )
        .or_else(|| differs("storage tile shape", &self.tiles, &other.tiles, |t| tile_shapes(t)))
        .or_else(|| {
            differs(
                "geometry (boundary kinds)",
                &self.boundaries,
                &other.boundaries,
                side_kinds,
            )
        })
        .or_else(|| {
            differs(
                "geometry (bodies: level and shape)",
                &self.bodies,
                &other.bodies,
                bodies,
            )
        })
        .or_else(|| {
            let observed = |s: &MemberIdentity| (s.observe_raw_exchange, s.observe_window_exchange);
            differs(
                "observables (raw and window exchange)",
                &observed(self),
                &observed(other),
                |o| debug(o),
            )
        })
        .or_else(|| {
            differs(
                "schedule (intervals)",
                &part(self, &intervals),
                &part(other, &intervals),
                |p| scheduled(p.clone()),
            )
        })
        .or_else(|| {
            differs("save points", &part(self, &saves), &part(other, &saves), |p| {
                scheduled(p.clone())
            })
        })
        .or_else(|| {
            differs("diagnostics period", &part(self, &every), &part(other, &every), |p| {
                scheduled(p.clone())
            })
        })
        .or_else(|| differs("statistics request", &self.stats, &other.stats, |s| debug(s)))
    }
}

/// What one member reports when observed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemberObservation {
    pub step_count: u64,
    /// The total mass in base cells.
    pub mass: f64,
    /// Each body's exchange window since the batch started (empty unless the
    /// window is observed).
    pub windows: Vec<ExchangeRecord>,
}

/// What a stepper offers a batch runner. Every call that touches the device
/// waits for it before returning.
pub trait Member {
    /// The backend's short name ("cpu", "cuda", "mock").
    fn backend(&self) -> &'static str;
    /// Base intervals advanced so far.
    fn step_count(&self) -> u64;
    /// What must agree across a batch.
    fn identity(&self) -> MemberIdentity;
    /// Opens (or reopens) the exchange window at the current interval, when
    /// the member observes it; otherwise nothing.
    fn open_window(&self) -> Result<()>;
    /// Enqueues `intervals` base intervals without waiting, so that a batch's
    /// members run side by side; [`Member::finish_advance`] waits.
    fn begin_advance(&self, intervals: u64) -> Result<()>;
    /// Waits for what [`Member::begin_advance`] enqueued.
    fn finish_advance(&self) -> Result<()>;
    /// Every active cell's velocity (x and y interleaved), patch by patch,
    /// level by level: what the diagnostic norm ([`relative_change`] over an
    /// interval) compares.
    fn velocity(&self) -> Result<Vec<f32>>;
    /// The statistics of `spec`, by [`Statistic::name`].
    fn stats(&self, spec: &StatsSpec) -> Result<BTreeMap<String, ArrayD<f64>>>;
    fn observe(&self) -> Result<MemberObservation>;
    fn memory_ledger(&self) -> MemoryLedger;
    /// Free device memory in bytes, as the member's driver reports it.
    fn available_device_memory(&self) -> Result<u64>;
    /// Releases the member's buffers and plans.
    fn close(&self) -> Result<()>;
}

/// Every active cell's velocity, patch by patch, level by level.
fn velocity<D: Driver>(stepper: &Stepper<D>) -> Result<Vec<f32>> {
    let hierarchy = stepper.hierarchy();
    let mut out = Vec::new();
    for (level, patches) in hierarchy.levels.iter().enumerate() {
        for p in 0..patches.len() {
            let fields = stepper.fields(level, p)?;
            out.extend(fields.ux.iter().zip(fields.uy.iter()).flat_map(|(x, y)| [*x, *y]));
        }
    }
    Ok(out)
}

/// The relative L2 change `|after - before| / |after|` in f64, 0 when both
/// are zero: a member's diagnostic norm over an interval.
pub fn relative_change(before: &[f32], after: &[f32]) -> f64 {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (b, a) in before.iter().zip(after) {
        let d = f64::from(*a) - f64::from(*b);
        diff += d * d;
        norm += f64::from(*a) * f64::from(*a);
    }
    if diff == 0.0 && norm == 0.0 {
        return 0.0;
    }
    (diff / norm).sqrt()
}

/// Each level's storage tile as a case's `run.tiles` gives it: `[16, 16]`,
/// or `whole allocation` for a level stored as one tile.
fn tile_shapes(tiles: &[Option<[u32; 2]>]) -> String {
    let shapes: Vec<String> = tiles
        .iter()
        .enumerate()
        .map(|(level, t)| match t {
            Some([x, y]) => format!("level {level} [{x}, {y}]"),
            None => format!("level {level} whole allocation"),
        })
        .collect();
    match shapes.is_empty() {
        true => "the whole allocation on every level".into(),
        false => shapes.join(", "),
    }
}

/// The base grid's sides as a case file names them.
fn side_kinds(sides: &[Boundary; 4]) -> String {
    ["x_min", "x_max", "y_min", "y_max"]
        .iter()
        .zip(sides)
        .map(|(side, b)| format!("{side} {}", b.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn shape_kind(shape: &Shape) -> &'static str {
    match shape {
        Shape::Circle { .. } => "circle",
        Shape::Rectangle { .. } => "rectangle",
        Shape::Polygon { .. } => "polygon",
    }
}

impl<D: Driver> Member for Stepper<D> {
    fn backend(&self) -> &'static str {
        self.backend()
    }

    fn step_count(&self) -> u64 {
        self.step_count()
    }

    fn identity(&self) -> MemberIdentity {
        let (lattice, exec) = self.configuration();
        MemberIdentity::of(&lattice, &exec)
    }

    fn open_window(&self) -> Result<()> {
        match self.configuration().1.observe_window_exchange {
            true => self.start_exchange_window(),
            false => Ok(()),
        }
    }

    fn begin_advance(&self, intervals: u64) -> Result<()> {
        self.begin_step(intervals)
    }

    fn finish_advance(&self) -> Result<()> {
        self.finish_step()
    }

    fn velocity(&self) -> Result<Vec<f32>> {
        velocity(self)
    }

    fn stats(&self, spec: &StatsSpec) -> Result<BTreeMap<String, ArrayD<f64>>> {
        let mut out = BTreeMap::new();
        for statistic in &spec.statistics {
            let value = match *statistic {
                Statistic::Mass => ArrayD::from_shape_vec(IxDyn(&[1]), vec![self.total_mass()?]),
                Statistic::Field { level, patch, quantity } => {
                    let fields = self.fields(level, patch)?;
                    let field = match quantity {
                        FieldQuantity::DeltaRho => fields.delta_rho,
                        FieldQuantity::Ux => fields.ux,
                        FieldQuantity::Uy => fields.uy,
                    };
                    Ok(field.mapv(f64::from).into_dyn())
                }
                Statistic::Exchange { body } => {
                    let r = self.read_raw_exchange(body)?;
                    ArrayD::from_shape_vec(IxDyn(&[3]), vec![r.force[0], r.force[1], r.torque])
                }
            }
            .expect("each statistic's shape holds its values");
            out.insert(statistic.name(), value);
        }
        Ok(out)
    }

    fn observe(&self) -> Result<MemberObservation> {
        let (lattice, exec) = self.configuration();
        let windows = match exec.observe_window_exchange {
            true => (0..lattice.bodies.len())
                .map(|b| self.read_exchange_window(b))
                .collect::<Result<Vec<_>>>()?,
            false => Vec::new(),
        };
        Ok(MemberObservation {
            step_count: self.step_count(),
            mass: self.total_mass()?,
            windows,
        })
    }

    fn memory_ledger(&self) -> MemoryLedger {
        self.memory_ledger()
    }

    fn available_device_memory(&self) -> Result<u64> {
        self.free_device_memory()
    }

    fn close(&self) -> Result<()> {
        self.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_and_diagnostic_points_land_on_multiples_and_the_end() {
        let s = FixedSchedule::new(10, 4).unwrap();
        assert_eq!(s.save_points(), &[4, 8, 10]);
        assert_eq!(s.segments().collect::<Vec<_>>(), vec![4, 4, 2]);
        assert_eq!(s.segments().sum::<u64>(), s.intervals());
        assert_eq!(FixedSchedule::new(6, 3).unwrap().save_points(), &[3, 6]);
        assert_eq!(s.diagnostic_points(), vec![4, 8, 10]);
        let d = s.with_diagnostics_every(3).unwrap();
        assert_eq!(d.diagnostic_points(), vec![3, 6, 9, 10]);
        assert_eq!(d.stops(), vec![3, 4, 6, 8, 9, 10]);
    }

    #[test]
    fn empty_or_inconsistent_schedules_are_refused_naming_the_key() {
        let e = FixedSchedule::new(0, 1).unwrap_err().to_string();
        assert!(e.contains("schedule.intervals") && e.contains("at least 1"), "{e}");
        let e = FixedSchedule::new(5, 6).unwrap_err().to_string();
        assert!(e.contains("schedule.save_every") && e.contains("1..=5"), "{e}");
        let e = FixedSchedule::new(5, 1).unwrap().with_diagnostics_every(0).unwrap_err();
        assert!(e.to_string().contains("schedule.diagnostics_every"), "{e}");
    }

    #[test]
    fn relative_change_is_zero_at_rest_and_scales_with_the_difference() {
        assert_eq!(relative_change(&[0.0; 4], &[0.0; 4]), 0.0);
        let r = relative_change(&[1.0, 0.0], &[1.0, 0.1]);
        assert!((r - 0.1 / (1.01f64).sqrt()).abs() < 1e-7, "{r}");
        assert!(relative_change(&[0.0], &[f32::NAN]).is_nan());
    }

    #[test]
    fn identities_name_their_first_difference() {
        let a = MemberIdentity {
            hierarchy: HierarchySpec {
                base: [32, 32],
                levels: Vec::new(),
            },
            tiles: Vec::new(),
            boundaries: [Boundary::Periodic; 4],
            bodies: Vec::new(),
            observe_raw_exchange: false,
            observe_window_exchange: false,
            schedule: Some(FixedSchedule::new(10, 5).unwrap()),
            stats: StatsSpec::default(),
        };
        assert_eq!(a.difference(&a.clone()), None);
        let mut b = a.clone();
        b.schedule = Some(FixedSchedule::new(10, 2).unwrap());
        assert_eq!(a.difference(&b).unwrap().0, "save points");
        b.hierarchy.base = [32, 16];
        let (what, mine, theirs) = a.difference(&b).unwrap();
        assert!(what.starts_with("hierarchy"), "{what}");
        assert_eq!(
            (mine.as_str(), theirs.as_str()),
            ("base grid 32 x 32 cells", "base grid 32 x 16 cells")
        );
        b.hierarchy.base = a.hierarchy.base;
        b.hierarchy.levels = vec![vec![
            crate::domain::hierarchy::Rect::new(4, 4, 12, 20),
            crate::domain::hierarchy::Rect::new(16, 2, 30, 8),
        ]];
        assert_eq!(
            a.difference(&b).unwrap().2,
            "base grid 32 x 32 cells; level 1 patches x 4..12 y 4..20, x 16..30 y 2..8"
        );
        b.hierarchy = a.hierarchy.clone();
        b.boundaries[3] = Boundary::FreeSlip;
        let (what, mine, theirs) = a.difference(&b).unwrap();
        assert_eq!(what, "geometry (boundary kinds)");
        assert_eq!(mine, "x_min periodic, x_max periodic, y_min periodic, y_max periodic");
        assert!(theirs.ends_with("y_max free_slip"), "{theirs}");
    }
}
