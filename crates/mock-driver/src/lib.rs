//! `MockDriver`: an [`lbm_core::Driver`] that records every call, in order, as a
//! serialisable [`Event`] with symbolic buffer names, so host-contract tests can
//! assert on what the stepper enqueues and insta snapshots can pin a launch plan.
//!
//! # What it supports
//!
//! - **Recording.** `alloc` (label and size), `free`, `upload` (byte range and an
//!   FNV-1a digest of the bytes), `download`, `memset_async`, `copy_async`,
//!   `launch` (kernel, grid, block and every argument) and `synchronize`. Buffers
//!   appear as `buf#3 "L1.p0.f.a"`, never as pointers; ids are handed out 0, 1,
//!   2, … in allocation order, so two identical runs give identical logs.
//!   `free_memory` is answered but not logged: it enqueues nothing.
//! - **Fault injection, counted from arming.** [`MockHandle::fail_launch`]`(k)`
//!   makes the k-th call to `launch` after the arming (k = 1: the next one) return
//!   [`Error::Device`] at that call without running it. [`MockHandle::fail_synchronize`]`(k)`
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
//!   ([`Error::UnknownBuffer`]), which includes a double free;
//! - an upload, download, memset or copy whose byte range runs past the end of
//!   its buffer ([`Error::Device`]);
//! - an allocation larger than the remaining capacity ([`Error::Device`]);
//! - a launch with a zero grid or block dimension or more than 1024 threads per
//!   block, an argument list that the typed decoders of [`lbm_core::launch`]
//!   refuse, a buffer argument that is unknown or too small for the layout the
//!   launch declares, or an open exchange window sharing the interval
//!   accumulator ([`Error::LaunchArgs`]). Sizes are checked for the buffers the
//!   kernel reads: `stream_collide`'s wall distances (nine planes) only with
//!   interpolated walls, its inlet profile (one f32 per active row) and
//!   boundary state (8 bytes) only when a side is an inlet, and
//!   `update_boundary_state`'s table (two f32 per point) only for a table
//!   amplitude; a buffer passed but not read need only be live.
//!
//! # What it deliberately does not do
//!
//! It models no timing, no concurrency and no physics of its own: without
//! `executing` nothing is computed, and a failing `synchronize` does not undo work
//! the CPU backend has already done. It does not judge whether a plan is
//! physically right; the snapshots and the CPU physics tests do.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lbm_core::lattice::Q;
use lbm_core::launch::{
    AccumulateExchange, AccumulateFineFlux, CorrectInterfaceMass, EXCHANGE_WORDS, Edge, FillGhost, LINK_WORDS,
    RestrictToParent, StreamCollide, UpdateBoundaryState, fine_covered, inlet_samples, ring_cells,
};
use lbm_core::{Arg, BufferId, CpuDriver, Driver, Error, Kernel, Launch, Result};
use serde::{Serialize, Serializer};

const BACKEND: &str = "mock";
/// Threads per block a CUDA device accepts at most.
const MAX_BLOCK_THREADS: u32 = 1024;
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
            LoggedArg::U32(v) => write!(f, "{v}u32"),
            LoggedArg::U64(v) => write!(f, "{v}u64"),
            LoggedArg::F32(v) => write!(f, "{v:?}f32"),
            LoggedArg::F64(v) => write!(f, "{v:?}f64"),
        }
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
            EventKind::Error => "error",
        };
        f.write_str(name)
    }
}

/// One driver call, in the order the driver saw it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
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
        args: Vec<LoggedArg>,
    },
    Synchronize,
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
}

fn device_error(operation: &str, message: String) -> Error {
    Error::Device {
        backend: BACKEND.into(),
        operation: operation.into(),
        message,
    }
}

fn launch_error(kernel: Kernel, reason: String) -> Error {
    Error::LaunchArgs {
        kernel: kernel.cuda_name().into(),
        reason,
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
            .ok_or_else(|| Error::unknown_buffer(BACKEND, id))
    }

    fn check_range(&self, operation: &str, id: BufferId, offset: usize, bytes: usize) -> Result<()> {
        let b = self.live(id)?;
        match offset.checked_add(bytes) {
            Some(end) if end <= b.bytes => Ok(()),
            _ => Err(device_error(
                operation,
                format!(
                    "byte range {} runs past the {} bytes of {}",
                    range(offset, bytes),
                    b.bytes,
                    self.name(id)
                ),
            )),
        }
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
            let e = device_error(
                "alloc",
                format!("out of memory: `{label}` needs {bytes} bytes, {free} bytes are free"),
            );
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
        let args = launch
            .args
            .iter()
            .map(|arg| match *arg {
                Arg::Buffer { id, byte_offset } => LoggedArg::Buffer {
                    buffer: self.name(id),
                    byte_offset,
                },
                Arg::U32(v) => LoggedArg::U32(v),
                Arg::U64(v) => LoggedArg::U64(v),
                Arg::F32(v) => LoggedArg::F32(v),
                Arg::F64(v) => LoggedArg::F64(v),
            })
            .collect();
        self.log.push(Event::Launch {
            kernel: launch.kernel,
            grid: launch.grid,
            block: launch.block,
            args,
        });
        let result = if fires(&mut self.launch_fault) {
            Err(device_error(
                &format!("launch of {}", launch.kernel.cuda_name()),
                "injected launch failure".into(),
            ))
        } else {
            self.validate(launch).and_then(|()| self.execute(launch))
        };
        self.outcome(EventKind::Launch, result)
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

    fn validate(&self, launch: &Launch) -> Result<()> {
        let kernel = launch.kernel;
        if launch.grid.contains(&0) || launch.block.contains(&0) {
            return Err(launch_error(
                kernel,
                format!(
                    "grid {:?} and block {:?} need every dimension at least 1",
                    launch.grid, launch.block
                ),
            ));
        }
        let threads: u64 = launch.block.iter().map(|b| u64::from(*b)).product();
        if threads > u64::from(MAX_BLOCK_THREADS) {
            return Err(launch_error(
                kernel,
                format!(
                    "block {:?} has {threads} threads, at most {MAX_BLOCK_THREADS} allowed",
                    launch.block
                ),
            ));
        }
        for arg in &launch.args {
            if let Arg::Buffer { id, byte_offset } = *arg {
                let b = self.live(id)?;
                if byte_offset >= b.bytes as u64 {
                    return Err(launch_error(
                        kernel,
                        format!(
                            "byte offset {byte_offset} is past the {} bytes of {}",
                            b.bytes,
                            self.name(id)
                        ),
                    ));
                }
            }
        }
        let populations = |cells: usize| Q * cells * 4;
        // The bytes each buffer argument must hold for the layout the launch
        // declares. The match is exhaustive on purpose: a new kernel is a compile
        // error here until the mock knows what its buffers must hold.
        let needs: Vec<(&str, BufferId, usize)> = match kernel {
            Kernel::StreamCollide => {
                let k = StreamCollide::decode(launch)?;
                let plane = k.layout.plane_cells();
                let mut needs = vec![
                    ("src", k.src, populations(plane)),
                    ("dst", k.dst, populations(plane)),
                    ("flags", k.flags, plane),
                ];
                if k.interpolated_walls {
                    needs.push(("wall_distance", k.wall_distance, populations(plane)));
                }
                if k.edges.contains(&Edge::Inlet) {
                    needs.push(("inlet_profile", k.inlet_profile, 4 * inlet_samples(k.active.height())));
                    needs.push(("boundary_state", k.boundary_state, 8));
                }
                needs
            }
            Kernel::FillGhost => {
                let k = FillGhost::decode(launch)?;
                let coarse = populations(k.coarse.plane_cells());
                vec![
                    ("coarse_t", k.coarse_t, coarse),
                    ("coarse_t1", k.coarse_t1, coarse),
                    ("fine_dst", k.fine_dst, populations(k.fine.plane_cells())),
                ]
            }
            Kernel::RestrictToParent => {
                let k = RestrictToParent::decode(launch)?;
                vec![
                    ("fine_src", k.fine_src, populations(k.fine.plane_cells())),
                    ("coarse_dst", k.coarse_dst, populations(k.coarse.plane_cells())),
                ]
            }
            Kernel::AccumulateFineFlux => {
                let k = AccumulateFineFlux::decode(launch)?;
                let covered = fine_covered(&k.layout);
                vec![
                    ("fine", k.fine, populations(k.layout.plane_cells())),
                    ("flux", k.flux, 4 * ring_cells(&covered, k.kinds)),
                ]
            }
            Kernel::CorrectInterfaceMass => {
                let k = CorrectInterfaceMass::decode(launch)?;
                let coarse = populations(k.coarse.plane_cells());
                vec![
                    ("coarse_t", k.coarse_t, coarse),
                    ("coarse_t1", k.coarse_t1, coarse),
                    ("flux", k.flux, 4 * ring_cells(&k.covered, k.kinds)),
                ]
            }
            Kernel::AccumulateExchange => {
                let k = AccumulateExchange::decode(launch)?;
                if k.window_on && k.window == k.interval {
                    return Err(launch_error(
                        kernel,
                        "an open window needs its own accumulator, not the interval's".into(),
                    ));
                }
                let accumulator = EXCHANGE_WORDS * 8;
                vec![
                    ("f", k.f, populations(k.plane_cells as usize)),
                    ("links", k.links, LINK_WORDS * 4 * k.n_links as usize),
                    ("interval", k.interval, accumulator),
                    ("window", k.window, accumulator),
                ]
            }
            Kernel::UpdateBoundaryState => {
                let k = UpdateBoundaryState::decode(launch)?;
                vec![
                    ("state", k.state, 8),
                    ("table", k.table, 2 * 4 * k.table_points as usize),
                ]
            }
        };
        for (what, id, need) in needs {
            let have = self.live(id)?.bytes;
            if have < need {
                return Err(launch_error(
                    kernel,
                    format!("{what} {} holds {have} bytes, the launch needs {need}", self.name(id)),
                ));
            }
        }
        Ok(())
    }

    fn synchronize(&mut self) -> Result<()> {
        self.log.push(Event::Synchronize);
        let result = if fires(&mut self.sync_fault) {
            Err(device_error(
                "synchronize",
                "injected asynchronous failure surfacing at the wait".into(),
            ))
        } else {
            self.cpu.as_mut().map_or(Ok(()), |cpu| cpu.synchronize())
        };
        self.outcome(EventKind::Synchronize, result)
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
    use lbm_core::lattice::{Collision, Relaxation};
    use lbm_core::launch::{Amplitude, Edge};

    fn stream_collide(src: BufferId, dst: BufferId, flags: BufferId) -> Launch {
        // The rendering test pins these relaxation rates and this force.
        let any = Relaxation::new(Collision::Bgk, 1.0);
        StreamCollide {
            omega_plus: 1.25,
            omega_minus: 1.5,
            force: [1e-5, 0.0],
            ..StreamCollide::periodic(src, dst, flags, [4, 4], any)
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
            "launch stream_collide grid [1, 1, 1] block [256, 1, 1] (buf#0 \"p.f.a\", buf#1 \"p.f.b\", \
             buf#2 \"p.flags\", buf#2 \"p.flags\", buf#2 \"p.flags\", buf#2 \"p.flags\", 4u32, 4u32, 4u32, 4u32, \
             0u32, 0u32, 4u32, 4u32, 0u32, 0u32, 0u32, 0u32, 0.0f32, 0.0f32, 0.0f32, 0.0f32, 0.0f32, 0.0f32, 0.0f32, \
             0.0f32, 1.25f32, 1.5f32, 1e-5f32, 0.0f32, 0u32)",
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
            json.starts_with(r#"{"event":"upload","buffer":"buf#2 \"p.flags\"""#),
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
            &["unknown buffer 9 on the mock backend"],
        );
        check_refused(
            |d, [_, _, f]| d.upload(f, 8, &[0; 9]),
            &["upload", "[8, 17)", "16 bytes", "p.flags"],
        );
        check_refused(|d, [a, ..]| d.download(a, 576, &mut [0]), &["download", "[576, 577)"]);
        check_refused(
            |d, [a, ..]| d.memset_async(a, usize::MAX, 2, 0),
            &["memset", "runs past"],
        );
        check_refused(|d, [a, _, f]| d.copy_async(a, 0, f, 0, 17), &["copy destination"]);
        check_refused(
            |d, [_, _, f]| {
                d.free(f)?;
                d.free(f)
            },
            &["unknown buffer 2"],
        );
        check_refused(
            |d, _| d.alloc("huge", 2 << 30).map(|_| ()),
            &["out of memory", "`huge`", "2147483648 bytes"],
        );
        check_refused(
            |d, [a, b, f]| d.launch(&stream_collide(a, f, b)),
            &[
                "stream_collide",
                "dst buf#2 \"p.flags\" holds 16 bytes, the launch needs 576",
            ],
        );
        check_refused(
            |d, [a, b, f]| {
                let mut launch = stream_collide(a, b, f);
                launch.args.pop();
                d.launch(&launch)
            },
            &["stream_collide", "too few arguments"],
        );
        check_refused(
            |d, [a, b, f]| {
                let mut k = StreamCollide::decode(&stream_collide(a, b, f))?;
                k.interpolated_walls = true;
                d.launch(&k.launch())
            },
            &["wall_distance buf#2 \"p.flags\" holds 16 bytes, the launch needs 576"],
        );
        check_refused(
            |d, [a, b, f]| {
                let mut k = StreamCollide::decode(&stream_collide(a, b, f))?;
                k.edges[0] = Edge::Inlet;
                k.inlet_profile = d.alloc("tiny", 4)?;
                d.launch(&k.launch())
            },
            &["inlet_profile buf#3 \"tiny\" holds 4 bytes, the launch needs 48"],
        );
        check_refused(
            |d, [_, _, f]| {
                let tiny = d.alloc("tiny", 4)?;
                d.launch(&UpdateBoundaryState::new(f, tiny, &Amplitude::Constant).launch())?;
                let table = Amplitude::Table {
                    points: vec![[0.0, 0.0], [1.0, 1.0], [2.0, 0.5]],
                };
                d.launch(&UpdateBoundaryState::new(f, tiny, &table).launch())
            },
            &[
                "update_boundary_state",
                "table buf#3 \"tiny\" holds 4 bytes, the launch needs 24",
            ],
        );
        check_refused(
            |d, [_, _, f]| {
                let tiny = d.alloc("tiny", 4)?;
                d.launch(&UpdateBoundaryState::new(tiny, f, &Amplitude::Constant).launch())
            },
            &["state buf#3 \"tiny\" holds 4 bytes, the launch needs 8"],
        );
        check_refused(
            |d, [a, b, f]| {
                let mut launch = stream_collide(a, b, f);
                launch.block = [2048, 1, 1];
                d.launch(&launch)
            },
            &["2048 threads"],
        );
        check_refused(
            |d, [a, b, f]| {
                let mut launch = stream_collide(a, b, f);
                launch.args[0] = Arg::Buffer { id: a, byte_offset: 4 };
                d.launch(&launch)
            },
            &["expected a buffer at offset 0"],
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
        assert!(message.contains("mock device error during synchronize"), "{message}");
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
}
