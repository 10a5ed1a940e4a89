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
use crate::launch::{EXCHANGE_WORDS, Edge, LINK_WORDS, fine_covered, ring_cells};
use crate::ledger::{ExchangeRecord, MemoryLedger};
use crate::plan::{Accumulators, Action, ExchangeBuffers, HopPlan, LevelPhysics, PatchBuffers, PlanInputs};

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
    pub bodies: Vec<Body>,
}

impl LatticeConfig {
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
    buffers: Vec<Vec<PatchBuffers>>,
    exchange: Vec<ExchangeBuffers>,
    accumulators: Vec<Accumulators>,
    /// Body indices in each level's accumulator slot order.
    body_slots: Vec<Vec<usize>>,
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
        if lattice.tau.is_nan() || lattice.tau <= 0.5 {
            return Err(Error::parameter("tau", lattice.tau, "must exceed 1/2"));
        }
        check_edges(&lattice.edges)?;
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
        let mut inner = Inner {
            driver,
            hierarchy,
            physics,
            buffers: Vec::new(),
            exchange: Vec::new(),
            accumulators: Vec::new(),
            body_slots: Vec::new(),
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
            physics: &inner.physics,
            base_edges: inner.lattice.edges,
            wall_velocity: inner.lattice.wall_velocity.map(|v| v.map(|c| c as f32)),
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

fn check_edges(edges: &[Edge; 4]) -> Result<()> {
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
                let covered = fine_covered(&patch.layout);
                let cells = ring_cells(covered.width(), covered.height());
                Some(self.alloc(format!("{name}.interface_flux"), cells * 4)?)
            } else {
                None
            };
            self.buffers[patch.level].push(PatchBuffers { f, flags, flux });
            let slots = &self.body_slots[patch.level];
            let table = geometry::links(patch, &owner, &level_bodies, |b| {
                slots.iter().position(|s| *s == b).expect("body has a slot") as u32
            });
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
