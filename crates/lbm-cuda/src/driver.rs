//! [`CudaDriver`]: the [`Driver`] seam over cudarc, one context, one stream, one
//! module loaded from the embedded PTX.
//!
//! Every enqueue (`memset_async`, `copy_async`, `launch`, replays) goes to the
//! main stream and returns at once; [`Driver::synchronize`] is the only wait
//! that reports the errors of enqueued work. `upload` and `download` also wait
//! for the main stream (they must complete before returning), so an earlier
//! asynchronous error can surface there too, as the trait allows. Launches are
//! checked on the host first ([`lbm_core::kernels::check_launch`]: by `launch`
//! each time, by `prepare` once per plan) so that no kernel can touch memory
//! outside the buffers it was given; a buffer argument is passed as its device
//! pointer plus its byte offset, an absent one as a null pointer.
//!
//! Further streams come from the same context; events are CUDA events;
//! staging areas are page-locked host memory with default flags (not
//! write-combined, which the CPU reads slowly).
//!
//! A prepared plan is, by default ([`PlanMode::Graphs`]), a CUDA graph
//! captured from the main stream at `prepare`: `replay` is one graph launch
//! however many actions the plan has, so a small grid's interval costs one
//! host call instead of one per kernel, and the device runs the kernels back
//! to back. The graph holds exactly the plan's actions in order (the mock's
//! launch log of a replay is what it contains). [`PlanMode::Launches`]
//! enqueues the actions one by one instead, for comparison.
//!
//! What it does not do: no retry; it never reuses a freed buffer's id (so a
//! graph's baked-in pointers stay valid while the plan table accepts the
//! plan), and it refuses an overlapping copy within one buffer (the CPU
//! driver allows it).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, DriverError, PinnedHostSlice,
    result, sys,
};
use cudarc::nvrtc::Ptx;
use lbm_core::device::{
    Action, BatchLaunch, EventId, PeerBuffer, PeerEvent, PeerStream, PlanId, SPREAD_ENTRY, StagingId, StreamId,
    live_buffer,
};
use lbm_core::error::CudaCode;
use lbm_core::kernels::{PlanTable, check_launch};
use lbm_core::{Arg, BufferId, Driver, Error, Kernel, Launch, Result};

const BACKEND: &str = "cuda";

/// Side streams for the groups of a plan: a hop's group holds the bulk
/// update and at most three small launches beside it (the general update,
/// the momentum exchange, the interface flux).
const SIDE_STREAMS: usize = 3;

/// How [`Driver::prepare`] keeps a plan for [`Driver::replay`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PlanMode {
    /// Captured once as a CUDA graph; a replay is one graph launch.
    #[default]
    Graphs,
    /// Kept as marshalled actions; a replay enqueues each one.
    Launches,
}

/// The CUDA backend; see the module documentation.
pub struct CudaDriver {
    // Fields drop in order: buffers are freed (stream-ordered) while the
    // module, stream and context they need are still alive.
    buffers: Vec<Option<DeviceBuffer>>,
    staging: Vec<Option<Staging>>,
    plans: PlanTable,
    /// The captured graph of each prepared plan, by [`PlanId`]; `None` for a
    /// plan prepared under [`PlanMode::Launches`], or released.
    graphs: Vec<Option<PlanGraph>>,
    plan_mode: PlanMode,
    events: Vec<CudaEvent>,
    /// One function per kernel, in [`Kernel::ALL`] order.
    functions: Vec<CudaFunction>,
    /// `stream_collide_spread` ([`Launch::cuda_entry`]).
    spread_function: CudaFunction,
    /// Each kernel's `_batch` entry, in [`Kernel::ALL`] order (`None` for a
    /// kernel without one).
    batch_functions: Vec<Option<CudaFunction>>,
    /// The argument tables of each prepared plan's batches, by [`PlanId`],
    /// in action order: device memory the plan's launches read.
    batch_tables: Vec<Vec<BatchTable>>,
    /// Further streams; [`StreamId`] `k` is `streams[k - 1]`.
    streams: Vec<Arc<CudaStream>>,
    /// Where the second and later launches of an [`Action::Together`] run,
    /// one stream each ([`SIDE_STREAMS`], then round again), at the device's
    /// highest priority so that the group's small launches get their blocks
    /// ahead of the large one's waiting blocks.
    side: Vec<Arc<CudaStream>>,
    /// A group's fork (recorded on the plan's stream, waited for by the side
    /// streams) and each side stream's join: made once, so that enqueuing a
    /// group creates no event (a wait takes the event's latest record).
    fork: CudaEvent,
    joins: Vec<CudaEvent>,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
    device_name: String,
}

struct DeviceBuffer {
    label: String,
    /// The size the caller asked for; the allocation has at least one byte.
    bytes: usize,
    ptr: sys::CUdeviceptr,
    /// Owns the allocation; dropping it frees the memory in stream order.
    _memory: CudaSlice<u8>,
}

/// The argument table of one prepared batch (`crate::batch_words`), in device
/// memory for as long as the plan lives.
struct BatchTable {
    ptr: sys::CUdeviceptr,
    _memory: CudaSlice<u64>,
}

struct Staging {
    label: String,
    ptr: *mut u8,
    bytes: usize,
    /// Owns the page-locked allocation.
    _memory: PinnedHostSlice<u8>,
}

// SAFETY: `ptr` points into `_memory`, which this struct owns and which lives
// in host memory any thread may access; the driver moves with its staging.
unsafe impl Send for Staging {}

/// A plan's instantiated graph.
struct PlanGraph(CudaGraph);

// SAFETY: CUDA graph objects are not bound to a thread; they only need calls
// on them serialised, which `&mut CudaDriver` guarantees, and the graph moves
// with the driver that owns it.
unsafe impl Send for PlanGraph {}

impl Drop for CudaDriver {
    fn drop(&mut self) {
        // Let enqueued work finish before its buffers and module go. An error
        // here has nowhere to go; `synchronize` is where errors are reported.
        let _ = self.ctx.bind_to_thread();
        let _ = self.stream.synchronize();
    }
}

impl std::fmt::Debug for CudaDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDriver")
            .field("device", &self.device_name)
            .field("ordinal", &self.ctx.ordinal())
            .field("live_buffers", &self.buffers.iter().flatten().count())
            .finish()
    }
}

/// A kernel parameter, stored so that its address can be handed to the launch.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Param {
    U32(u32),
    U64(u64),
    F32(f32),
    F64(f64),
}

/// A failed CUDA call: the result code kept as data, with its name.
fn cuda_error(operation: impl Into<String>, error: DriverError) -> Error {
    let name = error
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", error.0));
    Error::Cuda {
        operation: operation.into(),
        code: CudaCode {
            code: error.0 as u32,
            name,
        },
    }
}

fn unavailable(reason: impl Into<String>) -> Error {
    Error::Unavailable {
        backend: BACKEND,
        reason: reason.into(),
    }
}

fn no_driver() -> Error {
    unavailable(
        "no CUDA driver was found: the NVIDIA driver library (libcuda.so) could not be loaded; \
         install the NVIDIA driver or use the CPU backend",
    )
}

fn unknown(what: &'static str, id: u32) -> Error {
    Error::UnknownHandle {
        backend: BACKEND,
        what,
        id,
    }
}

/// The text of a caught panic.
/// The position of `kernel` in [`Kernel::ALL`], which orders the loaded functions.
fn kernel_index(kernel: Kernel) -> usize {
    Kernel::ALL
        .iter()
        .position(|k| *k == kernel)
        .expect("Kernel::ALL lists every kernel")
}

fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "cudarc panicked".into())
}

/// Whether the CUDA driver library can be loaded. Calls nothing else in cudarc.
pub fn driver_library_present() -> bool {
    // SAFETY: `is_culib_present` only tries to open the driver library under its
    // candidate names and closes it again; it calls no CUDA function.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether a CUDA device can be used: the driver library loads and reports at
/// least one device. Never panics.
pub fn device_available() -> bool {
    if !driver_library_present() {
        return false;
    }
    // A driver older than the bindings lacks symbols, and cudarc panics on a
    // missing symbol; that means "not available" here.
    std::panic::catch_unwind(CudaContext::device_count)
        .map(|count| matches!(count, Ok(n) if n > 0))
        .unwrap_or(false)
}

/// The name of every CUDA device present, by ordinal; empty without a driver
/// library or a device. Never panics.
pub fn device_names() -> Vec<String> {
    if !driver_library_present() {
        return Vec::new();
    }
    std::panic::catch_unwind(|| {
        use cudarc::driver::result;
        result::init().ok()?;
        let count = CudaContext::device_count().ok()?;
        (0..count)
            .map(|i| result::device::get(i).and_then(result::device::get_name).ok())
            .collect::<Option<Vec<String>>>()
    })
    .ok()
    .flatten()
    .unwrap_or_default()
}

impl CudaDriver {
    /// Opens device `ordinal`: its primary context, one stream and the kernel
    /// module. Without a driver library this is an error that says so, and no
    /// cudarc call is made before that is known.
    pub fn new(ordinal: usize) -> Result<Self> {
        if !driver_library_present() {
            return Err(no_driver());
        }
        std::panic::catch_unwind(move || Self::open(ordinal))
            .unwrap_or_else(|panic| Err(unavailable(panic_text(panic))))
    }

    fn open(ordinal: usize) -> Result<Self> {
        let ctx = CudaContext::new(ordinal).map_err(|e| cuda_error(format!("open device {ordinal}"), e))?;
        // SAFETY: this driver orders its streams itself, through the events its
        // caller records and waits for (the seam's contract), so cudarc's
        // cross-stream event tracking is not needed; it is off before any
        // stream or buffer exists.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| cuda_error("create the stream", e))?;
        let (_, greatest) =
            result::stream::get_priority_range().map_err(|e| cuda_error("read stream priorities", e))?;
        let side = (0..SIDE_STREAMS)
            .map(|_| ctx.new_stream_with_priority(greatest))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| cuda_error("create the side streams", e))?;
        let group_events = (0..=SIDE_STREAMS)
            .map(|_| ctx.new_event(None))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| cuda_error("create the group events", e))?;
        let (fork, joins) = {
            let mut events = group_events.into_iter();
            (events.next().expect("one fork event"), events.collect())
        };
        let module = ctx
            .load_module(Ptx::from_src(crate::PTX))
            .map_err(|e| cuda_error("load the kernel module (kernels/lbm.ptx)", e))?;
        let functions = Kernel::ALL
            .iter()
            .map(|k| {
                module
                    .load_function(k.cuda_name())
                    .map_err(|e| cuda_error(format!("find kernel {}", k.cuda_name()), e))
            })
            .collect::<Result<Vec<_>>>()?;
        let spread_function = module
            .load_function(SPREAD_ENTRY)
            .map_err(|e| cuda_error(format!("find kernel {SPREAD_ENTRY}"), e))?;
        let batch_functions = Kernel::ALL
            .iter()
            .map(|k| {
                let name = format!("{}_batch", k.cuda_name());
                k.batches()
                    .then(|| {
                        module
                            .load_function(&name)
                            .map_err(|e| cuda_error(format!("find kernel {name}"), e))
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        let device_name = ctx.name().map_err(|e| cuda_error("read the device name", e))?;
        Ok(CudaDriver {
            buffers: Vec::new(),
            staging: Vec::new(),
            plans: PlanTable::default(),
            graphs: Vec::new(),
            plan_mode: PlanMode::default(),
            events: Vec::new(),
            functions,
            spread_function,
            batch_functions,
            batch_tables: Vec::new(),
            streams: Vec::new(),
            side,
            fork,
            joins,
            stream,
            ctx,
            device_name,
        })
    }

    /// The device's name, e.g. "NVIDIA H200".
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    /// How plans prepared from now on are kept; plans already prepared keep
    /// theirs.
    pub fn set_plan_mode(&mut self, mode: PlanMode) {
        self.plan_mode = mode;
    }

    /// The device's memory in bytes.
    pub fn total_memory(&self) -> Result<u64> {
        let (_free, total) = self
            .ctx
            .mem_get_info()
            .map_err(|e| cuda_error("query device memory", e))?;
        Ok(total as u64)
    }

    fn bind(&self, operation: &str) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| cuda_error(operation, e))
    }

    fn buffer(&self, id: BufferId) -> Result<&DeviceBuffer> {
        live_buffer(&self.buffers, id, BACKEND)
    }

    fn size_of(&self, id: BufferId) -> Option<usize> {
        self.buffer(id).ok().map(|b| b.bytes)
    }

    fn stream_of(&self, stream: StreamId) -> Result<&Arc<CudaStream>> {
        match stream.0 {
            0 => Ok(&self.stream),
            k => self.streams.get(k as usize - 1).ok_or(unknown("stream", k)),
        }
    }

    fn event(&self, event: EventId) -> Result<&CudaEvent> {
        self.events.get(event.0 as usize).ok_or(unknown("event", event.0))
    }

    /// Enqueues a launch that the check has passed on `stream`.
    fn enqueue(&self, stream: &CudaStream, launch: &Launch) -> Result<()> {
        let mut params = marshal(&launch.args, |id| Ok(self.buffer(id)?.ptr))?;
        let mut pointers: Vec<*mut c_void> = params
            .iter_mut()
            .map(|param| match param {
                Param::U32(v) => std::ptr::from_mut(v).cast(),
                Param::U64(v) => std::ptr::from_mut(v).cast(),
                Param::F32(v) => std::ptr::from_mut(v).cast(),
                Param::F64(v) => std::ptr::from_mut(v).cast(),
            })
            .collect();
        // SAFETY: the parameters follow the kernel's signature (the typed decoder
        // accepted the argument kinds and count, and the tidy test pins each
        // `__global__` signature to them); `check_launch` proved every access
        // the kernel makes lies inside the buffers passed, and an absent
        // optional buffer (a null pointer) is never read; those buffers stay
        // allocated until the launch completes because frees are stream-ordered;
        // and `params` outlives this call, which copies the values.
        unsafe {
            self.launch_programmatic(
                stream,
                match launch.cuda_entry() {
                    SPREAD_ENTRY => &self.spread_function,
                    _ => &self.functions[kernel_index(launch.kernel)],
                },
                launch.grid,
                launch.block,
                &mut pointers,
                || format!("launch {}", launch.kernel),
            )
        }
    }

    /// Enqueues a batch that the check has passed, through its kernel's
    /// `_batch` entry reading `table`: member 0's grid times one z layer
    /// per member.
    fn enqueue_batch(&self, stream: &CudaStream, batch: &BatchLaunch, table: &BatchTable) -> Result<()> {
        let first = batch.first();
        let function = self.batch_functions[kernel_index(first.kernel)]
            .as_ref()
            .expect("check_batch admits only kernels with a _batch entry");
        let mut table_ptr = table.ptr;
        let [x, y, _] = batch.grid();
        let grid = [x, y, batch.members() as u32];
        // SAFETY: the entry takes one pointer, to `table`: every member's
        // arguments as words in signature order (`batch_words`, which
        // batch.cuh reads back with the body's own parameter types, the tidy
        // test pinning those to the launch structs); `check_batch` proved
        // every member's accesses lie inside its buffers and that no member
        // touches bytes another writes; the table lives as long as the plan,
        // and a plan's buffers outlive its replays (a freed one makes the
        // replay stale).
        unsafe {
            self.launch_programmatic(
                stream,
                function,
                grid,
                first.block,
                &mut [std::ptr::from_mut(&mut table_ptr).cast()],
                || format!("launch {}_batch", first.kernel),
            )
        }
    }

    /// Launches `function` on `stream` with programmatic stream
    /// serialization: the kernel may be scheduled while the one before it
    /// drains instead of after it completed, because every kernel's prologue
    /// (common.cuh's `lbm_prologue`, pinned by the tidy test) waits for its
    /// prerequisites before it touches memory. A plan's interval is a chain
    /// of short dependent kernels, and without the attribute each link costs
    /// a full drain and launch. cudarc's launch builder sets no launch
    /// attribute, hence `cuLaunchKernelEx`.
    ///
    /// # Safety
    ///
    /// `params` point at values of the kernel's parameter types, in its
    /// order, and the kernel's accesses with them are valid.
    unsafe fn launch_programmatic(
        &self,
        stream: &CudaStream,
        function: &CudaFunction,
        grid: [u32; 3],
        block: [u32; 3],
        params: &mut [*mut c_void],
        operation: impl Fn() -> String,
    ) -> Result<()> {
        self.bind("launch a kernel")?;
        let mut attributes = [sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value: sys::CUlaunchAttributeValue {
                programmaticStreamSerializationAllowed: 1,
            },
        }];
        let config = sys::CUlaunchConfig {
            gridDimX: grid[0],
            gridDimY: grid[1],
            gridDimZ: grid[2],
            blockDimX: block[0],
            blockDimY: block[1],
            blockDimZ: block[2],
            sharedMemBytes: 0,
            hStream: stream.cu_stream(),
            attrs: attributes.as_mut_ptr(),
            numAttrs: attributes.len() as u32,
        };
        // SAFETY: the caller's contract for `params`; `config` and its
        // attribute outlive the call, which copies them.
        unsafe {
            sys::cuLaunchKernelEx(
                &config,
                function.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .map_err(|e| cuda_error(operation(), e))
    }

    /// Enqueues one checked action of a plan on `stream`; a batch takes the
    /// plan's next argument table from `tables`.
    fn enqueue_action<'t>(
        &self,
        stream: &CudaStream,
        action: &Action,
        tables: &mut impl Iterator<Item = &'t BatchTable>,
    ) -> Result<()> {
        match action {
            Action::Launch(launch) => self.enqueue(stream, launch),
            Action::Together(members) => self.enqueue_together(stream, members, tables),
            Action::Batch(batch) => self.enqueue_batch(stream, batch, tables.next().expect("one table per batch")),
            Action::Memset {
                buffer,
                byte_offset,
                bytes,
                value,
            } => self.memset_range(stream, *buffer, *byte_offset, *bytes, *value),
        }
    }

    /// Enqueues a group of launches or batches in no order among
    /// themselves ([`Action::Together`]): the first on `stream`, each other
    /// on a side stream after what `stream` holds so far, and `stream` then
    /// waits for them. Under capture the events become the graph's edges, so
    /// the group is parallel branches of the plan's graph. The batches take
    /// `tables` in the group's order.
    fn enqueue_together<'t>(
        &self,
        stream: &CudaStream,
        members: &[Action],
        tables: &mut impl Iterator<Item = &'t BatchTable>,
    ) -> Result<()> {
        let Some((first, others)) = members.split_first() else {
            return Ok(());
        };
        // Each member's table, taken in the group's order before the
        // members are enqueued in another.
        let mut own: Vec<Option<&'t BatchTable>> = members
            .iter()
            .map(|a| matches!(a, Action::Batch(_)).then(|| tables.next().expect("one table per batch")))
            .collect();
        let first_table = own.remove(0);
        let sides = &self.side[..others.len().min(SIDE_STREAMS)];
        let fork = |e| cuda_error("fork a group of launches", e);
        if !others.is_empty() {
            self.fork.record(stream).map_err(fork)?;
            for side in sides {
                side.wait(&self.fork).map_err(fork)?;
            }
            for ((member, table), side) in others.iter().zip(own).zip(sides.iter().cycle()) {
                self.enqueue_action(side, member, &mut table.into_iter())?;
            }
        }
        self.enqueue_action(stream, first, &mut first_table.into_iter())?;
        let join = |e| cuda_error("join a group of launches", e);
        for (side, event) in sides.iter().zip(&self.joins) {
            event.record(side).map_err(join)?;
            stream.wait(event).map_err(join)?;
        }
        Ok(())
    }

    /// Enqueues a memset of a range on `stream`, on a bound context.
    fn memset_range(
        &self,
        stream: &CudaStream,
        buffer: BufferId,
        byte_offset: usize,
        bytes: usize,
        value: u8,
    ) -> Result<()> {
        let dst = self.range("memset", buffer, byte_offset, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: the range lies inside a live allocation (checked by `range`),
        // and a buffer freed later is released in stream order, after the memset.
        unsafe { result::memset_d8_async(dst, value, bytes, stream.cu_stream()) }.map_err(|e| cuda_error("memset", e))
    }

    /// Every batch's argument table of `actions`, uploaded.
    fn batch_tables_of(&self, actions: &[Action]) -> Result<Vec<BatchTable>> {
        // In the order `enqueue_action` takes them: a group's in the group's.
        actions
            .iter()
            .flat_map(|a| match a {
                Action::Together(members) => members.iter().collect(),
                other => vec![other],
            })
            .filter_map(|a| match a {
                Action::Batch(batch) => Some(batch),
                _ => None,
            })
            .map(|batch| {
                let words = crate::batch_words(batch, |id| Ok(self.buffer(id)?.ptr))?;
                let memory = self
                    .stream
                    .clone_htod(&words)
                    .map_err(|e| cuda_error("upload a batch's argument table", e))?;
                let ptr = memory.device_ptr(&self.stream).0;
                Ok(BatchTable { ptr, _memory: memory })
            })
            .collect()
    }

    /// `actions`, captured from the main stream into an instantiated graph
    /// (`None` for an empty plan). Nothing runs: a captured stream only
    /// records.
    fn capture(&mut self, label: &str, actions: &[Action], tables: &[BatchTable]) -> Result<Option<PlanGraph>> {
        let operation = format!("capture plan `{label}` as a CUDA graph");
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| cuda_error(operation.clone(), e))?;
        let mut tables = tables.iter();
        let recorded = actions
            .iter()
            .try_for_each(|a| self.enqueue_action(&self.stream, a, &mut tables));
        // End the capture whatever happened, so the stream is usable again.
        // Capture copies each launch's stream priority into its node, but a
        // graph runs every node at its launch stream's priority unless told
        // otherwise: without this flag a group's side launches lose the
        // priority that gets their blocks ahead of the first launch's.
        let ended = self
            .stream
            .end_capture(sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY);
        recorded?;
        let graph = ended.map_err(|e| cuda_error(operation.clone(), e))?;
        if let Some(graph) = &graph {
            // Moves the graph's setup off its first replay.
            graph.upload().map_err(|e| cuda_error(operation, e))?;
        }
        Ok(graph.map(PlanGraph))
    }

    /// The device address of `[offset, offset + len)` of `id`, once that range
    /// is known to lie inside the buffer.
    fn range(&self, operation: &'static str, id: BufferId, offset: usize, len: usize) -> Result<sys::CUdeviceptr> {
        let b = self.buffer(id)?;
        let end = offset.saturating_add(len);
        if end > b.bytes {
            return Err(Error::OutOfRange {
                backend: BACKEND,
                operation,
                label: b.label.clone(),
                start: offset as u64,
                end: end as u64,
                size: b.bytes as u64,
            });
        }
        Ok(b.ptr + offset as u64)
    }

    fn wait(&self, operation: &str) -> Result<()> {
        self.stream.synchronize().map_err(|e| cuda_error(operation, e))?;
        // Frees run in `Drop` and can only record their errors; report them here.
        self.ctx
            .check_err()
            .map_err(|e| cuda_error(format!("{operation} (a deferred free)"), e))
    }
}

/// The launch's arguments as kernel parameters, buffers resolved by `pointer`.
fn marshal(args: &[Arg], pointer: impl Fn(BufferId) -> Result<u64>) -> Result<Vec<Param>> {
    args.iter()
        .map(|arg| {
            Ok(match *arg {
                Arg::Buffer { id, byte_offset } => Param::U64(pointer(id)? + byte_offset),
                Arg::NoBuffer => Param::U64(0),
                Arg::U32(v) => Param::U32(v),
                Arg::U64(v) => Param::U64(v),
                Arg::F32(v) => Param::F32(v),
                Arg::F64(v) => Param::F64(v),
            })
        })
        .collect()
}

impl Driver for CudaDriver {
    fn backend(&self) -> &'static str {
        "cuda"
    }

    fn alloc(&mut self, label: &str, bytes: usize) -> Result<BufferId> {
        self.bind("alloc")?;
        // CUDA refuses empty allocations; a one-byte one keeps ids and pointers uniform.
        let memory = self
            .stream
            .alloc_zeros::<u8>(bytes.max(1))
            .map_err(|e| cuda_error(format!("alloc of {bytes} bytes for `{label}`"), e))?;
        // Event tracking is off, so the returned guard records nothing.
        let ptr = memory.device_ptr(&self.stream).0;
        let id = BufferId(self.buffers.len() as u32);
        self.buffers.push(Some(DeviceBuffer {
            label: label.to_owned(),
            bytes,
            ptr,
            _memory: memory,
        }));
        Ok(id)
    }

    fn free(&mut self, buffer: BufferId) -> Result<()> {
        self.buffer(buffer)?;
        self.bind("free")?;
        // Dropping the slice frees it in stream order, after all enqueued work.
        self.buffers[buffer.0 as usize] = None;
        self.plans.note_free();
        Ok(())
    }

    fn upload(&mut self, buffer: BufferId, byte_offset: usize, data: &[u8]) -> Result<()> {
        let dst = self.range("upload", buffer, byte_offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        self.bind("upload")?;
        // SAFETY: `dst .. dst + data.len()` lies inside a live allocation (checked
        // by `range`), and `data` outlives the copy because we wait for the
        // stream before returning.
        unsafe { result::memcpy_htod_async(dst, data, self.stream.cu_stream()) }
            .map_err(|e| cuda_error("upload", e))?;
        self.wait("upload")
    }

    fn download(&mut self, buffer: BufferId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        let src = self.range("download", buffer, byte_offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        self.bind("download")?;
        // SAFETY: `src .. src + out.len()` lies inside a live allocation (checked
        // by `range`), and `out` stays borrowed until the stream has finished.
        unsafe { result::memcpy_dtoh_async(out, src, self.stream.cu_stream()) }
            .map_err(|e| cuda_error("download", e))?;
        self.wait("download")
    }

    fn memset_async(&mut self, buffer: BufferId, byte_offset: usize, bytes: usize, value: u8) -> Result<()> {
        self.bind("memset")?;
        self.memset_range(&self.stream, buffer, byte_offset, bytes, value)
    }

    fn copy_async(
        &mut self,
        src: BufferId,
        src_offset: usize,
        dst: BufferId,
        dst_offset: usize,
        bytes: usize,
    ) -> Result<()> {
        let from = self.range("copy source", src, src_offset, bytes)?;
        let to = self.range("copy destination", dst, dst_offset, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        if src == dst && src_offset < dst_offset + bytes && dst_offset < src_offset + bytes {
            return Err(Error::parameter(
                "copy_async ranges",
                format!(
                    "[{src_offset}, {}) -> [{dst_offset}, {}) of {src}",
                    src_offset + bytes,
                    dst_offset + bytes
                ),
                "source and destination ranges that do not overlap",
            ));
        }
        self.bind("copy")?;
        // SAFETY: both ranges lie inside live allocations (checked by `range`)
        // and do not overlap; frees are stream-ordered after the copy.
        unsafe { result::memcpy_dtod_async(to, from, bytes, self.stream.cu_stream()) }
            .map_err(|e| cuda_error("copy", e))
    }

    fn launch(&mut self, launch: &Launch) -> Result<()> {
        check_launch(launch, |id| self.size_of(id))?;
        self.bind("launch")?;
        self.enqueue(&self.stream, launch)
    }

    fn synchronize(&mut self) -> Result<()> {
        self.bind("synchronize")?;
        for (k, stream) in self.streams.iter().enumerate() {
            stream
                .synchronize()
                .map_err(|e| cuda_error(format!("synchronize stream {}", k + 1), e))?;
        }
        self.wait("synchronize")
    }

    fn free_memory(&self) -> Result<u64> {
        let (free, _total) = self
            .ctx
            .mem_get_info()
            .map_err(|e| cuda_error("query free memory", e))?;
        Ok(free as u64)
    }

    fn create_stream(&mut self) -> Result<StreamId> {
        // Further streams carry small work beside the main stream's large
        // kernels (a split's halo exchange, the output ring's copies): at the
        // device's highest priority their blocks are scheduled ahead of the
        // main stream's waiting ones instead of after them.
        self.bind("create a stream")?;
        let (_, greatest) =
            result::stream::get_priority_range().map_err(|e| cuda_error("read stream priorities", e))?;
        let stream = self
            .ctx
            .new_stream_with_priority(greatest)
            .map_err(|e| cuda_error("create a stream", e))?;
        self.streams.push(stream);
        Ok(StreamId(self.streams.len() as u32))
    }

    fn create_event(&mut self) -> Result<EventId> {
        let event = self.ctx.new_event(None).map_err(|e| cuda_error("create an event", e))?;
        self.events.push(event);
        Ok(EventId(self.events.len() as u32 - 1))
    }

    fn record_event(&mut self, event: EventId, stream: StreamId) -> Result<()> {
        let stream = self.stream_of(stream)?;
        self.event(event)?
            .record(stream)
            .map_err(|e| cuda_error("record an event", e))
    }

    fn wait_event(&mut self, stream: StreamId, event: EventId) -> Result<()> {
        let event = self.event(event)?;
        self.stream_of(stream)?
            .wait(event)
            .map_err(|e| cuda_error("wait for an event", e))
    }

    fn synchronize_event(&mut self, event: EventId) -> Result<()> {
        self.event(event)?
            .synchronize()
            .map_err(|e| cuda_error("synchronize an event", e))
    }

    fn share(&mut self, buffer: BufferId) -> Result<Option<PeerBuffer>> {
        let b = self.buffer(buffer)?;
        Ok(Some(PeerBuffer {
            backend: BACKEND,
            device: self.ctx.ordinal(),
            address: b.ptr,
            bytes: b.bytes,
        }))
    }

    fn record_peer_event(&mut self, event: EventId, stream: StreamId) -> Result<PeerEvent> {
        self.bind("record a peer event")?;
        let stream = self.stream_of(stream)?;
        let e = self.event(event)?;
        e.record(stream).map_err(|e| cuda_error("record a peer event", e))?;
        Ok(PeerEvent {
            backend: BACKEND,
            handle: e.cu_event() as u64,
        })
    }

    fn wait_peer_event(&mut self, stream: StreamId, event: PeerEvent) -> Result<()> {
        if event.backend != BACKEND {
            return Err(unavailable(format!(
                "a {} event cannot be waited for on CUDA",
                event.backend
            )));
        }
        self.bind("wait for a peer event")?;
        let stream = self.stream_of(stream)?;
        // SAFETY: the handle is a live event of another CudaDriver of this
        // process (the split keeps its drivers, and so their events, until
        // every stream that waits is done), and waiting on an event of another
        // context or device is what cuStreamWaitEvent allows.
        unsafe {
            result::stream::wait_event(
                stream.cu_stream(),
                event.handle as sys::CUevent,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .map_err(|e| cuda_error("wait for a peer event", e))
    }

    fn share_stream(&mut self, stream: StreamId) -> Result<Option<PeerStream>> {
        let stream = self.stream_of(stream)?;
        Ok(Some(PeerStream {
            backend: BACKEND,
            device: self.ctx.ordinal(),
            handle: stream.cu_stream() as u64,
        }))
    }

    fn copy_from_peer(&mut self, stream: StreamId, src: PeerBuffer, dst: BufferId) -> Result<()> {
        if src.backend != BACKEND {
            return Err(unavailable(format!("a copy from a {} buffer into CUDA", src.backend)));
        }
        let to = self.range("copy from a peer", dst, 0, src.bytes)?;
        let stream = self.stream_of(stream)?;
        if src.bytes == 0 {
            return Ok(());
        }
        // SAFETY: `to` spans `src.bytes` inside a live allocation (checked by
        // `range`); `src` is a live allocation of another CudaDriver of this
        // process that its owner keeps until this copy completes, ordered
        // after its writes by a peer event; with unified addressing the
        // driver finds both devices from the addresses.
        unsafe { result::memcpy_dtod_async(to, src.address, src.bytes, stream.cu_stream()) }
            .map_err(|e| cuda_error("copy from a peer", e))
    }

    fn alloc_staging(&mut self, label: &str, bytes: usize) -> Result<StagingId> {
        // SAFETY: the memory is uninitialised until a download lands in it;
        // `read_staging` reads only bytes the caller has downloaded and waited
        // for (the seam's contract), and u8 has no invalid bit patterns.
        let mut memory = unsafe { self.ctx.alloc_pinned_with_flags::<u8>(bytes.max(1), 0) }
            .map_err(|e| cuda_error(format!("alloc {bytes} bytes of staging for `{label}`"), e))?;
        let ptr = memory.as_mut_ptr().map_err(|e| cuda_error("map staging", e))?;
        self.staging.push(Some(Staging {
            label: label.to_owned(),
            ptr,
            bytes,
            _memory: memory,
        }));
        Ok(StagingId(self.staging.len() as u32 - 1))
    }

    fn free_staging(&mut self, staging: StagingId) -> Result<()> {
        match self.staging.get_mut(staging.0 as usize) {
            Some(slot @ Some(_)) => {
                // Downloads into it may still be in flight.
                self.stream.synchronize().map_err(|e| cuda_error("free staging", e))?;
                *slot = None;
                Ok(())
            }
            _ => Err(unknown("staging", staging.0)),
        }
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
        let src = self.range("download", buffer, byte_offset, bytes)?;
        let s = self
            .staging
            .get(staging.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(unknown("staging", staging.0))?;
        if staging_offset.saturating_add(bytes) > s.bytes {
            return Err(Error::OutOfRange {
                backend: BACKEND,
                operation: "download into staging",
                label: s.label.clone(),
                start: staging_offset as u64,
                end: staging_offset.saturating_add(bytes) as u64,
                size: s.bytes as u64,
            });
        }
        if bytes == 0 {
            return Ok(());
        }
        let stream = self.stream_of(stream)?;
        self.bind("download_async")?;
        // SAFETY: the source range lies inside a live allocation (`range`), the
        // destination inside the page-locked staging area (checked above), which
        // lives as long as this driver and is freed only after the main stream
        // finished; the caller waits for an event after the copy before reading.
        unsafe {
            let out = std::slice::from_raw_parts_mut(s.ptr.add(staging_offset), bytes);
            result::memcpy_dtoh_async(out, src, stream.cu_stream())
        }
        .map_err(|e| cuda_error("download into staging", e))
    }

    fn read_staging(&mut self, staging: StagingId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        let s = self
            .staging
            .get(staging.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(unknown("staging", staging.0))?;
        if byte_offset.saturating_add(out.len()) > s.bytes {
            return Err(Error::OutOfRange {
                backend: BACKEND,
                operation: "read staging",
                label: s.label.clone(),
                start: byte_offset as u64,
                end: byte_offset.saturating_add(out.len()) as u64,
                size: s.bytes as u64,
            });
        }
        // SAFETY: the range lies inside the staging area (checked above), and
        // the caller has waited for the downloads that wrote it.
        let staged = unsafe { std::slice::from_raw_parts(s.ptr.add(byte_offset), out.len()) };
        out.copy_from_slice(staged);
        Ok(())
    }

    fn prepare(&mut self, label: &str, actions: &[Action]) -> Result<PlanId> {
        // The table checks every action first: nothing unchecked is captured.
        let buffers = &self.buffers;
        let id = self.plans.prepare(actions, BACKEND, |id| {
            live_buffer(buffers, id, BACKEND).ok().map(|b| b.bytes)
        })?;
        let prepared = self.bind("prepare").and_then(|()| {
            let tables = self.batch_tables_of(actions)?;
            let graph = match self.plan_mode {
                PlanMode::Graphs => self.capture(label, actions, &tables)?,
                PlanMode::Launches => None,
            };
            Ok((tables, graph))
        });
        let (tables, graph) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => {
                self.plans.release(id, BACKEND)?;
                return Err(e);
            }
        };
        let slot = id.0 as usize + 1;
        self.graphs.resize_with(slot, || None);
        self.graphs[id.0 as usize] = graph;
        self.batch_tables.resize_with(slot, Vec::new);
        self.batch_tables[id.0 as usize] = tables;
        Ok(id)
    }

    fn replay(&mut self, plan: PlanId) -> Result<()> {
        self.replay_on(StreamId::MAIN, plan)
    }

    fn replay_on(&mut self, stream: StreamId, plan: PlanId) -> Result<()> {
        // Refuses an unknown plan and one whose buffers were freed, graph or not.
        let actions = self.plans.replay(plan, BACKEND, |id| self.size_of(id))?;
        self.bind("replay")?;
        let stream = self.stream_of(stream)?.clone();
        match self.graphs.get(plan.0 as usize).and_then(Option::as_ref) {
            // SAFETY: the executable graph lives as long as its plan (this
            // table holds it), and launching it on another stream of the same
            // context is what cuGraphLaunch allows; the caller orders it with
            // events.
            Some(graph) => unsafe { sys::cuGraphLaunch(graph.0.cu_graph_exec(), stream.cu_stream()) }
                .result()
                .map_err(|e| cuda_error("replay a plan's graph", e)),
            None => {
                let mut tables = self.batch_tables[plan.0 as usize].iter();
                actions
                    .iter()
                    .try_for_each(|a| self.enqueue_action(&stream, a, &mut tables))
            }
        }
    }

    fn release_plan(&mut self, plan: PlanId) -> Result<()> {
        self.plans.release(plan, BACKEND)?;
        if let Some(slot) = self.graphs.get_mut(plan.0 as usize) {
            // A graph still running is freed when it completes.
            *slot = None;
        }
        if let Some(tables) = self.batch_tables.get_mut(plan.0 as usize) {
            // Freed in stream order, after the plan's enqueued work.
            tables.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marshal_resolves_buffers_with_their_offsets_and_keeps_scalars() {
        let args = [
            Arg::Buffer {
                id: BufferId(2),
                byte_offset: 16,
            },
            Arg::U32(7),
            Arg::U64(1 << 40),
            Arg::F32(0.5),
            Arg::F64(-2.0),
        ];
        let params = marshal(&args, |id| Ok(0x1000 * (id.0 as u64 + 1))).unwrap();
        assert_eq!(
            params,
            [
                Param::U64(0x3010),
                Param::U32(7),
                Param::U64(1 << 40),
                Param::F32(0.5),
                Param::F64(-2.0)
            ]
        );
        let missing = marshal(&args, |id| {
            Err(Error::UnknownBuffer {
                backend: BACKEND,
                buffer: id,
            })
        });
        assert!(missing.unwrap_err().to_string().contains("unknown buffer buf#2"));
    }
}
