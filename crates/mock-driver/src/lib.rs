//! `MockDriver`: an [`lbm_core::Driver`] that records every call, in order, as a
//! serialisable [`Event`] with symbolic buffer names, so host-contract tests can
//! assert on what the stepper enqueues and insta snapshots can pin a launch plan.
//!
//! # What it supports
//!
//! - **Recording.** `alloc` (label and size), `free`, `upload` (byte range and an
//!   FNV-1a digest of the bytes), `download`, `memset_async`, `copy_async`,
//!   `launch` (kernel, grid, block and every argument under its parameter
//!   name), `synchronize`, and the seam's streams, events, staging and
//!   prepared plans. Buffers
//!   appear as `buf#3 "L1.p0.f.a"`, never as pointers; ids are handed out 0, 1,
//!   2, … in allocation order, so two identical runs give identical logs.
//!   `free_memory` is answered but not logged: it enqueues nothing.
//! - **Fault injection, counted from arming.** [`MockHandle::fail_launch`]`(k)`
//!   makes the k-th call to `launch` after the arming (k = 1: the next one) return
//!   [`Error::Injected`](lbm_core::Error::Injected) at that call without running it. [`MockHandle::fail_synchronize`]`(k)`
//!   does the same for the k-th `synchronize`, which is where an asynchronous
//!   device error surfaces on a real stream. Every call counts, including ones
//!   rejected for bad arguments. A fault fires once and then disarms; launch and
//!   synchronize faults are armed independently.
//! - **Execution on request.** [`MockDriver::new`] executes nothing and a
//!   download returns the fill byte (0 unless [`MockHandle::set_download_fill`]
//!   says otherwise). [`MockDriver::executing`] also forwards every call that
//!   passes validation to an [`lbm_core::CpuDriver`], so downloads return real data.
//!   The log is the same in both modes.
//! - **A shared handle.** A `Stepper` takes ownership of its driver, so
//!   [`MockDriver::handle`] gives the test a [`MockHandle`] onto the same recorder
//!   to read and clear the log and to arm faults.
//! - **Memory.** `free_memory` is a fixed capacity (1 GiB unless
//!   [`MockHandle::set_capacity`] says otherwise) minus the live bytes.
//!
//! # What it rejects
//!
//! Each rejected call returns an error, and the log gets the call's event (when it
//! names a known buffer) followed by an [`Event::Error`]; a rejected `alloc` logs
//! only the error because it produced no buffer.
//!
//! - a buffer id that was never allocated or is already freed
//!   ([`Error::UnknownBuffer`](lbm_core::Error::UnknownBuffer)), which includes a double free, and an unknown
//!   stream, event, staging area or plan ([`Error::UnknownHandle`](lbm_core::Error::UnknownHandle));
//! - an upload, download, memset, copy or staging transfer whose byte range runs
//!   past the end of its buffer ([`Error::OutOfRange`](lbm_core::Error::OutOfRange));
//! - an allocation larger than the remaining capacity ([`Error::OutOfMemory`](lbm_core::Error::OutOfMemory));
//! - a launch, or a plan to prepare, that lbm-core's one launch check
//!   ([`lbm_core::kernels::check_launch`]) refuses ([`Error::Launch`](lbm_core::Error::Launch)): exactly
//!   what the CPU and CUDA drivers refuse;
//! - a replay of a plan whose buffers were freed since ([`Error::StalePlan`](lbm_core::Error::StalePlan)).
//!
//! Streams, events and staging are recorded and, when executing, forwarded to
//! the CPU driver, which runs everything at once and in order. A replay is
//! logged as `replay plan#k` followed by each of its actions, counted by the
//! launch fault like direct launches.
//!
//! # What it deliberately does not do
//!
//! It models no timing, no concurrency and no physics of its own: without
//! `executing` nothing is computed, and a failing `synchronize` does not undo work
//! the CPU backend has already done. It does not judge whether a plan is
//! physically right; the snapshots and the CPU physics tests do.
#![forbid(unsafe_code)]

mod event;
mod recorder;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lbm_core::device::{Action, EventId, PlanId, StagingId, StreamId};
use lbm_core::{BufferId, CpuDriver, Driver, Kernel, Launch, Result};

pub use event::{BufferName, Event, EventKind, LoggedArg, NamedArg, render};
use recorder::Recorder;

const BACKEND: &str = "mock";
const DEFAULT_CAPACITY: u64 = 1 << 30;

fn lock(shared: &Mutex<Recorder>) -> MutexGuard<'_, Recorder> {
    // A test that panicked while holding the lock leaves a log that is still
    // worth reading.
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The recording driver; see the module documentation.
pub struct MockDriver {
    shared: Arc<Mutex<Recorder>>,
}

impl Default for MockDriver {
    fn default() -> Self {
        MockDriver::new()
    }
}

impl MockDriver {
    /// A driver that records and validates but executes nothing.
    pub fn new() -> Self {
        MockDriver {
            shared: Arc::new(Mutex::new(Recorder::new(None))),
        }
    }

    /// A driver that records, validates and executes every accepted call on a
    /// [`CpuDriver`], so downloads return real data.
    pub fn executing() -> Self {
        MockDriver {
            shared: Arc::new(Mutex::new(Recorder::new(Some(CpuDriver::new())))),
        }
    }

    /// A handle onto this driver's log and faults, valid after the driver moves.
    pub fn handle(&self) -> MockHandle {
        MockHandle {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Driver for MockDriver {
    fn backend(&self) -> &'static str {
        BACKEND
    }
    fn alloc(&mut self, label: &str, bytes: usize) -> Result<BufferId> {
        lock(&self.shared).alloc(label, bytes)
    }
    fn free(&mut self, buffer: BufferId) -> Result<()> {
        lock(&self.shared).free(buffer)
    }
    fn upload(&mut self, buffer: BufferId, byte_offset: usize, data: &[u8]) -> Result<()> {
        lock(&self.shared).upload(buffer, byte_offset, data)
    }
    fn download(&mut self, buffer: BufferId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        lock(&self.shared).download(buffer, byte_offset, out)
    }
    fn memset_async(&mut self, buffer: BufferId, byte_offset: usize, bytes: usize, value: u8) -> Result<()> {
        lock(&self.shared).memset(buffer, byte_offset, bytes, value)
    }
    fn copy_async(
        &mut self,
        src: BufferId,
        src_offset: usize,
        dst: BufferId,
        dst_offset: usize,
        bytes: usize,
    ) -> Result<()> {
        lock(&self.shared).copy(src, src_offset, dst, dst_offset, bytes)
    }
    fn launch(&mut self, launch: &Launch) -> Result<()> {
        lock(&self.shared).launch(launch)
    }
    fn synchronize(&mut self) -> Result<()> {
        lock(&self.shared).synchronize()
    }
    fn free_memory(&self) -> Result<u64> {
        let r = lock(&self.shared);
        Ok(r.capacity.saturating_sub(r.live_bytes))
    }
    fn create_stream(&mut self) -> Result<StreamId> {
        lock(&self.shared).create_stream()
    }
    fn create_event(&mut self) -> Result<EventId> {
        lock(&self.shared).create_event()
    }
    fn record_event(&mut self, event: EventId, stream: StreamId) -> Result<()> {
        lock(&self.shared).record_event(event, stream)
    }
    fn wait_event(&mut self, stream: StreamId, event: EventId) -> Result<()> {
        lock(&self.shared).wait_event(stream, event)
    }
    fn synchronize_event(&mut self, event: EventId) -> Result<()> {
        lock(&self.shared).synchronize_event(event)
    }
    fn alloc_staging(&mut self, label: &str, bytes: usize) -> Result<StagingId> {
        lock(&self.shared).alloc_staging(label, bytes)
    }
    fn free_staging(&mut self, staging: StagingId) -> Result<()> {
        lock(&self.shared).free_staging(staging)
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
        lock(&self.shared).download_async(stream, buffer, byte_offset, staging, staging_offset, bytes)
    }
    fn read_staging(&mut self, staging: StagingId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        lock(&self.shared).read_staging(staging, byte_offset, out)
    }
    fn prepare(&mut self, label: &str, actions: &[Action]) -> Result<PlanId> {
        lock(&self.shared).prepare(label, actions)
    }
    fn replay(&mut self, plan: PlanId) -> Result<()> {
        lock(&self.shared).replay(plan)
    }
    fn release_plan(&mut self, plan: PlanId) -> Result<()> {
        lock(&self.shared).release_plan(plan)
    }
}

/// A test's view of a [`MockDriver`] it no longer owns: the log, and the faults.
#[derive(Clone)]
pub struct MockHandle {
    shared: Arc<Mutex<Recorder>>,
}

impl MockHandle {
    fn recorder(&self) -> MutexGuard<'_, Recorder> {
        lock(&self.shared)
    }

    /// Every event since creation or the last [`Self::clear_log`].
    pub fn log(&self) -> Vec<Event> {
        self.recorder().log.clone()
    }

    /// The log, leaving it empty.
    pub fn take_log(&self) -> Vec<Event> {
        std::mem::take(&mut self.recorder().log)
    }

    pub fn clear_log(&self) {
        self.recorder().log.clear();
    }

    /// The log, one line per event.
    pub fn render(&self) -> String {
        render(&self.recorder().log)
    }

    /// Events of `kind` in the log.
    pub fn count(&self, kind: EventKind) -> usize {
        self.recorder().log.iter().filter(|e| e.kind() == kind).count()
    }

    /// The kernels of the logged launches (a batch's once), in order.
    pub fn launch_kernels(&self) -> Vec<Kernel> {
        self.recorder()
            .log
            .iter()
            .filter_map(|e| match e {
                Event::Launch { kernel, .. } | Event::BatchLaunch { kernel, .. } => Some(*kernel),
                _ => None,
            })
            .collect()
    }

    /// The buffers allocated and not yet freed, in id order.
    pub fn live_buffers(&self) -> Vec<BufferName> {
        let r = self.recorder();
        (0..r.buffers.len() as u32)
            .map(BufferId)
            .filter(|id| r.buffers[id.0 as usize].live)
            .map(|id| r.name(id))
            .collect()
    }

    /// Makes the `k`-th call to `launch` from now fail (k = 1: the next call),
    /// replacing any launch fault armed before.
    ///
    /// # Panics
    /// When `k` is 0: there is no zeroth call.
    pub fn fail_launch(&self, k: u64) {
        assert!(k >= 1, "fail_launch counts calls from 1 (the next call)");
        self.recorder().launch_fault = Some(k);
    }

    /// Makes the `k`-th call to `synchronize` from now fail (k = 1: the next
    /// call), replacing any synchronize fault armed before.
    ///
    /// # Panics
    /// When `k` is 0: there is no zeroth call.
    pub fn fail_synchronize(&self, k: u64) {
        assert!(k >= 1, "fail_synchronize counts calls from 1 (the next call)");
        self.recorder().sync_fault = Some(k);
    }

    /// Disarms every fault that has not fired yet.
    pub fn disarm(&self) {
        let mut r = self.recorder();
        r.launch_fault = None;
        r.sync_fault = None;
    }

    /// The byte every download returns when the driver does not execute.
    pub fn set_download_fill(&self, value: u8) {
        self.recorder().download_fill = value;
    }

    /// Total device memory reported by `free_memory` and enforced by `alloc`.
    pub fn set_capacity(&self, bytes: u64) {
        self.recorder().capacity = bytes;
    }
}

#[cfg(test)]
mod tests;
