//! A fused batch: members of one geometry and resolution, each with its own
//! physical parameters, advanced on one driver with one launch per kernel per
//! hop for all of them ([`crate::device::BatchLaunch`]), where a lockstep
//! batch launches every kernel once per member.
//!
//! [`member_drivers`] splits one driver into a [`MemberDriver`] per member.
//! Each member is an ordinary [`Stepper`] on its member driver, so it is
//! checked, built, observed, checked for divergence, snapshotted and read out
//! by the stepper's own code. The member drivers lay every buffer out once on
//! the device for all members: the k-th buffer each member allocates is one
//! allocation, member `m`'s copy at `m` times its stride (the largest
//! member's size, [`BufferSizes`], rounded up to [`MEMBER_ALIGN`] bytes), and
//! a member whose k-th buffer differs in name from member 0's, or is larger
//! than the stride, is refused ([`Error::FusedShape`]). Members whose bodies
//! lie otherwise (another angle, position or size: an aerofoil's polar) so
//! differ only in the sizes of their lists, links and wall tables. Every
//! call of a member lands on its own copy; its launches are checked against
//! its own buffers first.
//!
//! The two interval plans ([`INTERVAL_PLANS`]) are fused: once every member
//! has prepared its own, the batch prepares one plan whose every launch is a
//! batch of each member's launch (its buffers moved to its copy, its scalars
//! — relaxation, forcing, wall velocities, the inlet's amplitude, its list's
//! and links' counts — its own; launched with the largest member's grid where
//! the kernel [idles beyond its grid](Kernel::idles_beyond_its_grid))
//! and whose memsets cover every member's copy. A member's replay of an
//! interval is queued; when every member has queued the same interval, the
//! fused interval is enqueued once. So a batch advances as a whole: every
//! member begins the same intervals ([`Member::begin_advance`], the last one
//! enqueues them), then each finishes; a member that waits while its own
//! intervals are still queued fails ([`Error::FusedAdvance`]). A member that
//! closes (or fails and is dropped) leaves the batch: the others go on
//! without waiting for it, its copies computed but never read. Every other
//! plan (the health check, the settle, the output ring's) runs per member,
//! on its copy.
//!
//! Every member computes exactly what its own stepper on its own driver
//! computes: the same kernels on the same arguments, bit for bit.
//!
//! [`Member::begin_advance`]: crate::member::Member::begin_advance

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::config::{ExecConfig, LatticeConfig};
use crate::cpu::CpuDriver;
use crate::device::{Action, Arg, BatchLaunch, BufferId, Driver, EventId, Kernel, Launch, PlanId, StagingId, StreamId};
use crate::error::{Error, Result};
use crate::kernels::KernelArgs;
use crate::kernels::check_actions;
use crate::kernels::lbm::StreamCollide;
use crate::ledger::MemoryLedger;
use crate::stepper::{INTERVAL_PLANS, Stepper};

/// The alignment of every member's copy of a buffer: device allocations are
/// 256-byte aligned, so each member's copy starts as its own buffer would.
pub const MEMBER_ALIGN: usize = 256;

/// A member of a fused batch: a stepper on its member driver.
pub type FusedMember<D> = Stepper<MemberDriver<D>>;

/// Builds one member per configuration on `driver`, in order, as a fused
/// batch, after [`check`]ing them; a member that cannot be built, or whose
/// shape differs, is named.
pub fn batch<D: Driver>(driver: D, members: Vec<(LatticeConfig, ExecConfig)>) -> Result<Vec<FusedMember<D>>> {
    let sizes = check(&members, driver.split_min_cells())?;
    member_drivers(driver, members.len(), &sizes)
        .into_iter()
        .zip(members)
        .enumerate()
        .map(|(member, (driver, (lattice, exec)))| {
            Stepper::new(driver, lattice, exec).map_err(|source| match source {
                shape @ Error::FusedShape { .. } => shape,
                source => Error::FusedMember {
                    member,
                    source: Box::new(source),
                },
            })
        })
        .collect()
}

/// The bytes of each buffer's copy in a fused batch, by label: the largest
/// any member allocates ([`check`] finds them, [`member_drivers`] lays the
/// buffers out with them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BufferSizes(pub std::collections::BTreeMap<String, usize>);

/// Checks before any work that `members` can run as one fused batch on a
/// driver whose [`Driver::split_min_cells`] is `split_min_cells`, and gives
/// the sizes of their buffers' copies: each member is built in turn on the
/// host, as a member of such a batch of its size, and its buffers and
/// interval plans compared with member 0's (the same buffers, of any size;
/// the same steps, kernels and blocks, grids differing only where a kernel
/// idles beyond its grid). The member that cannot be built, or whose shape
/// differs, is named.
pub fn check(members: &[(LatticeConfig, ExecConfig)], split_min_cells: usize) -> Result<BufferSizes> {
    let mut sizes = BufferSizes::default();
    let mut first: Option<(MemoryLedger, [Vec<Action>; 2])> = None;
    for (member, (lattice, exec)) in members.iter().enumerate() {
        let driver = CpuDriver::for_batch(members.len(), split_min_cells);
        let stepper = Stepper::new(driver, lattice.clone(), exec.clone()).map_err(|source| Error::FusedMember {
            member,
            source: Box::new(source),
        })?;
        let plan = stepper.plan();
        let shape = (stepper.memory_ledger(), [plan.actions(0), plan.actions(1)]);
        for (label, bytes) in &shape.0.entries {
            let largest = sizes.0.entry(label.clone()).or_default();
            *largest = (*largest).max(*bytes as usize);
        }
        match &first {
            None => first = Some(shape),
            Some((ledger, intervals)) => {
                // The first buffer, of either member, that the other lacks.
                let bytes = |l: &MemoryLedger, label: &str| {
                    l.entries.get(label).map_or("none".into(), |b| format!("{b} bytes"))
                };
                if let Some(label) = shape
                    .0
                    .entries
                    .keys()
                    .chain(ledger.entries.keys())
                    .find(|label| shape.0.entries.contains_key(*label) != ledger.entries.contains_key(*label))
                {
                    // A buffer only some members' cases ask for, named as
                    // the case asks for it.
                    let cause = match label.as_str() {
                        "boundary.amplitude_table" => {
                            " (an inlet amplitude given as `{ table = ... }` in some members and not in others: \
                             give every member a table, a constant one being `[[0.0, 1.0]]`)"
                        }
                        _ => "",
                    };
                    return Err(Error::FusedShape {
                        member,
                        what: format!(
                            "its buffer `{label}` has {} where member 0's has {}{cause}",
                            bytes(&shape.0, label),
                            bytes(ledger, label)
                        ),
                    });
                }
                for (theirs, mine) in intervals.iter().zip(&shape.1) {
                    same_shape(theirs, mine).map_err(|what| Error::FusedShape { member, what })?;
                }
            }
        }
    }
    Ok(sizes)
}

/// Splits `driver` into the drivers of `members` members of one fused batch,
/// each buffer's copies `sizes` apart (a buffer it does not name, as far
/// apart as member 0's copy is large).
pub fn member_drivers<D: Driver>(driver: D, members: usize, sizes: &BufferSizes) -> Vec<MemberDriver<D>> {
    let shared = Arc::new(Mutex::new(Shared {
        device: driver,
        members,
        sizes: sizes.clone(),
        slots: Vec::new(),
        allocated: vec![0; members],
        frees: vec![0; members],
        streams: vec![Vec::new(); members],
        events: vec![Vec::new(); members],
        staging: vec![Vec::new(); members],
        plans: (0..members).map(|_| Vec::new()).collect(),
        fusions: Vec::new(),
        queues: vec![VecDeque::new(); members],
        closed: vec![false; members],
    }));
    (0..members)
        .map(|member| MemberDriver {
            shared: Arc::clone(&shared),
            member,
        })
        .collect()
}

/// One member's view of a fused batch's driver; see the module documentation.
pub struct MemberDriver<D: Driver> {
    shared: Arc<Mutex<Shared<D>>>,
    member: usize,
}

/// One buffer every member allocated, laid out once.
struct Slot {
    device: BufferId,
    label: String,
    /// Bytes of each member's copy (0 until it allocates it).
    bytes: Vec<usize>,
    /// Bytes from one member's copy to the next.
    stride: usize,
    /// Which members hold their copy (not freed).
    live: Vec<bool>,
}

/// A member's prepared plan.
enum Plan {
    /// Prepared on the device for this member alone, with the member's own
    /// actions (in its buffer ids) for the stale check, and the member's
    /// frees when it was prepared.
    Own {
        device: PlanId,
        actions: Vec<Action>,
        frees: u64,
    },
    /// The member's part of the fusion with this index, and the member's
    /// frees when it was prepared.
    Fused {
        fusion: usize,
        frees: u64,
    },
    Released,
}

/// One interval plan of every member, fused once all have prepared it.
struct Fusion {
    label: String,
    /// Each member's actions, in its buffer ids.
    actions: Vec<Option<Vec<Action>>>,
    prepared: Option<PlanId>,
    released: Vec<bool>,
}

struct Shared<D: Driver> {
    device: D,
    members: usize,
    sizes: BufferSizes,
    /// By the members' buffer id: the k-th allocation of every member.
    slots: Vec<Slot>,
    /// Each member's allocations so far (its next buffer id).
    allocated: Vec<usize>,
    /// Each member's frees so far: a replay looks for a freed buffer only
    /// when the member freed one since the plan was prepared.
    frees: Vec<u64>,
    /// Each member's streams: its stream `k` (k >= 1) is `streams[m][k - 1]`.
    streams: Vec<Vec<StreamId>>,
    events: Vec<Vec<EventId>>,
    staging: Vec<Vec<StagingId>>,
    plans: Vec<Vec<Plan>>,
    fusions: Vec<Fusion>,
    /// Each member's replayed intervals (fusion indices) not yet enqueued.
    queues: Vec<VecDeque<usize>>,
    /// Members that released a fused plan (closed): the batch goes on
    /// without waiting for them, their copies computed but never read.
    closed: Vec<bool>,
}

fn unknown(what: &'static str, id: u32) -> Error {
    Error::UnknownHandle {
        backend: "fused",
        what,
        id,
    }
}

impl<D: Driver> Shared<D> {
    /// Member `m`'s live copy of `id`.
    fn slot(&self, m: usize, id: BufferId) -> Result<&Slot> {
        self.slots
            .get(id.0 as usize)
            .filter(|s| s.live[m])
            .ok_or(Error::UnknownBuffer {
                backend: "fused",
                buffer: id,
            })
    }

    /// Bytes of member `m`'s copy of `id`, `None` when it holds none.
    fn size_of(&self, m: usize, id: BufferId) -> Option<usize> {
        self.slot(m, id).ok().map(|s| s.bytes[m])
    }

    /// Where `[offset, offset + len)` of member `m`'s copy of `id` lies on the
    /// device.
    fn at(
        &self,
        m: usize,
        id: BufferId,
        operation: &'static str,
        offset: usize,
        len: usize,
    ) -> Result<(BufferId, usize)> {
        let slot = self.slot(m, id)?;
        let end = offset.saturating_add(len);
        if end > slot.bytes[m] {
            return Err(Error::OutOfRange {
                backend: "fused",
                operation,
                label: slot.label.clone(),
                start: offset as u64,
                end: end as u64,
                size: slot.bytes[m] as u64,
            });
        }
        Ok((slot.device, m * slot.stride + offset))
    }

    fn stream(&self, m: usize, stream: StreamId) -> Result<StreamId> {
        match stream.0 {
            0 => Ok(StreamId::MAIN),
            k => self.streams[m].get(k as usize - 1).copied().ok_or(unknown("stream", k)),
        }
    }

    fn event(&self, m: usize, event: EventId) -> Result<EventId> {
        self.events[m]
            .get(event.0 as usize)
            .copied()
            .ok_or(unknown("event", event.0))
    }

    fn staging(&self, m: usize, staging: StagingId) -> Result<StagingId> {
        self.staging[m]
            .get(staging.0 as usize)
            .copied()
            .ok_or(unknown("staging", staging.0))
    }

    /// Member `m`'s launch with every buffer moved to its copy.
    fn launch_of(&self, m: usize, launch: &Launch) -> Launch {
        let mut out = launch.clone();
        for arg in &mut out.args {
            if let Arg::Buffer { id, byte_offset } = arg {
                let slot = &self.slots[id.0 as usize];
                *id = slot.device;
                *byte_offset += (m * slot.stride) as u64;
            }
        }
        out
    }

    /// Member `m`'s checked action on the device.
    fn action_of(&self, m: usize, action: &Action) -> Action {
        match action {
            Action::Launch(l) => Action::Launch(self.launch_of(m, l)),
            Action::Memset {
                buffer,
                byte_offset,
                bytes,
                value,
            } => {
                let slot = &self.slots[buffer.0 as usize];
                Action::Memset {
                    buffer: slot.device,
                    byte_offset: m * slot.stride + byte_offset,
                    bytes: *bytes,
                    value: *value,
                }
            }
            Action::Batch(_) => unreachable!("a member's plan holding a batch is refused at prepare"),
            Action::Together(members) => Action::Together(members.iter().map(|a| self.action_of(m, a)).collect()),
        }
    }

    /// One batch of the launch that `pick` finds in each member's step.
    fn batch_of(&self, actions: &[Vec<Action>], pick: impl Fn(&[Action]) -> &Action) -> Action {
        Action::Batch(BatchLaunch {
            launches: actions
                .iter()
                .enumerate()
                .map(|(m, own)| match pick(own) {
                    Action::Launch(l) => per_cell(self.launch_of(m, l)),
                    _ => unreachable!("every member's step has member 0's shape (checked at prepare)"),
                })
                .collect(),
        })
    }

    /// The fused plan of `fusion`, once every member has handed in its
    /// actions ([`Shared::fuse`]).
    fn fuse_all(&self, fusion: &Fusion) -> Vec<(usize, Action)> {
        let all: Vec<Vec<Action>> = fusion.actions.iter().flatten().cloned().collect();
        self.fuse(&all)
    }

    /// Every member's `actions` as one plan of batches, each with the index
    /// of the members' action it comes from; see the module documentation.
    fn fuse(&self, actions: &[Vec<Action>]) -> Vec<(usize, Action)> {
        let mut out = Vec::new();
        for (k, first) in actions[0].iter().enumerate() {
            let mut push = |action| out.push((k, action));
            match first {
                Action::Launch(_) => push(self.batch_of(actions, |own| &own[k])),
                // A group of launches becomes a group of batches, one per
                // launch: what a member may run side by side, the batch may.
                Action::Together(members) => push(Action::Together(
                    (0..members.len())
                        .map(|j| {
                            self.batch_of(actions, |own| match &own[k] {
                                Action::Together(group) => &group[j],
                                other => other,
                            })
                        })
                        .collect(),
                )),
                Action::Memset {
                    buffer,
                    byte_offset: 0,
                    bytes,
                    value,
                } if self.slots[buffer.0 as usize].bytes.iter().all(|b| b == bytes) => {
                    // A whole buffer (an accumulator): every member's copy at once.
                    let slot = &self.slots[buffer.0 as usize];
                    push(Action::Memset {
                        buffer: slot.device,
                        byte_offset: 0,
                        bytes: slot.stride * self.members,
                        value: *value,
                    });
                }
                Action::Memset { .. } => {
                    for (m, own) in actions.iter().enumerate() {
                        push(self.action_of(m, &own[k]));
                    }
                }
                Action::Batch(_) => unreachable!("a member's plan holding a batch is refused at prepare"),
            }
        }
        out
    }

    /// Enqueues every interval that all open members have queued.
    fn drain(&mut self, m: usize) -> Result<()> {
        loop {
            let mut head = None;
            for k in (0..self.members).filter(|k| !self.closed[*k]) {
                match (self.queues[k].front(), head) {
                    (None, _) => return Ok(()),
                    (Some(&f), None) => head = Some(f),
                    (Some(&f), Some(h)) if f != h => {
                        return Err(Error::FusedAdvance {
                            member: m,
                            action: "replay an interval",
                            why: "the members of a fused batch queued different intervals: every member advances by the same intervals",
                        });
                    }
                    _ => {}
                }
            }
            let Some(head) = head else { return Ok(()) };
            for k in 0..self.members {
                if !self.closed[k] {
                    self.queues[k].pop_front();
                }
            }
            let plan = self.fusions[head].prepared.expect("queued only once prepared");
            self.device.replay(plan)?;
        }
    }
}

/// Whether `mine` has the shape of `first`: the same steps, each launch of
/// the same kernel, block and grid (any grid where the kernel idles beyond
/// its grid), each memset the same; else what differs.
fn same_shape(first: &[Action], mine: &[Action]) -> std::result::Result<(), String> {
    if first.len() != mine.len() {
        return Err(format!(
            "its interval has {} steps, member 0's {}",
            mine.len(),
            first.len()
        ));
    }
    fn same(a: &Action, b: &Action) -> bool {
        match (a, b) {
            (Action::Launch(a), Action::Launch(b)) => {
                (a.kernel, a.block) == (b.kernel, b.block) && (a.grid == b.grid || a.kernel.idles_beyond_its_grid())
            }
            (Action::Together(a), Action::Together(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b))
            }
            (Action::Memset { bytes: a, value: x, .. }, Action::Memset { bytes: b, value: y, .. }) => (a, x) == (b, y),
            _ => false,
        }
    }
    fn shape(a: &Action) -> String {
        match a {
            Action::Launch(l) => format!("{} grid {:?} x block {:?}", l.kernel, l.grid, l.block),
            Action::Memset { bytes, value, .. } => format!("a memset of {bytes} bytes to {value}"),
            Action::Batch(b) => format!("a batch of {}", b.first().kernel),
            Action::Together(members) => {
                let members: Vec<String> = members.iter().map(shape).collect();
                format!("a group of {}", members.join(", "))
            }
        }
    }
    match first.iter().zip(mine).enumerate().find(|(_, (a, b))| !same(a, b)) {
        Some((k, (a, b))) => Err(format!("its step {k} is {}, member 0's {}", shape(b), shape(a))),
        None => Ok(()),
    }
}

impl<D: Driver> MemberDriver<D> {
    fn lock(&self) -> MutexGuard<'_, Shared<D>> {
        // A panic inside the device driver poisons the lock; every later
        // call still gets the device's own answer, so recover the guard.
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Calls `f` with the batch's device driver and the fused plan of the
    /// interval plan `label` (one of [`INTERVAL_PLANS`]) as the device runs
    /// it, each action with the index of the member's plan step it comes
    /// from; `None` until every member has prepared that plan. For measuring
    /// where a fused interval's time goes (the `gpu_interval` bench).
    pub fn with_fused_plan<R>(&self, label: &str, f: impl FnOnce(&mut D, &[(usize, Action)]) -> R) -> Option<R> {
        let mut s = self.lock();
        let fusion = s
            .fusions
            .iter()
            .find(|fusion| fusion.label == label && fusion.prepared.is_some())?;
        let fused = s.fuse_all(fusion);
        Some(f(&mut s.device, &fused))
    }
}

impl<D: Driver> Driver for MemberDriver<D> {
    fn backend(&self) -> &'static str {
        self.lock().device.backend()
    }

    fn alloc(&mut self, label: &str, bytes: usize) -> Result<BufferId> {
        let m = self.member;
        let mut s = self.lock();
        let k = s.allocated[m];
        if let Some(slot) = s.slots.get(k) {
            if slot.label != label || bytes > slot.stride {
                return Err(Error::FusedShape {
                    member: m,
                    what: format!(
                        "its buffer `{label}` has {bytes} bytes where member 0's `{}` has {} (its copies {} bytes apart)",
                        slot.label, slot.bytes[0], slot.stride
                    ),
                });
            }
        } else {
            let largest = s.sizes.0.get(label).copied().unwrap_or(0).max(bytes);
            let stride = largest.next_multiple_of(MEMBER_ALIGN).max(MEMBER_ALIGN);
            let members = s.members;
            let device = s.device.alloc(label, stride * members)?;
            s.slots.push(Slot {
                device,
                label: label.to_owned(),
                bytes: vec![0; members],
                stride,
                live: vec![false; members],
            });
        }
        s.slots[k].bytes[m] = bytes;
        s.slots[k].live[m] = true;
        s.allocated[m] += 1;
        Ok(BufferId(k as u32))
    }

    fn free(&mut self, buffer: BufferId) -> Result<()> {
        let m = self.member;
        let mut s = self.lock();
        s.slot(m, buffer)?;
        s.frees[m] += 1;
        let slot = &mut s.slots[buffer.0 as usize];
        slot.live[m] = false;
        if slot.live.iter().any(|l| *l) {
            return Ok(());
        }
        let device = slot.device;
        s.device.free(device)
    }

    fn upload(&mut self, buffer: BufferId, byte_offset: usize, data: &[u8]) -> Result<()> {
        let mut s = self.lock();
        let (id, at) = s.at(self.member, buffer, "upload", byte_offset, data.len())?;
        s.device.upload(id, at, data)
    }

    fn download(&mut self, buffer: BufferId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        let mut s = self.lock();
        let (id, at) = s.at(self.member, buffer, "download", byte_offset, out.len())?;
        s.device.download(id, at, out)
    }

    fn memset_async(&mut self, buffer: BufferId, byte_offset: usize, bytes: usize, value: u8) -> Result<()> {
        let mut s = self.lock();
        let (id, at) = s.at(self.member, buffer, "memset", byte_offset, bytes)?;
        s.device.memset_async(id, at, bytes, value)
    }

    fn copy_async(
        &mut self,
        src: BufferId,
        src_offset: usize,
        dst: BufferId,
        dst_offset: usize,
        bytes: usize,
    ) -> Result<()> {
        let mut s = self.lock();
        let (src, so) = s.at(self.member, src, "copy", src_offset, bytes)?;
        let (dst, dof) = s.at(self.member, dst, "copy", dst_offset, bytes)?;
        s.device.copy_async(src, so, dst, dof, bytes)
    }

    fn launch(&mut self, launch: &Launch) -> Result<()> {
        let m = self.member;
        let mut s = self.lock();
        crate::kernels::check_launch(launch, |id| s.size_of(m, id))?;
        let own = s.launch_of(m, launch);
        s.device.launch(&own)
    }

    fn synchronize(&mut self) -> Result<()> {
        let m = self.member;
        let mut s = self.lock();
        if !s.queues[m].is_empty() {
            return Err(Error::FusedAdvance {
                member: m,
                action: "wait for its intervals",
                why: "they are enqueued once every member of the fused batch has begun the same intervals",
            });
        }
        s.device.synchronize()
    }

    fn free_memory(&self) -> Result<u64> {
        self.lock().device.free_memory()
    }

    fn create_stream(&mut self) -> Result<StreamId> {
        let m = self.member;
        let mut s = self.lock();
        let stream = s.device.create_stream()?;
        s.streams[m].push(stream);
        Ok(StreamId(s.streams[m].len() as u32))
    }

    fn create_event(&mut self) -> Result<EventId> {
        let m = self.member;
        let mut s = self.lock();
        let event = s.device.create_event()?;
        s.events[m].push(event);
        Ok(EventId(s.events[m].len() as u32 - 1))
    }

    fn record_event(&mut self, event: EventId, stream: StreamId) -> Result<()> {
        let m = self.member;
        let mut s = self.lock();
        let (event, stream) = (s.event(m, event)?, s.stream(m, stream)?);
        s.device.record_event(event, stream)
    }

    fn wait_event(&mut self, stream: StreamId, event: EventId) -> Result<()> {
        let m = self.member;
        let mut s = self.lock();
        let (stream, event) = (s.stream(m, stream)?, s.event(m, event)?);
        s.device.wait_event(stream, event)
    }

    fn synchronize_event(&mut self, event: EventId) -> Result<()> {
        let m = self.member;
        let mut s = self.lock();
        let event = s.event(m, event)?;
        s.device.synchronize_event(event)
    }

    fn alloc_staging(&mut self, label: &str, bytes: usize) -> Result<StagingId> {
        let m = self.member;
        let mut s = self.lock();
        let staging = s.device.alloc_staging(label, bytes)?;
        s.staging[m].push(staging);
        Ok(StagingId(s.staging[m].len() as u32 - 1))
    }

    fn free_staging(&mut self, staging: StagingId) -> Result<()> {
        let m = self.member;
        let mut s = self.lock();
        let staging = s.staging(m, staging)?;
        s.device.free_staging(staging)
    }

    fn download_async(
        &mut self,
        stream: StreamId,
        buffer: BufferId,
        byte_offset: usize,
        staging: StagingId,
        staging_offset: usize,
        bytes: usize,
    ) -> Result<()> {
        let m = self.member;
        let mut s = self.lock();
        let stream = s.stream(m, stream)?;
        let (id, at) = s.at(m, buffer, "download", byte_offset, bytes)?;
        let staging = s.staging(m, staging)?;
        s.device.download_async(stream, id, at, staging, staging_offset, bytes)
    }

    fn read_staging(&mut self, staging: StagingId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        let m = self.member;
        let mut s = self.lock();
        let staging = s.staging(m, staging)?;
        s.device.read_staging(staging, byte_offset, out)
    }

    fn prepare(&mut self, label: &str, actions: &[Action]) -> Result<PlanId> {
        let m = self.member;
        let mut s = self.lock();
        let backend = s.device.backend();
        // The member's own check, against its own copies.
        check_actions(actions, backend, |id| s.size_of(m, id))?;
        if actions.iter().any(|a| matches!(a, Action::Batch(_))) {
            return Err(Error::FusedShape {
                member: m,
                what: "its plan holds a batch already".into(),
            });
        }
        let plan = match INTERVAL_PLANS.contains(&label) {
            true => {
                let index = match s
                    .fusions
                    .iter()
                    .position(|f| f.label == label && f.actions[m].is_none())
                {
                    Some(index) => index,
                    None => {
                        let members = s.members;
                        s.fusions.push(Fusion {
                            label: label.to_owned(),
                            actions: vec![None; members],
                            prepared: None,
                            released: vec![false; members],
                        });
                        s.fusions.len() - 1
                    }
                };
                if let Some(first) = s.fusions[index].actions.iter().flatten().next() {
                    same_shape(first, actions).map_err(|what| Error::FusedShape { member: m, what })?;
                }
                s.fusions[index].actions[m] = Some(actions.to_vec());
                if s.fusions[index].actions.iter().all(Option::is_some) {
                    let fused: Vec<Action> = s.fuse_all(&s.fusions[index]).into_iter().map(|(_, a)| a).collect();
                    let prepared = s.device.prepare(&format!("fused.{label}"), &fused)?;
                    s.fusions[index].prepared = Some(prepared);
                }
                Plan::Fused {
                    fusion: index,
                    frees: s.frees[m],
                }
            }
            false => {
                let own: Vec<Action> = actions.iter().map(|a| s.action_of(m, a)).collect();
                Plan::Own {
                    device: s.device.prepare(label, &own)?,
                    actions: actions.to_vec(),
                    frees: s.frees[m],
                }
            }
        };
        s.plans[m].push(plan);
        Ok(PlanId(s.plans[m].len() as u32 - 1))
    }

    fn replay(&mut self, plan: PlanId) -> Result<()> {
        let m = self.member;
        let mut s = self.lock();
        let (device, fusion, actions, frees) = match s.plans[m].get(plan.0 as usize) {
            Some(Plan::Own { device, actions, frees }) => (Some(*device), None, actions, *frees),
            Some(Plan::Fused { fusion, frees }) => (
                None,
                Some(*fusion),
                s.fusions[*fusion].actions[m].as_ref().expect("set at prepare"),
                *frees,
            ),
            _ => return Err(unknown("plan", plan.0)),
        };
        // Only a member that freed a buffer since can hold a stale plan.
        if frees != s.frees[m]
            && let Some(buffer) = actions
                .iter()
                .flat_map(Action::buffers)
                .find(|b| s.size_of(m, *b).is_none())
        {
            return Err(Error::StalePlan {
                backend: "fused",
                plan,
                buffer,
            });
        }
        let Some(f) = fusion else {
            return s.device.replay(device.expect("an own plan has its device plan"));
        };
        if s.fusions[f].prepared.is_none() {
            return Err(Error::FusedAdvance {
                member: m,
                action: "replay an interval",
                why: "not every member of the fused batch has been built",
            });
        }
        // Only a member whose queue was empty can complete a round.
        let was_empty = s.queues[m].is_empty();
        s.queues[m].push_back(f);
        match was_empty {
            true => s.drain(m),
            false => Ok(()),
        }
    }

    fn batch_members(&self) -> usize {
        self.lock().members
    }

    fn split_min_cells(&self) -> usize {
        self.lock().device.split_min_cells()
    }

    fn release_plan(&mut self, plan: PlanId) -> Result<()> {
        let m = self.member;
        let mut s = self.lock();
        let slot = s.plans[m].get_mut(plan.0 as usize).ok_or(unknown("plan", plan.0))?;
        match std::mem::replace(slot, Plan::Released) {
            Plan::Own { device, .. } => s.device.release_plan(device),
            Plan::Fused { fusion: f, .. } => {
                s.closed[m] = true;
                s.queues[m].clear();
                // The others no longer wait for this member's intervals.
                s.drain(m)?;
                let fusion = &mut s.fusions[f];
                fusion.released[m] = true;
                match (fusion.released.iter().all(|r| *r), fusion.prepared) {
                    (true, Some(device)) => s.device.release_plan(device),
                    _ => Ok(()),
                }
            }
            Plan::Released => Err(unknown("plan", plan.0)),
        }
    }
}

/// `launch` as a fused batch runs it: `stream_collide` one thread per cell
/// ([`StreamCollide::per_cell_shape`]), because the members' lists together
/// already fill the device; every other kernel as it is.
fn per_cell(launch: Launch) -> Launch {
    match launch.kernel {
        Kernel::StreamCollide => {
            let shape = StreamCollide::decode(&launch)
                .expect("a member's launch passed the launch check")
                .per_cell_shape();
            Launch {
                grid: shape.grid,
                block: shape.block,
                ..launch
            }
        }
        _ => launch,
    }
}
