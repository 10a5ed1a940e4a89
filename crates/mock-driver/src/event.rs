//! The log: one [`Event`] per driver call, with buffers by name and kernel
//! arguments by parameter, rendered one line each and serialisable as JSON.
//!
//! It records; it decides nothing about what is accepted (see the recorder).

use std::fmt;

use lbm_core::Kernel;
use serde::{Serialize, Serializer};

use lbm_core::BufferId;

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
    Together,
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
            EventKind::Together => "together",
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
    /// One launch for every member of a fused batch, with member 0's
    /// arguments.
    BatchLaunch {
        kernel: Kernel,
        members: usize,
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
    /// The next `launches` launches (or batches) of a replay are one group
    /// that a device may run side by side
    /// ([`lbm_core::device::Action::Together`]).
    Together {
        launches: usize,
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
            Event::Launch { .. } | Event::BatchLaunch { .. } => EventKind::Launch,
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
            Event::Together { .. } => EventKind::Together,
            Event::ReleasePlan { .. } => EventKind::ReleasePlan,
            Event::Error { .. } => EventKind::Error,
        }
    }
}

pub(crate) fn range(offset: usize, bytes: usize) -> String {
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
            Event::BatchLaunch {
                kernel,
                members,
                grid,
                block,
                args,
            } => {
                write!(
                    f,
                    "launch {}_batch x{members} grid {grid:?} block {block:?} (member 0: ",
                    kernel.cuda_name()
                )?;
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
            Event::Together { launches } => write!(f, "together {launches} launches"),
            Event::ReleasePlan { plan } => write!(f, "release_plan plan#{plan}"),
            Event::Error { call, message } => write!(f, "error in {call}: {message}"),
        }
    }
}

/// One line per event, each ending in a newline.
pub fn render(events: &[Event]) -> String {
    events.iter().map(|e| format!("{e}\n")).collect()
}

pub(crate) fn fnv1a64(data: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in data {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}
