//! `Stepper<D>`: owns a hierarchy's device buffers, boundary tables and ledgers,
//! and advances it by base intervals through a [`Driver`].
//!
//! Contract (DESIGN.md §4): `step(n)` enqueues n intervals on the one stream and
//! waits once, at the end; `step(0)` launches and waits for nothing. On any error
//! the stepper is `Failed`: the exchange ledger and window are invalid,
//! `step_count` keeps its value from entry, and every later read, step or download
//! says the stepper failed. Device errors surfacing at the single wait are not
//! attributed to an interval; `step(1)` repeatedly localises one. The stepper does
//! no physics itself: it only allocates, uploads and replays the [`HopPlan`].

use std::sync::{Mutex, MutexGuard};

use ndarray::Array2;
use serde::{Deserialize, Serialize};

use crate::device::{BufferId, Driver};
use crate::error::{Error, Result};
use crate::geometry::{self, Body};
use crate::hierarchy::{Hierarchy, HierarchySpec, Patch};
use crate::lattice::{self, Collision, Moments, Q, Relaxation};
use crate::launch::{
    Amplitude, EXCHANGE_WORDS, Edge, LINK_WORDS, PatchSides, UpdateBoundaryState, fine_covered, inlet_samples,
    ring_cells,
};
use crate::ledger::{ExchangeRecord, MemoryLedger};
use crate::plan::{
    Accumulators, Action, BoundaryBuffers, ExchangeBuffers, HopPlan, LevelPhysics, PatchBuffers, PlanInputs,
    patch_sides,
};

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
    pub edges: [Edge; 4],
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
}

impl InletSpec {
    /// The velocities of the base rows as `stream_collide` takes them, three
    /// per row ([`crate::launch::inlet_sample`]): the profile at the row's
    /// centre, less and plus half its rise across the row.
    pub fn profile_samples(&self, ny: u32) -> Vec<f32> {
        let h = ny as f64;
        let at = |y: f64| {
            self.velocity
                * match self.profile {
                    Profile::Uniform => 1.0,
                    Profile::Parabolic => 4.0 * y * (h - y) / (h * h),
                }
        };
        let samples: Vec<f32> = (0..ny)
            .flat_map(|j| {
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

impl LatticeConfig {
    /// An unrefined `nx` x `ny` grid at rest with the default collision, no
    /// force, resting walls, no inlet and no bodies: the start of most tests.
    pub fn uniform(nx: u32, ny: u32, tau: f64, edges: [Edge; 4]) -> Self {
        LatticeConfig {
            hierarchy: HierarchySpec::uniform(nx, ny),
            collision: Collision::default(),
            tau,
            force: [0.0, 0.0],
            edges,
            wall_velocity: [[0.0; 2]; 4],
            inlet: None,
            bodies: Vec::new(),
        }
    }

    /// The smallest τ⁺ − ½ the collision model is run with: BGK turns unstable
    /// near τ = ½ much sooner than TRT with its free odd rate.
    pub fn min_tau_excess(&self) -> f64 {
        match self.collision {
            Collision::Bgk => 0.01,
            Collision::Trt { .. } => 0.002,
        }
    }

    /// The fastest speed the configuration itself prescribes (inlet at its
    /// peak amplitude, moving walls), lattice units.
    pub fn prescribed_speed(&self) -> f64 {
        let inlet = self
            .inlet
            .as_ref()
            .map_or(0.0, |i| i.velocity.abs() * i.amplitude.peak());
        self.wall_velocity
            .iter()
            .zip(self.edges)
            .filter(|(_, e)| *e == Edge::Wall)
            .map(|(v, _)| v[0].hypot(v[1]))
            .fold(inlet, f64::max)
    }

    /// Refuses, before any work, a run whose lattice Mach number for
    /// `max_speed` exceeds [`MAX_MACH`] or whose τ⁺ on some level is too close
    /// to ½, naming the level and the number and what to change.
    pub fn check_stability(&self, max_speed: f64) -> Result<()> {
        let mach = max_speed * 3f64.sqrt();
        if mach > MAX_MACH {
            return Err(Error::parameter(
                "lattice Mach number",
                format!("{mach:.3} (speed {max_speed:.4} / c_s)"),
                &format!("at most {MAX_MACH}: lower the lattice velocity"),
            ));
        }
        let min = self.min_tau_excess();
        for level in 0..=self.hierarchy.levels.len() {
            let tau = self.tau_at(level);
            if tau.is_nan() || tau - 0.5 < min {
                return Err(Error::parameter(
                    &format!("level {level} relaxation time"),
                    format!("{tau:.5}"),
                    &format!(
                        "at least {:.3} for {:?}: raise the resolution or the lattice velocity",
                        0.5 + min,
                        self.collision
                    ),
                ));
            }
        }
        Ok(())
    }

    /// τ⁺ of `level` for the same physical viscosity: ν doubles per level
    /// under acoustic scaling, so τ_l − ½ = 2^l (τ₀ − ½).
    pub fn tau_at(&self, level: usize) -> f64 {
        0.5 + (self.tau - 0.5) * 2f64.powi(level as i32)
    }

    fn level_physics(&self, level: usize) -> LevelPhysics {
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Status {
    Ready,
    Advancing,
    Failed,
    Closed,
}

/// Density and velocity of a patch's active region, indexed `[y, x]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Fields {
    pub delta_rho: Array2<f32>,
    pub ux: Array2<f32>,
    pub uy: Array2<f32>,
}

struct Inner<D: Driver> {
    driver: D,
    lattice: LatticeConfig,
    exec: ExecConfig,
    hierarchy: Hierarchy,
    physics: Vec<LevelPhysics>,
    /// How each patch's coupling sees its sides, indexed like the hierarchy.
    sides: Vec<Vec<PatchSides>>,
    buffers: Vec<Vec<PatchBuffers>>,
    exchange: Vec<ExchangeBuffers>,
    accumulators: Vec<Accumulators>,
    /// Body indices in each level's accumulator slot order.
    body_slots: Vec<Vec<usize>>,
    boundary: BoundaryBuffers,
    plan: HopPlan,
    status: Status,
    step_count: u64,
    exchange_valid: bool,
    window_start: Option<u64>,
    window_valid: bool,
    memory: MemoryLedger,
    allocated: Vec<BufferId>,
}

/// Advances a refined lattice through a [`Driver`]; see the module documentation.
pub struct Stepper<D: Driver> {
    inner: Mutex<Inner<D>>,
}

impl<D: Driver> Stepper<D> {
    /// Validates the configuration, allocates every buffer, uploads flags and
    /// link tables, fills the lattice at rest and builds the hop plan.
    pub fn new(driver: D, lattice: LatticeConfig, exec: ExecConfig) -> Result<Self> {
        let hierarchy = lattice.hierarchy.validate(&exec.tiles)?;
        lattice.check_stability(lattice.prescribed_speed())?;
        check_edges(&lattice.edges, lattice.inlet.is_some())?;
        for (b, body) in lattice.bodies.iter().enumerate() {
            if body.level >= hierarchy.n_levels() {
                return Err(Error::parameter(
                    &format!("bodies[{b}].level"),
                    body.level,
                    &format!("a level of the hierarchy, 0..{}", hierarchy.n_levels()),
                ));
            }
        }
        let physics = (0..hierarchy.n_levels()).map(|l| lattice.level_physics(l)).collect();
        let wall_velocity = lattice.wall_velocity.map(|v| v.map(|c| c as f32));
        let sides = hierarchy
            .levels
            .iter()
            .map(|patches| {
                patches
                    .iter()
                    .map(|p| match p.level {
                        // The base grid's sides are its edges; it has no coupling.
                        0 => Ok(PatchSides::INTERFACES),
                        _ => patch_sides(p, lattice.edges, wall_velocity),
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        let mut inner = Inner {
            driver,
            hierarchy,
            physics,
            sides,
            buffers: Vec::new(),
            exchange: Vec::new(),
            accumulators: Vec::new(),
            body_slots: Vec::new(),
            boundary: BoundaryBuffers {
                inlet_profile: BufferId(u32::MAX),
                state: BufferId(u32::MAX),
                update: None,
            },
            plan: HopPlan {
                intervals: [Vec::new(), Vec::new()],
            },
            status: Status::Ready,
            step_count: 0,
            exchange_valid: false,
            window_start: None,
            window_valid: false,
            memory: MemoryLedger::default(),
            allocated: Vec::new(),
            lattice,
            exec,
        };
        if let Err(e) = inner.allocate() {
            // The allocation error is the one to report; a failure to free what
            // was allocated before it adds nothing the caller could act on.
            let _ = inner.release();
            return Err(e);
        }
        inner.plan = HopPlan::build(&PlanInputs {
            hierarchy: &inner.hierarchy,
            buffers: &inner.buffers,
            sides: &inner.sides,
            physics: &inner.physics,
            base_edges: inner.lattice.edges,
            wall_velocity: inner.lattice.wall_velocity.map(|v| v.map(|c| c as f32)),
            boundary: &inner.boundary,
            exchange: &inner.exchange,
            accumulators: &inner.accumulators,
            zero_interval: inner.exec.observe_raw_exchange,
            accumulate: inner.exec.observe_raw_exchange || inner.exec.observe_window_exchange,
        });
        let stepper = Stepper {
            inner: Mutex::new(inner),
        };
        stepper.initialize(|_, _, _| Moments::default())?;
        Ok(stepper)
    }

    fn lock(&self) -> MutexGuard<'_, Inner<D>> {
        // A panic inside a driver poisons the lock; the state is still
        // consistent enough to report `Failed`, so recover the guard.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn status(&self) -> Status {
        self.lock().status
    }

    pub fn step_count(&self) -> u64 {
        self.lock().step_count
    }

    pub fn hierarchy(&self) -> Hierarchy {
        self.lock().hierarchy.clone()
    }

    pub fn plan(&self) -> HopPlan {
        self.lock().plan.clone()
    }

    pub fn memory_ledger(&self) -> MemoryLedger {
        self.lock().memory.clone()
    }

    /// Sets every cell of every level to the equilibrium of `init(level, x, y)`,
    /// where (x, y) is the cell centre in base lattice units.
    pub fn initialize(&self, init: impl Fn(usize, f64, f64) -> Moments) -> Result<()> {
        let mut inner = self.lock();
        inner.require_ready("initialize")?;
        let result = inner.upload_state(&init);
        if result.is_err() {
            inner.fail();
        }
        result
    }

    /// Advances `n` base intervals with one wait at the end; see the module docs.
    pub fn step(&self, n: u64) -> Result<()> {
        let mut inner = self.lock();
        inner.require_ready("step")?;
        if n == 0 {
            return Ok(());
        }
        inner.status = Status::Advancing;
        inner.exchange_valid = false;
        match inner.enqueue(n).and_then(|()| inner.driver.synchronize()) {
            Ok(()) => {
                inner.step_count += n;
                inner.exchange_valid = inner.exec.observe_raw_exchange;
                inner.status = Status::Ready;
                Ok(())
            }
            Err(e) => {
                inner.fail();
                Err(e)
            }
        }
    }

    /// Opens (or reopens) the exchange window at the current step.
    pub fn start_exchange_window(&self) -> Result<()> {
        let mut inner = self.lock();
        inner.require_ready("start an exchange window")?;
        if !inner.exec.observe_window_exchange {
            return Err(Error::NotAvailable {
                what: "exchange window".into(),
                reason: "the stepper was built without observe_window_exchange".into(),
            });
        }
        let zeroes: Vec<(BufferId, usize)> = inner
            .accumulators
            .iter()
            .filter_map(|a| a.window.map(|w| (w, a.bytes)))
            .collect();
        for (buffer, bytes) in zeroes {
            if let Err(e) = inner.driver.memset_async(buffer, 0, bytes, 0) {
                inner.fail();
                return Err(e);
            }
        }
        inner.window_start = Some(inner.step_count);
        inner.window_valid = true;
        Ok(())
    }

    /// The momentum exchange on `body` over the last completed interval.
    pub fn read_raw_exchange(&self, body: usize) -> Result<ExchangeRecord> {
        let mut inner = self.lock();
        inner.require_ready("read the raw exchange")?;
        if !inner.exec.observe_raw_exchange {
            return Err(Error::NotAvailable {
                what: "raw exchange".into(),
                reason: "the stepper was built without observe_raw_exchange".into(),
            });
        }
        if !inner.exchange_valid {
            return Err(Error::NotCompleted {
                what: "the raw exchange".into(),
            });
        }
        let end = inner.step_count;
        inner.read_exchange(body, end - 1, end, false)
    }

    /// The momentum exchange on `body` since `start_exchange_window`.
    pub fn read_exchange_window(&self, body: usize) -> Result<ExchangeRecord> {
        let mut inner = self.lock();
        inner.require_ready("read the exchange window")?;
        let (Some(start), true) = (inner.window_start, inner.window_valid) else {
            return Err(Error::NotAvailable {
                what: "exchange window".into(),
                reason: "no window is open; call start_exchange_window first".into(),
            });
        };
        let end = inner.step_count;
        inner.read_exchange(body, start, end, true)
    }

    /// Density and velocity of one patch's active region.
    pub fn fields(&self, level: usize, patch: usize) -> Result<Fields> {
        let mut inner = self.lock();
        inner.require_ready("download")?;
        inner.fields(level, patch)
    }

    /// Raw shifted populations (`f_i - w_i`) of one patch's current buffer, in
    /// storage order, nine planes.
    pub fn download(&self, level: usize, patch: usize) -> Result<Vec<f32>> {
        let mut inner = self.lock();
        inner.require_ready("download")?;
        inner.download_current(level, patch)
    }

    /// Density minus one at `point` (base lattice units) on a body surface or a
    /// wall, seen from the fluid side `outward` (a unit axis vector pointing
    /// from the surface into the fluid): taken on the finest patch holding the
    /// point, interpolated linearly across the axis and extrapolated linearly
    /// along it from the first two fluid cell centres.
    pub fn surface_density(&self, point: [f64; 2], outward: [i32; 2]) -> Result<f64> {
        let mut inner = self.lock();
        inner.require_ready("download")?;
        let (level, index) = inner.finest_patch_at(point)?;
        let fields = inner.fields(level, index)?;
        let patch = &inner.hierarchy.levels[level][index];
        let scale = 2f64.powi(level as i32);
        let [gx0, gy0, _, _] = patch.global_active();
        // Active-region coordinates in which cell (i, j) has its centre at (i, j).
        let local = [point[0] * scale - gx0 as f64 - 0.5, point[1] * scale - gy0 as f64 - 0.5];
        let along = if outward[0] != 0 { 0 } else { 1 };
        let across = 1 - along;
        let sign = (outward[0] + outward[1]) as f64;
        let base = local[across].floor();
        let weight = local[across] - base;
        let solid = |c: [f64; 2]| {
            let p = [(c[0] + gx0 as f64 + 0.5) / scale, (c[1] + gy0 as f64 + 0.5) / scale];
            inner.lattice.bodies.iter().any(|b| b.shape.contains(p))
        };
        let (h, w) = fields.delta_rho.dim();
        let mut value = 0.0;
        for (offset, share) in [(0.0, 1.0 - weight), (1.0, weight)] {
            // The first two fluid cell centres beyond the point along the normal.
            let mut samples = Vec::with_capacity(2);
            let mut k = (sign * local[along]).floor() * sign;
            while samples.len() < 2 {
                k += sign;
                let mut c = [0.0; 2];
                c[along] = k;
                c[across] = base + offset;
                if c[0] < 0.0 || c[1] < 0.0 || c[0] >= w as f64 || c[1] >= h as f64 {
                    return Err(Error::NotAvailable {
                        what: format!("surface density at ({:.3}, {:.3})", point[0], point[1]),
                        reason: "the fluid cells beside it leave the patch; refine around the point".into(),
                    });
                }
                if !solid(c) {
                    samples.push((k, fields.delta_rho[(c[1] as usize, c[0] as usize)] as f64));
                }
            }
            let [(k1, d1), (k2, d2)] = [samples[0], samples[1]];
            value += share * (d1 + (d2 - d1) * (local[along] - k1) / (k2 - k1));
        }
        Ok(value)
    }

    /// Total mass in base-cell units: every level's active cells not covered by
    /// a finer patch, each weighted by its area `4^-level`.
    pub fn total_mass(&self) -> Result<f64> {
        let mut inner = self.lock();
        inner.require_ready("download")?;
        let mut excess = 0.0f64;
        let mut volume = 0.0f64;
        for level in 0..inner.hierarchy.n_levels() {
            let area = 0.25f64.powi(level as i32);
            for p in 0..inner.hierarchy.levels[level].len() {
                let fields = inner.fields(level, p)?;
                let patch = &inner.hierarchy.levels[level][p];
                let [gx0, gy0, _, _] = patch.global_active();
                let children: Vec<[i64; 4]> = inner
                    .hierarchy
                    .levels
                    .get(level + 1)
                    .map(|c| {
                        c.iter()
                            .filter(|c| c.parent == Some(p))
                            .map(|c| [c.rect.x0, c.rect.y0, c.rect.x1, c.rect.y1].map(i64::from))
                            .collect()
                    })
                    .unwrap_or_default();
                for ((y, x), d) in fields.delta_rho.indexed_iter() {
                    let (gx, gy) = (gx0 + x as i64, gy0 + y as i64);
                    if children
                        .iter()
                        .any(|r| gx >= r[0] && gx < r[2] && gy >= r[1] && gy < r[3])
                    {
                        continue;
                    }
                    excess += *d as f64 * area;
                    volume += area;
                }
            }
        }
        Ok(volume + excess)
    }

    /// Frees every buffer; the stepper then refuses everything but `status`.
    pub fn close(&self) -> Result<()> {
        let mut inner = self.lock();
        if inner.status == Status::Closed {
            return Ok(());
        }
        let result = inner.release();
        inner.status = Status::Closed;
        result
    }
}

impl<D: Driver> Drop for Stepper<D> {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; `close` reports them.
        let _ = self.close();
    }
}

fn check_edges(edges: &[Edge; 4], has_inlet: bool) -> Result<()> {
    const SIDES: [&str; 4] = ["x_min", "x_max", "y_min", "y_max"];
    for (side, edge) in edges.iter().enumerate() {
        let allowed = match edge {
            Edge::Inlet => side == 0,
            Edge::Outflow => side == 1,
            _ => true,
        };
        if !allowed {
            return Err(Error::parameter(
                SIDES[side],
                format!("{edge:?}"),
                "an inlet only on x_min and an outflow only on x_max",
            ));
        }
    }
    if (edges[0] == Edge::Inlet) != has_inlet {
        return Err(Error::parameter(
            "inlet",
            if has_inlet { "given" } else { "missing" },
            "an inlet description exactly when x_min is an inlet",
        ));
    }
    for (axis, pair) in [("x", [0, 1]), ("y", [2, 3])] {
        let [a, b] = pair.map(|s| edges[s]);
        if a == Edge::Ghost || b == Edge::Ghost {
            return Err(Error::parameter(
                "edges",
                format!("{axis} side ghost"),
                "base sides are periodic or wall",
            ));
        }
        if (a == Edge::Periodic) != (b == Edge::Periodic) {
            return Err(Error::parameter(
                "edges",
                format!("{axis}: {a:?} and {b:?}"),
                "periodic sides come in pairs: both sides of an axis periodic or neither",
            ));
        }
    }
    Ok(())
}

impl<D: Driver> Inner<D> {
    fn require_ready(&self, action: &str) -> Result<()> {
        match self.status {
            Status::Ready => Ok(()),
            Status::Failed | Status::Advancing => Err(Error::Failed { action: action.into() }),
            Status::Closed => Err(Error::Closed { action: action.into() }),
        }
    }

    fn fail(&mut self) {
        self.status = Status::Failed;
        self.exchange_valid = false;
        self.window_valid = false;
    }

    fn alloc(&mut self, label: String, bytes: usize) -> Result<BufferId> {
        let id = self.driver.alloc(&label, bytes)?;
        self.allocated.push(id);
        self.memory.add(label, bytes as u64);
        Ok(id)
    }

    fn allocate(&mut self) -> Result<()> {
        self.allocate_boundary()?;
        let patches: Vec<Patch> = self.hierarchy.patches().cloned().collect();
        let bodies = self.lattice.bodies.clone();
        self.body_slots = vec![Vec::new(); self.hierarchy.n_levels()];
        for (b, body) in bodies.iter().enumerate() {
            self.body_slots[body.level].push(b);
        }
        for patch in &patches {
            let name = patch.name();
            let plane = patch.layout.plane_cells();
            let f_bytes = Q * plane * 4;
            let f = [
                self.alloc(format!("{name}.f.a"), f_bytes)?,
                self.alloc(format!("{name}.f.b"), f_bytes)?,
            ];
            let level_bodies: Vec<(usize, &geometry::Shape)> = bodies
                .iter()
                .enumerate()
                .filter(|(_, b)| b.level == patch.level)
                .map(|(i, b)| (i, &b.shape))
                .collect();
            let (mask, owner) = geometry::rasterize(patch, &level_bodies);
            let flags = self.alloc(format!("{name}.flags"), plane)?;
            self.driver.upload(flags, 0, &mask)?;
            if self.buffers.len() <= patch.level {
                self.buffers.push(Vec::new());
            }
            let flux = if patch.level > 0 {
                let cells = ring_cells(&fine_covered(&patch.layout), self.sides[patch.level][patch.index].kinds);
                Some(self.alloc(format!("{name}.interface_flux"), cells * 4)?)
            } else {
                None
            };
            let slots = &self.body_slots[patch.level];
            let tables = geometry::wall_tables(patch, &owner, &level_bodies, |b| {
                slots.iter().position(|s| *s == b).expect("body has a slot") as u32
            });
            let wall_distance = if tables.links.is_empty() {
                None
            } else {
                let buffer = self.alloc(format!("{name}.wall_distance"), tables.wall_distance.len() * 4)?;
                self.driver
                    .upload(buffer, 0, bytemuck::cast_slice(&tables.wall_distance))?;
                Some(buffer)
            };
            self.buffers[patch.level].push(PatchBuffers {
                f,
                flags,
                flux,
                wall_distance,
            });
            let table = tables.links;
            if !table.is_empty() {
                let links = self.alloc(format!("{name}.links"), table.len() * 4)?;
                self.driver.upload(links, 0, bytemuck::cast_slice(&table))?;
                self.exchange.push(ExchangeBuffers {
                    level: patch.level,
                    patch: patch.index,
                    links,
                    n_links: (table.len() / LINK_WORDS) as u32,
                });
            }
        }
        let observe = self.exec.observe_raw_exchange || self.exec.observe_window_exchange;
        for level in 0..self.hierarchy.n_levels() {
            if !observe || self.body_slots[level].is_empty() {
                continue;
            }
            let bytes = self.body_slots[level].len() * EXCHANGE_WORDS * 8;
            let interval = self.alloc(format!("L{level}.exchange.interval"), bytes)?;
            let window = if self.exec.observe_window_exchange {
                Some(self.alloc(format!("L{level}.exchange.window"), bytes)?)
            } else {
                None
            };
            self.accumulators.push(Accumulators {
                level,
                interval,
                window,
                bytes,
            });
        }
        Ok(())
    }

    /// The inlet profile, the boundary state and the amplitude table. Every
    /// `stream_collide` takes the first two, so they exist (as small zeroed
    /// buffers) even without an inlet.
    fn allocate_boundary(&mut self) -> Result<()> {
        let ny = self.hierarchy.base().layout.ny;
        let inlet = self.lattice.inlet.clone();
        let profile = match &inlet {
            Some(inlet) => inlet.profile_samples(ny),
            None => vec![0.0],
        };
        let inlet_profile = self.alloc("boundary.inlet_profile".into(), profile.len() * 4)?;
        self.driver.upload(inlet_profile, 0, bytemuck::cast_slice(&profile))?;
        let state = self.alloc("boundary.state".into(), 8)?;
        let update = match &inlet {
            Some(inlet) => {
                let table: Vec<f32> = match &inlet.amplitude {
                    Amplitude::Table { points } => points.iter().flatten().map(|v| *v as f32).collect(),
                    _ => vec![0.0],
                };
                let buffer = self.alloc("boundary.amplitude_table".into(), table.len() * 4)?;
                self.driver.upload(buffer, 0, bytemuck::cast_slice(&table))?;
                Some(UpdateBoundaryState::new(state, buffer, &inlet.amplitude).launch())
            }
            None => None,
        };
        self.boundary = BoundaryBuffers {
            inlet_profile,
            state,
            update,
        };
        Ok(())
    }

    fn release(&mut self) -> Result<()> {
        let mut first_error = None;
        for id in std::mem::take(&mut self.allocated) {
            if let Err(e) = self.driver.free(id) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn upload_state(&mut self, init: &impl Fn(usize, f64, f64) -> Moments) -> Result<()> {
        let patches: Vec<Patch> = self.hierarchy.patches().cloned().collect();
        for patch in &patches {
            let layout = patch.layout;
            let plane = layout.plane_cells();
            let mut f = vec![0.0f32; Q * plane];
            for y in 0..layout.ny {
                for x in 0..layout.nx {
                    let [cx, cy] = geometry::cell_center(patch, x, y);
                    let feq = lattice::equilibrium(init(patch.level, cx, cy));
                    let index = layout.index(x, y);
                    for (i, v) in feq.iter().enumerate() {
                        f[i * plane + index] = *v;
                    }
                }
            }
            let bytes: &[u8] = bytemuck::cast_slice(&f);
            for buffer in self.buffers[patch.level][patch.index].f {
                self.driver.upload(buffer, 0, bytes)?;
            }
        }
        Ok(())
    }

    fn enqueue(&mut self, n: u64) -> Result<()> {
        for k in 0..n {
            for step in self.plan.interval(self.step_count + k) {
                match &step.action {
                    Action::Launch(launch) => self.driver.launch(launch)?,
                    Action::Memset { buffer, bytes } => self.driver.memset_async(*buffer, 0, *bytes, 0)?,
                }
            }
        }
        Ok(())
    }

    fn current(&self, level: usize, patch: usize) -> BufferId {
        // Level 0 swaps once per interval; finer levels return to buffer 0.
        let parity = if level == 0 { (self.step_count % 2) as usize } else { 0 };
        self.buffers[level][patch].f[parity]
    }

    fn patch(&self, level: usize, patch: usize) -> Result<&Patch> {
        self.hierarchy
            .levels
            .get(level)
            .and_then(|l| l.get(patch))
            .ok_or_else(|| {
                Error::parameter(
                    "level/patch",
                    format!("{level}/{patch}"),
                    "an existing level and patch of the hierarchy",
                )
            })
    }

    /// The finest patch whose active region holds `point` (base lattice units).
    fn finest_patch_at(&self, point: [f64; 2]) -> Result<(usize, usize)> {
        let mut found = None;
        for (level, patches) in self.hierarchy.levels.iter().enumerate() {
            let scale = 2f64.powi(level as i32);
            for p in patches {
                let [x0, y0, x1, y1] = p.global_active().map(|v| v as f64);
                let (x, y) = (point[0] * scale, point[1] * scale);
                if x >= x0 && x < x1 && y >= y0 && y < y1 {
                    found = Some((level, p.index));
                }
            }
        }
        found.ok_or_else(|| Error::parameter("point", format!("{point:?}"), "a point inside the domain"))
    }

    fn download_current(&mut self, level: usize, patch: usize) -> Result<Vec<f32>> {
        let plane = self.patch(level, patch)?.layout.plane_cells();
        let mut f = vec![0.0f32; Q * plane];
        let buffer = self.current(level, patch);
        if let Err(e) = self.driver.download(buffer, 0, bytemuck::cast_slice_mut(&mut f)) {
            self.fail();
            return Err(e);
        }
        Ok(f)
    }

    fn fields(&mut self, level: usize, patch: usize) -> Result<Fields> {
        let f = self.download_current(level, patch)?;
        let p = self.patch(level, patch)?;
        let plane = p.layout.plane_cells();
        let a = p.active;
        let shape = (a.height() as usize, a.width() as usize);
        let force = self.physics[level].force;
        let mut fields = Fields {
            delta_rho: Array2::zeros(shape),
            ux: Array2::zeros(shape),
            uy: Array2::zeros(shape),
        };
        for y in a.y0..a.y1 {
            for x in a.x0..a.x1 {
                let index = p.layout.index(x, y);
                let cell: [f32; Q] = std::array::from_fn(|i| f[i * plane + index]);
                // Stored populations are post-collision: their momentum is ρu + F/2.
                let m = lattice::moments(&cell, [-force[0], -force[1]]);
                let at = ((y - a.y0) as usize, (x - a.x0) as usize);
                fields.delta_rho[at] = m.delta_rho;
                fields.ux[at] = m.ux;
                fields.uy[at] = m.uy;
            }
        }
        Ok(fields)
    }

    fn read_exchange(&mut self, body: usize, start: u64, end: u64, window: bool) -> Result<ExchangeRecord> {
        let Some(level) = self.lattice.bodies.get(body).map(|b| b.level) else {
            return Err(Error::parameter(
                "body",
                body,
                &format!("a body index below {}", self.lattice.bodies.len()),
            ));
        };
        let slot = self.body_slots[level]
            .iter()
            .position(|b| *b == body)
            .expect("every body has a slot");
        let acc = self
            .accumulators
            .iter()
            .find(|a| a.level == level)
            .expect("observed bodies have accumulators")
            .clone();
        let buffer = if window {
            acc.window.expect("window observed")
        } else {
            acc.interval
        };
        let mut words = [0.0f64; EXCHANGE_WORDS];
        if let Err(e) = self
            .driver
            .download(buffer, slot * EXCHANGE_WORDS * 8, bytemuck::cast_slice_mut(&mut words))
        {
            self.fail();
            return Err(e);
        }
        let hop = 0.5f64.powi(level as i32);
        Ok(ExchangeRecord {
            body,
            level,
            time_start: start,
            time_end: end,
            sample_count: (end - start) << level,
            force: [words[0] * hop, words[1] * hop],
            torque: words[2] * hop,
        })
    }
}
