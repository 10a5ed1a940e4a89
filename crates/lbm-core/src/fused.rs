//! A fused batch: members of one geometry and resolution, each with its own
//! physical parameters, advanced on one driver with one launch per kernel per
//! hop for all of them ([`crate::device::BatchLaunch`]), where a lockstep
//! batch launches every kernel once per member.
//!
//! Each member is first built as an ordinary [`Stepper`] on a [`CpuDriver`]:
//! its *host mirror*. That runs every check a stepper makes and fills every
//! table (flags, wall distances, links, inlet profile, the lattice at rest).
//! The batch then lays each of member 0's buffers out once on the device for
//! all members, member `m`'s copy at `m` times the buffer's stride (its size
//! rounded up to [`MEMBER_ALIGN`] bytes), and fuses the members' hop plans
//! step by step: a launch becomes one batch of every member's launch, its
//! buffers moved to the member's slice, its scalars (relaxation, forcing,
//! wall velocities, the inlet's amplitude) the member's own; a memset of a
//! whole buffer becomes one memset of every member's copy. Members whose
//! buffers or launches differ in shape are refused ([`Error::FusedShape`]).
//! Every member thus computes exactly what its own stepper computes: the same
//! kernels with the same arguments, bit for bit.
//!
//! Reads go through the mirror: a member's state buffers are downloaded into
//! it (once per advance, on the first read) and the mirror answers with the
//! stepper's own code, so a fused member observes exactly as a stepper does.
//!
//! [`FusedMember`] implements [`Member`], so `lockstep::LockstepRunner` runs a
//! fused batch with the whole member contract. A fused batch advances only as
//! a whole: every member calls [`Member::begin_advance`] with the same number
//! of intervals (the last of them enqueues the batch's intervals), then each
//! calls [`Member::finish_advance`] (the first waits). What it does not do:
//! the divergence check, snapshots and the output ring of a single stepper;
//! members of different shapes.

use std::sync::{Arc, Mutex, MutexGuard};

use ndarray::ArrayD;

use crate::config::{ExecConfig, LatticeConfig};
use crate::cpu::CpuDriver;
use crate::device::{Action, Arg, BatchLaunch, BufferId, Driver, Launch, PlanId};
use crate::error::{Error, Result};
use crate::ledger::MemoryLedger;
use crate::member::{Member, MemberIdentity, MemberObservation, StatsSpec};
use crate::schedule::plan::{HopPlan, parity_at_interval_start};
use crate::stepper::{Stepper, prepare_pair};

/// The alignment of every member's copy of a buffer: device allocations are
/// 256-byte aligned, so each member's slice starts as its own buffer would.
pub const MEMBER_ALIGN: usize = 256;

/// Where one of a mirror's buffers lives on the device.
#[derive(Clone, Debug)]
struct Slot {
    device: BufferId,
    /// Bytes of one member's copy.
    bytes: usize,
    /// Bytes from one member's copy to the next.
    stride: usize,
    label: String,
}

/// How far the batch is in an advance.
#[derive(Clone, Debug, PartialEq)]
enum Phase {
    Ready,
    /// Some members have called `begin_advance` with `intervals`.
    Begun {
        intervals: u64,
        begun: Vec<bool>,
    },
    /// Every member has begun; the intervals are enqueued.
    InFlight {
        intervals: u64,
    },
    Failed,
}

struct Inner<D: Driver> {
    driver: D,
    /// By the mirror's buffer id (every mirror has the same ids).
    slots: Vec<Option<Slot>>,
    /// Every device buffer, in allocation order.
    device: Vec<BufferId>,
    /// The fused interval plans, by level-0 parity.
    prepared: [PlanId; 2],
    phase: Phase,
    /// Members that began the last advance and have not yet finished it.
    owed: Vec<bool>,
    step_count: u64,
    /// The last interval's raw exchange is there to read.
    exchange_valid: bool,
    /// Each member's open exchange window.
    window_start: Vec<Option<u64>>,
    /// Whether a member's mirror holds the device state.
    synced: Vec<bool>,
    closed: Vec<bool>,
}

struct Batch<D: Driver> {
    mirrors: Vec<Stepper<CpuDriver>>,
    backend: &'static str,
    inner: Mutex<Inner<D>>,
}

/// One member of a fused batch; see the module documentation.
pub struct FusedMember<D: Driver> {
    batch: Arc<Batch<D>>,
    index: usize,
}

impl<D: Driver> FusedMember<D> {
    /// Builds the members' host mirrors, lays their buffers out on `driver`
    /// and prepares the fused plans; an empty list gives no members.
    pub fn batch(mut driver: D, members: Vec<(LatticeConfig, ExecConfig)>) -> Result<Vec<FusedMember<D>>> {
        if members.is_empty() {
            return Ok(Vec::new());
        }
        let mirrors = members
            .into_iter()
            .enumerate()
            .map(|(member, (lattice, exec))| {
                Stepper::new(CpuDriver::new(), lattice, exec).map_err(|source| Error::FusedMember {
                    member,
                    source: Box::new(source),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let layout = mirrors[0].with_parts(|_, _, r, _| r.allocations().to_vec());
        for (member, mirror) in mirrors.iter().enumerate().skip(1) {
            let own = mirror.with_parts(|_, _, r, _| r.allocations().to_vec());
            if own.len() != layout.len() {
                return Err(Error::FusedShape {
                    member,
                    what: format!("it has {} buffers, member 0 {}", own.len(), layout.len()),
                });
            }
            if let Some(((_, label, bytes), (_, first_label, first_bytes))) =
                own.iter().zip(&layout).find(|(a, b)| a != b)
            {
                return Err(Error::FusedShape {
                    member,
                    what: format!(
                        "its buffer `{label}` has {bytes} bytes where member 0's `{first_label}` has {first_bytes}"
                    ),
                });
            }
        }
        let n = mirrors.len();
        let mut slots: Vec<Option<Slot>> = Vec::new();
        let mut device = Vec::new();
        let laid_out = lay_out(&mut driver, &mirrors, &layout, &mut slots, &mut device).and_then(|()| {
            let plans: Vec<HopPlan> = mirrors.iter().map(|m| m.with_parts(|_, _, _, p| p.clone())).collect();
            let fused = [0, 1].map(|step_count| {
                let actions: Vec<Vec<Action>> = plans.iter().map(|p| p.actions(step_count)).collect();
                fuse(&actions, &slots, n)
            });
            let [even, odd] = fused;
            prepare_pair(
                &mut driver,
                ["fused.interval.even", "fused.interval.odd"],
                &[even?, odd?],
            )
        });
        let prepared = match laid_out {
            Ok(prepared) => prepared,
            Err(e) => {
                // The refusal is what to report; freeing adds nothing to act on.
                for id in device {
                    let _ = driver.free(id);
                }
                return Err(e);
            }
        };
        let backend = driver.backend();
        let batch = Arc::new(Batch {
            mirrors,
            backend,
            inner: Mutex::new(Inner {
                driver,
                slots,
                device,
                prepared,
                phase: Phase::Ready,
                owed: vec![false; n],
                step_count: 0,
                exchange_valid: false,
                window_start: vec![None; n],
                synced: vec![true; n],
                closed: vec![false; n],
            }),
        });
        Ok((0..n)
            .map(|index| FusedMember {
                batch: Arc::clone(&batch),
                index,
            })
            .collect())
    }

    /// The member's position in its batch.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Members in the batch.
    pub fn members(&self) -> usize {
        self.batch.mirrors.len()
    }

    fn lock(&self) -> MutexGuard<'_, Inner<D>> {
        // A panic inside a driver poisons the lock; the phase still says
        // what can be done, so recover the guard.
        self.batch.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn mirror(&self) -> &Stepper<CpuDriver> {
        &self.batch.mirrors[self.index]
    }

    /// The member's mirror, holding the device state; `action` names the
    /// read for a refusal.
    fn synced(&self, action: &'static str) -> Result<&Stepper<CpuDriver>> {
        let mut inner = self.lock();
        inner.require_ready(self.index, action)?;
        if !inner.synced[self.index] {
            let Inner {
                driver,
                slots,
                step_count,
                exchange_valid,
                window_start,
                ..
            } = &mut *inner;
            let m = self.index;
            let result = self
                .mirror()
                .mirror(*step_count, window_start[m], *exchange_valid, |b, out| {
                    let slot = slots[b.id.0 as usize].as_ref().expect("every mirror buffer has a slot");
                    driver.download(slot.device, m * slot.stride, out)
                });
            if let Err(e) = result {
                inner.phase = Phase::Failed;
                return Err(e);
            }
            inner.synced[self.index] = true;
        }
        Ok(self.mirror())
    }
}

/// Allocates each of `layout`'s buffers once for all members and fills every
/// member's copy from its mirror.
fn lay_out<D: Driver>(
    driver: &mut D,
    mirrors: &[Stepper<CpuDriver>],
    layout: &[(BufferId, String, usize)],
    slots: &mut Vec<Option<Slot>>,
    device: &mut Vec<BufferId>,
) -> Result<()> {
    for (id, label, bytes) in layout {
        let stride = bytes.next_multiple_of(MEMBER_ALIGN).max(MEMBER_ALIGN);
        let buffer = driver.alloc(label, stride * mirrors.len())?;
        device.push(buffer);
        let mut data = vec![0u8; stride * mirrors.len()];
        for (m, mirror) in mirrors.iter().enumerate() {
            let own = &mut data[m * stride..m * stride + bytes];
            mirror.with_parts(|cpu, _, _, _| cpu.download(*id, 0, own))?;
        }
        driver.upload(buffer, 0, &data)?;
        let at = id.0 as usize;
        if slots.len() <= at {
            slots.resize(at + 1, None);
        }
        slots[at] = Some(Slot {
            device: buffer,
            bytes: *bytes,
            stride,
            label: label.clone(),
        });
    }
    Ok(())
}

/// Member `m`'s launch with every buffer moved to the member's copy.
fn member_launch(launch: &Launch, m: usize, slots: &[Option<Slot>]) -> Launch {
    let mut out = launch.clone();
    for arg in &mut out.args {
        if let Arg::Buffer { id, byte_offset } = arg {
            let slot = slots[id.0 as usize].as_ref().expect("every mirror buffer has a slot");
            *id = slot.device;
            *byte_offset += (m * slot.stride) as u64;
        }
    }
    out
}

/// The members' plans (each `actions[m]`, in mirror buffer ids) as one plan
/// of batches; see the module documentation.
fn fuse(actions: &[Vec<Action>], slots: &[Option<Slot>], n: usize) -> Result<Vec<Action>> {
    let first = &actions[0];
    if let Some((member, own)) = actions.iter().enumerate().find(|(_, a)| a.len() != first.len()) {
        return Err(Error::FusedShape {
            member,
            what: format!("its interval has {} steps, member 0's {}", own.len(), first.len()),
        });
    }
    let shape_of = |a: &Action| match a {
        Action::Launch(l) => format!("{} grid {:?} x block {:?}", l.kernel, l.grid, l.block),
        Action::Memset { bytes, value, .. } => format!("a memset of {bytes} bytes to {value}"),
        Action::Batch(b) => format!("a batch of {}", b.first().kernel),
    };
    (0..first.len())
        .map(|k| {
            for (member, own) in actions.iter().enumerate() {
                let same = match (&own[k], &first[k]) {
                    (Action::Launch(a), Action::Launch(b)) => {
                        (a.kernel, a.grid, a.block) == (b.kernel, b.grid, b.block)
                    }
                    (a @ Action::Memset { .. }, b @ Action::Memset { .. }) => a == b,
                    _ => false,
                };
                if !same {
                    return Err(Error::FusedShape {
                        member,
                        what: format!(
                            "its step {k} is {}, member 0's {}",
                            shape_of(&own[k]),
                            shape_of(&first[k])
                        ),
                    });
                }
            }
            Ok(match &first[k] {
                Action::Launch(_) => Action::Batch(BatchLaunch {
                    launches: actions
                        .iter()
                        .enumerate()
                        .map(|(m, own)| match &own[k] {
                            Action::Launch(l) => member_launch(l, m, slots),
                            _ => unreachable!("every member's step is a launch (compared above)"),
                        })
                        .collect(),
                }),
                Action::Memset { buffer, bytes, value } => {
                    let slot = slots[buffer.0 as usize]
                        .as_ref()
                        .expect("every mirror buffer has a slot");
                    // A plan's memsets set whole buffers (accumulators, the
                    // health results), so one memset covers every member's.
                    assert_eq!(*bytes, slot.bytes, "plan memsets set whole buffers");
                    Action::Memset {
                        buffer: slot.device,
                        bytes: slot.stride * n,
                        value: *value,
                    }
                }
                Action::Batch(_) => unreachable!("a stepper's plan holds no batches"),
            })
        })
        .collect()
}

impl<D: Driver> Inner<D> {
    fn require_ready(&self, member: usize, action: &'static str) -> Result<()> {
        if self.closed[member] {
            return Err(Error::Closed { action });
        }
        match &self.phase {
            Phase::Ready if !self.owed[member] => Ok(()),
            Phase::Failed => Err(Error::Failed { action }),
            _ => Err(Error::InFlight { action }),
        }
    }
}

impl<D: Driver> Member for FusedMember<D> {
    fn backend(&self) -> &'static str {
        self.batch.backend
    }

    fn step_count(&self) -> u64 {
        self.lock().step_count
    }

    fn identity(&self) -> MemberIdentity {
        self.mirror().identity()
    }

    fn open_window(&self) -> Result<()> {
        let mut inner = self.lock();
        inner.require_ready(self.index, "open the exchange window")?;
        if !self.mirror().configuration().1.observe_window_exchange {
            return Ok(());
        }
        let windows: Vec<BufferId> = self
            .mirror()
            .with_parts(|_, _, r, _| r.accumulators.iter().filter_map(|a| a.window).collect());
        let m = self.index;
        for window in windows {
            let slot = inner.slots[window.0 as usize]
                .clone()
                .expect("every mirror buffer has a slot");
            if let Err(e) = inner.driver.memset_async(slot.device, m * slot.stride, slot.bytes, 0) {
                inner.phase = Phase::Failed;
                return Err(e);
            }
        }
        inner.window_start[m] = Some(inner.step_count);
        inner.synced[m] = false;
        Ok(())
    }

    fn begin_advance(&self, intervals: u64) -> Result<()> {
        let mut inner = self.lock();
        let (m, n) = (self.index, self.batch.mirrors.len());
        if inner.closed[m] {
            return Err(Error::Closed { action: "step" });
        }
        if inner.owed[m] {
            return Err(Error::InFlight { action: "step" });
        }
        match &mut inner.phase {
            Phase::Failed => return Err(Error::Failed { action: "step" }),
            Phase::InFlight { .. } => return Err(Error::InFlight { action: "step" }),
            Phase::Ready => {
                inner.phase = Phase::Begun {
                    intervals,
                    begun: vec![false; n],
                }
            }
            Phase::Begun { intervals: asked, .. } if *asked != intervals => {
                return Err(Error::FusedAdvance {
                    member: m,
                    action: "step",
                    why: "every member of a fused batch advances by the same intervals as the first to begin",
                });
            }
            Phase::Begun { .. } => {}
        }
        let Phase::Begun { begun, .. } = &mut inner.phase else {
            unreachable!("set above")
        };
        begun[m] = true;
        if !begun.iter().all(|b| *b) {
            return Ok(());
        }
        inner.phase = Phase::InFlight { intervals };
        inner.owed = vec![true; n];
        inner.exchange_valid = false;
        let Inner {
            driver,
            prepared,
            step_count,
            ..
        } = &mut *inner;
        let enqueued =
            (0..intervals).try_for_each(|k| driver.replay(prepared[parity_at_interval_start(0, *step_count + k)]));
        if enqueued.is_err() {
            inner.phase = Phase::Failed;
        }
        enqueued
    }

    fn finish_advance(&self) -> Result<()> {
        let mut inner = self.lock();
        let m = self.index;
        match inner.phase.clone() {
            Phase::InFlight { intervals } => {
                let waited = inner.driver.synchronize();
                inner.owed[m] = false;
                if let Err(e) = waited {
                    inner.phase = Phase::Failed;
                    return Err(e);
                }
                inner.step_count += intervals;
                inner.exchange_valid = intervals > 0;
                inner.synced.iter_mut().for_each(|s| *s = false);
                inner.phase = Phase::Ready;
                Ok(())
            }
            Phase::Ready if inner.owed[m] => {
                inner.owed[m] = false;
                Ok(())
            }
            Phase::Failed if inner.owed[m] => {
                inner.owed[m] = false;
                Err(Error::Failed { action: "step" })
            }
            Phase::Begun { .. } => Err(Error::FusedAdvance {
                member: m,
                action: "finish its advance",
                why: "not every member of the fused batch has begun it (begin_advance on all, then finish_advance)",
            }),
            _ => Err(Error::FusedAdvance {
                member: m,
                action: "finish its advance",
                why: "nothing was begun",
            }),
        }
    }

    fn velocity(&self) -> Result<Vec<f32>> {
        Member::velocity(self.synced("read the velocity")?)
    }

    fn stats(&self, spec: &StatsSpec) -> Result<std::collections::BTreeMap<String, ArrayD<f64>>> {
        Member::stats(self.synced("read statistics")?, spec)
    }

    fn observe(&self) -> Result<MemberObservation> {
        Member::observe(self.synced("observe")?)
    }

    /// The member's share of every buffer: its stride of each.
    fn memory_ledger(&self) -> MemoryLedger {
        let inner = self.lock();
        let mut ledger = MemoryLedger::default();
        for slot in inner.slots.iter().flatten() {
            ledger.add(slot.label.clone(), slot.stride as u64);
        }
        ledger
    }

    fn available_device_memory(&self) -> Result<u64> {
        self.lock().driver.free_memory()
    }

    /// Closes the member's mirror; the last member to close releases the
    /// batch's plans and device buffers.
    fn close(&self) -> Result<()> {
        let mut inner = self.lock();
        if inner.closed[self.index] {
            return Ok(());
        }
        inner.closed[self.index] = true;
        let mirror = self.mirror().close();
        if !inner.closed.iter().all(|c| *c) {
            return mirror;
        }
        let Inner {
            driver,
            prepared,
            device,
            ..
        } = &mut *inner;
        let plans = prepared.iter().try_for_each(|p| driver.release_plan(*p));
        let mut freed = Ok(());
        for id in std::mem::take(device) {
            if let Err(e) = driver.free(id) {
                freed = freed.and(Err(e));
            }
        }
        mirror.and(plans).and(freed)
    }
}
