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
//!   [`Error::Injected`] at that call without running it. [`MockHandle::fail_synchronize`]`(k)`
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
//!   ([`Error::UnknownBuffer`]), which includes a double free, and an unknown
//!   stream, event, staging area or plan ([`Error::UnknownHandle`]);
//! - an upload, download, memset, copy or staging transfer whose byte range runs
//!   past the end of its buffer ([`Error::OutOfRange`]);
//! - an allocation larger than the remaining capacity ([`Error::OutOfMemory`]);
//! - a launch, or a plan to prepare, that lbm-core's one launch check
//!   ([`lbm_core::kernels::check_launch`]) refuses ([`Error::Launch`]): exactly
//!   what the CPU and CUDA drivers refuse;
//! - a replay of a plan whose buffers were freed since ([`Error::StalePlan`]).
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

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lbm_core::device::{Action, EventId, PlanId, StagingId, StreamId};
use lbm_core::kernels::{check_action, check_launch, check_replay};
use lbm_core::{Arg, BufferId, CpuDriver, Driver, Error, Kernel, Launch, Result};
use serde::{Serialize, Serializer};

const BACKEND: &str = "mock";
const DEFAULT_CAPACITY: u64 = 1 << 30;

/// A buffer as it appears in the log: `buf#3 "L1.p0.f.a"`, or `buf#9 <unknown>`
/// for an id the driver never handed out. Serialises as that string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferName {
    pub id: BufferId,
    pub label: Option<String>,
}

impl fmt::Display for BufferName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.label {
            Some(label) => write!(f, "{} {label:?}", self.id),
            None => write!(f, "{} <unknown>", self.id),
        }
    }
}

impl Serialize for BufferName {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// One kernel argument as logged: buffers by name, scalars with their type.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoggedArg {
    Buffer { buffer: BufferName, byte_offset: u64 },
    NoBuffer,
    U32(u32),
    U64(u64),
    F32(f32),
    F64(f64),
}

impl fmt::Display for LoggedArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `{:?}` of a float is the shortest text that reads back to the same
        // bits, so the rendering is exact and stable.
        match self {
            LoggedArg::Buffer { buffer, byte_offset: 0 } => write!(f, "{buffer}"),
            LoggedArg::Buffer { buffer, byte_offset } => write!(f, "{buffer}+{byte_offset}"),
            LoggedArg::NoBuffer => f.write_str("none"),
            LoggedArg::U32(v) => write!(f, "{v}u32"),
            LoggedArg::U64(v) => write!(f, "{v}u64"),
            LoggedArg::F32(v) => write!(f, "{v:?}f32"),
            LoggedArg::F64(v) => write!(f, "{v:?}f64"),
        }
    }
}

/// One kernel argument as logged, under its `__global__` parameter name.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NamedArg {
    pub param: &'static str,
    pub value: LoggedArg,
}

impl fmt::Display for NamedArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}", self.param, self.value)
    }
}

/// The kind of an [`Event`], for counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Alloc,
    Free,
    Upload,
    Download,
    Memset,
    Copy,
    Launch,
    Synchronize,
    CreateStream,
    CreateEvent,
    RecordEvent,
    WaitEvent,
    SynchronizeEvent,
    AllocStaging,
    FreeStaging,
    DownloadAsync,
    ReadStaging,
    Prepare,
    Replay,
    ReleasePlan,
    Error,
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            EventKind::Alloc => "alloc",
            EventKind::Free => "free",
            EventKind::Upload => "upload",
            EventKind::Download => "download",
            EventKind::Memset => "memset",
            EventKind::Copy => "copy",
            EventKind::Launch => "launch",
            EventKind::Synchronize => "synchronize",
            EventKind::CreateStream => "create_stream",
            EventKind::CreateEvent => "create_event",
            EventKind::RecordEvent => "record_event",
            EventKind::WaitEvent => "wait_event",
            EventKind::SynchronizeEvent => "synchronize_event",
            EventKind::AllocStaging => "alloc_staging",
            EventKind::FreeStaging => "free_staging",
            EventKind::DownloadAsync => "download_async",
            EventKind::ReadStaging => "read_staging",
            EventKind::Prepare => "prepare",
            EventKind::Replay => "replay",
            EventKind::ReleasePlan => "release_plan",
            EventKind::Error => "error",
        };
        f.write_str(name)
    }
}

/// One driver call, in the order the driver saw it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    Alloc {
        buffer: BufferName,
        bytes: usize,
    },
    Free {
        buffer: BufferName,
    },
    Upload {
        buffer: BufferName,
        byte_offset: usize,
        bytes: usize,
        /// FNV-1a 64 of the uploaded bytes, in hex, so a changed table shows.
        digest: String,
    },
    Download {
        buffer: BufferName,
        byte_offset: usize,
        bytes: usize,
    },
    Memset {
        buffer: BufferName,
        byte_offset: usize,
        bytes: usize,
        value: u8,
    },
    Copy {
        src: BufferName,
        src_offset: usize,
        dst: BufferName,
        dst_offset: usize,
        bytes: usize,
    },
    Launch {
        kernel: Kernel,
        grid: [u32; 3],
        block: [u32; 3],
        args: Vec<NamedArg>,
    },
    Synchronize,
    CreateStream {
        stream: u32,
    },
    CreateEvent {
        event: u32,
    },
    RecordEvent {
        event: u32,
        stream: u32,
    },
    WaitEvent {
        stream: u32,
        event: u32,
    },
    SynchronizeEvent {
        event: u32,
    },
    AllocStaging {
        staging: u32,
        label: String,
        bytes: usize,
    },
    FreeStaging {
        staging: u32,
    },
    DownloadAsync {
        stream: u32,
        buffer: BufferName,
        byte_offset: usize,
        staging: u32,
        staging_offset: usize,
        bytes: usize,
    },
    ReadStaging {
        staging: u32,
        byte_offset: usize,
        bytes: usize,
    },
    /// A plan checked and kept; its actions are logged when it is replayed.
    Prepare {
        plan: u32,
        label: String,
        actions: usize,
    },
    /// A replay; the plan's actions follow as their own events.
    Replay {
        plan: u32,
    },
    ReleasePlan {
        plan: u32,
    },
    /// The preceding call (of kind `call`) returned this error.
    Error {
        call: EventKind,
        message: String,
    },
}

impl Event {
    pub fn kind(&self) -> EventKind {
        match self {
            Event::Alloc { .. } => EventKind::Alloc,
            Event::Free { .. } => EventKind::Free,
            Event::Upload { .. } => EventKind::Upload,
            Event::Download { .. } => EventKind::Download,
            Event::Memset { .. } => EventKind::Memset,
            Event::Copy { .. } => EventKind::Copy,
            Event::Launch { .. } => EventKind::Launch,
            Event::Synchronize => EventKind::Synchronize,
            Event::CreateStream { .. } => EventKind::CreateStream,
            Event::CreateEvent { .. } => EventKind::CreateEvent,
            Event::RecordEvent { .. } => EventKind::RecordEvent,
            Event::WaitEvent { .. } => EventKind::WaitEvent,
            Event::SynchronizeEvent { .. } => EventKind::SynchronizeEvent,
            Event::AllocStaging { .. } => EventKind::AllocStaging,
            Event::FreeStaging { .. } => EventKind::FreeStaging,
            Event::DownloadAsync { .. } => EventKind::DownloadAsync,
            Event::ReadStaging { .. } => EventKind::ReadStaging,
            Event::Prepare { .. } => EventKind::Prepare,
            Event::Replay { .. } => EventKind::Replay,
            Event::ReleasePlan { .. } => EventKind::ReleasePlan,
            Event::Error { .. } => EventKind::Error,
        }
    }
}

fn range(offset: usize, bytes: usize) -> String {
    format!("[{offset}, {})", offset.saturating_add(bytes))
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Alloc { buffer, bytes } => write!(f, "alloc {buffer} {bytes} bytes"),
            Event::Free { buffer } => write!(f, "free {buffer}"),
            Event::Upload {
                buffer,
                byte_offset,
                bytes,
                digest,
            } => write!(f, "upload {buffer} {} fnv1a64 {digest}", range(*byte_offset, *bytes)),
            Event::Download {
                buffer,
                byte_offset,
                bytes,
            } => write!(f, "download {buffer} {}", range(*byte_offset, *bytes)),
            Event::Memset {
                buffer,
                byte_offset,
                bytes,
                value,
            } => write!(f, "memset {buffer} {} = {value:#04x}", range(*byte_offset, *bytes)),
            Event::Copy {
                src,
                src_offset,
                dst,
                dst_offset,
                bytes,
            } => write!(
                f,
                "copy {src} {} -> {dst} {}",
                range(*src_offset, *bytes),
                range(*dst_offset, *bytes)
            ),
            Event::Launch {
                kernel,
                grid,
                block,
                args,
            } => {
                write!(f, "launch {} grid {grid:?} block {block:?} (", kernel.cuda_name())?;
                for (i, arg) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{arg}")?;
                }
                f.write_str(")")
            }
            Event::Synchronize => f.write_str("synchronize"),
            Event::CreateStream { stream } => write!(f, "create_stream stream#{stream}"),
            Event::CreateEvent { event } => write!(f, "create_event event#{event}"),
            Event::RecordEvent { event, stream } => write!(f, "record_event event#{event} on stream#{stream}"),
            Event::WaitEvent { stream, event } => write!(f, "wait_event stream#{stream} waits for event#{event}"),
            Event::SynchronizeEvent { event } => write!(f, "synchronize_event event#{event}"),
            Event::AllocStaging { staging, label, bytes } => {
                write!(f, "alloc_staging staging#{staging} {label:?} {bytes} bytes")
            }
            Event::FreeStaging { staging } => write!(f, "free_staging staging#{staging}"),
            Event::DownloadAsync {
                stream,
                buffer,
                byte_offset,
                staging,
                staging_offset,
                bytes,
            } => write!(
                f,
                "download_async on stream#{stream} {buffer} {} -> staging#{staging} {}",
                range(*byte_offset, *bytes),
                range(*staging_offset, *bytes)
            ),
            Event::ReadStaging {
                staging,
                byte_offset,
                bytes,
            } => write!(f, "read_staging staging#{staging} {}", range(*byte_offset, *bytes)),
            Event::Prepare { plan, label, actions } => write!(f, "prepare plan#{plan} {label:?} {actions} actions"),
            Event::Replay { plan } => write!(f, "replay plan#{plan}"),
            Event::ReleasePlan { plan } => write!(f, "release_plan plan#{plan}"),
            Event::Error { call, message } => write!(f, "error in {call}: {message}"),
        }
    }
}

/// One line per event, each ending in a newline.
pub fn render(events: &[Event]) -> String {
    events.iter().map(|e| format!("{e}\n")).collect()
}

fn fnv1a64(data: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in data {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

struct BufferRecord {
    label: String,
    bytes: usize,
    live: bool,
    /// The twin buffer in the CPU backend when executing.
    cpu: Option<BufferId>,
}

/// The state shared by a [`MockDriver`] and its handles.
struct Recorder {
    log: Vec<Event>,
    /// Indexed by `BufferId.0`; freed buffers stay so their names stay known.
    buffers: Vec<BufferRecord>,
    cpu: Option<CpuDriver>,
    /// Calls left until the armed fault fires, counting the failing one.
    launch_fault: Option<u64>,
    sync_fault: Option<u64>,
    download_fill: u8,
    capacity: u64,
    live_bytes: u64,
    /// Staging areas by id, with their twins when executing.
    staging: Vec<StagingRecord>,
    /// Prepared plans by id; `None` once released.
    plans: Vec<Option<Vec<Action>>>,
    streams: u32,
    events: u32,
    launches: u64,
    syncs: u64,
}

struct StagingRecord {
    label: String,
    bytes: usize,
    live: bool,
    cpu: Option<StagingId>,
}

fn unknown(what: &'static str, id: u32) -> Error {
    Error::UnknownHandle {
        backend: BACKEND,
        what,
        id,
    }
}

/// Counts a call against an armed fault; true when this call is the one to fail.
fn fires(fault: &mut Option<u64>) -> bool {
    match fault {
        Some(1) => {
            *fault = None;
            true
        }
        Some(left) => {
            *left -= 1;
            false
        }
        None => false,
    }
}

impl Recorder {
    fn new(cpu: Option<CpuDriver>) -> Self {
        Recorder {
            log: Vec::new(),
            buffers: Vec::new(),
            cpu,
            launch_fault: None,
            sync_fault: None,
            download_fill: 0,
            capacity: DEFAULT_CAPACITY,
            live_bytes: 0,
            staging: Vec::new(),
            plans: Vec::new(),
            streams: 0,
            events: 0,
            launches: 0,
            syncs: 0,
        }
    }

    fn name(&self, id: BufferId) -> BufferName {
        BufferName {
            id,
            label: self.buffers.get(id.0 as usize).map(|b| b.label.clone()),
        }
    }

    fn live(&self, id: BufferId) -> Result<&BufferRecord> {
        self.buffers
            .get(id.0 as usize)
            .filter(|b| b.live)
            .ok_or(Error::UnknownBuffer {
                backend: BACKEND,
                buffer: id,
            })
    }

    fn size_of(&self, id: BufferId) -> Option<usize> {
        self.live(id).ok().map(|b| b.bytes)
    }

    fn check_range(&self, operation: &'static str, id: BufferId, offset: usize, bytes: usize) -> Result<()> {
        let b = self.live(id)?;
        in_range(operation, &b.label, b.bytes, offset, bytes)
    }

    /// Logs the outcome of a call whose event is already in the log.
    fn outcome<T>(&mut self, call: EventKind, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            self.log.push(Event::Error {
                call,
                message: e.to_string(),
            });
        }
        result
    }

    /// Runs `call` on the CPU backend when executing, with a function that
    /// turns this driver's ids into the backend's; does nothing otherwise.
    fn on_cpu(&mut self, call: impl FnOnce(&mut CpuDriver, &dyn Fn(BufferId) -> BufferId) -> Result<()>) -> Result<()> {
        let Recorder { cpu, buffers, .. } = self;
        match cpu {
            Some(cpu) => call(cpu, &|id| {
                buffers[id.0 as usize]
                    .cpu
                    .expect("an executing driver twins every buffer")
            }),
            None => Ok(()),
        }
    }

    fn alloc(&mut self, label: &str, bytes: usize) -> Result<BufferId> {
        let free = self.capacity.saturating_sub(self.live_bytes);
        if bytes as u64 > free {
            let e = Error::OutOfMemory {
                backend: BACKEND,
                label: label.to_owned(),
                bytes: bytes as u64,
                available: free,
            };
            return self.outcome(EventKind::Alloc, Err(e));
        }
        let cpu = match self.cpu.as_mut().map(|cpu| cpu.alloc(label, bytes)).transpose() {
            Ok(cpu) => cpu,
            Err(e) => return self.outcome(EventKind::Alloc, Err(e)),
        };
        let id = BufferId(self.buffers.len() as u32);
        self.buffers.push(BufferRecord {
            label: label.to_owned(),
            bytes,
            live: true,
            cpu,
        });
        self.live_bytes += bytes as u64;
        self.log.push(Event::Alloc {
            buffer: self.name(id),
            bytes,
        });
        Ok(id)
    }

    fn free(&mut self, id: BufferId) -> Result<()> {
        self.log.push(Event::Free { buffer: self.name(id) });
        let result = self.live(id).map(|b| (b.bytes, b.cpu)).and_then(|(bytes, cpu)| {
            if let (Some(driver), Some(cpu)) = (self.cpu.as_mut(), cpu) {
                driver.free(cpu)?;
            }
            self.buffers[id.0 as usize].live = false;
            self.live_bytes -= bytes as u64;
            Ok(())
        });
        self.outcome(EventKind::Free, result)
    }

    fn upload(&mut self, id: BufferId, offset: usize, data: &[u8]) -> Result<()> {
        self.log.push(Event::Upload {
            buffer: self.name(id),
            byte_offset: offset,
            bytes: data.len(),
            digest: fnv1a64(data),
        });
        let result = self
            .check_range("upload", id, offset, data.len())
            .and_then(|()| self.on_cpu(|cpu, twin| cpu.upload(twin(id), offset, data)));
        self.outcome(EventKind::Upload, result)
    }

    fn download(&mut self, id: BufferId, offset: usize, out: &mut [u8]) -> Result<()> {
        self.log.push(Event::Download {
            buffer: self.name(id),
            byte_offset: offset,
            bytes: out.len(),
        });
        let fill = self.download_fill;
        let result = self.check_range("download", id, offset, out.len()).and_then(|()| {
            if self.cpu.is_none() {
                out.fill(fill);
            }
            self.on_cpu(|cpu, twin| cpu.download(twin(id), offset, out))
        });
        self.outcome(EventKind::Download, result)
    }

    fn memset(&mut self, id: BufferId, offset: usize, bytes: usize, value: u8) -> Result<()> {
        self.log.push(Event::Memset {
            buffer: self.name(id),
            byte_offset: offset,
            bytes,
            value,
        });
        let result = self
            .check_range("memset", id, offset, bytes)
            .and_then(|()| self.on_cpu(|cpu, twin| cpu.memset_async(twin(id), offset, bytes, value)));
        self.outcome(EventKind::Memset, result)
    }

    fn copy(&mut self, src: BufferId, src_offset: usize, dst: BufferId, dst_offset: usize, bytes: usize) -> Result<()> {
        self.log.push(Event::Copy {
            src: self.name(src),
            src_offset,
            dst: self.name(dst),
            dst_offset,
            bytes,
        });
        let result = self
            .check_range("copy source", src, src_offset, bytes)
            .and_then(|()| self.check_range("copy destination", dst, dst_offset, bytes))
            .and_then(|()| {
                self.on_cpu(|cpu, twin| cpu.copy_async(twin(src), src_offset, twin(dst), dst_offset, bytes))
            });
        self.outcome(EventKind::Copy, result)
    }

    fn launch(&mut self, launch: &Launch) -> Result<()> {
        self.log_launch(launch);
        let result = self
            .fault(launch.kernel.cuda_name())
            .and_then(|()| check_launch(launch, |id| self.size_of(id)))
            .and_then(|()| self.execute(launch));
        self.outcome(EventKind::Launch, result)
    }

    fn log_launch(&mut self, launch: &Launch) {
        let args = launch
            .args
            .iter()
            .zip(launch.kernel.params())
            .map(|(arg, param)| NamedArg {
                param,
                value: match *arg {
                    Arg::Buffer { id, byte_offset } => LoggedArg::Buffer {
                        buffer: self.name(id),
                        byte_offset,
                    },
                    Arg::NoBuffer => LoggedArg::NoBuffer,
                    Arg::U32(v) => LoggedArg::U32(v),
                    Arg::U64(v) => LoggedArg::U64(v),
                    Arg::F32(v) => LoggedArg::F32(v),
                    Arg::F64(v) => LoggedArg::F64(v),
                },
            })
            .collect();
        self.log.push(Event::Launch {
            kernel: launch.kernel,
            grid: launch.grid,
            block: launch.block,
            args,
        });
    }

    /// Counts a launch against the armed launch fault.
    fn fault(&mut self, _kernel: &str) -> Result<()> {
        self.launches += 1;
        match fires(&mut self.launch_fault) {
            true => Err(Error::Injected {
                call: "launch",
                count: self.launches,
            }),
            false => Ok(()),
        }
    }

    fn execute(&mut self, launch: &Launch) -> Result<()> {
        self.on_cpu(|cpu, twin| {
            let mut translated = launch.clone();
            for arg in &mut translated.args {
                if let Arg::Buffer { id, .. } = arg {
                    *id = twin(*id);
                }
            }
            cpu.launch(&translated)
        })
    }

    fn prepare(&mut self, label: &str, actions: &[Action]) -> Result<PlanId> {
        let plan = self.plans.len() as u32;
        self.log.push(Event::Prepare {
            plan,
            label: label.to_owned(),
            actions: actions.len(),
        });
        let checked = actions
            .iter()
            .try_for_each(|a| check_action(a, BACKEND, |id| self.size_of(id)));
        let result = checked.map(|()| {
            self.plans.push(Some(actions.to_vec()));
            PlanId(plan)
        });
        self.outcome(EventKind::Prepare, result)
    }

    /// Logs the replay, then each action as its own event, failing where an
    /// armed launch fault fires; a plan whose buffers were freed is refused.
    fn replay(&mut self, plan: PlanId) -> Result<()> {
        self.log.push(Event::Replay { plan: plan.0 });
        let actions = match self.plans.get(plan.0 as usize).cloned().flatten() {
            Some(actions) => actions,
            None => return self.outcome(EventKind::Replay, Err(unknown("plan", plan.0))),
        };
        let stale = check_replay(plan, &actions, BACKEND, |id| self.size_of(id));
        if stale.is_err() {
            return self.outcome(EventKind::Replay, stale);
        }
        for action in &actions {
            match action {
                Action::Launch(launch) => {
                    self.log_launch(launch);
                    let result = self
                        .fault(launch.kernel.cuda_name())
                        .and_then(|()| self.execute(launch));
                    self.outcome(EventKind::Launch, result)?;
                }
                Action::Memset { buffer, bytes } => self.memset(*buffer, 0, *bytes, 0)?,
            }
        }
        Ok(())
    }

    fn release_plan(&mut self, plan: PlanId) -> Result<()> {
        self.log.push(Event::ReleasePlan { plan: plan.0 });
        let result = match self.plans.get_mut(plan.0 as usize) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(unknown("plan", plan.0)),
        };
        self.outcome(EventKind::ReleasePlan, result)
    }

    fn handle(&mut self, kind: EventKind, what: &'static str, id: u32, limit: u32) -> Result<()> {
        let result = match id < limit {
            true => Ok(()),
            false => Err(unknown(what, id)),
        };
        self.outcome(kind, result)
    }

    fn create_stream(&mut self) -> Result<StreamId> {
        // The CPU twin counts streams and events the same way, so ids agree.
        if let Some(cpu) = self.cpu.as_mut() {
            cpu.create_stream()?;
        }
        self.streams += 1;
        self.log.push(Event::CreateStream { stream: self.streams });
        Ok(StreamId(self.streams))
    }

    fn create_event(&mut self) -> Result<EventId> {
        if let Some(cpu) = self.cpu.as_mut() {
            cpu.create_event()?;
        }
        self.log.push(Event::CreateEvent { event: self.events });
        self.events += 1;
        Ok(EventId(self.events - 1))
    }

    fn record_event(&mut self, event: EventId, stream: StreamId) -> Result<()> {
        self.log.push(Event::RecordEvent {
            event: event.0,
            stream: stream.0,
        });
        let events = self.events;
        self.handle(EventKind::RecordEvent, "event", event.0, events)?;
        self.handle(EventKind::RecordEvent, "stream", stream.0, self.streams + 1)
    }

    fn wait_event(&mut self, stream: StreamId, event: EventId) -> Result<()> {
        self.log.push(Event::WaitEvent {
            stream: stream.0,
            event: event.0,
        });
        let events = self.events;
        self.handle(EventKind::WaitEvent, "event", event.0, events)?;
        self.handle(EventKind::WaitEvent, "stream", stream.0, self.streams + 1)
    }

    fn synchronize_event(&mut self, event: EventId) -> Result<()> {
        self.log.push(Event::SynchronizeEvent { event: event.0 });
        let events = self.events;
        self.handle(EventKind::SynchronizeEvent, "event", event.0, events)
    }

    fn alloc_staging(&mut self, label: &str, bytes: usize) -> Result<StagingId> {
        let staging = self.staging.len() as u32;
        self.log.push(Event::AllocStaging {
            staging,
            label: label.to_owned(),
            bytes,
        });
        let cpu = match self.cpu.as_mut().map(|cpu| cpu.alloc_staging(label, bytes)).transpose() {
            Ok(cpu) => cpu,
            Err(e) => return self.outcome(EventKind::AllocStaging, Err(e)),
        };
        self.staging.push(StagingRecord {
            label: label.to_owned(),
            bytes,
            live: true,
            cpu,
        });
        Ok(StagingId(staging))
    }

    fn live_staging(&self, staging: StagingId) -> Result<&StagingRecord> {
        self.staging
            .get(staging.0 as usize)
            .filter(|s| s.live)
            .ok_or(unknown("staging", staging.0))
    }

    fn free_staging(&mut self, staging: StagingId) -> Result<()> {
        self.log.push(Event::FreeStaging { staging: staging.0 });
        let result = self.live_staging(staging).map(|s| s.cpu).and_then(|twin| {
            if let (Some(cpu), Some(twin)) = (self.cpu.as_mut(), twin) {
                cpu.free_staging(twin)?;
            }
            self.staging[staging.0 as usize].live = false;
            Ok(())
        });
        self.outcome(EventKind::FreeStaging, result)
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
        self.log.push(Event::DownloadAsync {
            stream: stream.0,
            buffer: self.name(buffer),
            byte_offset,
            staging: staging.0,
            staging_offset,
            bytes,
        });
        let streams = self.streams;
        let result = (|| {
            if stream.0 > streams {
                return Err(unknown("stream", stream.0));
            }
            self.check_range("download", buffer, byte_offset, bytes)?;
            let s = self.live_staging(staging)?;
            in_range("download into staging", &s.label, s.bytes, staging_offset, bytes)?;
            let twin_staging = s.cpu;
            self.on_cpu(|cpu, twin| {
                cpu.download_async(
                    stream,
                    twin(buffer),
                    byte_offset,
                    twin_staging.expect("an executing driver twins every staging area"),
                    staging_offset,
                    bytes,
                )
            })
        })();
        self.outcome(EventKind::DownloadAsync, result)
    }

    fn read_staging(&mut self, staging: StagingId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        self.log.push(Event::ReadStaging {
            staging: staging.0,
            byte_offset,
            bytes: out.len(),
        });
        let fill = self.download_fill;
        let result = (|| {
            let s = self.live_staging(staging)?;
            in_range("read staging", &s.label, s.bytes, byte_offset, out.len())?;
            let twin = s.cpu;
            match (self.cpu.as_mut(), twin) {
                (Some(cpu), Some(twin)) => cpu.read_staging(twin, byte_offset, out),
                _ => {
                    out.fill(fill);
                    Ok(())
                }
            }
        })();
        self.outcome(EventKind::ReadStaging, result)
    }

    fn synchronize(&mut self) -> Result<()> {
        self.log.push(Event::Synchronize);
        self.syncs += 1;
        let result = if fires(&mut self.sync_fault) {
            Err(Error::Injected {
                call: "synchronize",
                count: self.syncs,
            })
        } else {
            self.cpu.as_mut().map_or(Ok(()), |cpu| cpu.synchronize())
        };
        self.outcome(EventKind::Synchronize, result)
    }
}

/// `[offset, offset + bytes)` inside `size` bytes of `label`, or the range error.
fn in_range(operation: &'static str, label: &str, size: usize, offset: usize, bytes: usize) -> Result<()> {
    match offset.checked_add(bytes) {
        Some(end) if end <= size => Ok(()),
        end => Err(Error::OutOfRange {
            backend: BACKEND,
            operation,
            label: label.to_owned(),
            start: offset as u64,
            end: end.map_or(u64::MAX, |e| e as u64),
            size: size as u64,
        }),
    }
}

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

    /// The kernels of the logged launches, in order.
    pub fn launch_kernels(&self) -> Vec<Kernel> {
        self.recorder()
            .log
            .iter()
            .filter_map(|e| match e {
                Event::Launch { kernel, .. } => Some(*kernel),
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
mod tests {
    use super::*;
    use lbm_core::config::Amplitude;
    use lbm_core::fixtures::benchmark_physics;
    use lbm_core::kernels::KernelArgs;
    use lbm_core::kernels::boundary::UpdateBoundaryState;
    use lbm_core::kernels::lbm::StreamCollide;
    use lbm_core::lattice::Q;
    use lbm_core::{Boundary, BufferRef};

    fn stream_collide(src: BufferId, dst: BufferId, flags: BufferId) -> Launch {
        // The rendering test pins these relaxation rates and this force.
        StreamCollide {
            omega_plus: 1.25,
            omega_minus: 1.5,
            force: [1e-5, 0.0],
            ..StreamCollide::periodic(src.into(), dst.into(), flags.into(), [4, 4], benchmark_physics())
        }
        .launch()
    }

    /// A driver with a 4x4 patch allocated: (driver, handle, [a, b, flags]).
    fn setup(driver: MockDriver) -> (MockDriver, MockHandle, [BufferId; 3]) {
        let handle = driver.handle();
        let mut driver = driver;
        let f_bytes = Q * 16 * 4;
        let ids = [
            driver.alloc("p.f.a", f_bytes).unwrap(),
            driver.alloc("p.f.b", f_bytes).unwrap(),
            driver.alloc("p.flags", 16).unwrap(),
        ];
        (driver, handle, ids)
    }

    #[test]
    fn the_log_names_buffers_and_renders_one_line_per_call() {
        let (mut driver, handle, [a, b, flags]) = setup(MockDriver::new());
        driver.upload(flags, 0, &[0; 16]).unwrap();
        driver.memset_async(a, 4, 8, 0xff).unwrap();
        driver.copy_async(a, 0, b, 0, 16).unwrap();
        driver.launch(&stream_collide(a, b, flags)).unwrap();
        driver.synchronize().unwrap();
        let mut out = [7u8; 4];
        driver.download(b, 0, &mut out).unwrap();
        driver.free(flags).unwrap();
        let text = handle.render();
        let expect = [
            "alloc buf#0 \"p.f.a\" 576 bytes",
            "alloc buf#1 \"p.f.b\" 576 bytes",
            "alloc buf#2 \"p.flags\" 16 bytes",
            "upload buf#2 \"p.flags\" [0, 16) fnv1a64 ",
            "memset buf#0 \"p.f.a\" [4, 12) = 0xff",
            "copy buf#0 \"p.f.a\" [0, 16) -> buf#1 \"p.f.b\" [0, 16)",
            "launch stream_collide grid [1, 1, 1] block [256, 1, 1] (src = buf#0 \"p.f.a\", dst = buf#1 \"p.f.b\", \
             flags = buf#2 \"p.flags\", wall_distance = none, inlet_profile = none, boundary_state = none, \
             nx = 4u32, ny = 4u32, tile_x = 4u32, tile_y = 4u32, x0 = 0u32, y0 = 0u32, x1 = 4u32, y1 = 4u32, \
             boundary_x_min = 0u32, boundary_x_max = 0u32, boundary_y_min = 0u32, boundary_y_max = 0u32, \
             wall_x_min_ux = 0.0f32, wall_x_min_uy = 0.0f32, wall_x_max_ux = 0.0f32, wall_x_max_uy = 0.0f32, \
             wall_y_min_ux = 0.0f32, wall_y_min_uy = 0.0f32, wall_y_max_ux = 0.0f32, wall_y_max_uy = 0.0f32, \
             omega_plus = 1.25f32, omega_minus = 1.5f32, force_x = 1e-5f32, force_y = 0.0f32, \
             interpolated_walls = 0u32)",
            "synchronize",
            "download buf#1 \"p.f.b\" [0, 4)",
            "free buf#2 \"p.flags\"",
        ];
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), expect.len(), "{text}");
        for (line, want) in lines.iter().zip(expect) {
            assert!(line.starts_with(want), "`{line}` does not start with `{want}`");
        }
        assert_eq!(out, [0; 4], "a non-executing download returns the fill byte");
        assert_eq!(handle.count(EventKind::Alloc), 3);
        assert_eq!(handle.launch_kernels(), vec![Kernel::StreamCollide]);
        let json = serde_json::to_string(&handle.log()[3]).unwrap();
        assert!(
            json.starts_with(r#"{"kind":"upload","buffer":"buf#2 \"p.flags\"""#),
            "{json}"
        );
        assert_eq!(handle.live_buffers().len(), 2);
    }

    /// Runs `call` on a fresh driver and checks it is refused with a message
    /// holding every part of `expect`, logged as an error after the call.
    fn check_refused(call: impl FnOnce(&mut MockDriver, [BufferId; 3]) -> Result<()>, expect: &[&str]) {
        let (mut driver, handle, ids) = setup(MockDriver::new());
        handle.clear_log();
        let message = call(&mut driver, ids).unwrap_err().to_string();
        for part in expect {
            assert!(message.contains(part), "`{message}` lacks `{part}`");
        }
        let log = handle.log();
        assert_eq!(log.last().map(Event::kind), Some(EventKind::Error), "{log:?}");
    }

    #[test]
    fn bad_calls_are_refused_and_logged() {
        check_refused(
            |d, _| d.upload(BufferId(9), 0, &[1]),
            &["unknown buffer buf#9 on the mock backend"],
        );
        check_refused(
            |d, [_, _, f]| d.upload(f, 8, &[0; 9]),
            &["upload", "[8, 17)", "16 bytes", "p.flags"],
        );
        check_refused(|d, [a, ..]| d.download(a, 576, &mut [0]), &["download", "[576, 577)"]);
        check_refused(|d, [a, ..]| d.memset_async(a, usize::MAX, 2, 0), &["memset", "outside"]);
        check_refused(|d, [a, _, f]| d.copy_async(a, 0, f, 0, 17), &["copy destination"]);
        check_refused(
            |d, [_, _, f]| {
                d.free(f)?;
                d.free(f)
            },
            &["unknown buffer buf#2"],
        );
        check_refused(
            |d, _| d.alloc("huge", 2 << 30).map(|_| ()),
            &["`huge`", "2147483648 bytes", "only"],
        );
        check_refused(
            |d, [a, b, f]| d.launch(&stream_collide(a, f, b)),
            &[
                "stream_collide",
                "`dst` (buf#2) holds 16 bytes after offset 0, the launch needs 576",
            ],
        );
        check_refused(
            |d, [a, b, f]| {
                let mut launch = stream_collide(a, b, f);
                launch.args.pop();
                d.launch(&launch)
            },
            &["stream_collide", "30 arguments, the kernel takes 31"],
        );
        check_refused(
            |d, [a, b, f]| {
                let mut k = StreamCollide::decode(&stream_collide(a, b, f))?;
                k.wall_distance = Some(f.into());
                d.launch(&k.launch())
            },
            &["`wall_distance` (buf#2) holds 16 bytes after offset 0, the launch needs 576"],
        );
        check_refused(
            |d, [a, b, f]| {
                let mut k = StreamCollide::decode(&stream_collide(a, b, f))?;
                k.boundaries[0] = Boundary::Inlet;
                k.boundaries[1] = Boundary::Outflow;
                k.inlet_profile = Some(d.alloc("tiny", 4)?.into());
                k.boundary_state = Some(f.into());
                d.launch(&k.launch())
            },
            &["`inlet_profile` (buf#3) holds 4 bytes after offset 0, the launch needs 48"],
        );
        check_refused(
            |d, [_, _, f]| {
                let tiny: BufferRef = d.alloc("tiny", 4)?.into();
                d.launch(&UpdateBoundaryState::new(f.into(), None, &Amplitude::Constant).launch())?;
                let table = Amplitude::Table {
                    points: vec![[0.0, 0.0], [1.0, 1.0], [2.0, 0.5]],
                };
                d.launch(&UpdateBoundaryState::new(f.into(), Some(tiny), &table).launch())
            },
            &[
                "update_boundary_state",
                "`table` (buf#3) holds 4 bytes after offset 0, the launch needs 24",
            ],
        );
        check_refused(
            |d, _| {
                let tiny = d.alloc("tiny", 4)?;
                d.launch(&UpdateBoundaryState::new(tiny.into(), None, &Amplitude::Constant).launch())
            },
            &["`state` (buf#3) holds 4 bytes after offset 0, the launch needs 8"],
        );
        check_refused(
            |d, [a, b, f]| {
                let mut launch = stream_collide(a, b, f);
                launch.block = [2048, 1, 1];
                d.launch(&launch)
            },
            &["block [2048, 1, 1] has more than 1024 threads"],
        );
        check_refused(
            |d, [a, b, f]| {
                let mut launch = stream_collide(a, b, f);
                launch.args[0] = Arg::Buffer { id: a, byte_offset: 2 };
                d.launch(&launch)
            },
            &["`src` (buf#0) byte offset 2 is not a multiple of 4"],
        );
    }

    /// Arms a fault `k` calls ahead and checks which call of `calls` fails.
    fn check_fault(kind: EventKind, k: u64, calls: usize, expect_failing: Option<usize>) {
        let (mut driver, handle, [a, b, f]) = setup(MockDriver::new());
        match kind {
            EventKind::Launch => handle.fail_launch(k),
            _ => handle.fail_synchronize(k),
        }
        let results: Vec<bool> = (0..calls)
            .map(|_| match kind {
                EventKind::Launch => driver.launch(&stream_collide(a, b, f)).is_ok(),
                _ => driver.synchronize().is_ok(),
            })
            .collect();
        let failing: Vec<usize> = (0..calls).filter(|i| !results[*i]).collect();
        assert_eq!(failing, expect_failing.into_iter().collect::<Vec<_>>(), "{kind} k={k}");
        assert_eq!(handle.count(EventKind::Error), failing.len());
    }

    #[test]
    fn faults_fire_once_at_the_kth_call_after_arming() {
        check_fault(EventKind::Launch, 1, 3, Some(0));
        check_fault(EventKind::Launch, 3, 5, Some(2));
        check_fault(EventKind::Launch, 4, 3, None);
        check_fault(EventKind::Synchronize, 1, 2, Some(0));
        check_fault(EventKind::Synchronize, 2, 4, Some(1));
        let (mut driver, handle, _) = setup(MockDriver::new());
        handle.fail_synchronize(1);
        handle.disarm();
        assert!(driver.synchronize().is_ok());
        handle.fail_synchronize(1);
        let message = driver.synchronize().unwrap_err().to_string();
        assert!(message.contains("mock synchronize #2 failed as injected"), "{message}");
    }

    #[test]
    fn executing_drivers_compute_and_log_the_same() {
        let run = |driver: MockDriver| {
            let (mut driver, handle, [a, b, f]) = setup(driver);
            let ones: Vec<u8> = (0..Q * 16).flat_map(|i| (i as f32 * 1e-3).to_le_bytes()).collect();
            driver.upload(a, 0, &ones).unwrap();
            driver.launch(&stream_collide(a, b, f)).unwrap();
            driver.synchronize().unwrap();
            let mut out = vec![0u8; Q * 16 * 4];
            driver.download(b, 0, &mut out).unwrap();
            (handle.render(), out)
        };
        let (log_exec, out_exec) = run(MockDriver::executing());
        let (log_mock, out_mock) = run(MockDriver::new());
        assert_eq!(log_exec, log_mock);
        assert!(out_mock.iter().all(|b| *b == 0));
        assert!(out_exec.iter().any(|b| *b != 0), "the CPU backend streamed the data");
    }

    #[test]
    fn streams_events_staging_and_plans_are_logged_and_executed_in_order() {
        let (mut driver, handle, [a, b, f]) = setup(MockDriver::executing());
        let data: Vec<u8> = (0..Q * 16).flat_map(|i| (i as f32 * 1e-3).to_le_bytes()).collect();
        driver.upload(a, 0, &data).unwrap();
        handle.clear_log();
        let plan = driver
            .prepare(
                "pingpong",
                &[
                    Action::Launch(stream_collide(a, b, f)),
                    Action::Memset { buffer: a, bytes: 4 },
                ],
            )
            .unwrap();
        let copy = driver.create_stream().unwrap();
        let done = driver.create_event().unwrap();
        let staging = driver.alloc_staging("out", 16).unwrap();
        driver.replay(plan).unwrap();
        driver.record_event(done, StreamId::MAIN).unwrap();
        driver.wait_event(copy, done).unwrap();
        driver.download_async(copy, b, 0, staging, 0, 16).unwrap();
        driver.synchronize_event(done).unwrap();
        let mut staged = [0u8; 16];
        driver.read_staging(staging, 0, &mut staged).unwrap();
        let mut direct = [0u8; 16];
        driver.download(b, 0, &mut direct).unwrap();
        assert_eq!(staged, direct, "the staged bytes are the buffer's after the replay");
        assert!(direct.iter().any(|v| *v != 0));
        driver.release_plan(plan).unwrap();
        let kinds: Vec<EventKind> = handle.log().iter().map(Event::kind).collect();
        use EventKind::*;
        assert_eq!(
            kinds,
            [
                Prepare,
                CreateStream,
                CreateEvent,
                AllocStaging,
                Replay,
                Launch,
                Memset,
                RecordEvent,
                WaitEvent,
                DownloadAsync,
                SynchronizeEvent,
                ReadStaging,
                Download,
                ReleasePlan
            ]
        );
        let text = handle.render();
        assert!(text.contains("prepare plan#0 \"pingpong\" 2 actions"), "{text}");
        assert!(
            text.contains("download_async on stream#1 buf#1 \"p.f.b\" [0, 16) -> staging#0 [0, 16)"),
            "{text}"
        );
        // A replay after a buffer it names is freed is refused.
        let plan = driver
            .prepare("again", &[Action::Memset { buffer: f, bytes: 4 }])
            .unwrap();
        driver.free(f).unwrap();
        let message = driver.replay(plan).unwrap_err().to_string();
        assert!(message.contains("freed since it was prepared"), "{message}");
        // Unknown handles are refused by name.
        let message = driver.wait_event(StreamId(7), done).unwrap_err().to_string();
        assert!(message.contains("unknown stream 7"), "{message}");
    }

    #[test]
    fn prepare_refuses_a_plan_with_a_bad_launch_before_anything_runs() {
        let (mut driver, handle, [a, b, f]) = setup(MockDriver::new());
        let bad = stream_collide(a, f, b);
        let message = driver
            .prepare("bad", &[Action::Launch(stream_collide(a, b, f)), Action::Launch(bad)])
            .unwrap_err()
            .to_string();
        assert!(message.contains("`dst` (buf#2) holds 16 bytes"), "{message}");
        assert_eq!(handle.count(EventKind::Launch), 0);
    }
}
