//! Kernel families: each `kernels/X.cu` has one module here holding its launch
//! structs (encode and decode side by side), what each kernel reads and writes
//! with sizes ([`KernelArgs::buffer_uses`]), the geometric preconditions of its
//! arguments, and its CPU reference.
//!
//! [`check_launch`] derives the launch check from those declarations once, for
//! every driver: argument kinds and count, grid coverage, required and absent
//! optional buffers, sizes after each byte offset, alignment and aliasing. The
//! CPU, mock and CUDA backends run it, so the mock refuses exactly what CUDA
//! would. What it cannot check is the contents of a buffer (a link table's body
//! slots are trusted to come from [`crate::domain::geometry::wall_tables`]).
//!
//! Nothing here allocates or enqueues; the drivers do.

pub mod boundary;
pub mod exchange;
pub mod halo;
pub mod health;
pub mod lbm;
pub mod moments;
pub mod producer;
pub mod refine;
pub mod reflux;

mod args;
mod check;
mod constants;
mod host;
mod reduce;

use crate::device::{Arg, BLOCK_THREADS, BufferRef, Kernel, Launch};
use crate::domain::hierarchy::Layout;
use crate::error::{LaunchProblem, Result};
use crate::lattice::Q;

pub use check::{PlanTable, check_actions, check_batch, check_launch};
pub use constants::{cuda_constants, ptx_sources_line};
pub use host::{HostViews, ReadViews, WriteViews};

use args::{ArgReader, push_layout, push_rect, push_sides};
use check::{check_layout, check_patch};
use host::{par_row_bands, read_cell};

/// How a kernel touches one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    /// Read and written in place (accumulators, counters).
    ReadWrite,
}

/// One buffer a launch touches: the parameter, the buffer, the bytes the
/// kernel reaches from the byte offset, the element alignment and the access.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BufferUse {
    pub param: &'static str,
    pub buffer: BufferRef,
    pub bytes: usize,
    pub align: u64,
    pub access: Access,
}

impl BufferUse {
    pub fn read(param: &'static str, buffer: BufferRef, bytes: usize, align: u64) -> Self {
        BufferUse {
            param,
            buffer,
            bytes,
            align,
            access: Access::Read,
        }
    }
    pub fn write(param: &'static str, buffer: BufferRef, bytes: usize, align: u64) -> Self {
        BufferUse {
            access: Access::Write,
            ..BufferUse::read(param, buffer, bytes, align)
        }
    }
    pub fn read_write(param: &'static str, buffer: BufferRef, bytes: usize, align: u64) -> Self {
        BufferUse {
            access: Access::ReadWrite,
            ..BufferUse::read(param, buffer, bytes, align)
        }
    }
}

/// The one launch shape a kernel accepts: a kernel that reduces inside its
/// blocks (its shared memory and summation tree are written for
/// [`BLOCK_THREADS`] threads and a fixed block count), or one whose threads
/// find their cell from the grid's own dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExactShape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
}

impl ExactShape {
    /// `blocks` one-dimensional blocks of [`BLOCK_THREADS`] threads.
    pub const fn blocks(blocks: u32) -> Self {
        ExactShape {
            grid: [blocks, 1, 1],
            block: [BLOCK_THREADS, 1, 1],
        }
    }
    /// A launch of `kernel` in this shape.
    pub fn launch(self, kernel: Kernel, args: Vec<Arg>) -> Launch {
        Launch {
            kernel,
            grid: self.grid,
            block: self.block,
            args,
        }
    }
}

/// Bytes of the nine f32 population planes of `layout`.
pub fn population_bytes(layout: &Layout) -> usize {
    Q * layout.plane_cells() * 4
}

/// The launch struct of one kernel: its arguments in the order of the
/// `__global__` signature, and what the launch may touch.
pub trait KernelArgs: Sized + Sync {
    const KERNEL: Kernel;
    /// The `__global__` parameter names, in order (checked by the tidy test).
    const PARAMS: &'static [&'static str];
    /// The launch, argument list and grid.
    fn launch(&self) -> Launch;
    /// The struct back from a launch of this kernel; offsets are kept.
    fn decode(launch: &Launch) -> Result<Self>;
    /// Work items the grid must cover.
    fn work_items(&self) -> usize;
    /// The arguments' geometric preconditions and which optional buffers must
    /// be present (everything [`Self::buffer_uses`] relies on: it may assume
    /// this passed).
    fn check_shape(&self) -> std::result::Result<(), LaunchProblem>;
    /// Every buffer the kernel reads or writes, with the bytes it reaches.
    fn buffer_uses(&self) -> Vec<BufferUse>;
    /// The one grid and block the kernel accepts, for a kernel that reduces
    /// inside its blocks: its shared memory and summation order are fixed for
    /// exactly that shape.
    fn required_shape(&self) -> Option<ExactShape> {
        None
    }
    /// A second grid and block the kernel also accepts beside
    /// [`Self::required_shape`]: `stream_collide` one thread per cell, the
    /// shape a fused batch launches it in.
    fn alternative_shape(&self) -> Option<ExactShape> {
        None
    }
    /// Runs the CPU reference over `views`, which hold every buffer of
    /// [`Self::buffer_uses`] by parameter name (the launch check passed).
    fn run_on_host(&self, views: &mut HostViews);
}

/// Something done with a launch's decoded struct, whatever its kernel: see
/// [`dispatch`].
pub trait FamilyVisitor {
    type Output;
    fn visit<K: KernelArgs>(self, launch: &Launch) -> Self::Output;
}

/// Calls `visitor` with the launch struct type of `launch.kernel`; the one
/// place a kernel is mapped to its family.
pub fn dispatch<V: FamilyVisitor>(launch: &Launch, visitor: V) -> V::Output {
    match launch.kernel {
        Kernel::StreamCollide => visitor.visit::<lbm::StreamCollide>(launch),
        Kernel::StreamCollideBulk | Kernel::StreamCollideBulkWalled => visitor.visit::<lbm::StreamCollideBulk>(launch),
        Kernel::FillGhost => visitor.visit::<refine::FillGhost>(launch),
        Kernel::RestrictToParent => visitor.visit::<refine::RestrictToParent>(launch),
        Kernel::AccumulateFineFlux => visitor.visit::<reflux::AccumulateFineFlux>(launch),
        Kernel::CorrectInterfaceMass => visitor.visit::<reflux::CorrectInterfaceMass>(launch),
        Kernel::AccumulateExchange => visitor.visit::<exchange::AccumulateExchange>(launch),
        Kernel::UpdateBoundaryState => visitor.visit::<boundary::UpdateBoundaryState>(launch),
        Kernel::PackHalo => visitor.visit::<halo::PackHalo>(launch),
        Kernel::UnpackHalo => visitor.visit::<halo::UnpackHalo>(launch),
        Kernel::CheckHealth => visitor.visit::<health::CheckHealth>(launch),
        Kernel::SaveMoments => visitor.visit::<moments::SaveMoments>(launch),
        Kernel::ProduceStatic => visitor.visit::<producer::ProduceStatic>(launch),
        Kernel::ProducePrefix => visitor.visit::<producer::ProducePrefix>(launch),
        Kernel::ProduceChunked => visitor.visit::<producer::ProduceChunked>(launch),
        Kernel::ProduceRecord => visitor.visit::<producer::ProduceRecord>(launch),
    }
}

/// The buffers `launch` touches, from its family's declaration.
pub fn uses_of(launch: &Launch) -> Result<Vec<BufferUse>> {
    struct Uses;
    impl FamilyVisitor for Uses {
        type Output = Result<Vec<BufferUse>>;
        fn visit<K: KernelArgs>(self, launch: &Launch) -> Self::Output {
            Ok(K::decode(launch)?.buffer_uses())
        }
    }
    dispatch(launch, Uses)
}

/// The work items the grid of `launch` must cover, from its family.
pub fn work_items_of(launch: &Launch) -> Result<usize> {
    struct Items;
    impl FamilyVisitor for Items {
        type Output = Result<usize>;
        fn visit<K: KernelArgs>(self, launch: &Launch) -> Self::Output {
            Ok(K::decode(launch)?.work_items())
        }
    }
    dispatch(launch, Items)
}
