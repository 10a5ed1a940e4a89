//! `EmuDriver` (feature `emu`): the kernels of `kernels/` built for the host
//! (`kernels/host_emu.cpp`, compiled by `cargo xtask kernel-emu`) behind the
//! device seam, so the very CUDA source runs against the CPU reference on a
//! machine without a GPU. It checks launches with the same launch check as
//! every driver; streams and events are bookkeeping only (work runs at once).
//!
//! What it does not do: anything specific to the GPU (PTX, the driver,
//! atomics order, memory model); it is for tests, never for runs.

use std::ffi::{CString, c_char, c_void};

use lbm_core::device::{
    Action, BatchLaunch, EventId, PeerBuffer, PeerEvent, PlanId, StagingId, StreamId, live_buffer, live_buffer_mut,
};
use lbm_core::kernels::{PlanTable, check_launch};
use lbm_core::{BufferId, Driver, Error, Launch, Result};

use crate::{arg_word, batch_words};

const BACKEND: &str = "emu";

type LaunchFn = unsafe extern "C" fn(*const c_char, u32, u32, u32, u32, u32, *mut *mut c_void) -> i32;

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

    fn address(&self, id: BufferId) -> Result<u64> {
        live_buffer(&self.buffers, id, BACKEND).map(|b| b.words.as_ptr() as u64)
    }

    /// Runs a launch the check has passed through `lbm_emu_launch`.
    fn run(&mut self, launch: &Launch) -> Result<()> {
        let mut slots = launch
            .args
            .iter()
            .map(|a| arg_word(a, &|id| self.address(id)))
            .collect::<Result<Vec<u64>>>()?;
        self.call(launch.cuda_entry(), launch, 1, &mut slots)
    }

    /// One action of a replayed plan; a group's members in order.
    fn run_action(&mut self, action: &Action) -> Result<()> {
        match action {
            Action::Launch(launch) => self.run(launch),
            Action::Together(members) => members.iter().try_for_each(|a| self.run_action(a)),
            Action::Batch(batch) => self.run_batch(batch),
            Action::Memset {
                buffer,
                byte_offset,
                bytes,
                value,
            } => self.memset_async(*buffer, *byte_offset, *bytes, *value),
        }
    }

    /// Runs a batch the check has passed through its `_batch` entry, members
    /// on the grid's z layers.
    fn run_batch(&mut self, batch: &BatchLaunch) -> Result<()> {
        let words = batch_words(batch, |id| self.address(id))?;
        let mut slots = vec![words.as_ptr() as u64];
        let name = format!("{}_batch", batch.first().kernel.cuda_name());
        // The largest member's grid, as the device launches it.
        let shape = Launch {
            grid: batch.grid(),
            ..batch.first().clone()
        };
        self.call(&name, &shape, batch.members() as u32, &mut slots)
    }

    /// Calls kernel `name` with the parameter `slots` on `shape`'s grid times
    /// `layers` z layers.
    fn call(&mut self, name: &str, shape: &Launch, layers: u32, slots: &mut [u64]) -> Result<()> {
        if shape.grid[2] != 1 || shape.block[2] != 1 {
            return Err(unavailable(format!(
                "{}: host_emu.cpp runs grids of x by y blocks of x by y threads, not grid {:?} of blocks {:?}",
                shape.kernel, shape.grid, shape.block
            )));
        }
        // Each slot holds its value in its first bytes (little-endian), as
        // the kernel reads it through a pointer to the parameter.
        let mut params: Vec<*mut c_void> = slots.iter_mut().map(|s| s as *mut u64 as *mut c_void).collect();
        let cname = CString::new(name).expect("kernel names have no NUL");
        // SAFETY: the launch check (`check_launch`, or `check_batch` for each
        // member of a batch) proved every access of the kernel lies inside
        // the buffers passed, which live in `self.buffers` for the call, and an
        // absent buffer (0) is never read; the parameter slots and a batch's
        // word table outlive the call; the launch runs to completion before
        // returning.
        let rc = unsafe {
            (self.launch_fn)(
                cname.as_ptr(),
                shape.grid[0],
                shape.grid[1],
                layers,
                shape.block[0],
                shape.block[1],
                params.as_mut_ptr(),
            )
        };
        match rc {
            0 => Ok(()),
            1 => Err(unavailable(format!("host_emu.cpp has no kernel {name}"))),
            _ => Err(unavailable(format!(
                "{name} synchronises its block: mark it threaded in host_emu.cpp"
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
        self.plans.note_free();
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
    fn share(&mut self, buffer: BufferId) -> Result<Option<PeerBuffer>> {
        let b = live_buffer(&self.buffers, buffer, BACKEND)?;
        Ok(Some(PeerBuffer {
            backend: BACKEND,
            device: 0,
            address: b.words.as_ptr() as u64,
            bytes: b.bytes,
        }))
    }
    fn record_peer_event(&mut self, event: EventId, stream: StreamId) -> Result<PeerEvent> {
        self.known(event, stream)?;
        Ok(PeerEvent {
            backend: BACKEND,
            handle: u64::from(event.0),
        })
    }
    fn wait_peer_event(&mut self, stream: StreamId, event: PeerEvent) -> Result<()> {
        if stream.0 > self.streams {
            return Err(unknown("stream", stream.0));
        }
        // Everything runs when it is enqueued: what the event marks is done.
        match event.backend {
            BACKEND => Ok(()),
            other => Err(unavailable(format!("a {other} event cannot be waited for here"))),
        }
    }
    fn copy_from_peer(&mut self, stream: StreamId, src: PeerBuffer, dst: BufferId) -> Result<()> {
        if stream.0 > self.streams {
            return Err(unknown("stream", stream.0));
        }
        if src.backend != BACKEND {
            return Err(unavailable(format!("a copy from a {} buffer", src.backend)));
        }
        // SAFETY: `src` is the word storage of a live buffer of another
        // EmuDriver of this process (never reallocated while it lives, and
        // kept by its owner until this copy), `bytes` long; drivers run
        // their work when it is enqueued, so nothing writes it meanwhile.
        let bytes = unsafe { std::slice::from_raw_parts(src.address as *const u8, src.bytes) };
        self.upload(dst, 0, bytes)
    }
    fn replay_on(&mut self, stream: StreamId, plan: PlanId) -> Result<()> {
        // Every stream runs its work when it is enqueued.
        if stream.0 > self.streams {
            return Err(unknown("stream", stream.0));
        }
        self.replay(plan)
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
        actions.iter().try_for_each(|a| self.run_action(a))
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
