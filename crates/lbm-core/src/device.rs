//! The device seam: the [`Driver`] trait every backend implements, the [`Kernel`]
//! manifest of all device code, the serialisable [`Launch`] description and the
//! [`Action`]s a prepared plan replays.
//!
//! Everything above this seam (schedule, stepper, ledgers) is backend-agnostic;
//! nothing here knows about CUDA, threads or the host memory layout of a
//! particular backend. What a launch may touch is not decided here either: each
//! kernel family in [`crate::kernels`] declares it, and
//! [`crate::kernels::check_launch`] is the one check every driver applies.

use serde::Serialize;

use crate::error::{Error, Result};

/// Opaque handle of a device buffer, unique within one driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct BufferId(pub u32);

impl std::fmt::Display for BufferId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "buf#{}", self.0)
    }
}

/// A buffer and a byte offset into it, as a kernel parameter sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct BufferRef {
    pub id: BufferId,
    pub byte_offset: u64,
}

impl From<BufferId> for BufferRef {
    fn from(id: BufferId) -> Self {
        BufferRef { id, byte_offset: 0 }
    }
}

/// Buffer `id` of a backend's table indexed by id, where a freed or never
/// allocated buffer is `None`; the error names the backend.
pub fn live_buffer<'a, T>(table: &'a [Option<T>], id: BufferId, backend: &'static str) -> Result<&'a T> {
    table
        .get(id.0 as usize)
        .and_then(Option::as_ref)
        .ok_or(Error::UnknownBuffer { backend, buffer: id })
}

/// [`live_buffer`] for writing.
pub fn live_buffer_mut<'a, T>(table: &'a mut [Option<T>], id: BufferId, backend: &'static str) -> Result<&'a mut T> {
    table
        .get_mut(id.0 as usize)
        .and_then(Option::as_mut)
        .ok_or(Error::UnknownBuffer { backend, buffer: id })
}

/// An ordered queue of device work. [`StreamId::MAIN`] is where every launch,
/// memset and copy goes; further streams (from [`Driver::create_stream`]) carry
/// downloads into staging memory alongside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct StreamId(pub u32);

impl StreamId {
    pub const MAIN: StreamId = StreamId(0);
}

/// A marker recorded on one stream that another stream (or the host) can wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct EventId(pub u32);

/// Host memory a download can land in asynchronously (page-locked on CUDA).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct StagingId(pub u32);

/// A plan prepared by [`Driver::prepare`], replayed by [`Driver::replay`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct PlanId(pub u32);

/// One variant per `__global__` function in `kernels/`. Adding a kernel means the
/// `.cu` function, the variant here and its family module in [`crate::kernels`]
/// (launch struct, buffer needs, CPU reference); the tidy test checks that the
/// `.cu` signatures and [`Kernel::params`] agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kernel {
    /// Pull streaming, boundaries and collision of one patch: `current -> spare`.
    StreamCollide,
    /// The same update on a row-major patch's interior, as if every cell
    /// there and its neighbours were fluid; `stream_collide` over the
    /// patch's boundary cells follows it.
    StreamCollideBulk,
    /// The bulk update where a side of its region is a wall: its own entry,
    /// so that the others do not pay for the walls' path.
    StreamCollideBulkWalled,
    /// Coarse-to-fine: fill a patch's ghost band from its parent in space and time.
    FillGhost,
    /// Fine-to-coarse: overwrite the parent cells a patch covers.
    RestrictToParent,
    /// Mass a patch exchanges with its ghost band in one fine hop, per ring cell.
    AccumulateFineFlux,
    /// Reflux: give the parent ring cells the mass the two levels disagree on.
    CorrectInterfaceMass,
    /// Momentum exchange on body links, added to the interval and window integrals.
    AccumulateExchange,
    /// Advance the interval counter and the inlet amplitude factor.
    UpdateBoundaryState,
    /// A split run's halo exchange: the populations of a column that cross
    /// a cut, into a contiguous buffer ...
    PackHalo,
    /// ... and such a buffer into the neighbour's halo column.
    UnpackHalo,
    /// The first non-finite and the first too-fast fluid cell of a patch.
    CheckHealth,
    /// A patch's density and velocity into staging, for the outputs.
    SaveMoments,
    /// Ring producer: a fixed byte count from one source.
    ProduceStatic,
    /// Ring producer: a row count read on the device, up to an upper bound.
    ProducePrefix,
    /// Ring producer: several byte ranges of one source, back to back.
    ProduceChunked,
    /// Ring producer: a record header written on the device, then a payload.
    ProduceRecord,
}

impl Kernel {
    pub const ALL: [Kernel; 17] = [
        Kernel::StreamCollide,
        Kernel::StreamCollideBulk,
        Kernel::StreamCollideBulkWalled,
        Kernel::FillGhost,
        Kernel::RestrictToParent,
        Kernel::AccumulateFineFlux,
        Kernel::CorrectInterfaceMass,
        Kernel::AccumulateExchange,
        Kernel::UpdateBoundaryState,
        Kernel::PackHalo,
        Kernel::UnpackHalo,
        Kernel::CheckHealth,
        Kernel::SaveMoments,
        Kernel::ProduceStatic,
        Kernel::ProducePrefix,
        Kernel::ProduceChunked,
        Kernel::ProduceRecord,
    ];

    /// Whether this is one of the bulk kernel's entries.
    pub fn is_bulk(self) -> bool {
        matches!(self, Kernel::StreamCollideBulk | Kernel::StreamCollideBulkWalled)
    }

    /// The name of the `__global__` function in `kernels/`.
    pub fn cuda_name(self) -> &'static str {
        match self {
            Kernel::StreamCollide => "stream_collide",
            Kernel::StreamCollideBulk => "stream_collide_bulk",
            Kernel::StreamCollideBulkWalled => "stream_collide_bulk_walled",
            Kernel::FillGhost => "fill_ghost",
            Kernel::RestrictToParent => "restrict_to_parent",
            Kernel::AccumulateFineFlux => "accumulate_fine_flux",
            Kernel::CorrectInterfaceMass => "correct_interface_mass",
            Kernel::AccumulateExchange => "accumulate_exchange",
            Kernel::UpdateBoundaryState => "update_boundary_state",
            Kernel::PackHalo => "pack_halo",
            Kernel::UnpackHalo => "unpack_halo",
            Kernel::CheckHealth => "check_health",
            Kernel::SaveMoments => "save_moments",
            Kernel::ProduceStatic => "produce_static",
            Kernel::ProducePrefix => "produce_prefix",
            Kernel::ProduceChunked => "produce_chunked",
            Kernel::ProduceRecord => "produce_record",
        }
    }

    /// Whether the kernel's blocks beyond its launch's own grid do nothing,
    /// so that a fused batch may launch members whose grids differ with the
    /// largest: the general update over a list (a thread past the list's
    /// count leaves) and the momentum exchange (a block past its slots'
    /// leaves). Members whose bodies lie otherwise (another angle, position
    /// or size) differ in exactly these two grids.
    pub fn idles_beyond_its_grid(self) -> bool {
        matches!(self, Kernel::StreamCollide | Kernel::AccumulateExchange)
    }

    /// Whether the kernel has a `{name}_batch` entry that runs a
    /// [`BatchLaunch`]: the kernels of the hop plan.
    pub fn batches(self) -> bool {
        !matches!(
            self,
            Kernel::PackHalo
                | Kernel::UnpackHalo
                | Kernel::CheckHealth
                | Kernel::SaveMoments
                | Kernel::ProduceStatic
                | Kernel::ProducePrefix
                | Kernel::ProduceChunked
                | Kernel::ProduceRecord
        )
    }

    /// The parameter names of the `__global__` function, in order: what a
    /// launch log prints beside each argument.
    pub fn params(self) -> &'static [&'static str] {
        use crate::kernels::{KernelArgs, boundary, exchange, halo, health, lbm, moments, producer, refine, reflux};
        match self {
            Kernel::StreamCollide => lbm::StreamCollide::PARAMS,
            Kernel::StreamCollideBulk | Kernel::StreamCollideBulkWalled => lbm::StreamCollideBulk::PARAMS,
            Kernel::FillGhost => refine::FillGhost::PARAMS,
            Kernel::RestrictToParent => refine::RestrictToParent::PARAMS,
            Kernel::AccumulateFineFlux => reflux::AccumulateFineFlux::PARAMS,
            Kernel::CorrectInterfaceMass => reflux::CorrectInterfaceMass::PARAMS,
            Kernel::AccumulateExchange => exchange::AccumulateExchange::PARAMS,
            Kernel::UpdateBoundaryState => boundary::UpdateBoundaryState::PARAMS,
            Kernel::PackHalo => halo::PackHalo::PARAMS,
            Kernel::UnpackHalo => halo::UnpackHalo::PARAMS,
            Kernel::CheckHealth => health::CheckHealth::PARAMS,
            Kernel::SaveMoments => moments::SaveMoments::PARAMS,
            Kernel::ProduceStatic => producer::ProduceStatic::PARAMS,
            Kernel::ProducePrefix => producer::ProducePrefix::PARAMS,
            Kernel::ProduceChunked => producer::ProduceChunked::PARAMS,
            Kernel::ProduceRecord => producer::ProduceRecord::PARAMS,
        }
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.cuda_name())
    }
}

/// One kernel argument, in the order of the `__global__` signature.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Arg {
    Buffer {
        id: BufferId,
        byte_offset: u64,
    },
    /// An optional buffer that is absent: a null pointer the kernel never reads.
    NoBuffer,
    U32(u32),
    U64(u64),
    F32(f32),
    F64(f64),
}

impl From<BufferRef> for Arg {
    fn from(r: BufferRef) -> Arg {
        Arg::Buffer {
            id: r.id,
            byte_offset: r.byte_offset,
        }
    }
}

impl From<Option<BufferRef>> for Arg {
    fn from(r: Option<BufferRef>) -> Arg {
        r.map_or(Arg::NoBuffer, Arg::from)
    }
}

/// Threads per block of every launch.
pub const BLOCK_THREADS: u32 = 256;
/// Threads per block a CUDA device accepts at most.
pub const MAX_BLOCK_THREADS: u32 = 1024;

/// The entry of `stream_collide` with one thread per population
/// ([`Launch::cuda_entry`]).
pub const SPREAD_ENTRY: &str = "stream_collide_spread";

/// A complete kernel launch: built only by the launch structs of
/// [`crate::kernels`], replayed by every driver, logged by the mock.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Launch {
    pub kernel: Kernel,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub args: Vec<Arg>,
}

impl Launch {
    /// The `__global__` entry that runs the launch: its kernel's, but
    /// `stream_collide` in blocks a column of [`crate::lattice::Q`] threads
    /// high (one thread per population, `StreamCollide`'s own shape) runs
    /// `stream_collide_spread`; one thread per cell (a fused batch's) runs
    /// `stream_collide`.
    pub fn cuda_entry(&self) -> &'static str {
        match self.kernel {
            Kernel::StreamCollide if self.block[1] == crate::lattice::Q as u32 => SPREAD_ENTRY,
            kernel => kernel.cuda_name(),
        }
    }

    /// A one-dimensional launch of at least `threads` threads in blocks of 256.
    pub fn linear(kernel: Kernel, threads: usize, args: Vec<Arg>) -> Launch {
        let blocks = threads.div_ceil(BLOCK_THREADS as usize).max(1);
        Launch {
            kernel,
            grid: [blocks as u32, 1, 1],
            block: [BLOCK_THREADS, 1, 1],
            args,
        }
    }

    /// Threads the launch starts.
    pub fn threads(&self) -> u64 {
        self.grid.iter().chain(&self.block).map(|&d| u64::from(d)).product()
    }

    /// Every buffer argument, in order.
    pub fn buffers(&self) -> impl Iterator<Item = BufferId> + '_ {
        self.args.iter().filter_map(|a| match a {
            Arg::Buffer { id, .. } => Some(*id),
            _ => None,
        })
    }
}

/// Members a [`BatchLaunch`] may hold: the largest grid z dimension.
pub const MAX_BATCH_MEMBERS: usize = 65535;

/// One kernel run for every member of a fused batch as one launch: each
/// member's own [`Launch`] (its buffers, usually its slice of one allocation
/// per buffer, and its scalars), all of one kernel, grid and block. A device
/// runs it as the kernel's `_batch` entry over a grid whose z index is the
/// member, reading each member's arguments from a table in device memory, so
/// every member computes exactly what its own launch computes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BatchLaunch {
    pub launches: Vec<Launch>,
}

impl BatchLaunch {
    /// The kernel and block every member's launch shares (member 0's).
    pub fn first(&self) -> &Launch {
        &self.launches[0]
    }

    /// The grid the device launches for every member: the largest of the
    /// members' own in each dimension. They differ only for a kernel that
    /// [idles beyond its grid](Kernel::idles_beyond_its_grid) (the launch
    /// check holds the others to one grid), so each member does its own
    /// launch's work.
    pub fn grid(&self) -> [u32; 3] {
        self.launches
            .iter()
            .fold([0; 3], |g, l| std::array::from_fn(|d| g[d].max(l.grid[d])))
    }

    pub fn members(&self) -> usize {
        self.launches.len()
    }
}

/// One piece of work a prepared plan enqueues on [`StreamId::MAIN`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Action {
    Launch(Launch),
    /// One launch for every member of a fused batch.
    Batch(BatchLaunch),
    /// Set `bytes` bytes of `buffer` from `byte_offset` on to `value` (0 for
    /// accumulators, 0xFF for the "no cell" results of `check_health`).
    Memset {
        buffer: BufferId,
        byte_offset: usize,
        bytes: usize,
        value: u8,
    },
    /// Launches, or batches of a fused batch, in no order among themselves
    /// (never a memset or another group): each starts after every action
    /// before the group and every action after it waits for all of them, so
    /// a device may run them side by side (CUDA: the first on the plan's
    /// stream, each other on a side stream of the highest priority, forked
    /// and joined by events, inside the plan's graph). The plan that groups
    /// them guarantees that none writes what another reads or writes (a
    /// split update's bulk region and a list of cells outside it: the launch
    /// check sees whole buffers and cannot tell); the CPU and the mock run
    /// them in order, which is one of the orders a device may take.
    Together(Vec<Action>),
}

impl Action {
    /// The launches the action holds: its own, each of a group's, or each
    /// member's of a batch.
    pub fn launches(&self) -> Vec<&Launch> {
        match self {
            Action::Launch(launch) => vec![launch],
            Action::Together(members) => members.iter().flat_map(Action::launches).collect(),
            Action::Batch(batch) => batch.launches.iter().collect(),
            Action::Memset { .. } => Vec::new(),
        }
    }

    /// Every buffer the action names.
    pub fn buffers(&self) -> Vec<BufferId> {
        match self {
            Action::Launch(launch) => launch.buffers().collect(),
            Action::Batch(batch) => batch.launches.iter().flat_map(Launch::buffers).collect(),
            Action::Memset { buffer, .. } => vec![*buffer],
            Action::Together(members) => members.iter().flat_map(Action::buffers).collect(),
        }
    }
}

/// A backend that owns device memory and ordered streams.
///
/// Every `*_async` call and every launch is enqueued on [`StreamId::MAIN`]
/// unless a stream is named; [`Driver::synchronize`] waits for every stream and
/// is where errors of enqueued work may surface rather than at the call that
/// caused them. `upload` and `download` are ordered with the main stream and
/// complete before they return.
///
/// Launches are checked against [`crate::kernels::check_launch`] before they
/// run: by [`Driver::launch`] each time, and by [`Driver::prepare`] once for a
/// plan that [`Driver::replay`] then enqueues without checking again.
pub trait Driver: Send {
    /// A short name for messages and manifests: "cpu", "cuda", "mock".
    fn backend(&self) -> &'static str;
    /// A zero-initialised buffer of `bytes` bytes; `label` names it in logs.
    fn alloc(&mut self, label: &str, bytes: usize) -> Result<BufferId>;
    fn free(&mut self, buffer: BufferId) -> Result<()>;
    fn upload(&mut self, buffer: BufferId, byte_offset: usize, data: &[u8]) -> Result<()>;
    fn download(&mut self, buffer: BufferId, byte_offset: usize, out: &mut [u8]) -> Result<()>;
    fn memset_async(&mut self, buffer: BufferId, byte_offset: usize, bytes: usize, value: u8) -> Result<()>;
    fn copy_async(
        &mut self,
        src: BufferId,
        src_offset: usize,
        dst: BufferId,
        dst_offset: usize,
        bytes: usize,
    ) -> Result<()>;
    /// Checks `launch` and enqueues it on the main stream.
    fn launch(&mut self, launch: &Launch) -> Result<()>;
    /// Waits for every stream.
    fn synchronize(&mut self) -> Result<()>;
    /// Free device memory in bytes, for the memory ledger and admission checks.
    fn free_memory(&self) -> Result<u64>;

    /// A further stream, ordered only with itself and the events it waits for.
    fn create_stream(&mut self) -> Result<StreamId>;
    fn create_event(&mut self) -> Result<EventId>;
    /// Marks the point `stream` has reached; work enqueued later is not covered.
    fn record_event(&mut self, event: EventId, stream: StreamId) -> Result<()>;
    /// Makes `stream` wait, without blocking the host, until `event` is reached.
    fn wait_event(&mut self, stream: StreamId, event: EventId) -> Result<()>;
    /// Blocks the host until `event` is reached.
    fn synchronize_event(&mut self, event: EventId) -> Result<()>;

    /// Host staging memory of `bytes` bytes for asynchronous downloads.
    fn alloc_staging(&mut self, label: &str, bytes: usize) -> Result<StagingId>;
    fn free_staging(&mut self, staging: StagingId) -> Result<()>;
    /// Enqueues a copy of `bytes` bytes from `buffer` at `byte_offset` into
    /// `staging` at `staging_offset` on `stream`; the bytes are there once an
    /// event recorded after it is reached.
    fn download_async(
        &mut self,
        stream: StreamId,
        buffer: BufferId,
        byte_offset: usize,
        staging: StagingId,
        staging_offset: usize,
        bytes: usize,
    ) -> Result<()>;
    /// Copies staged bytes out; the caller has waited for the downloads.
    fn read_staging(&mut self, staging: StagingId, byte_offset: usize, out: &mut [u8]) -> Result<()>;

    /// Checks every action of a plan once and keeps it for [`Driver::replay`]
    /// (a CUDA graph may stand behind it; the CPU and the mock loop over it).
    fn prepare(&mut self, label: &str, actions: &[Action]) -> Result<PlanId>;
    /// Enqueues every action of a prepared plan on the main stream, in order.
    fn replay(&mut self, plan: PlanId) -> Result<()>;
    fn release_plan(&mut self, plan: PlanId) -> Result<()>;

    /// Members of the fused batch whose launches this driver runs together
    /// (`crate::fused`): 1 for a driver of its own. A stepper splits a
    /// patch's update when the batch's interior cells make it pay.
    fn batch_members(&self) -> usize {
        1
    }

    /// Interior cells (over the batch's members) from which splitting a
    /// patch's update into the bulk kernel and the general kernel over its
    /// boundary cells pays on this backend: where a second launch costs
    /// more than the general kernel loses on the interior below it.
    fn split_min_cells(&self) -> usize {
        crate::schedule::BULK_MIN_CELLS
    }

    /// `buffer` as another driver of this process may copy from it on its
    /// own stream ([`Driver::copy_from_peer`]), or `None` for a backend that
    /// moves bytes between drivers only through the host (the default). A
    /// split run's halos go device to device when every slab's driver
    /// shares its buffers.
    fn share(&mut self, buffer: BufferId) -> Result<Option<PeerBuffer>> {
        let _ = buffer;
        Ok(None)
    }
    /// Records `event` on `stream`, as a point another driver's streams may
    /// wait for ([`Driver::wait_peer_event`]).
    fn record_peer_event(&mut self, event: EventId, stream: StreamId) -> Result<PeerEvent> {
        let _ = (event, stream);
        Err(no_peers(self.backend()))
    }
    /// Makes `stream` wait for another driver's recorded event.
    fn wait_peer_event(&mut self, stream: StreamId, event: PeerEvent) -> Result<()> {
        let _ = (stream, event);
        Err(no_peers(self.backend()))
    }
    /// Enqueues on `stream` a copy of `src`'s bytes (another driver's shared
    /// buffer) into `dst` from its start; the caller orders it after the
    /// writes of `src` with a peer event, and `src` stays allocated until
    /// the copy completes.
    fn copy_from_peer(&mut self, stream: StreamId, src: PeerBuffer, dst: BufferId) -> Result<()> {
        let _ = (stream, src, dst);
        Err(no_peers(self.backend()))
    }
    /// `stream` as a collective library ([`Collective`]) may enqueue its
    /// sends and receives on it, or `None` for a backend without one (the
    /// default).
    fn share_stream(&mut self, stream: StreamId) -> Result<Option<PeerStream>> {
        let _ = stream;
        Ok(None)
    }
    /// [`Driver::replay`] on `stream`, for work that runs beside the main
    /// stream (a split's halo exchange while the interior updates); the
    /// caller orders it with events. By default only the main stream.
    fn replay_on(&mut self, stream: StreamId, plan: PlanId) -> Result<()> {
        match stream == StreamId::MAIN {
            true => self.replay(plan),
            false => Err(no_peers(self.backend())),
        }
    }
}

/// A buffer of one driver that another driver of the same process may copy
/// from: its backend, device and address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerBuffer {
    pub backend: &'static str,
    pub device: usize,
    pub address: u64,
    pub bytes: usize,
}

/// A stream of one driver, as a collective library enqueues on it: its
/// backend, device and handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerStream {
    pub backend: &'static str,
    pub device: usize,
    pub handle: u64,
}

/// One point-to-point move of a collective group: every byte of `src` (a
/// buffer the sending driver shares) into `dst` (one the receiving driver
/// shares, at least as large), the send enqueued on `send_on` and the
/// receive on `recv_on`, each after what its stream already holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub src: PeerBuffer,
    pub dst: PeerBuffer,
    pub send_on: PeerStream,
    pub recv_on: PeerStream,
}

/// A library that moves bytes between the devices of one process as groups
/// of sends and receives (NCCL on CUDA: one communicator for the run, one
/// rank per device, a device's own rank for two drivers of one device).
/// A split's halo exchange goes through it when one is given
/// (`crate::split::Split::use_collective`).
pub trait Collective: Send {
    /// A short name for messages and summaries: "nccl".
    fn name(&self) -> &'static str;
    /// Enqueues every transfer as one group, without blocking the host: a
    /// stream's later work waits for its sends and receives, and the
    /// buffers stay allocated until they complete.
    fn transfer(&mut self, transfers: &[Transfer]) -> Result<()>;
}

/// A recorded event of one driver that another driver may wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerEvent {
    pub backend: &'static str,
    pub handle: u64,
}

fn no_peers(backend: &'static str) -> Error {
    Error::NotAvailable {
        what: format!("peer copies on the {backend} backend"),
        reason: "it moves bytes between drivers only through the host (Driver::share is None)",
    }
}

/// A boxed driver is a driver, so a backend chosen at run time
/// (`Box<dyn Driver>`) runs the same generic code as a concrete one.
impl<D: Driver + ?Sized> Driver for Box<D> {
    fn backend(&self) -> &'static str {
        (**self).backend()
    }
    fn alloc(&mut self, label: &str, bytes: usize) -> Result<BufferId> {
        (**self).alloc(label, bytes)
    }
    fn free(&mut self, buffer: BufferId) -> Result<()> {
        (**self).free(buffer)
    }
    fn upload(&mut self, buffer: BufferId, byte_offset: usize, data: &[u8]) -> Result<()> {
        (**self).upload(buffer, byte_offset, data)
    }
    fn download(&mut self, buffer: BufferId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        (**self).download(buffer, byte_offset, out)
    }
    fn memset_async(&mut self, buffer: BufferId, byte_offset: usize, bytes: usize, value: u8) -> Result<()> {
        (**self).memset_async(buffer, byte_offset, bytes, value)
    }
    fn copy_async(
        &mut self,
        src: BufferId,
        src_offset: usize,
        dst: BufferId,
        dst_offset: usize,
        bytes: usize,
    ) -> Result<()> {
        (**self).copy_async(src, src_offset, dst, dst_offset, bytes)
    }
    fn launch(&mut self, launch: &Launch) -> Result<()> {
        (**self).launch(launch)
    }
    fn synchronize(&mut self) -> Result<()> {
        (**self).synchronize()
    }
    fn free_memory(&self) -> Result<u64> {
        (**self).free_memory()
    }
    fn create_stream(&mut self) -> Result<StreamId> {
        (**self).create_stream()
    }
    fn create_event(&mut self) -> Result<EventId> {
        (**self).create_event()
    }
    fn record_event(&mut self, event: EventId, stream: StreamId) -> Result<()> {
        (**self).record_event(event, stream)
    }
    fn wait_event(&mut self, stream: StreamId, event: EventId) -> Result<()> {
        (**self).wait_event(stream, event)
    }
    fn synchronize_event(&mut self, event: EventId) -> Result<()> {
        (**self).synchronize_event(event)
    }
    fn share(&mut self, buffer: BufferId) -> Result<Option<PeerBuffer>> {
        (**self).share(buffer)
    }
    fn record_peer_event(&mut self, event: EventId, stream: StreamId) -> Result<PeerEvent> {
        (**self).record_peer_event(event, stream)
    }
    fn wait_peer_event(&mut self, stream: StreamId, event: PeerEvent) -> Result<()> {
        (**self).wait_peer_event(stream, event)
    }
    fn copy_from_peer(&mut self, stream: StreamId, src: PeerBuffer, dst: BufferId) -> Result<()> {
        (**self).copy_from_peer(stream, src, dst)
    }
    fn share_stream(&mut self, stream: StreamId) -> Result<Option<PeerStream>> {
        (**self).share_stream(stream)
    }
    fn replay_on(&mut self, stream: StreamId, plan: PlanId) -> Result<()> {
        (**self).replay_on(stream, plan)
    }
    fn alloc_staging(&mut self, label: &str, bytes: usize) -> Result<StagingId> {
        (**self).alloc_staging(label, bytes)
    }
    fn free_staging(&mut self, staging: StagingId) -> Result<()> {
        (**self).free_staging(staging)
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
        (**self).download_async(stream, buffer, byte_offset, staging, staging_offset, bytes)
    }
    fn read_staging(&mut self, staging: StagingId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        (**self).read_staging(staging, byte_offset, out)
    }
    fn prepare(&mut self, label: &str, actions: &[Action]) -> Result<PlanId> {
        (**self).prepare(label, actions)
    }
    fn replay(&mut self, plan: PlanId) -> Result<()> {
        (**self).replay(plan)
    }
    fn release_plan(&mut self, plan: PlanId) -> Result<()> {
        (**self).release_plan(plan)
    }
    fn batch_members(&self) -> usize {
        (**self).batch_members()
    }
    fn split_min_cells(&self) -> usize {
        (**self).split_min_cells()
    }
}
