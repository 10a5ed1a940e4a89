//! [`CudaDriver`]: the [`Driver`] seam over cudarc, one context, one stream, one
//! module loaded from the embedded PTX.
//!
//! Every enqueue (`memset_async`, `copy_async`, `launch`) goes to the one stream
//! and returns at once; [`Driver::synchronize`] is the only wait that reports the
//! errors of enqueued work. `upload` and `download` also wait for the stream
//! (they must complete before returning), so an earlier asynchronous error can
//! surface there too, as the trait allows. Launches are checked on the host
//! first ([`crate::check_launch`]) so that no kernel can touch memory outside the
//! buffers it was given; a buffer argument is passed as its device pointer plus
//! its byte offset.
//!
//! What it does not do: no second stream, no graphs, no pinned staging memory,
//! no retry; it never reuses a freed buffer's id, and it refuses an overlapping
//! copy within one buffer (the CPU driver allows it).

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DriverError, LaunchConfig, PushKernelArg, result, sys,
};
use cudarc::nvrtc::Ptx;
use lbm_core::device::live_buffer;
use lbm_core::{Arg, BufferId, Driver, Error, Kernel, Launch, Result};

use crate::validate;

/// The CUDA backend; see the module documentation.
pub struct CudaDriver {
    // Fields drop in order: buffers are freed (stream-ordered) while the
    // module, stream and context they need are still alive.
    buffers: Vec<Option<DeviceBuffer>>,
    /// One function per kernel, in [`Kernel::ALL`] order.
    functions: Vec<CudaFunction>,
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

/// The error every failure of this backend becomes.
fn device_error(operation: impl Into<String>, message: impl Into<String>) -> Error {
    Error::Device {
        backend: "cuda".into(),
        operation: operation.into(),
        message: message.into(),
    }
}

/// A CUDA error with its name and description, e.g.
/// `CUDA_ERROR_OUT_OF_MEMORY: out of memory`.
fn cuda_message(error: DriverError) -> String {
    let name = error
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", error.0));
    match error.error_string() {
        Ok(text) => format!("{name}: {}", text.to_string_lossy()),
        Err(_) => name,
    }
}

fn cuda_error(operation: impl Into<String>, error: DriverError) -> Error {
    device_error(operation, cuda_message(error))
}

fn no_driver() -> Error {
    device_error(
        "initialise",
        "no CUDA driver was found: the NVIDIA driver library (libcuda.so) could not be loaded; \
         install the NVIDIA driver or use the CPU backend",
    )
}

/// The text of a caught panic.
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

impl CudaDriver {
    /// Opens device `ordinal`: its primary context, one stream and the kernel
    /// module. Without a driver library this is an error that says so, and no
    /// cudarc call is made before that is known.
    pub fn new(ordinal: usize) -> Result<Self> {
        if !driver_library_present() {
            return Err(no_driver());
        }
        std::panic::catch_unwind(move || Self::open(ordinal))
            .unwrap_or_else(|panic| Err(device_error("initialise", panic_text(panic))))
    }

    fn open(ordinal: usize) -> Result<Self> {
        let ctx = CudaContext::new(ordinal).map_err(|e| cuda_error(format!("open device {ordinal}"), e))?;
        // SAFETY: every operation of this driver runs on its one stream, so
        // cudarc's cross-stream event tracking has nothing to order; it is off
        // before the stream and any buffer exist.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| cuda_error("create the stream", e))?;
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
        let device_name = ctx.name().map_err(|e| cuda_error("read the device name", e))?;
        Ok(CudaDriver {
            buffers: Vec::new(),
            functions,
            stream,
            ctx,
            device_name,
        })
    }

    /// The device's name, e.g. "NVIDIA H200".
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    fn bind(&self, operation: &str) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| cuda_error(operation, e))
    }

    fn buffer(&self, id: BufferId) -> Result<&DeviceBuffer> {
        live_buffer(&self.buffers, id, "cuda")
    }

    /// The device address of `[offset, offset + len)` of `id`, once that range
    /// is known to lie inside the buffer.
    fn range(&self, operation: &str, id: BufferId, offset: usize, len: usize) -> Result<sys::CUdeviceptr> {
        let b = self.buffer(id)?;
        let end = offset.saturating_add(len);
        if end > b.bytes {
            return Err(device_error(
                operation,
                format!("byte range ends at {end}, past the {} bytes of `{}`", b.bytes, b.label),
            ));
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
        let memory = self.stream.alloc_zeros::<u8>(bytes.max(1)).map_err(|e| {
            device_error(
                "alloc",
                format!("{} (allocating {bytes} bytes for `{label}`)", cuda_message(e)),
            )
        })?;
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
        let dst = self.range("memset", buffer, byte_offset, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        self.bind("memset")?;
        // SAFETY: the range lies inside a live allocation (checked by `range`),
        // and a buffer freed later is released in stream order, after the memset.
        unsafe { result::memset_d8_async(dst, value, bytes, self.stream.cu_stream()) }
            .map_err(|e| cuda_error("memset", e))
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
            return Err(device_error(
                "copy",
                format!(
                    "source [{src_offset}, {}) and destination [{dst_offset}, {}) of {src} overlap",
                    src_offset + bytes,
                    dst_offset + bytes
                ),
            ));
        }
        self.bind("copy")?;
        // SAFETY: both ranges lie inside live allocations (checked by `range`)
        // and do not overlap; frees are stream-ordered after the copy.
        unsafe { result::memcpy_dtod_async(to, from, bytes, self.stream.cu_stream()) }
            .map_err(|e| cuda_error("copy", e))
    }

    fn launch(&mut self, launch: &Launch) -> Result<()> {
        let name = launch.kernel.cuda_name();
        validate::check(launch, |id| self.buffer(id).ok().map(|b| b.bytes))?;
        let params = marshal(&launch.args, |id| Ok(self.buffer(id)?.ptr))?;
        let index = Kernel::ALL
            .iter()
            .position(|k| *k == launch.kernel)
            .expect("Kernel::ALL lists every kernel");
        self.bind("launch")?;
        let mut builder = self.stream.launch_builder(&self.functions[index]);
        for param in &params {
            match param {
                Param::U32(v) => builder.arg(v),
                Param::U64(v) => builder.arg(v),
                Param::F32(v) => builder.arg(v),
                Param::F64(v) => builder.arg(v),
            };
        }
        let config = LaunchConfig {
            grid_dim: launch.grid.into(),
            block_dim: launch.block.into(),
            shared_mem_bytes: 0,
        };
        // SAFETY: the parameters follow the kernel's signature (the typed decoder
        // accepted the argument kinds and count, and the tidy test pins each
        // `__global__` signature to them); `validate::check` proved every access
        // the kernel makes lies inside the buffers passed; those buffers stay
        // allocated until the launch completes because frees are stream-ordered;
        // and `params` outlives this call, which copies the values.
        unsafe { builder.launch(config) }.map_err(|e| cuda_error(format!("launch {name}"), e))?;
        Ok(())
    }

    fn synchronize(&mut self) -> Result<()> {
        self.bind("synchronize")?;
        self.wait("synchronize")
    }

    fn free_memory(&self) -> Result<u64> {
        let (free, _total) = self
            .ctx
            .mem_get_info()
            .map_err(|e| cuda_error("query free memory", e))?;
        Ok(free as u64)
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
        let missing = marshal(&args, |id| Err(Error::unknown_buffer("cuda", id)));
        assert!(missing.unwrap_err().to_string().contains("unknown buffer 2"));
    }
}
