//! The device seam: the [`Driver`] trait every backend implements, the [`Kernel`]
//! manifest of all device code, and the serialisable [`Launch`] description.
//!
//! Everything above this seam (plan, stepper, ledgers) is backend-agnostic; nothing
//! here knows about CUDA, threads or host memory layout of a particular backend.

use serde::Serialize;

use crate::error::{Error, Result};

/// Opaque handle of a device buffer, unique within one driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct BufferId(pub u32);

/// Buffer `id` of a backend's table indexed by id, where a freed or never
/// allocated buffer is `None`; the error names the backend.
pub fn live_buffer<'a, T>(table: &'a [Option<T>], id: BufferId, backend: &str) -> Result<&'a T> {
    table
        .get(id.0 as usize)
        .and_then(Option::as_ref)
        .ok_or_else(|| Error::unknown_buffer(backend, id))
}

/// [`live_buffer`] for writing.
pub fn live_buffer_mut<'a, T>(table: &'a mut [Option<T>], id: BufferId, backend: &str) -> Result<&'a mut T> {
    table
        .get_mut(id.0 as usize)
        .and_then(Option::as_mut)
        .ok_or_else(|| Error::unknown_buffer(backend, id))
}

impl std::fmt::Display for BufferId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "buf#{}", self.0)
    }
}

/// One variant per `__global__` function in `kernels/`. Adding a kernel means the
/// `.cu` function, the variant here, its CPU reference in [`crate::cpu`] and its
/// arguments in [`crate::launch`]; the tidy test checks the first two agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kernel {
    /// Pull streaming, boundaries and collision of one patch: `current -> spare`.
    StreamCollide,
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
}

impl Kernel {
    pub const ALL: [Kernel; 7] = [
        Kernel::StreamCollide,
        Kernel::FillGhost,
        Kernel::RestrictToParent,
        Kernel::AccumulateFineFlux,
        Kernel::CorrectInterfaceMass,
        Kernel::AccumulateExchange,
        Kernel::UpdateBoundaryState,
    ];

    /// The name of the `__global__` function in `kernels/`.
    pub fn cuda_name(self) -> &'static str {
        match self {
            Kernel::StreamCollide => "stream_collide",
            Kernel::FillGhost => "fill_ghost",
            Kernel::RestrictToParent => "restrict_to_parent",
            Kernel::AccumulateFineFlux => "accumulate_fine_flux",
            Kernel::CorrectInterfaceMass => "correct_interface_mass",
            Kernel::AccumulateExchange => "accumulate_exchange",
            Kernel::UpdateBoundaryState => "update_boundary_state",
        }
    }
}

/// One kernel argument, in the order of the `__global__` signature.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Arg {
    Buffer { id: BufferId, byte_offset: u64 },
    U32(u32),
    U64(u64),
    F32(f32),
    F64(f64),
}

impl Arg {
    pub fn buffer(id: BufferId) -> Arg {
        Arg::Buffer { id, byte_offset: 0 }
    }
}

/// Threads per block of every launch.
pub const BLOCK_THREADS: u32 = 256;

/// A complete kernel launch: built only by the typed constructors in
/// [`crate::launch`], replayed by every driver, logged by the mock.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Launch {
    pub kernel: Kernel,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub args: Vec<Arg>,
}

impl Launch {
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
}

/// A backend that owns device memory and one ordered stream.
///
/// Every `*_async` call and every launch is enqueued on that stream;
/// [`Driver::synchronize`] is the only host wait, and errors of enqueued work may
/// surface there rather than at the call that caused them. `upload` and
/// `download` are ordered with the stream and complete before they return.
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
    fn launch(&mut self, launch: &Launch) -> Result<()>;
    fn synchronize(&mut self) -> Result<()>;
    /// Free device memory in bytes, for the memory ledger and admission checks.
    fn free_memory(&self) -> Result<u64>;
}
