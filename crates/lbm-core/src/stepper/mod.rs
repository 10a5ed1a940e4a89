//! `Stepper<D>`: owns a hierarchy's device resources and its hop plan, and
//! advances it by base intervals through a [`Driver`].
//!
//! Contract (DESIGN.md §4): `step(n)` enqueues n intervals on the main stream
//! and waits once, at the end; `step(0)` launches and waits for nothing. On any
//! error the stepper is `Failed`: the exchange ledger and window are invalid,
//! `step_count` keeps its value from entry, and every later read, step or
//! download says the stepper failed. Device errors surfacing at the single wait
//! are not attributed to an interval; `step(1)` repeatedly localises one.
//!
//! Every read sees each covered cell restricted from its child, as if every
//! interval restricted all of them: the intervals restrict only the cells
//! they read back, and the first read after a step that needs the rest (a
//! refined patch's populations, a snapshot, a health check) enqueues the
//! settle plan first (`HopPlan::settle`); work through `with_device` that
//! reads the populations calls [`Stepper::settle`] before it.
//!
//! Construction runs in one direction: the configuration is checked, the
//! resources are allocated, the plan is built from them and prepared on the
//! driver (where every launch is checked once). The stepper does no physics
//! itself and keeps no buffer handles of its own beyond its resources.
//!
//! The driver-free state (`State`) is apart from the driver so that the
//! reads in `observe` borrow both at once. Each stepper owns its driver:
//! an ensemble that shares one device gives each member its own driver (its
//! own streams and buffers on the same device), which keeps a member's
//! failure its own.

mod health;
mod observe;

use std::sync::{Mutex, MutexGuard};

use serde::Serialize;

pub use health::{HealthProblem, Unhealthy};
pub use observe::Fields;

use crate::config::{ExecConfig, LatticeConfig, LevelPhysics};
use crate::device::{Action, BufferId, BufferRef, Driver, Launch, PlanId};
use crate::domain::hierarchy::{Hierarchy, Patch, Rect};
use crate::error::{Error, Result};
use crate::kernels::KernelArgs;
use crate::kernels::exchange::EXCHANGE_WORDS;
use crate::kernels::moments::SaveMoments;
use crate::lattice::Moments;
use crate::ledger::{ExchangeRecord, MemoryLedger};
use crate::schedule::plan::{HopPlan, PlanInputs, current_buffer, parity_at_interval_start};
use crate::schedule::resources::Resources;

/// The labels under which a stepper prepares its two interval plans (by
/// level-0 parity): what a fused batch's member drivers fuse
/// (`crate::fused`).
pub const INTERVAL_PLANS: [&str; 2] = ["interval.even", "interval.odd"];

/// The labels of the settle plans (`HopPlan::settle`), by level-0 parity.
const SETTLE_PLANS: [&str; 2] = ["settle.even", "settle.odd"];

/// The complete changing state of a stepper between intervals; see
/// [`Stepper::snapshot`].
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub step_count: u64,
    /// Where the open exchange window started, if one is open.
    pub window_start: Option<u64>,
    /// Each state buffer's label and contents, in allocation order.
    pub buffers: Vec<(String, Vec<u8>)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Status {
    Ready,
    Advancing,
    Failed,
    Closed,
}

/// What a read of a patch's populations between intervals needs of the cells
/// its children cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoveredCells {
    /// Every covered cell holds the restriction of the finer level (after
    /// [`Stepper::settle`]): what a saved field shows.
    Settled,
    /// Only the covered cells within `schedule::plan::RESTRICT_BAND` parent
    /// cells of an interface side must be exact, as every interval leaves
    /// them; the deeper ones hold the parent's own update. Enough for a read
    /// of the uncovered cells and their covered neighbours (a probe's or a
    /// line's bilinear sample, on the finest patch whose centres surround it).
    Band,
}

/// What the outputs may read of a stepper's device state; see
/// [`Stepper::with_device`].
pub struct DeviceView<'a> {
    state: &'a State,
}

/// A level's exchange window accumulator: [`EXCHANGE_WORDS`] f64 per body
/// slot, in the order of `bodies`.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowBuffer {
    pub level: usize,
    pub buffer: BufferRef,
    pub bytes: usize,
    /// Body indices in slot order.
    pub bodies: Vec<usize>,
}

impl DeviceView<'_> {
    pub fn step_count(&self) -> u64 {
        self.state.step_count
    }

    /// The base grid as this stepper holds it and its two population
    /// buffers; after `n` intervals the current one is `[n % 2]`.
    pub fn base(&self) -> (&Patch, [BufferId; 2]) {
        (self.state.hierarchy.base(), self.state.resources.patches[0][0].f)
    }

    /// Where the exchange window opened, while it is open.
    pub fn window_start(&self) -> Option<u64> {
        self.state.window_start.filter(|_| self.state.window_valid)
    }

    /// One `save_moments` per patch, in hierarchy order, of its current
    /// populations into `arena` at `offsets[k]` bytes (the k-th patch). With
    /// [`CoveredCells::Settled`] the stepper must be settled
    /// ([`Stepper::settle`]).
    pub fn moments_launches(&self, arena: BufferId, offsets: &[usize], covered: CoveredCells) -> Vec<Launch> {
        let state = self.state;
        debug_assert!(
            covered == CoveredCells::Band || state.settled || state.settle_plans.is_none(),
            "the populations are read after Stepper::settle"
        );
        state
            .hierarchy
            .patches()
            .zip(offsets)
            .map(|(p, offset)| {
                SaveMoments {
                    f: current_buffer(&state.resources, p.level, p.index, state.step_count).into(),
                    out: BufferRef {
                        id: arena,
                        byte_offset: *offset as u64,
                    },
                    layout: p.layout,
                    active: p.active,
                    force: state.physics[p.level].force,
                }
                .launch()
            })
            .collect()
    }

    /// One `save_moments` of the cells `rect` (storage coordinates, inside
    /// the active region) of the `patch`-th patch in hierarchy order into
    /// `arena` at `offset` bytes: what a point probe reads, without the rest
    /// of the patch. Cells no settle is needed for, as
    /// [`CoveredCells::Band`].
    pub fn moments_launch_of(&self, arena: BufferId, offset: usize, patch: usize, rect: Rect) -> Launch {
        let state = self.state;
        let p = state.hierarchy.patches().nth(patch).expect("a patch of this hierarchy");
        debug_assert!(
            rect.x0 >= p.active.x0 && rect.x1 <= p.active.x1 && rect.y0 >= p.active.y0 && rect.y1 <= p.active.y1
        );
        SaveMoments {
            f: current_buffer(&state.resources, p.level, p.index, state.step_count).into(),
            out: BufferRef {
                id: arena,
                byte_offset: offset as u64,
            },
            layout: p.layout,
            active: rect,
            force: state.physics[p.level].force,
        }
        .launch()
    }

    /// The window accumulators, when the stepper observes the window.
    pub fn windows(&self) -> Vec<WindowBuffer> {
        let r = &self.state.resources;
        r.accumulators
            .iter()
            .filter_map(|a| {
                a.window.map(|w| WindowBuffer {
                    level: a.level,
                    buffer: w.into(),
                    bytes: a.bytes,
                    bodies: r.body_slots[a.level].clone(),
                })
            })
            .collect()
    }
}

/// Refuses an exchange window where the stepper keeps none.
fn window_available(state: &State) -> Result<()> {
    match state.exec.observe_window_exchange {
        true => Ok(()),
        false => Err(Error::NotAvailable {
            what: "exchange window".into(),
            reason: "the stepper was built without observe_window_exchange",
        }),
    }
}

/// Enqueues the zeroing of every window accumulator and opens the window at
/// the stepper's interval.
fn restart_window<D: Driver>(driver: &mut D, state: &mut State) -> Result<()> {
    for acc in &state.resources.accumulators {
        if let Some(window) = acc.window {
            driver.memset_async(window, 0, acc.bytes, 0)?;
        }
    }
    state.window_start = Some(state.step_count);
    state.window_valid = true;
    Ok(())
}

impl WindowBuffer {
    /// Each body's record from the accumulator's `words` over base
    /// intervals `start..end`.
    pub fn records(&self, words: &[f64], start: u64, end: u64) -> Vec<ExchangeRecord> {
        self.bodies
            .iter()
            .enumerate()
            .map(|(slot, body)| {
                let at = slot * EXCHANGE_WORDS;
                observe::exchange_record(*body, self.level, &words[at..at + EXCHANGE_WORDS], start, end)
            })
            .collect()
    }
}

/// Everything a stepper knows besides its driver.
struct State {
    lattice: LatticeConfig,
    exec: ExecConfig,
    hierarchy: Hierarchy,
    physics: Vec<LevelPhysics>,
    resources: Resources,
    plan: HopPlan,
    /// The plan's two intervals as the driver prepared them, by level-0 parity.
    prepared: [PlanId; 2],
    /// A slab's intervals in two parts, `[head, tail]`, each by level-0
    /// parity, once [`Stepper::prepare_parts`] made them.
    parts: Option<[[PlanId; 2]; 2]>,
    /// The health check's plans, once a check has prepared them.
    health: Option<health::HealthPlans>,
    /// The settle plans by level-0 parity, when a restriction leaves a hole.
    settle_plans: Option<[PlanId; 2]>,
    /// Whether every covered cell holds its restriction (the settle plan
    /// has run since the last interval, or none is needed).
    settled: bool,
    status: Status,
    step_count: u64,
    /// Intervals enqueued by `begin_step` and not yet waited for.
    in_flight: u64,
    exchange_valid: bool,
    window_start: Option<u64>,
    window_valid: bool,
}

struct Inner<D: Driver> {
    driver: D,
    state: State,
}

/// Advances a refined lattice through a [`Driver`]; see the module documentation.
pub struct Stepper<D: Driver> {
    inner: Mutex<Inner<D>>,
}

impl<D: Driver> Stepper<D> {
    /// Checks the configuration, allocates and fills every buffer, builds and
    /// prepares the hop plan and fills the lattice at rest.
    pub fn new(mut driver: D, lattice: LatticeConfig, exec: ExecConfig) -> Result<Self> {
        let (hierarchy, sides) = lattice.validate_window(&exec.tiles, exec.slab.as_ref())?;
        let physics: Vec<LevelPhysics> = (0..hierarchy.n_levels()).map(|l| lattice.level_physics(l)).collect();
        let wall_velocity = lattice.wall_velocity.map(|v| v.map(|c| c as f32));
        let mut resources = Resources::allocate(&mut driver, &hierarchy, &sides, &lattice, &exec)?;
        let plan = HopPlan::build(
            &PlanInputs {
                hierarchy: &hierarchy,
                sides: &sides,
                physics: &physics,
                boundaries: lattice.boundaries,
                wall_velocity,
                inlet: lattice.inlet.as_ref(),
                zero_interval: exec.observe_raw_exchange,
                accumulate: exec.observe_raw_exchange || exec.observe_window_exchange,
            },
            &resources,
        );
        let prepared = match prepare_pair(&mut driver, INTERVAL_PLANS, &[plan.actions(0), plan.actions(1)]) {
            Ok(prepared) => prepared,
            Err(e) => {
                // The refusal is what to report; freeing adds nothing to act on.
                let _ = resources.release(&mut driver);
                return Err(e);
            }
        };
        let settle_plans = match plan.settle[0].is_empty() {
            true => None,
            false => match prepare_pair(
                &mut driver,
                SETTLE_PLANS,
                &[plan.settle_actions(0), plan.settle_actions(1)],
            ) {
                Ok(plans) => Some(plans),
                Err(e) => {
                    // As above.
                    let _ = prepared.iter().try_for_each(|p| driver.release_plan(*p));
                    let _ = resources.release(&mut driver);
                    return Err(e);
                }
            },
        };
        let stepper = Stepper {
            inner: Mutex::new(Inner {
                driver,
                state: State {
                    lattice,
                    exec,
                    hierarchy,
                    physics,
                    resources,
                    plan,
                    prepared,
                    parts: None,
                    health: None,
                    settle_plans,
                    settled: true,
                    status: Status::Ready,
                    step_count: 0,
                    in_flight: 0,
                    exchange_valid: false,
                    window_start: None,
                    window_valid: false,
                },
            }),
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
        self.lock().state.status
    }

    /// The driver's backend name ("cpu", "cuda", "mock").
    pub fn backend(&self) -> &'static str {
        self.lock().driver.backend()
    }

    /// The configuration the stepper was built from.
    pub fn configuration(&self) -> (LatticeConfig, ExecConfig) {
        let inner = self.lock();
        (inner.state.lattice.clone(), inner.state.exec.clone())
    }

    /// Free device memory in bytes, as the driver reports it.
    pub fn free_device_memory(&self) -> Result<u64> {
        self.lock().driver.free_memory()
    }

    pub fn step_count(&self) -> u64 {
        self.lock().state.step_count
    }

    pub fn hierarchy(&self) -> Hierarchy {
        self.lock().state.hierarchy.clone()
    }

    pub fn plan(&self) -> HopPlan {
        self.lock().state.plan.clone()
    }

    pub fn memory_ledger(&self) -> MemoryLedger {
        self.lock().state.resources.memory.clone()
    }

    /// Sets every cell of every level to the equilibrium of `init(level, x, y)`,
    /// where (x, y) is the cell centre in base lattice units: the density and
    /// velocity [`Stepper::fields`] then reads, under a body force too.
    pub fn initialize(&self, init: impl Fn(usize, f64, f64) -> Moments) -> Result<()> {
        let mut inner = self.lock();
        inner.state.require_ready("initialize")?;
        let Inner { driver, state } = &mut *inner;
        let result = observe::upload_state(driver, state, &init);
        match result {
            Ok(()) => state.settled = true,
            Err(_) => state.fail(),
        }
        result
    }

    /// Advances `n` base intervals with one wait at the end; see the module docs.
    pub fn step(&self, n: u64) -> Result<()> {
        if n == 0 {
            return self.lock().state.require_ready("step");
        }
        self.begin_step(n)?;
        self.finish_step()
    }

    /// Enqueues `n` base intervals and returns without waiting, so that
    /// several steppers' work can run side by side (a lockstep batch, each
    /// member on its own stream). Until [`Stepper::finish_step`] the stepper
    /// refuses everything else ([`Error::InFlight`]); `begin_step(n)` then
    /// `finish_step()` is `step(n)`, launch for launch.
    pub fn begin_step(&self, n: u64) -> Result<()> {
        let mut inner = self.lock();
        inner.state.require_ready("step")?;
        let Inner { driver, state } = &mut *inner;
        state.start_advancing();
        state.in_flight = n;
        let enqueued =
            (0..n).try_for_each(|k| driver.replay(state.prepared[parity_at_interval_start(0, state.step_count + k)]));
        enqueued.inspect_err(|_| state.fail())
    }

    /// Prepares a slab's intervals also in two parts, cut before the base
    /// grid's general update (the only launch that reads its halo column),
    /// for [`Stepper::step_in_parts`]; a split's device transport asks for
    /// them before anything runs. Needs a stepper built with
    /// [`ExecConfig::slab`].
    pub fn prepare_parts(&self) -> Result<()> {
        let mut inner = self.lock();
        inner.state.require_ready("prepare the interval in parts")?;
        let Inner { driver, state } = &mut *inner;
        if state.exec.slab.is_none() {
            return Err(Error::parameter(
                "prepare_parts",
                "a stepper of the whole domain",
                "a slab's stepper (ExecConfig::slab)",
            ));
        }
        if state.parts.is_some() {
            return Ok(());
        }
        let halves = [0, 1].map(|parity| {
            let steps = state.plan.interval(parity);
            let cut = steps
                .iter()
                .position(|s| s.name == "L0.p0.stream_collide")
                .expect("every interval updates the base grid");
            let mut head: Vec<Action> = steps[..cut].iter().map(|s| s.action.clone()).collect();
            let mut tail: Vec<Action> = steps[cut..].iter().map(|s| s.action.clone()).collect();
            // The base grid's update is a group (the bulk kernel, the general
            // one, the exchange): the bulk never reads the halo column, so it
            // goes with the head, and the rest, which does or follows what
            // does, begins the tail in the group's order.
            if let Action::Together(members) = tail[0].clone() {
                let bulk = matches!(&members[0], Action::Launch(l) if l.kernel.is_bulk());
                let (to_head, to_tail) = members.split_at(bulk as usize);
                head.extend(to_head.iter().cloned());
                tail.splice(0..1, to_tail.iter().cloned());
            }
            (head, tail)
        });
        let [(even_head, even_tail), (odd_head, odd_tail)] = halves;
        let head = prepare_pair(
            driver,
            ["interval.even.head", "interval.odd.head"],
            &[even_head, odd_head],
        )?;
        match prepare_pair(
            driver,
            ["interval.even.tail", "interval.odd.tail"],
            &[even_tail, odd_tail],
        ) {
            Ok(tail) => {
                state.parts = Some([head, tail]);
                Ok(())
            }
            Err(e) => {
                // The refusal is what to report; releasing adds nothing to act on.
                let _ = head.iter().try_for_each(|p| driver.release_plan(*p));
                Err(e)
            }
        }
    }

    /// One more interval of a slab (beginning a step when none is in
    /// flight), its plan in two parts with `between` enqueued between them:
    /// the head ends with the base grid's bulk update, which never reads the
    /// halo column, and the tail begins with its general update, which does,
    /// so a split makes only the tail wait for the halo. Needs
    /// [`Stepper::prepare_parts`] first.
    pub fn step_in_parts(&self, between: impl FnOnce(&mut D) -> Result<()>) -> Result<()> {
        let mut inner = self.lock();
        if inner.state.status != Status::Advancing {
            inner.state.require_ready("step")?;
        }
        let Inner { driver, state } = &mut *inner;
        let Some([head, tail]) = state.parts else {
            return Err(Error::parameter(
                "step_in_parts",
                "a stepper without its interval in parts",
                "a slab's stepper after prepare_parts",
            ));
        };
        if state.status == Status::Ready {
            state.status = Status::Advancing;
            state.exchange_valid = false;
            state.settled = false;
            state.in_flight = 0;
        }
        let parity = parity_at_interval_start(0, state.step_count + state.in_flight);
        state.in_flight += 1;
        let enqueued = driver
            .replay(head[parity])
            .and_then(|()| between(driver))
            .and_then(|()| driver.replay(tail[parity]));
        enqueued.inspect_err(|_| state.fail())
    }

    /// Runs `work` with the driver while intervals may be in flight, for
    /// work enqueued on the main stream after them that no read of the
    /// stepper sees until they are waited for (a split run's halo exchange).
    /// A failure fails the stepper.
    pub fn enqueue_on_device<R>(&self, work: impl FnOnce(&mut D) -> Result<R>) -> Result<R> {
        let mut inner = self.lock();
        if inner.state.status != Status::Advancing {
            inner.state.require_ready("enqueue on its device")?;
        }
        let Inner { driver, state } = &mut *inner;
        let result = work(driver);
        if result.is_err() {
            state.fail();
        }
        result
    }

    /// Waits for the intervals [`Stepper::begin_step`] enqueued; errors of
    /// that work surface here.
    pub fn finish_step(&self) -> Result<()> {
        let mut inner = self.lock();
        if inner.state.status != Status::Advancing {
            inner.state.require_ready("finish a step")?;
            return Err(Error::parameter(
                "finish_step",
                "no step in flight",
                "a begin_step before each finish_step",
            ));
        }
        let Inner { driver, state } = &mut *inner;
        match driver.synchronize() {
            Ok(()) => {
                state.step_count += state.in_flight;
                state.in_flight = 0;
                state.end_advancing();
                Ok(())
            }
            Err(e) => {
                state.fail();
                Err(e)
            }
        }
    }

    /// Opens (or reopens) the exchange window at the current step.
    pub fn start_exchange_window(&self) -> Result<()> {
        let mut inner = self.lock();
        inner.state.require_ready("start an exchange window")?;
        let Inner { driver, state } = &mut *inner;
        window_available(state)?;
        restart_window(driver, state).inspect_err(|_| state.fail())
    }

    /// Enqueues `n` intervals as [`Stepper::begin_step`] does and, after
    /// each but the last, hands the driver and a view of the state after
    /// that interval to `sample`, which enqueues what it reads (the output
    /// ring's records) and says whether it took a sample; where it did, the
    /// exchange window (if the stepper keeps one) restarts there, as
    /// [`Stepper::start_exchange_window`] after a read would. So the samples
    /// inside a chunk of intervals cost no host round trip each;
    /// [`Stepper::finish_step`] waits for all of it.
    pub fn begin_step_sampled<E: From<Error>>(
        &self,
        n: u64,
        mut sample: impl FnMut(&mut D, DeviceView<'_>) -> std::result::Result<bool, E>,
    ) -> std::result::Result<(), E> {
        let mut inner = self.lock();
        inner.state.require_ready("step")?;
        let Inner { driver, state } = &mut *inner;
        state.start_advancing();
        // The views count the intervals enqueued so far: nothing stays in
        // flight for `finish_step` to add.
        state.in_flight = 0;
        let mut enqueue = || -> std::result::Result<(), E> {
            for k in 0..n {
                driver.replay(state.prepared[parity_at_interval_start(0, state.step_count)])?;
                state.step_count += 1;
                let took = k + 1 < n && sample(driver, DeviceView { state })?;
                if took && state.exec.observe_window_exchange {
                    restart_window(driver, state)?;
                }
            }
            Ok(())
        };
        enqueue().inspect_err(|_| state.fail())
    }

    /// The momentum exchange on `body` over the last completed interval.
    pub fn read_raw_exchange(&self, body: usize) -> Result<ExchangeRecord> {
        let mut inner = self.lock();
        inner.state.require_ready("read the raw exchange")?;
        let Inner { driver, state } = &mut *inner;
        if !state.exec.observe_raw_exchange {
            return Err(Error::NotAvailable {
                what: "raw exchange".into(),
                reason: "the stepper was built without observe_raw_exchange",
            });
        }
        if !state.exchange_valid {
            return Err(Error::NotCompleted {
                what: "the raw exchange",
            });
        }
        let end = state.step_count;
        observe::read_exchange(driver, state, body, end - 1, end, false)
    }

    /// The momentum exchange on `body` since `start_exchange_window`.
    pub fn read_exchange_window(&self, body: usize) -> Result<ExchangeRecord> {
        let mut inner = self.lock();
        inner.state.require_ready("read the exchange window")?;
        let Inner { driver, state } = &mut *inner;
        let (Some(start), true) = (state.window_start, state.window_valid) else {
            return Err(Error::NotAvailable {
                what: "exchange window".into(),
                reason: "no window is open; call start_exchange_window first",
            });
        };
        let end = state.step_count;
        observe::read_exchange(driver, state, body, start, end, true)
    }

    /// Density and velocity of one patch's active region.
    pub fn fields(&self, level: usize, patch: usize) -> Result<Fields> {
        let mut inner = self.lock();
        inner.state.require_ready("download")?;
        let Inner { driver, state } = &mut *inner;
        observe::fields(driver, state, level, patch)
    }

    /// Raw shifted populations (`f_i - w_i`) of one patch's current buffer, in
    /// storage order, nine planes.
    pub fn download(&self, level: usize, patch: usize) -> Result<Vec<f32>> {
        let mut inner = self.lock();
        inner.state.require_ready("download")?;
        let Inner { driver, state } = &mut *inner;
        observe::download_current(driver, state, level, patch)
    }

    /// The shifted populations of one patch's active region, indexed
    /// `[direction, y, x]` from the active region's corner.
    pub fn active_populations(&self, level: usize, patch: usize) -> Result<ndarray::Array3<f32>> {
        let raw = self.download(level, patch)?;
        let p = &self.lock().state.hierarchy.levels[level][patch].clone();
        let (a, plane) = (p.active, p.layout.plane_cells());
        Ok(ndarray::Array3::from_shape_fn(
            (crate::lattice::Q, a.height() as usize, a.width() as usize),
            |(i, y, x)| raw[i * plane + p.layout.index(a.x0 + x as u32, a.y0 + y as u32)],
        ))
    }

    /// Density minus one at `point` (base lattice units) on a body surface or a
    /// wall, seen from the fluid side `outward` (a unit axis vector pointing
    /// from the surface into the fluid): taken on the finest patch holding the
    /// point, interpolated linearly across the axis and extrapolated linearly
    /// along it from the first two fluid cell centres.
    pub fn surface_density(&self, point: [f64; 2], outward: [i32; 2]) -> Result<f64> {
        let mut inner = self.lock();
        inner.state.require_ready("download")?;
        let Inner { driver, state } = &mut *inner;
        observe::surface_density(driver, state, point, outward)
    }

    /// Total mass in base-cell units: every level's active cells not covered by
    /// a finer patch, each weighted by its area `4^-level`.
    pub fn total_mass(&self) -> Result<f64> {
        let mut inner = self.lock();
        inner.state.require_ready("download")?;
        let Inner { driver, state } = &mut *inner;
        observe::total_mass(driver, state)
    }

    /// Everything that changes as the run advances, downloaded: with the same
    /// configuration, [`Stepper::restore`] continues from it bit for bit.
    pub fn snapshot(&self) -> Result<Snapshot> {
        let mut inner = self.lock();
        inner.state.require_ready("take a snapshot")?;
        let Inner { driver, state } = &mut *inner;
        state.settle(driver)?;
        let mut buffers = Vec::with_capacity(state.resources.state.len());
        for b in &state.resources.state {
            let mut bytes = vec![0u8; b.bytes];
            if let Err(e) = driver.download(b.id, 0, &mut bytes) {
                state.fail();
                return Err(e);
            }
            buffers.push((b.label.clone(), bytes));
        }
        Ok(Snapshot {
            step_count: state.step_count,
            window_start: state.window_start.filter(|_| state.window_valid),
            buffers,
        })
    }

    /// How many buffers [`Stepper::snapshot`] holds.
    pub fn snapshot_buffers(&self) -> usize {
        self.lock().state.resources.state.len()
    }

    /// Puts back what [`Stepper::snapshot`] took from a stepper of the same
    /// configuration, refusing one whose buffers differ in name or size.
    pub fn restore(&self, snapshot: &Snapshot) -> Result<()> {
        let mut inner = self.lock();
        inner.state.require_ready("restore a snapshot")?;
        let Inner { driver, state } = &mut *inner;
        let ours = &state.resources.state;
        if ours.len() != snapshot.buffers.len() {
            return Err(Error::Snapshot {
                reason: format!(
                    "it holds {} state buffers, this stepper has {}",
                    snapshot.buffers.len(),
                    ours.len()
                ),
            });
        }
        for (b, (label, bytes)) in ours.iter().zip(&snapshot.buffers) {
            if *label != b.label || bytes.len() != b.bytes {
                return Err(Error::Snapshot {
                    reason: format!(
                        "it holds `{label}` of {} bytes where this stepper has `{}` of {} bytes",
                        bytes.len(),
                        b.label,
                        b.bytes
                    ),
                });
            }
        }
        for (b, (_, bytes)) in ours.iter().zip(&snapshot.buffers) {
            if let Err(e) = driver.upload(b.id, 0, bytes) {
                state.fail();
                return Err(e);
            }
        }
        state.step_count = snapshot.step_count;
        state.settled = true;
        state.window_start = snapshot.window_start;
        state.window_valid = snapshot.window_start.is_some();
        state.exchange_valid = false;
        Ok(())
    }

    /// The first cell of the flow, in level, patch and cell order, that has a
    /// non-finite population or is faster than `speed_limit` (lattice units
    /// of its level; [`crate::DIVERGED_MACH`] times c_s to detect a
    /// divergence), or `None`. Runs `check_health` on every patch's current
    /// buffer and waits once. A finding leaves the stepper `Ready`; what to
    /// do about it is the caller's choice.
    pub fn check_health(&self, speed_limit: f64) -> Result<Option<Unhealthy>> {
        let limit = health::kernel_speed_limit(speed_limit)?;
        let mut inner = self.lock();
        inner.state.require_ready("check health")?;
        let Inner { driver, state } = &mut *inner;
        let result = state
            .settle(driver)
            .and_then(|()| health::check_health(driver, state, limit));
        if result.is_err() {
            state.fail();
        }
        result
    }

    /// Enqueues the settle plan unless every covered cell already holds its
    /// restriction, so that work through [`Stepper::with_device`] may read
    /// the populations ([`DeviceView::moments_launches`]).
    pub fn settle(&self) -> Result<()> {
        let mut inner = self.lock();
        inner.state.require_ready("settle")?;
        let Inner { driver, state } = &mut *inner;
        state.settle(driver)
    }

    /// Runs `work` with the driver between intervals, for outputs that share
    /// the stepper's device and main stream (the output ring): `view` builds
    /// the launches that read the current state ([`Stepper::settle`] first
    /// where they read the populations). A failure fails the stepper.
    pub fn with_device<R, E: From<Error>>(
        &self,
        work: impl FnOnce(&mut D, &DeviceView<'_>) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        let mut inner = self.lock();
        inner.state.require_ready("work on its device")?;
        let Inner { driver, state } = &mut *inner;
        let result = work(driver, &DeviceView { state });
        if result.is_err() {
            state.fail();
        }
        result
    }

    /// Frees every buffer and prepared plan; the stepper then refuses
    /// everything but `status`.
    pub fn close(&self) -> Result<()> {
        self.close_with(|_| Ok(()))
    }

    /// [`Stepper::close`], after `release` has freed what its caller keeps
    /// on this driver (a split's halo buffers and plans), whatever the
    /// stepper's status; reports `release`'s failure first.
    pub fn close_with(&self, release: impl FnOnce(&mut D) -> Result<()>) -> Result<()> {
        let mut inner = self.lock();
        if inner.state.status == Status::Closed {
            return Ok(());
        }
        let Inner { driver, state } = &mut *inner;
        let released = release(driver);
        state.status = Status::Closed;
        let health = state.health.take();
        let plans = state
            .prepared
            .iter()
            .chain(state.parts.iter().flatten().flatten())
            .chain(state.settle_plans.iter().flatten())
            .chain(health.iter().flat_map(|h| &h.prepared))
            .try_for_each(|p| driver.release_plan(*p));
        let buffers = state.resources.release(driver);
        released.and(plans).and(buffers)
    }
}

impl<D: Driver> Drop for Stepper<D> {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; `close` reports them.
        let _ = self.close();
    }
}

/// Prepares a plan for each level-0 parity on `driver`; a refusal of the
/// second releases the first.
fn prepare_pair<D: Driver>(driver: &mut D, labels: [&str; 2], actions: &[Vec<Action>; 2]) -> Result<[PlanId; 2]> {
    let even = driver.prepare(labels[0], &actions[0])?;
    match driver.prepare(labels[1], &actions[1]) {
        Ok(odd) => Ok([even, odd]),
        Err(e) => {
            // The refusal is what to report; releasing adds nothing to act on.
            let _ = driver.release_plan(even);
            Err(e)
        }
    }
}

impl State {
    /// Enqueues the settle plan unless every covered cell holds its
    /// restriction already; a failure fails the stepper.
    fn settle<D: Driver>(&mut self, driver: &mut D) -> Result<()> {
        let Some(plans) = self.settle_plans.filter(|_| !self.settled) else {
            return Ok(());
        };
        match driver.replay(plans[parity_at_interval_start(0, self.step_count)]) {
            Ok(()) => {
                self.settled = true;
                Ok(())
            }
            Err(e) => {
                self.fail();
                Err(e)
            }
        }
    }

    /// Intervals are being enqueued: what they change is no longer read.
    fn start_advancing(&mut self) {
        self.status = Status::Advancing;
        self.exchange_valid = false;
        self.settled = false;
    }

    /// The intervals enqueued are done.
    fn end_advancing(&mut self) {
        self.exchange_valid = self.exec.observe_raw_exchange;
        self.status = Status::Ready;
    }

    fn require_ready(&self, action: &'static str) -> Result<()> {
        match self.status {
            Status::Ready => Ok(()),
            Status::Advancing => Err(Error::InFlight { action }),
            Status::Failed => Err(Error::Failed { action }),
            Status::Closed => Err(Error::Closed { action }),
        }
    }

    fn fail(&mut self) {
        self.status = Status::Failed;
        self.exchange_valid = false;
        self.window_valid = false;
    }
}
