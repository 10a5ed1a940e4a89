//! `EmuDriver` (feature `emu`): the kernels of `kernels/` built for the host
//! (`kernels/host_emu.cpp`, compiled by `cargo xtask kernel-emu`) behind the
//! device seam, so the very CUDA source runs against the CPU reference on a
//! machine without a GPU. It checks launches with the same launch check as
//! every driver; streams and events are bookkeeping only (work runs at once).
//!
//! What it does not do: anything specific to the GPU (PTX, the driver,
//! atomics order, memory model); it is for tests, never for runs.

use std::ffi::{CString, c_char, c_void};

use lbm_core::device::{Action, EventId, PlanId, StagingId, StreamId, live_buffer_mut};
use lbm_core::kernels::{PlanTable, check_launch};
use lbm_core::{Arg, BufferId, Driver, Error, Launch, Result};

const BACKEND: &str = "emu";

type LaunchFn = unsafe extern "C" fn(*const c_char, u32, u32, u32, *mut *mut c_void) -> i32;

struct HostBuffer {
    /// u64 words keep every buffer 8-byte aligned, as device allocations are.
    words: Vec<u64>,
    bytes: usize,
}

/// Runs each launch through `lbm_emu_launch` of kernels/host_emu.cpp over
/// host memory, after the same launch checks as `CudaDriver`.
pub struct EmuDriver {
    launch_fn: LaunchFn,
    buffers: Vec<Option<HostBuffer>>,
    /// Staging areas: host memory, apart from the buffers so ids stay those
    /// every other driver hands out.
    staging: Vec<Option<Vec<u8>>>,
    plans: PlanTable,
    streams: u32,
    events: u32,
    _library: libloading::Library,
}

fn unavailable(reason: String) -> Error {
    Error::Unavailable {
        backend: BACKEND,
        reason,
    }
}

impl EmuDriver {
    pub fn open(path: &str) -> Result<EmuDriver> {
        // SAFETY: the library is kernels/host_emu.cpp built by `cargo xtask
        // kernel-emu`; loading it runs only C++ static initialisers.
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| unavailable(format!("{path}: {e}")))?;
        // SAFETY: `lbm_emu_launch` has exactly the `LaunchFn` signature, and the
        // pointer stays valid as long as `_library`, which this struct owns.
        let launch_fn = unsafe { library.get::<LaunchFn>(b"lbm_emu_launch") }
            .map(|symbol| *symbol)
            .map_err(|e| unavailable(format!("{path}: {e}")))?;
        Ok(EmuDriver {
            launch_fn,
            buffers: Vec::new(),
            staging: Vec::new(),
            plans: PlanTable::default(),
            streams: 0,
            events: 0,
            _library: library,
        })
    }

    fn buffer(&mut self, id: BufferId) -> Result<&mut HostBuffer> {
        live_buffer_mut(&mut self.buffers, id, BACKEND)
    }

    fn bytes(&mut self, id: BufferId, operation: &'static str, offset: usize, len: usize) -> Result<&mut [u8]> {
        let b = self.buffer(id)?;
        if offset.saturating_add(len) > b.bytes {
            return Err(Error::OutOfRange {
                backend: BACKEND,
                operation,
                label: id.to_string(),
                start: offset as u64,
                end: offset.saturating_add(len) as u64,
                size: b.bytes as u64,
            });
        }
        Ok(&mut bytemuck::cast_slice_mut(&mut b.words)[offset..offset + len])
    }

    fn size_of(&self, id: BufferId) -> Option<usize> {
        self.buffers
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .map(|b| b.bytes)
    }

    /// Runs a launch the check has passed through `lbm_emu_launch`.
    fn run(&mut self, launch: &Launch) -> Result<()> {
        if launch.grid[2] != 1 || launch.block[1] != 1 || launch.block[2] != 1 {
            return Err(unavailable(format!(
                "{}: host_emu.cpp runs grids of x by y one-dimensional blocks, not grid {:?} of blocks {:?}",
                launch.kernel, launch.grid, launch.block
            )));
        }
        let mut slots = Vec::with_capacity(launch.args.len());
        for arg in &launch.args {
            slots.push(match *arg {
                Arg::Buffer { id, byte_offset } => self.buffer(id)?.words.as_mut_ptr() as u64 + byte_offset,
                Arg::NoBuffer => 0,
                Arg::U32(v) => v as u64,
                Arg::U64(v) => v,
                Arg::F32(v) => v.to_bits() as u64,
                Arg::F64(v) => v.to_bits(),
            });
        }
        // Each slot holds its value in its first bytes (little-endian), as
        // the kernel reads it through a pointer to the parameter.
        let mut params: Vec<*mut c_void> = slots.iter_mut().map(|s| s as *mut u64 as *mut c_void).collect();
        let name = CString::new(launch.kernel.cuda_name()).expect("kernel names have no NUL");
        // SAFETY: `check_launch` proved every access of the kernel lies inside
        // the buffers passed, which live in `self.buffers` for the call, and an
        // absent buffer (0) is never read; the parameter slots outlive the call;
        // the launch runs to completion before returning.
        let rc = unsafe {
            (self.launch_fn)(
                name.as_ptr(),
                launch.grid[0],
                launch.grid[1],
                launch.block[0],
                params.as_mut_ptr(),
            )
        };
        match rc {
            0 => Ok(()),
            1 => Err(unavailable(format!("host_emu.cpp has no kernel {}", launch.kernel))),
            _ => Err(unavailable(format!(
                "{} synchronises its block: mark it threaded in host_emu.cpp",
                launch.kernel
            ))),
        }
    }
}

/// `[start, start + len)` inside `size` bytes of a staging area.
fn range(size: usize, operation: &'static str, start: usize, len: usize) -> Result<()> {
    match start.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        end => Err(Error::OutOfRange {
            backend: BACKEND,
            operation,
            label: "staging".into(),
            start: start as u64,
            end: end.map_or(u64::MAX, |e| e as u64),
            size: size as u64,
        }),
    }
}

fn unknown(what: &'static str, id: u32) -> Error {
    Error::UnknownHandle {
        backend: BACKEND,
        what,
        id,
    }
}

impl Driver for EmuDriver {
    fn backend(&self) -> &'static str {
        BACKEND
    }
    fn alloc(&mut self, _label: &str, bytes: usize) -> Result<BufferId> {
        self.buffers.push(Some(HostBuffer {
            words: vec![0; bytes.div_ceil(8)],
            bytes,
        }));
        Ok(BufferId(self.buffers.len() as u32 - 1))
    }
    fn free(&mut self, buffer: BufferId) -> Result<()> {
        self.buffer(buffer)?;
        self.buffers[buffer.0 as usize] = None;
        Ok(())
    }
    fn upload(&mut self, buffer: BufferId, byte_offset: usize, data: &[u8]) -> Result<()> {
        self.bytes(buffer, "upload", byte_offset, data.len())?
            .copy_from_slice(data);
        Ok(())
    }
    fn download(&mut self, buffer: BufferId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        out.copy_from_slice(self.bytes(buffer, "download", byte_offset, out.len())?);
        Ok(())
    }
    fn memset_async(&mut self, buffer: BufferId, byte_offset: usize, bytes: usize, value: u8) -> Result<()> {
        self.bytes(buffer, "memset", byte_offset, bytes)?.fill(value);
        Ok(())
    }
    fn copy_async(&mut self, src: BufferId, so: usize, dst: BufferId, dof: usize, bytes: usize) -> Result<()> {
        let chunk = self.bytes(src, "copy", so, bytes)?.to_vec();
        self.upload(dst, dof, &chunk)
    }
    fn launch(&mut self, launch: &Launch) -> Result<()> {
        check_launch(launch, |id| self.size_of(id))?;
        self.run(launch)
    }
    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }
    fn free_memory(&self) -> Result<u64> {
        Ok(u64::MAX)
    }
    fn create_stream(&mut self) -> Result<StreamId> {
        self.streams += 1;
        Ok(StreamId(self.streams))
    }
    fn create_event(&mut self) -> Result<EventId> {
        self.events += 1;
        Ok(EventId(self.events - 1))
    }
    fn record_event(&mut self, event: EventId, stream: StreamId) -> Result<()> {
        self.known(event, stream)
    }
    fn wait_event(&mut self, stream: StreamId, event: EventId) -> Result<()> {
        self.known(event, stream)
    }
    fn synchronize_event(&mut self, event: EventId) -> Result<()> {
        self.known(event, StreamId::MAIN)
    }
    fn alloc_staging(&mut self, _label: &str, bytes: usize) -> Result<StagingId> {
        self.staging.push(Some(vec![0; bytes]));
        Ok(StagingId(self.staging.len() as u32 - 1))
    }
    fn free_staging(&mut self, staging: StagingId) -> Result<()> {
        self.staging_area(staging)?;
        self.staging[staging.0 as usize] = None;
        Ok(())
    }
    fn download_async(
        &mut self,
        _stream: StreamId,
        buffer: BufferId,
        byte_offset: usize,
        staging: StagingId,
        staging_offset: usize,
        bytes: usize,
    ) -> Result<()> {
        let data = self.bytes(buffer, "download", byte_offset, bytes)?.to_vec();
        let area = self.staging_area(staging)?;
        range(area.len(), "download into staging", staging_offset, bytes)?;
        area[staging_offset..staging_offset + bytes].copy_from_slice(&data);
        Ok(())
    }
    fn read_staging(&mut self, staging: StagingId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        let area = self.staging_area(staging)?;
        range(area.len(), "read staging", byte_offset, out.len())?;
        out.copy_from_slice(&area[byte_offset..byte_offset + out.len()]);
        Ok(())
    }
    fn prepare(&mut self, _label: &str, actions: &[Action]) -> Result<PlanId> {
        let buffers = &self.buffers;
        self.plans.prepare(actions, BACKEND, |id| {
            buffers.get(id.0 as usize).and_then(Option::as_ref).map(|b| b.bytes)
        })
    }
    fn replay(&mut self, plan: PlanId) -> Result<()> {
        let actions = self.plans.replay(plan, BACKEND, |id| self.size_of(id))?;
        for action in actions.iter() {
            match action {
                Action::Launch(launch) => self.run(launch)?,
                Action::Memset { buffer, bytes, value } => self.memset_async(*buffer, 0, *bytes, *value)?,
            }
        }
        Ok(())
    }
    fn release_plan(&mut self, plan: PlanId) -> Result<()> {
        self.plans.release(plan, BACKEND)
    }
}

impl EmuDriver {
    fn known(&self, event: EventId, stream: StreamId) -> Result<()> {
        if event.0 >= self.events {
            return Err(unknown("event", event.0));
        }
        if stream.0 > self.streams {
            return Err(unknown("stream", stream.0));
        }
        Ok(())
    }

    fn staging_area(&mut self, staging: StagingId) -> Result<&mut Vec<u8>> {
        self.staging
            .get_mut(staging.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(unknown("staging", staging.0))
    }
}
