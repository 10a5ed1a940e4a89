//! The one launch check, derived from each family's declarations
//! ([`KernelArgs`]): what every driver runs before a launch reaches a device,
//! and once per plan at prepare.
//!
//! It reads no buffer contents.

use crate::device::{Action, BatchLaunch, BufferId, Launch, MAX_BATCH_MEMBERS, MAX_BLOCK_THREADS, PlanId};
use crate::domain::hierarchy::{Layout, Rect};
use crate::error::{Error, LaunchProblem, Result};

use super::{Access, ExactShape, FamilyVisitor, KernelArgs, dispatch, uses_of};

/// Checks `launch` against buffer sizes (`size_of` answers bytes, or `None`
/// for a buffer the driver does not hold); see the module documentation.
pub fn check_launch(launch: &Launch, size_of: impl Fn(BufferId) -> Option<usize>) -> Result<()> {
    struct Check<F>(F);
    impl<F: Fn(BufferId) -> Option<usize>> FamilyVisitor for Check<F> {
        type Output = std::result::Result<(), LaunchProblem>;
        fn visit<K: KernelArgs>(self, launch: &Launch) -> Self::Output {
            check::<K>(launch, &self.0)
        }
    }
    dispatch(launch, Check(size_of)).map_err(|problem| Error::Launch {
        kernel: launch.kernel,
        problem,
    })
}

/// Checks a fused batch: every member's launch as [`check_launch`] checks it,
/// all of one kernel (one that has a `_batch` entry), block and grid (the
/// grid may differ for a kernel that [idles beyond its
/// grid](crate::Kernel::idles_beyond_its_grid)), grids of one z layer (the
/// device's z index is the member), at most
/// [`MAX_BATCH_MEMBERS`] members, and no member touching bytes another
/// member writes (or writing bytes another touches).
pub fn check_batch(batch: &BatchLaunch, size_of: impl Fn(BufferId) -> Option<usize>) -> Result<()> {
    let Some(first) = batch.launches.first() else {
        return Err(Error::EmptyBatch);
    };
    let refuse = |problem| Error::Launch {
        kernel: first.kernel,
        problem,
    };
    let members = batch.launches.len();
    if members > MAX_BATCH_MEMBERS {
        return Err(refuse(LaunchProblem::Batch {
            members,
            why: "more members than a grid's z dimension holds (65535)",
        }));
    }
    if !first.kernel.batches() {
        return Err(refuse(LaunchProblem::Batch {
            members,
            why: "the kernel has no `_batch` entry",
        }));
    }
    if first.grid[2] != 1 {
        return Err(refuse(LaunchProblem::Batch {
            members,
            why: "a member's grid must have one z layer: the z index is the member",
        }));
    }
    let mut uses = Vec::with_capacity(members);
    for (member, launch) in batch.launches.iter().enumerate() {
        let grid_differs = launch.grid != first.grid && !first.kernel.idles_beyond_its_grid();
        if (launch.kernel, launch.block) != (first.kernel, first.block) || grid_differs || launch.grid[2] != 1 {
            return Err(refuse(LaunchProblem::BatchShape {
                member,
                kernel: launch.kernel,
                grid: launch.grid,
                block: launch.block,
                first_kernel: first.kernel,
                first_grid: first.grid,
                first_block: first.block,
            }));
        }
        check_launch(launch, &size_of).map_err(|e| match e {
            Error::Launch { problem, .. } => refuse(LaunchProblem::BatchMember {
                member,
                problem: Box::new(problem),
            }),
            other => other,
        })?;
        uses.push(uses_of(launch)?);
    }
    // Every use of every member, by buffer and start: a use overlaps only
    // those after it that start before it ends, so the scan stays short.
    let mut all: Vec<(usize, &super::BufferUse)> = uses
        .iter()
        .enumerate()
        .flat_map(|(member, u)| u.iter().map(move |u| (member, u)))
        .collect();
    all.sort_by_key(|(_, u)| (u.buffer.id, u.buffer.byte_offset));
    for (i, &(member, a)) in all.iter().enumerate() {
        let end = a.buffer.byte_offset + a.bytes as u64;
        for &(other, b) in all[i + 1..]
            .iter()
            .take_while(|(_, b)| b.buffer.id == a.buffer.id && b.buffer.byte_offset < end)
        {
            if other != member && (a.access != Access::Read || b.access != Access::Read) {
                let (m, p, o, op) = match member > other {
                    true => (member, a.param, other, b.param),
                    false => (other, b.param, member, a.param),
                };
                return Err(refuse(LaunchProblem::BatchOverlap {
                    member: m,
                    param: p,
                    other: o,
                    other_param: op,
                    buffer: a.buffer.id,
                }));
            }
        }
    }
    Ok(())
}

/// Every action of a plan checked as [`PlanTable::prepare`] checks it, for a
/// driver that keeps its plans itself (a fused batch's member drivers).
pub fn check_actions(
    actions: &[Action],
    backend: &'static str,
    size_of: impl Fn(BufferId) -> Option<usize>,
) -> Result<()> {
    actions.iter().try_for_each(|a| check_action(a, backend, &size_of))
}

/// [`check_launch`] for a launch, [`check_batch`] for a batch, and for a
/// memset that its range lies inside the buffer.
fn check_action(action: &Action, backend: &'static str, size_of: &dyn Fn(BufferId) -> Option<usize>) -> Result<()> {
    match action {
        Action::Launch(launch) => check_launch(launch, size_of),
        Action::Batch(batch) => check_batch(batch, size_of),
        Action::Together(members) => members.iter().try_for_each(|a| match a {
            Action::Launch(_) | Action::Batch(_) => check_action(a, backend, size_of),
            Action::Memset { .. } | Action::Together(_) => Err(Error::NotAvailable {
                what: "a memset or a group inside a group".into(),
                reason: "a group holds only launches and batches, which a device may run side by side",
            }),
        }),
        Action::Memset {
            buffer,
            byte_offset,
            bytes,
            ..
        } => {
            let size = size_of(*buffer).ok_or(Error::UnknownBuffer {
                backend,
                buffer: *buffer,
            })?;
            let end = byte_offset.saturating_add(*bytes);
            if end > size {
                return Err(Error::OutOfRange {
                    backend,
                    operation: "memset",
                    label: buffer.to_string(),
                    start: *byte_offset as u64,
                    end: end as u64,
                    size: size as u64,
                });
            }
            Ok(())
        }
    }
}

/// Refuses the replay of prepared plan `plan` when a buffer its actions name
/// has been freed since it was prepared.
fn check_replay(
    plan: PlanId,
    actions: &[Action],
    backend: &'static str,
    size_of: impl Fn(BufferId) -> Option<usize>,
) -> Result<()> {
    match actions.iter().flat_map(Action::buffers).find(|b| size_of(*b).is_none()) {
        Some(buffer) => Err(Error::StalePlan { backend, plan, buffer }),
        None => Ok(()),
    }
}

fn check<K: KernelArgs>(
    launch: &Launch,
    size_of: &impl Fn(BufferId) -> Option<usize>,
) -> std::result::Result<(), LaunchProblem> {
    let k = K::decode(launch).map_err(|e| match e {
        Error::Launch { problem, .. } => problem,
        other => LaunchProblem::Shape(other.to_string()),
    })?;
    let (grid, block) = (launch.grid, launch.block);
    if grid.contains(&0) || block.contains(&0) {
        return Err(LaunchProblem::EmptyGrid { grid, block });
    }
    let block_threads: u64 = block.iter().map(|&d| u64::from(d)).product();
    if block_threads > u64::from(MAX_BLOCK_THREADS) {
        return Err(LaunchProblem::BlockTooLarge {
            block,
            max: MAX_BLOCK_THREADS,
        });
    }
    let is = |shape: ExactShape| grid == shape.grid && block == shape.block;
    if let Some(shape) = k.required_shape()
        && !is(shape)
        && !k.alternative_shape().is_some_and(is)
    {
        return Err(LaunchProblem::ExactShape {
            grid,
            block,
            required_grid: shape.grid,
            required_block: shape.block,
        });
    }
    k.check_shape()?;
    let items = k.work_items() as u64;
    if launch.threads() < items {
        return Err(LaunchProblem::GridTooSmall {
            threads: launch.threads(),
            items,
        });
    }
    let uses = k.buffer_uses();
    for u in &uses {
        let size = size_of(u.buffer.id).ok_or(LaunchProblem::UnknownBuffer {
            param: u.param,
            buffer: u.buffer.id,
        })?;
        let offset = u.buffer.byte_offset;
        if offset % u.align != 0 {
            return Err(LaunchProblem::Misaligned {
                param: u.param,
                buffer: u.buffer.id,
                offset,
                align: u.align,
            });
        }
        let available = (size as u64).saturating_sub(offset);
        if u.bytes as u64 > available {
            return Err(LaunchProblem::TooSmall {
                param: u.param,
                buffer: u.buffer.id,
                offset,
                available,
                needed: u.bytes as u64,
            });
        }
    }
    // A written buffer is named once: kernels work out of place.
    for (i, a) in uses.iter().enumerate() {
        for b in &uses[i + 1..] {
            if a.buffer.id == b.buffer.id && (a.access != Access::Read || b.access != Access::Read) {
                let (written, other) = if a.access != Access::Read {
                    (a.param, b.param)
                } else {
                    (b.param, a.param)
                };
                return Err(LaunchProblem::Aliased {
                    written,
                    other,
                    buffer: a.buffer.id,
                });
            }
        }
    }
    Ok(())
}

/// `layout.plane_cells()` once the layout is known not to divide by zero.
pub(super) fn check_layout(what: &str, layout: &Layout) -> std::result::Result<(), LaunchProblem> {
    if layout.nx == 0 || layout.ny == 0 || layout.tile[0] == 0 || layout.tile[1] == 0 {
        return Err(LaunchProblem::Shape(format!(
            "{what} layout {}x{} with tile {:?}: sizes and tile sides must be at least 1",
            layout.nx, layout.ny, layout.tile
        )));
    }
    Ok(())
}

/// [`check_layout`] of a patch and that its `active` region lies inside it.
pub(super) fn check_patch(layout: &Layout, active: &Rect) -> std::result::Result<(), LaunchProblem> {
    check_layout("the patch", layout)?;
    let (a, l) = (active, layout);
    if a.x0 > a.x1 || a.y0 > a.y1 || a.x1 > l.nx || a.y1 > l.ny {
        return Err(LaunchProblem::Shape(format!(
            "active region {a} is not inside the {}x{} allocation",
            l.nx, l.ny
        )));
    }
    Ok(())
}

/// The prepared plans of one driver: each checked once when it is added,
/// then handed out for replay after a check that none of its buffers was
/// freed since. A driver keeps one, tells it of every free
/// ([`PlanTable::note_free`]) and enqueues the actions itself.
#[derive(Default)]
pub struct PlanTable {
    plans: Vec<Option<Prepared>>,
    /// Buffers the driver has freed so far.
    frees: u64,
}

struct Prepared {
    actions: std::sync::Arc<[Action]>,
    /// [`PlanTable::frees`] when every buffer of the plan was last found
    /// live: a replay before the next free needs no look. A fused batch's
    /// plan names thousands of buffers, and looking them all up at every
    /// replay cost the host about as much as the GPU's interval.
    checked: std::cell::Cell<u64>,
}

impl PlanTable {
    /// Checks every action (launches with [`check_launch`], memsets against
    /// their buffer) and keeps the plan.
    pub fn prepare(
        &mut self,
        actions: &[Action],
        backend: &'static str,
        size_of: impl Fn(BufferId) -> Option<usize>,
    ) -> Result<PlanId> {
        check_actions(actions, backend, size_of)?;
        self.plans.push(Some(Prepared {
            actions: actions.into(),
            checked: std::cell::Cell::new(self.frees),
        }));
        Ok(PlanId(self.plans.len() as u32 - 1))
    }

    /// Counts a freed buffer: every plan is looked at again at its next
    /// replay.
    pub fn note_free(&mut self) {
        self.frees += 1;
    }

    /// The actions of `plan`, refused when it is unknown or a buffer it
    /// names was freed.
    pub fn replay(
        &self,
        plan: PlanId,
        backend: &'static str,
        size_of: impl Fn(BufferId) -> Option<usize>,
    ) -> Result<std::sync::Arc<[Action]>> {
        let prepared = self
            .plans
            .get(plan.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(Error::UnknownHandle {
                backend,
                what: "plan",
                id: plan.0,
            })?;
        if prepared.checked.get() != self.frees {
            check_replay(plan, &prepared.actions, backend, size_of)?;
            prepared.checked.set(self.frees);
        }
        Ok(prepared.actions.clone())
    }

    /// The id the next prepared plan gets.
    pub fn next_id(&self) -> PlanId {
        PlanId(self.plans.len() as u32)
    }

    pub fn release(&mut self, plan: PlanId, backend: &'static str) -> Result<()> {
        match self.plans.get_mut(plan.0 as usize) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(Error::UnknownHandle {
                backend,
                what: "plan",
                id: plan.0,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use super::*;

    #[test]
    fn a_replay_looks_at_its_buffers_only_after_a_free_and_refuses_a_freed_one() {
        let live = RefCell::new([true, true]);
        let looks = Cell::new(0);
        let size_of = |id: BufferId| {
            looks.set(looks.get() + 1);
            live.borrow()[id.0 as usize].then_some(64)
        };
        let memset = Action::Memset {
            buffer: BufferId(0),
            byte_offset: 0,
            bytes: 64,
            value: 0,
        };
        let mut table = PlanTable::default();
        let plan = table.prepare(&[memset], "test", size_of).unwrap();
        looks.set(0);
        table.replay(plan, "test", size_of).unwrap();
        assert_eq!(looks.get(), 0, "no free since the plan was checked");
        // Another buffer freed: one look, the plan still replays, then none again.
        live.borrow_mut()[1] = false;
        table.note_free();
        table.replay(plan, "test", size_of).unwrap();
        assert_eq!(looks.get(), 1);
        table.replay(plan, "test", size_of).unwrap();
        assert_eq!(looks.get(), 1);
        live.borrow_mut()[0] = false;
        table.note_free();
        let refused = table.replay(plan, "test", size_of);
        assert!(
            matches!(
                refused,
                Err(Error::StalePlan {
                    buffer: BufferId(0),
                    ..
                })
            ),
            "{refused:?}"
        );
        // Still refused: a refusal does not mark the plan checked.
        assert!(table.replay(plan, "test", size_of).is_err());
    }
}
