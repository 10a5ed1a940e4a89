//! Configuration of a run in lattice units: the hierarchy to build, the
//! collision model and relaxation time, the domain's boundaries with the
//! inlet's time amplitude, bodies and body force ([`LatticeConfig`]), and how
//! it executes ([`ExecConfig`]). The stability checks refuse, before any work,
//! what would not run.
//!
//! Physical units are the case file's business ([`crate::case`]); nothing here
//! allocates or knows a driver.

use serde::{Deserialize, Serialize};

use crate::domain::geometry::{self, BODY_CLEARANCE, Body};
use crate::domain::hierarchy::{Hierarchy, HierarchySpec, SIDE_NAMES};
use crate::domain::order::inlet_samples;
use crate::domain::sides::PatchSides;
use crate::error::{Error, Result};
use crate::lattice::{Collision, Relaxation};
use crate::ledger::MemoryLedger;

/// What lies beyond one side of a patch's active region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u32)]
pub enum Boundary {
    /// Wrap around to the opposite side.
    Periodic = 0,
    /// Half-way bounce-back wall, moving with the side's wall velocity.
    Wall = 1,
    /// A refined patch's side that is not on the domain's boundary: its ghost
    /// band holds valid populations, filled from the parent.
    Interface = 2,
    /// Velocity inlet (x-min only): bounce-back carrying the inlet profile
    /// times the current amplitude factor, flowing in +x.
    Inlet = 3,
    /// Pressure outlet (x-max only): anti-bounce-back at rest density with the
    /// velocity extrapolated to the boundary. Vortices leave through it; it
    /// pins the mean pressure, so acoustic waves reflect.
    Outflow = 4,
    /// Free-slip wall: populations are mirrored in the wall.
    FreeSlip = 5,
}

impl Boundary {
    /// The kind as a case file's `boundaries` names it (a moving wall is a
    /// wall; an interface is no case side).
    pub fn name(self) -> &'static str {
        match self {
            Boundary::Periodic => "periodic",
            Boundary::Wall => "wall",
            Boundary::Interface => "interface",
            Boundary::Inlet => "inlet",
            Boundary::Outflow => "outflow",
            Boundary::FreeSlip => "free_slip",
        }
    }

    const ALL: [Boundary; 6] = [
        Boundary::Periodic,
        Boundary::Wall,
        Boundary::Interface,
        Boundary::Inlet,
        Boundary::Outflow,
        Boundary::FreeSlip,
    ];

    /// The boundary a kernel code stands for.
    pub fn from_code(code: u32) -> Option<Boundary> {
        Self::ALL.get(code as usize).copied()
    }
}

/// How the inlet amplitude factor varies with time (base intervals in a
/// `LatticeConfig`, seconds in a case file).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Amplitude {
    /// Always 1.
    #[default]
    Constant,
    /// From 0 to 1 linearly over `duration`, then 1.
    Ramp { duration: f64 },
    /// `sin(2π t / period)`.
    Sine { period: f64 },
    /// Piecewise linear through `(t, factor)` points, constant beyond the ends.
    Table { points: Vec<[f64; 2]> },
}

/// The longest ramp or sine period, in base time steps: the device takes
/// the time over it in f32, where a longer one would be a constant.
pub const MAX_AMPLITUDE_STEPS: f64 = 1e12;

impl Amplitude {
    /// The same amplitude with every time multiplied by `scale`.
    pub fn rescaled(&self, scale: f64) -> Amplitude {
        match self {
            Amplitude::Constant => Amplitude::Constant,
            Amplitude::Ramp { duration } => Amplitude::Ramp {
                duration: duration * scale,
            },
            Amplitude::Sine { period } => Amplitude::Sine { period: period * scale },
            Amplitude::Table { points } => Amplitude::Table {
                points: points.iter().map(|[t, f]| [t * scale, *f]).collect(),
            },
        }
    }

    /// Refuses a ramp of no length, a sine period shorter than two time
    /// steps (sampled less than twice a period, it is another, slower wave;
    /// a period of 0 divides by zero on the device), either longer than
    /// [`MAX_AMPLITUDE_STEPS`] time steps, an empty table and a table whose
    /// times go back, naming `key` (the amplitude's dotted key) and `unit`
    /// (its times', in which the base level's time step is `step`).
    pub fn check(&self, key: &str, unit: &str, step: f64) -> Result<()> {
        // Round-off in the time step (1.25e-3 s came out 1.2500000000000002e-3)
        // does not refuse a period of exactly two steps.
        let within = |name: &str, value: f64, least: f64, what: &str| match value >= least * step * (1.0 - 1e-12)
            && value > 0.0
            && value <= MAX_AMPLITUDE_STEPS * step
        {
            true => Ok(()),
            false => Err(Error::parameter(
                &format!("{key}.{name}"),
                value,
                &format!(
                    "{what} up to {MAX_AMPLITUDE_STEPS:e} time steps ({:e} {unit})",
                    MAX_AMPLITUDE_STEPS * step
                ),
            )),
        };
        match self {
            Amplitude::Constant => Ok(()),
            Amplitude::Ramp { duration } => within("ramp.duration", *duration, 0.0, &format!("a time above 0 {unit},")),
            Amplitude::Sine { period } => within(
                "sine.period",
                *period,
                2.0,
                &format!("a period of at least two time steps ({:e} {unit}),", 2.0 * step),
            ),
            Amplitude::Table { points } if points.is_empty() => Err(Error::parameter(
                &format!("{key}.table.points"),
                "[]",
                "at least one [t, factor] row",
            )),
            Amplitude::Table { points } => match points.windows(2).position(|w| w[1][0] < w[0][0]) {
                Some(i) => Err(Error::parameter(
                    &format!("{key}.table.points[{}]", i + 1),
                    format!("t = {} after t = {}", points[i + 1][0], points[i][0]),
                    "times in ascending order (two equal times make a jump)",
                )),
                None => Ok(()),
            },
        }
    }

    /// The largest factor the amplitude reaches, for the Mach number check.
    pub fn peak(&self) -> f64 {
        match self {
            Amplitude::Table { points } => points.iter().map(|p| p[1].abs()).fold(0.0, f64::max),
            _ => 1.0,
        }
    }

    /// Whether the factor turns negative at some time: a sine's second
    /// half-period, a table's negative rows.
    pub fn reverses(&self) -> bool {
        match self {
            Amplitude::Sine { .. } => true,
            Amplitude::Table { points } => points.iter().any(|p| p[1] < 0.0),
            Amplitude::Constant | Amplitude::Ramp { .. } => false,
        }
    }

    /// The kernel's code for the amplitude's kind.
    pub fn code(&self) -> u32 {
        match self {
            Amplitude::Constant => 0,
            Amplitude::Ramp { .. } => 1,
            Amplitude::Sine { .. } => 2,
            Amplitude::Table { .. } => 3,
        }
    }

    /// The kind's one parameter as the kernel takes it (0 when it has none).
    pub fn parameter(&self) -> f32 {
        match self {
            Amplitude::Ramp { duration } => *duration as f32,
            Amplitude::Sine { period } => *period as f32,
            Amplitude::Constant | Amplitude::Table { .. } => 0.0,
        }
    }
}

/// The physics of a run, in lattice units of the base level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatticeConfig {
    pub hierarchy: HierarchySpec,
    pub collision: Collision,
    /// Relaxation time τ⁺ of the base level; finer levels follow from it.
    pub tau: f64,
    /// Body-force density on the base level.
    pub force: [f64; 2],
    /// Base-grid sides in the order x-min, x-max, y-min, y-max.
    pub boundaries: [Boundary; 4],
    /// Velocity of each wall side (ignored for periodic sides).
    pub wall_velocity: [[f64; 2]; 4],
    /// The velocity inlet, required exactly when the x-min side is `Inlet`.
    #[serde(default)]
    pub inlet: Option<InletSpec>,
    pub bodies: Vec<Body>,
}

/// Shape of the inlet velocity across the x-min side.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    Uniform,
    /// `4 U y (H - y) / H²` between walls at y = 0 and y = H (the base height).
    Parabolic,
}

/// A velocity inlet in lattice units; amplitude times are in base intervals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InletSpec {
    pub profile: Profile,
    /// Peak (parabolic) or uniform velocity, lattice units.
    pub velocity: f64,
    pub amplitude: Amplitude,
    /// The base rows `[j0, j1)` the inlet covers; the rest of the side is a
    /// resting wall, and a parabola spans these rows. `None`: the whole side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<[u32; 2]>,
}

impl InletSpec {
    /// The velocities of the base rows as `stream_collide` takes them, three
    /// per row ([`crate::domain::order::inlet_sample`]): the profile at the row's
    /// centre, less and plus half its rise across the row. Rows outside the
    /// span get zeros: the inlet's rule with a zero sample is a resting
    /// wall's bounce-back (it restores no odd non-equilibrium there), so the
    /// side needs no second rule.
    pub fn profile_samples(&self, ny: u32) -> Vec<f32> {
        let [j0, j1] = self.span.unwrap_or([0, ny]);
        let (y0, y1) = (j0 as f64, j1 as f64);
        let h = y1 - y0;
        let at = |y: f64| {
            self.velocity
                * match self.profile {
                    Profile::Uniform => 1.0,
                    Profile::Parabolic => 4.0 * (y - y0) * (y1 - y) / (h * h),
                }
        };
        let samples: Vec<f32> = (0..ny)
            .flat_map(|j| {
                if !(j0..j1).contains(&j) {
                    return [0.0; 3];
                }
                let (low, centre, high) = (at(j as f64), at(j as f64 + 0.5), at(j as f64 + 1.0));
                let half_rise = 0.5 * (high - low);
                [centre - half_rise, centre, centre + half_rise].map(|u| u as f32)
            })
            .collect();
        debug_assert_eq!(samples.len(), inlet_samples(ny));
        samples
    }
}

/// The lowest lattice Mach number (speed / c_s) refused.
pub const MAX_MACH: f64 = 0.3;

/// The local Mach number at which a running flow counts as diverged: callers
/// of [`crate::Stepper::check_health`] pass `DIVERGED_MACH * c_s` (1/√3 in
/// lattice units). The weakly compressible scheme is meaningless at and above
/// the lattice speed of sound: its equilibrium is the low-Mach expansion of
/// the Maxwellian, with errors growing like Ma², and a transonic flow is
/// nothing a scheme for the incompressible limit represents, so a cell that
/// fast is a blow-up under way. It is far above [`MAX_MACH`], which bounds
/// what a configuration may prescribe: local speeds in sound runs exceed that
/// near bodies and must not stop them.
pub const DIVERGED_MACH: f64 = 1.0;

/// The highest τ⁺ any level runs with. As τ grows the viscous time scale
/// shrinks below a step and the scheme's accuracy goes (bounce-back's wall
/// position drifts with τ, the coupling's rebuilt non-equilibrium grows with
/// it); the largest validated is DFG 2D-1 at 320 cells per diameter, whose
/// finest level runs at 2.1 inside every interval (docs/VALIDATION.md). τ − ½
/// doubles with each refinement level, so the finest level meets it first.
pub const MAX_TAU: f64 = 2.5;

/// The largest TRT magic parameter accepted: four times the most stable
/// value (1/4). Beyond it the odd moments barely relax and the flow is
/// wrong without diverging (a magic of 1e12 gave a cylinder's drag a
/// tenth of its value).
pub const MAX_MAGIC: f64 = 1.0;

/// A speed a run reaches, lattice units, with the key that sets it and what
/// lowers it: what [`LatticeConfig::check_stability`] names when it is too fast.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Speed {
    pub key: String,
    pub speed: f64,
    pub remedy: String,
}

/// What [`LatticeConfig::forced_speed`] finds a body force can drive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ForcedSpeed {
    /// The bound over the axes that have one, lattice units.
    pub speed: f64,
    /// How the larger axis was bounded, in words.
    pub bound: &'static str,
    /// Present when only bodies hold the flow along an axis and the speed
    /// the force could reach within the run passes [`MAX_MACH`]: no bound
    /// before the run, so not refused; `lbm check` warns.
    pub held_by_bodies: Option<HeldByBodies>,
}

/// The axes only bodies hold (x, y), and the speed the force could reach
/// within the run, lattice units: F t along those axes, the bound along the
/// others.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeldByBodies {
    pub axes: [bool; 2],
    pub speed: f64,
}

impl LatticeConfig {
    /// An unrefined `nx` x `ny` grid at rest with the default collision, no
    /// force, resting walls, no inlet and no bodies: the start of most tests.
    pub fn uniform(nx: u32, ny: u32, tau: f64, boundaries: [Boundary; 4]) -> Self {
        LatticeConfig {
            hierarchy: HierarchySpec::uniform(nx, ny),
            collision: Collision::default(),
            tau,
            force: [0.0, 0.0],
            boundaries,
            wall_velocity: [[0.0; 2]; 4],
            inlet: None,
            bodies: Vec::new(),
        }
    }

    /// The smallest τ⁺ − ½ the collision model is run with: BGK turns unstable
    /// near τ = ½ much sooner than TRT with its free odd rate.
    pub fn min_tau_excess(&self) -> f64 {
        match self.collision {
            Collision::Bgk {} => 0.01,
            Collision::Trt { .. } => 0.002,
        }
    }

    /// The speeds the configuration itself prescribes, lattice units: the
    /// inlet at its peak amplitude factor and each moving wall, named as
    /// this type's fields are.
    pub fn prescribed_speeds(&self) -> Vec<Speed> {
        let inlet = self.inlet.as_ref().map(|i| Speed {
            key: "inlet.velocity".into(),
            speed: i.velocity.abs() * i.amplitude.peak(),
            remedy: "lower it or the amplitude's peak".into(),
        });
        let walls = (0..4).filter(|&s| self.boundaries[s] == Boundary::Wall).map(|s| Speed {
            key: format!("wall_velocity[{s}] ({} wall)", SIDE_NAMES[s]),
            speed: self.wall_velocity[s][0].hypot(self.wall_velocity[s][1]),
            remedy: "lower it".into(),
        });
        inlet.into_iter().chain(walls).collect()
    }

    /// The fastest speed the body force can drive within `intervals` base
    /// intervals, lattice units, with how it was bounded. An upper bound:
    /// bodies only slow the flow. Along each axis the force accelerates the
    /// fluid freely (F per interval) until something holds it:
    /// - along a periodic axis, friction at the no-slip sides across it (a
    ///   wall, or the inlet, which fixes the transverse velocity): the
    ///   Poiseuille peak F H² / (8ν), with 2H for a channel one of whose sides
    ///   slips (free-slip or outflow); with no no-slip side only the bodies
    ///   can hold it, and how fast a flow through them gets (a periodic array
    ///   of cylinders: its permeability) is not known before the run, so that
    ///   axis is left out of the bound and goes to
    ///   [`ForcedSpeed::held_by_bodies`]; with no body the run's length
    ///   bounds it;
    /// - along a closed or open axis (walls, inlet, outflow), the pressure,
    ///   once sound has crossed the length L: F L / c_s.
    pub fn forced_speed(&self, intervals: u64) -> ForcedSpeed {
        let nu = (self.tau - 0.5) / 3.0;
        let free_reason = "F t: nothing holds the flow along that axis within the run";
        // (bound, why, whether only bodies hold it: then the bound is F t)
        let axis = |k: usize| -> (f64, &'static str, bool) {
            let force = self.force[k].abs();
            let free = force * intervals as f64;
            if force == 0.0 {
                return (0.0, "no force", false);
            }
            let [along, across] = [k, 1 - k].map(|a| [self.boundaries[2 * a], self.boundaries[2 * a + 1]]);
            let (length, height) = (self.hierarchy.base[k] as f64, self.hierarchy.base[1 - k] as f64);
            let held = if along[0] == Boundary::Periodic {
                let no_slip = across
                    .iter()
                    .filter(|b| matches!(b, Boundary::Wall | Boundary::Inlet))
                    .count();
                let slip = across
                    .iter()
                    .filter(|b| matches!(b, Boundary::FreeSlip | Boundary::Outflow))
                    .count();
                match (no_slip, slip) {
                    (2, _) => (
                        force * height * height / (8.0 * nu),
                        "the Poiseuille peak F H^2 / (8 nu) between the walls",
                    ),
                    (1, 1) => (
                        force * height * height / (2.0 * nu),
                        "the Poiseuille peak of a channel twice as wide (one side slips)",
                    ),
                    _ => return (free, free_reason, !self.bodies.is_empty()),
                }
            } else {
                (
                    force * length * 3f64.sqrt(),
                    "F L / c_s: the pressure takes up the force once sound has crossed the domain",
                )
            };
            let (speed, why) = if held.0 < free { held } else { (free, free_reason) };
            (speed, why, false)
        };
        let [x, y] = [axis(0), axis(1)];
        // The axes only bodies hold stay out of what is refused; with them
        // the estimate (F t along them) decides whether to warn, on the
        // whole speed, so that a stronger force never passes where a
        // weaker one was refused.
        let bounded = |a: (f64, &'static str, bool)| if a.2 { (0.0, "no force") } else { (a.0, a.1) };
        let ((ux, why_x), (uy, why_y)) = (bounded(x), bounded(y));
        let estimate = x.0.hypot(y.0);
        let held_by_bodies = (x.2 || y.2)
            .then_some(HeldByBodies {
                axes: [x.2, y.2],
                speed: estimate,
            })
            .filter(|_| estimate * 3f64.sqrt() > MAX_MACH);
        ForcedSpeed {
            speed: ux.hypot(uy),
            bound: if ux >= uy { why_x } else { why_y },
            held_by_bodies,
        }
    }

    /// Refuses, before any work, a run in which one of `speeds` exceeds the
    /// lattice Mach number [`MAX_MACH`] (naming its key), a TRT magic
    /// parameter that is not positive, or a level whose τ⁺ is too close to ½
    /// or above [`MAX_TAU`] (naming the level, the value and what to change).
    pub fn check_stability(&self, speeds: &[Speed]) -> Result<()> {
        let max_speed = MAX_MACH / 3f64.sqrt();
        for s in speeds {
            let mach = s.speed * 3f64.sqrt();
            if mach.is_nan() || mach > MAX_MACH {
                // Four decimals, or a power of ten past them: a force of
                // 1e308 drives a speed of 644 digits.
                let written = match s.speed.abs() < 1e6 {
                    true => format!("lattice speed {:.4}, Mach {mach:.3}", s.speed),
                    false => format!("lattice speed {:.4e}, Mach {mach:.3e}", s.speed),
                };
                return Err(Error::parameter(
                    &s.key,
                    written,
                    &format!(
                        "a lattice Mach number of at most {MAX_MACH} (lattice speed {max_speed:.4}): {}",
                        s.remedy
                    ),
                ));
            }
        }
        if let Collision::Trt { magic } = self.collision
            && !(magic > 0.0 && magic <= MAX_MAGIC)
        {
            return Err(Error::parameter(
                "collision.magic",
                magic,
                &format!(
                    "above 0 and at most {MAX_MAGIC} (it sets tau- = 1/2 + magic / (tau+ - 1/2): 3/16 puts \
                     bounce-back walls half-way, 1/4 is the most stable, 1/12 the least dispersive)"
                ),
            ));
        }
        let min = self.min_tau_excess();
        for level in 0..=self.hierarchy.levels.len() {
            let tau = self.tau_at(level);
            // One at the limit to the rounding of a viscosity given in
            // decimals passes (0.51 came out as 0.50999999...).
            if tau.is_nan() || tau - 0.5 < min * (1.0 - 1e-9) {
                return Err(Error::parameter(
                    &format!("level {level} relaxation time"),
                    format!("{tau:.5}"),
                    &format!(
                        "at least {:.3} for {} collision: raise the resolution or the lattice velocity",
                        0.5 + min,
                        match self.collision {
                            Collision::Bgk {} => "BGK",
                            Collision::Trt { .. } => "TRT",
                        }
                    ),
                ));
            }
        }
        // The finest level over the limit, whose tau is the largest; one
        // at the limit to the rounding passes.
        if let Some(level) = (0..=self.hierarchy.levels.len())
            .rev()
            .find(|&l| self.tau_at(l) > MAX_TAU * (1.0 + 1e-12))
        {
            return Err(Error::parameter(
                &format!("level {level} relaxation time"),
                format!("{:.5}", self.tau_at(level)),
                &format!(
                    "at most {MAX_TAU}, above which the scheme's accuracy goes: lower the lattice \
                     velocity or the resolution, or drop a refinement level (tau - 1/2 doubles per level)"
                ),
            ));
        }
        Ok(())
    }

    /// τ⁺ of `level` for the same physical viscosity: ν doubles per level
    /// under acoustic scaling, so τ_l − ½ = 2^l (τ₀ − ½).
    pub fn tau_at(&self, level: usize) -> f64 {
        0.5 + (self.tau - 0.5) * 2f64.powi(level as i32)
    }

    /// Relaxation and body force of `level` in its own lattice units.
    pub fn level_physics(&self, level: usize) -> LevelPhysics {
        let scale = 0.5f64.powi(level as i32);
        LevelPhysics {
            relaxation: Relaxation::new(self.collision, self.tau_at(level)),
            force: [(self.force[0] * scale) as f32, (self.force[1] * scale) as f32],
        }
    }
}

/// How the run executes and what it observes; no physics here.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecConfig {
    /// Storage tile per level; `None` or missing: the whole allocation.
    pub tiles: Vec<Option<[u32; 2]>>,
    pub observe_raw_exchange: bool,
    pub observe_window_exchange: bool,
    /// The fixed schedule of an ensemble member (`crate::member`); a batch
    /// runner requires one, a plain run ignores it.
    #[serde(default)]
    pub schedule: Option<crate::member::FixedSchedule>,
    /// What an ensemble member reports at each save point.
    #[serde(default)]
    pub stats: crate::member::StatsSpec,
    /// The part of the domain this stepper holds when a run is split over
    /// several devices (`crate::split`); `None`: all of it.
    #[serde(default)]
    pub slab: Option<crate::domain::decompose::SlabWindow>,
}

/// The per-level physics [`LatticeConfig::level_physics`] gives.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LevelPhysics {
    pub relaxation: Relaxation,
    /// Body-force density in this level's lattice units.
    pub force: [f32; 2],
}

/// Cells of its level within which a body's bounds count as touching a side:
/// the round-off of a body placed on a wall in metres, at any spacing (a gap
/// of 1e-12 m is 1e-7 of a cell of 10 µm).
pub(crate) const TOUCHING: f64 = 1e-6;

/// Which sides a body with `gaps` (cells of its level from x-min, x-max,
/// y-min, y-max; negative where it crosses) touches or crosses, among the
/// sides it may meet: resting walls and free-slip sides.
fn touches_walls(boundaries: &[Boundary; 4], wall_velocity: &[[f64; 2]; 4], gaps: [f64; 4]) -> [bool; 4] {
    std::array::from_fn(|s| gaps[s] <= TOUCHING && may_touch(boundaries[s], wall_velocity[s]))
}

/// Whether a body may touch or cross a side of this kind: a resting wall
/// (its rule and the body's never meet on one link) or a free-slip side (a
/// symmetry line, beyond which the body's mirror image stands:
/// [`crate::domain::geometry::wall_tables`]).
fn may_touch(kind: Boundary, velocity: [f64; 2]) -> bool {
    kind == Boundary::FreeSlip || (kind == Boundary::Wall && velocity == [0.0; 2])
}

impl LatticeConfig {
    /// The bodies on `level` with their indices, as
    /// [`geometry::rasterize`] takes them.
    pub fn level_bodies(&self, level: usize) -> Vec<(usize, &geometry::Shape)> {
        self.bodies
            .iter()
            .enumerate()
            .filter(|(_, b)| b.level == level)
            .map(|(i, b)| (i, &b.shape))
            .collect()
    }

    /// The kind of side `side` as a case file names it.
    fn side_name(&self, side: usize) -> &'static str {
        match (self.boundaries[side], self.wall_velocity[side] == [0.0; 2]) {
            (Boundary::Wall, false) => "moving_wall",
            (kind, _) => kind.name(),
        }
    }

    /// Every check a configuration must pass before anything is allocated or
    /// written: the hierarchy with `tiles`, stability, boundaries, the bodies
    /// ([`LatticeConfig::check_bodies`]), and each refined patch's sides. Returns
    /// the validated hierarchy and how each patch's coupling sees its sides.
    pub fn validate(&self, tiles: &[Option<[u32; 2]>]) -> Result<(Hierarchy, Vec<Vec<PatchSides>>)> {
        self.validate_window(tiles, None)
    }

    /// [`LatticeConfig::validate`], then the part of the hierarchy `slab`
    /// holds ([`crate::domain::decompose::SlabWindow::restrict`]).
    pub fn validate_window(
        &self,
        tiles: &[Option<[u32; 2]>],
        slab: Option<&crate::domain::decompose::SlabWindow>,
    ) -> Result<(Hierarchy, Vec<Vec<PatchSides>>)> {
        let hierarchy = self.hierarchy.validate(tiles)?;
        self.check_stability(&self.prescribed_speeds())?;
        self.check_boundaries()?;
        self.check_bodies(hierarchy.n_levels())?;
        self.check_body_levels(&hierarchy)?;
        let wall_velocity = self.wall_velocity.map(|v| v.map(|c| c as f32));
        let sides = hierarchy
            .levels
            .iter()
            .map(|patches| {
                patches
                    .iter()
                    .map(|p| match p.level {
                        // The base grid's sides are its boundaries; it has no coupling.
                        0 => Ok(PatchSides::INTERFACES),
                        _ => PatchSides::of_patch(p, self.boundaries, wall_velocity),
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        match slab {
            Some(window) => window.restrict(&hierarchy, &sides),
            None => Ok((hierarchy, sides)),
        }
    }

    /// The memory a run of this configuration allocates on a CUDA device, by
    /// buffer, as [`crate::schedule::estimate`] gives it before anything is
    /// allocated; refused as [`LatticeConfig::validate`] refuses. (The CPU
    /// backend splits smaller patches' updates: a few bytes per rim cell more.)
    pub fn memory_estimate(&self, exec: &ExecConfig) -> Result<MemoryLedger> {
        let (hierarchy, sides) = self.validate_window(&exec.tiles, exec.slab.as_ref())?;
        Ok(crate::schedule::estimate(
            &hierarchy,
            &sides,
            self,
            exec,
            crate::schedule::BULK_MIN_CELLS,
        ))
    }

    /// Refuses a body under a patch finer than its level. The finer patch's
    /// cells would be fluid where the body is, and each step's restriction
    /// would write that flow into the body's own cells on its level, which
    /// the updates otherwise leave alone (a case file puts each body on the
    /// finest level over it, and refuses one across a finer patch's edge).
    fn check_body_levels(&self, hierarchy: &Hierarchy) -> Result<()> {
        for (b, body) in self.bodies.iter().enumerate() {
            for patch in hierarchy.levels.iter().skip(body.level + 1).flatten() {
                let scale = 2f64.powi(patch.level as i32);
                let [x0, y0, x1, y1] = body.shape.bounds().map(|v| v * scale);
                let [ax0, ay0, ax1, ay1] = patch.global_active().map(|v| v as f64);
                if x1 > ax0 && x0 < ax1 && y1 > ay0 && y0 < ay1 {
                    return Err(Error::Layout {
                        level: patch.level,
                        patch: Some((patch.index, patch.rect)),
                        reason: format!(
                            "it covers bodies[{b}], which is on level {}: a body belongs to the finest level \
                             over it (`bodies[{b}].level` = {}, or move the patch)",
                            body.level, patch.level
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Refuses a body on a level the hierarchy lacks, and one that keeps
    /// fewer than [`BODY_CLEARANCE`] cells of its level from a side of the
    /// domain (periodic ones too: the rasteriser does not wrap) or, on the
    /// finer of their levels, from another body: overlapping or touching
    /// bodies are refused, as the rasteriser gives a shared cell to one of
    /// them and each link's wall distance comes from one outline only, which
    /// would make both the wall and each body's force wrong where they meet
    /// (one polygon makes a compound body).
    ///
    /// A resting wall or a free-slip side is the exception (`touches_walls`):
    /// a body may touch or cross it, as a step stands on a floor or half a
    /// body on a symmetry line. A wall's rule and the body's links never meet
    /// on one link (a link across the wall is the wall's, one into the body
    /// the body's); across a free-slip side a link meets the body's mirror
    /// image. A body that touches two opposite sides is refused, as it would
    /// cut the domain in two.
    pub fn check_bodies(&self, n_levels: usize) -> Result<()> {
        for (b, body) in self.bodies.iter().enumerate() {
            if body.level >= n_levels {
                return Err(Error::parameter(
                    &format!("bodies[{b}].level"),
                    body.level,
                    &format!("a level of the hierarchy, 0..{n_levels}"),
                ));
            }
        }
        let [nx, ny] = self.hierarchy.base.map(f64::from);
        // A gap of exactly the clearance, given in metres, comes out a
        // rounding below it on one side and not the other.
        let short = |gap: f64| gap.is_nan() || gap < BODY_CLEARANCE * (1.0 - 1e-9);
        for (b, body) in self.bodies.iter().enumerate() {
            let scale = 2f64.powi(body.level as i32);
            // Its part in the domain: a body may cross a wall (or is given
            // in code wholly beyond one, which then touches it).
            let [x0, y0, x1, y1] = body
                .shape
                .bounds_within([0.0, 0.0, nx, ny])
                .unwrap_or_else(|| body.shape.bounds());
            let gaps = [x0, nx - x1, y0, ny - y1].map(|g| g * scale);
            let touched = touches_walls(&self.boundaries, &self.wall_velocity, gaps);
            for (side, gap) in gaps.into_iter().enumerate() {
                if short(gap) && !touched[side] {
                    let accepted = match may_touch(self.boundaries[side], self.wall_velocity[side]) {
                        true => format!(
                            "a body that touches or crosses a resting wall or a free-slip side, or keeps at least \
                             {BODY_CLEARANCE} cells of its level from it (a narrower gap is a channel the lattice \
                             hardly resolves): move the body onto the side or away from it, or raise the resolution"
                        ),
                        false => format!(
                            "at least {BODY_CLEARANCE} cells of its level between a body and every side of the \
                             domain but a resting wall or a free-slip side, which it may touch or cross; periodic \
                             sides included: move or shrink the body, or raise the resolution"
                        ),
                    };
                    return Err(Error::parameter(
                        &format!("bodies[{b}]"),
                        format!(
                            "{} the {} side ({})",
                            match gap > 0.0 {
                                true => format!("{gap:.2} cells of level {} from", body.level),
                                false => "touching or crossing".to_owned(),
                            },
                            SIDE_NAMES[side],
                            self.side_name(side)
                        ),
                        &accepted,
                    ));
                }
            }
            if let Some(axis) = (0..2).find(|a| touched[2 * a] && touched[2 * a + 1]) {
                return Err(Error::parameter(
                    &format!("bodies[{b}]"),
                    format!(
                        "touching both the {} and the {} side",
                        SIDE_NAMES[2 * axis],
                        SIDE_NAMES[2 * axis + 1]
                    ),
                    "a body that leaves the fluid a way past it: it may touch one of two opposite sides, as it \
                     would otherwise cut the domain in two",
                ));
            }
            for (other, earlier) in self.bodies[..b].iter().enumerate() {
                let level = body.level.max(earlier.level);
                let gap = body.shape.distance(&earlier.shape) * 2f64.powi(level as i32);
                if short(gap) {
                    return Err(Error::parameter(
                        &format!("bodies[{b}]"),
                        if gap > 0.0 {
                            format!("{gap:.2} cells of level {level} from bodies[{other}]")
                        } else {
                            format!("overlapping or touching bodies[{other}]")
                        },
                        &format!(
                            "at least {BODY_CLEARANCE} cells of the finer level between two bodies (overlapping \
                             bodies are refused: make a compound body one polygon)"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Refuses, naming the side, an inlet off x-min, an outflow off x-max, an
    /// inlet description without an inlet side (or the reverse) or with an
    /// amplitude [`Amplitude::check`] refuses, an interface on the base grid
    /// and a periodic side without its opposite.
    pub fn check_boundaries(&self) -> Result<()> {
        let (boundaries, has_inlet) = (&self.boundaries, self.inlet.is_some());
        for (side, boundary) in boundaries.iter().enumerate() {
            let allowed = match boundary {
                Boundary::Inlet => side == 0,
                Boundary::Outflow => side == 1,
                _ => true,
            };
            if !allowed {
                // Named as the case file names the side and its kind.
                return Err(Error::parameter(
                    &format!("boundaries.{}", SIDE_NAMES[side]),
                    boundary.name(),
                    "an inlet only on x_min and an outflow only on x_max",
                ));
            }
        }
        if (boundaries[0] == Boundary::Inlet) != has_inlet {
            return Err(Error::parameter(
                "inlet",
                if has_inlet { "given" } else { "missing" },
                "an inlet description exactly when x_min is an inlet",
            ));
        }
        if let Some(inlet) = &self.inlet {
            inlet.amplitude.check("inlet.amplitude", "base intervals", 1.0)?;
        }
        for (axis, pair) in [("x", [0, 1]), ("y", [2, 3])] {
            let [a, b] = pair.map(|s| boundaries[s]);
            if a == Boundary::Interface || b == Boundary::Interface {
                return Err(Error::parameter(
                    "boundaries",
                    format!("{axis} side interface"),
                    "base sides are periodic, wall, inlet, outflow or free_slip",
                ));
            }
            if (a == Boundary::Periodic) != (b == Boundary::Periodic) {
                // Named as the side that is not periodic.
                let other = if a == Boundary::Periodic { pair[1] } else { pair[0] };
                return Err(Error::parameter(
                    &format!("boundaries.{}", SIDE_NAMES[other]),
                    boundaries[other].name(),
                    &format!(
                        "periodic, as its opposite side is: periodic sides come in pairs, both sides of the {axis} \
                         axis periodic or neither"
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 32 x 16 channel with an inlet of `amplitude`.
    fn channel(amplitude: Amplitude) -> LatticeConfig {
        LatticeConfig {
            inlet: Some(InletSpec {
                profile: Profile::Uniform,
                velocity: 0.05,
                amplitude,
                span: None,
            }),
            ..LatticeConfig::uniform(
                32,
                16,
                0.8,
                [Boundary::Inlet, Boundary::Outflow, Boundary::Wall, Boundary::Wall],
            )
        }
    }

    /// A span over the whole side gives the whole side's samples bit for
    /// bit; a shorter one gives its rows the profile over the span (its
    /// centre samples sum to the profile's flux) and the others zeros.
    #[test]
    fn an_inlet_span_puts_its_profile_on_its_rows_and_zeros_elsewhere() {
        for profile in [Profile::Uniform, Profile::Parabolic] {
            let inlet = |span| InletSpec {
                profile,
                velocity: 0.05,
                amplitude: Amplitude::Constant,
                span,
            };
            let bits = |v: Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(inlet(Some([0, 24])).profile_samples(24)),
                bits(inlet(None).profile_samples(24))
            );
            let samples = inlet(Some([6, 18])).profile_samples(24);
            let rows: Vec<&[f32]> = samples.chunks(3).collect();
            assert!(rows[..6].iter().chain(&rows[18..]).all(|r| r.iter().all(|u| *u == 0.0)));
            assert!(rows[6..18].iter().all(|r| r.iter().all(|u| *u > 0.0)), "{rows:?}");
            let flux: f64 = rows[6..18].iter().map(|r| r[1] as f64).sum();
            // The rows' centre values: on a parabola over 12 rows the
            // midpoint rule gives 1 + 1 / (2 · 12²) of its integral.
            let want = match profile {
                Profile::Uniform => 12.0 * 0.05,
                Profile::Parabolic => 12.0 * 0.05 * 2.0 / 3.0 * (1.0 + 1.0 / 288.0),
            };
            assert!((flux / want - 1.0).abs() < 1e-6, "{profile:?}: {flux} against {want}");
            let whole: Vec<f32> = inlet(None).profile_samples(12);
            let own: Vec<f32> = samples[18..54].to_vec();
            assert_eq!(
                bits(own),
                bits(whole),
                "{profile:?}: the span's rows as a side of their own"
            );
        }
    }

    /// BGK's least τ⁺, 0.51, passes as a viscosity in decimals rounds it
    /// (a few ulps below), and a step below it is refused.
    #[test]
    fn bgk_at_its_least_tau_to_the_rounding_passes() {
        let at = |tau: f64| LatticeConfig {
            collision: Collision::Bgk {},
            ..LatticeConfig::uniform(8, 8, tau, [Boundary::Periodic; 4])
        };
        let rounded = 0.51 - 4.0 * f64::EPSILON;
        assert!(rounded < 0.51, "{rounded}");
        at(rounded).check_stability(&[]).unwrap();
        let below = at(0.5099).check_stability(&[]).unwrap_err().to_string();
        assert!(below.contains("at least 0.510 for BGK"), "{below}");
    }

    #[test]
    fn bodies_near_a_side_or_each_other_are_refused_in_cells_of_their_level() {
        use crate::domain::geometry::Shape;
        let circle = |x: f64, y: f64| Body {
            shape: Shape::Circle {
                center: [x, y],
                radius: 2.0,
            },
            level: 0,
        };
        let mut lattice = LatticeConfig::uniform(32, 16, 0.8, [Boundary::Periodic; 4]);
        lattice.bodies = vec![circle(6.0, 8.0), circle(16.0, 8.0)];
        assert!(lattice.check_bodies(1).is_ok());
        lattice.bodies[0] = circle(3.0, 8.0);
        let e = lattice.check_bodies(1).unwrap_err().to_string();
        assert!(
            e.contains("`bodies[0]` = 1.00 cells of level 0 from the x_min side (periodic)"),
            "{e}"
        );
        lattice.bodies[0] = circle(13.0, 8.0);
        let e = lattice.check_bodies(1).unwrap_err().to_string();
        assert!(e.contains("`bodies[1]` = overlapping or touching bodies[0]"), "{e}");
        lattice.bodies[1].level = 1;
        let e = lattice.check_bodies(1).unwrap_err().to_string();
        assert!(
            e.contains("`bodies[1].level` = 1: a level of the hierarchy, 0..1"),
            "{e}"
        );
    }

    #[test]
    fn a_body_under_a_patch_finer_than_its_level_is_refused_naming_both() {
        use crate::domain::geometry::Shape;
        use crate::domain::hierarchy::Rect;
        let mut lattice = LatticeConfig::uniform(48, 40, 0.8, [Boundary::Wall; 4]);
        lattice.hierarchy.levels = vec![vec![Rect::new(8, 8, 24, 24)], vec![Rect::new(24, 24, 40, 40)]];
        let circle = |x: f64, level: usize| Body {
            shape: Shape::Circle {
                center: [x, 16.0],
                radius: 1.5,
            },
            level,
        };
        // On level 2, inside the level-2 patch; on level 1 beside it.
        for body in [circle(16.0, 2), circle(10.0, 1)] {
            lattice.bodies = vec![body];
            assert!(lattice.validate(&[]).is_ok());
        }
        // On level 1 or 0 under it, and on level 0 under the level-1 patch alone.
        for (body, level) in [(circle(16.0, 1), 2), (circle(16.0, 0), 1), (circle(10.0, 0), 1)] {
            lattice.bodies = vec![body];
            let e = lattice.validate(&[]).map(|_| ()).unwrap_err().to_string();
            assert!(e.contains(&format!("level {level} patch 0")), "{e}");
            assert!(e.contains("it covers bodies[0], which is on level"), "{e}");
            assert!(e.contains(&format!("`bodies[0].level` = {level}")), "{e}");
        }
    }

    #[test]
    fn a_speed_over_the_mach_limit_names_the_field_that_sets_it() {
        let mut lattice = LatticeConfig::uniform(32, 16, 0.8, [Boundary::Wall; 4]);
        lattice.wall_velocity[3] = [0.1, 0.1];
        assert!(lattice.validate(&[]).is_ok());
        lattice.wall_velocity[3] = [0.15, 0.15];
        let e = lattice.validate(&[]).map(|_| ()).unwrap_err().to_string();
        assert!(
            e.contains("`wall_velocity[3] (y_max wall)` = lattice speed 0.2121, Mach 0.367"),
            "{e}"
        );
        let e = channel(Amplitude::Table {
            points: vec![[0.0, 0.0], [10.0, 4.0]],
        })
        .validate(&[])
        .map(|_| ())
        .unwrap_err()
        .to_string();
        assert!(e.contains("`inlet.velocity` = lattice speed 0.2000"), "{e}");
    }

    #[test]
    fn an_inlet_amplitude_of_no_length_is_refused_in_base_intervals() {
        assert!(channel(Amplitude::Sine { period: 40.0 }).check_boundaries().is_ok());
        assert!(channel(Amplitude::Sine { period: 2.0 }).check_boundaries().is_ok());
        for (amplitude, expect) in [
            (
                Amplitude::Ramp { duration: 0.0 },
                "`inlet.amplitude.ramp.duration` = 0: a time above 0 base intervals, up to 1e12 time steps",
            ),
            (
                Amplitude::Sine { period: -3.0 },
                "`inlet.amplitude.sine.period` = -3: a period of at least two time steps (2e0 base intervals)",
            ),
            (
                Amplitude::Table { points: vec![] },
                "`inlet.amplitude.table.points` = []",
            ),
        ] {
            let e = channel(amplitude).check_boundaries().unwrap_err().to_string();
            assert!(e.contains(expect), "{e}");
        }
    }
}
