//! `CpuDriver`: the device seam over host memory, running each launch through
//! its family's CPU reference ([`crate::kernels`]).
//!
//! It is the default backend without a GPU and the numerical reference that GPU
//! results are compared against. Work "enqueued" here runs at once and in call
//! order, whatever the stream, so events are reached when recorded, a download
//! into staging has landed when it returns, and `synchronize` never fails; this
//! driver does not simulate asynchronous errors (the mock driver does). It owns
//! memory and dispatch only: no kernel arithmetic lives here.

use std::collections::BTreeSet;

use rayon::prelude::*;

use crate::device::{
    Action, BatchLaunch, BufferId, Driver, EventId, Launch, PlanId, StagingId, StreamId, live_buffer, live_buffer_mut,
};
use crate::error::{Error, Result};
use crate::kernels::{Access, BufferUse, FamilyVisitor, HostViews, KernelArgs, PlanTable, check_launch, dispatch};

/// The name [`Driver::backend`] gives: its buffers are host memory.
pub const BACKEND: &str = "cpu";

/// The host memory available to new allocations (`MemAvailable` of
/// `/proc/meminfo`), or less where this process's address-space limit
/// (`ulimit -v`) leaves less room beside what it has mapped (`VmSize`: a
/// run beyond it is killed by its first allocation that fails); `None`
/// where neither can be read (not Linux).
pub fn host_available_memory() -> Option<u64> {
    host_memory().map(|(bytes, _)| bytes)
}

/// [`host_available_memory`], and whether the address-space limit is what
/// bounds it.
pub fn host_memory() -> Option<(u64, bool)> {
    let free = proc_bytes("/proc/meminfo", "MemAvailable:");
    match (free, address_space_room()) {
        (Some(free), Some(room)) => Some((free.min(room), room < free)),
        (free, room) => free.map(|f| (f, false)).or(room.map(|r| (r, true))),
    }
}

/// What this process's address-space limit (`ulimit -v`) leaves beside
/// what it has mapped, or `None` where there is no limit.
fn address_space_room() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the one struct passed, on this frame.
        #[allow(unsafe_code)]
        let read = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) };
        if read != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        let mapped = proc_bytes("/proc/self/status", "VmSize:")?;
        Some(limit.rlim_cur.saturating_sub(mapped))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// The kB figure after `key` in the `/proc` file `path`, in bytes.
fn proc_bytes(path: &str, key: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// The most memory this process has held so far (`VmHWM` of
/// `/proc/self/status`: its peak resident set), or `None` where that cannot
/// be read (not Linux).
pub fn host_peak_memory() -> Option<u64> {
    proc_bytes("/proc/self/status", "VmHWM:")
}

/// Raises this process's limit on open files (`RLIMIT_NOFILE`'s soft limit)
/// to its hard limit when it is below `wanted`, and returns the limit then
/// in force; `None` where it cannot be read (not Linux with glibc).
pub fn raise_open_file_limit(wanted: u64) -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit read and write the one struct
        // passed, which lives on this stack frame.
        #[allow(unsafe_code)]
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return None;
            }
            if limit.rlim_cur < wanted {
                let raised = libc::rlimit {
                    rlim_cur: limit.rlim_max,
                    rlim_max: limit.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit.rlim_cur = raised.rlim_cur;
                }
            }
        }
        Some(limit.rlim_cur)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = wanted;
        None
    }
}

/// Starts the worker threads of the CPU backend and of the host's parallel
/// work (rayon's global pool) now, where a process limit that refuses them
/// is an error to report, not a panic at their first use.
pub fn start_workers() -> std::io::Result<()> {
    rayon::ThreadPoolBuilder::new()
        .build_global()
        .map_err(std::io::Error::other)
}

/// Whether this process ignores `signal` (its action is `SIG_IGN`, as a
/// parent may leave it: `nohup` for SIGHUP); `false` where that cannot be
/// read.
pub fn signal_ignored(signal: i32) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: with no new action, sigaction only writes the current one
        // into `current`, a plain struct this frame owns.
        #[allow(unsafe_code)]
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            libc::sigaction(signal, std::ptr::null(), &mut current) == 0 && current.sa_sigaction == libc::SIG_IGN
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = signal;
        false
    }
}

/// Hands the memory freed since to the system (glibc's `malloc_trim`), where
/// glibc would keep it for later allocations: after a save point's fields or
/// a checkpoint's state are dropped, a run held 120 MiB more than it used
/// (its heap grown for them, and a later large block mapped beside it).
/// Called at those moments, not for every allocation: making every large
/// block a mapping of its own cost the CPU stepping 15%.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the allocator's own
    // arenas to the system; it touches no memory in use.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}

struct HostBuffer {
    label: String,
    /// u64 words so that any element type up to f64 can be viewed in place.
    words: Vec<u64>,
    bytes: usize,
}

impl HostBuffer {
    fn new(label: &str, bytes: usize) -> Self {
        HostBuffer {
            label: label.to_owned(),
            words: vec![0; bytes.div_ceil(8)],
            bytes,
        }
    }
    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.bytes]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.bytes]
    }
    /// `[start, start + len)`, or the range error of `operation`.
    fn range(&self, operation: &'static str, start: usize, len: usize) -> Result<std::ops::Range<usize>> {
        let end = start.saturating_add(len);
        if end > self.bytes {
            return Err(Error::OutOfRange {
                backend: BACKEND,
                operation,
                label: self.label.clone(),
                start: start as u64,
                end: end as u64,
                size: self.bytes as u64,
            });
        }
        Ok(start..end)
    }
}

/// What [`Driver::split_min_cells`] answers on the host, where a second
/// kernel costs one more pass of the thread pool (a few microseconds) and
/// the general kernel spends about 15 ns more per cell than the bulk one:
/// every patch but the smallest splits.
pub const SPLIT_MIN_CELLS: usize = 1 << 10;

/// Host-memory backend; see the module documentation.
#[derive(Default)]
pub struct CpuDriver {
    buffers: Vec<Option<HostBuffer>>,
    staging: Vec<Option<HostBuffer>>,
    plans: PlanTable,
    streams: u32,
    events: u32,
    /// What [`Driver::batch_members`] answers (0 stands for 1).
    batch_members: usize,
    /// What [`Driver::split_min_cells`] answers, where not
    /// [`SPLIT_MIN_CELLS`].
    split_min_cells: Option<usize>,
    /// Whether a group's members run last first ([`CpuDriver::reversing_groups`]).
    reverse_groups: bool,
}

impl CpuDriver {
    pub fn new() -> Self {
        CpuDriver::default()
    }

    /// A driver that runs each group ([`Action::Together`]) last member
    /// first. A group promises that its members touch different bytes, so
    /// a plan computes the same bits in either order; a member that reads
    /// what another writes shows as a difference (the tests of the plan's
    /// groups).
    pub fn reversing_groups() -> Self {
        CpuDriver {
            reverse_groups: true,
            ..CpuDriver::default()
        }
    }

    /// A driver that splits a patch's update from `min_cells` interior cells
    /// ([`Driver::split_min_cells`]), as another backend does: a stepper on
    /// it replays the plan a stepper on that backend replays.
    pub fn splitting_from(min_cells: usize) -> Self {
        CpuDriver {
            split_min_cells: Some(min_cells),
            ..CpuDriver::default()
        }
    }

    /// A driver that answers [`Driver::batch_members`] with `members` and
    /// [`Driver::split_min_cells`] with `split_min_cells`: a stepper on it is
    /// built as a member of a fused batch of that size on a driver that
    /// splits so would be, which is how [`crate::fused::check`] sees a
    /// member's shape.
    pub fn for_batch(members: usize, split_min_cells: usize) -> Self {
        CpuDriver {
            batch_members: members,
            ..CpuDriver::splitting_from(split_min_cells)
        }
    }

    fn get(&self, id: BufferId) -> Result<&HostBuffer> {
        live_buffer(&self.buffers, id, BACKEND)
    }

    fn get_mut(&mut self, id: BufferId) -> Result<&mut HostBuffer> {
        live_buffer_mut(&mut self.buffers, id, BACKEND)
    }

    fn size_of(&self, id: BufferId) -> Option<usize> {
        size_in(&self.buffers, id)
    }

    fn stream(&self, stream: StreamId) -> Result<()> {
        match stream.0 <= self.streams {
            true => Ok(()),
            false => Err(unknown("stream", stream.0)),
        }
    }

    fn event(&self, event: EventId) -> Result<()> {
        match event.0 < self.events {
            true => Ok(()),
            false => Err(unknown("event", event.0)),
        }
    }

    /// Runs a launch the check has passed.
    fn execute(&mut self, launch: &Launch) -> Result<()> {
        struct Run<'a>(&'a mut CpuDriver);
        impl FamilyVisitor for Run<'_> {
            type Output = Result<()>;
            fn visit<K: KernelArgs>(self, launch: &Launch) -> Result<()> {
                self.0.run(&K::decode(launch)?)
            }
        }
        dispatch(launch, Run(self))
    }

    /// Takes every written buffer out of the table so that it can be borrowed
    /// mutably beside the ones read (the check refused aliases), runs the
    /// reference on views of exactly the bytes each use declares (so a
    /// reference sees what a kernel may touch, and nothing of a fused batch's
    /// other members) and puts them back.
    fn run<K: KernelArgs>(&mut self, k: &K) -> Result<()> {
        let uses = k.buffer_uses();
        let mut taken = Vec::new();
        for u in uses.iter().filter(|u| u.access != Access::Read) {
            self.get(u.buffer.id)?;
            let buffer = self.buffers[u.buffer.id.0 as usize].take().expect("checked above");
            taken.push((u.param, u.buffer, buffer));
        }
        let mut views = HostViews::default();
        for u in uses.iter().filter(|u| u.access == Access::Read) {
            let offset = u.buffer.byte_offset as usize;
            match self.buffers[u.buffer.id.0 as usize].as_ref() {
                Some(b) => views.reads.add(u.param, &b.bytes()[offset..offset + u.bytes]),
                None => {
                    drop(views);
                    self.restore(taken);
                    return Err(Error::UnknownBuffer {
                        backend: BACKEND,
                        buffer: u.buffer.id,
                    });
                }
            }
        }
        for ((param, r, buffer), u) in taken.iter_mut().zip(uses.iter().filter(|u| u.access != Access::Read)) {
            let offset = r.byte_offset as usize;
            views
                .writes
                .add(param, &mut buffer.bytes_mut()[offset..offset + u.bytes]);
        }
        k.run_on_host(&mut views);
        drop(views);
        self.restore(taken);
        Ok(())
    }

    /// One action of a replayed plan; a group's members in order.
    fn run_action(&mut self, action: &Action) -> Result<()> {
        match action {
            Action::Launch(launch) => self.execute(launch),
            Action::Together(members) => match self.reverse_groups {
                false => members.iter().try_for_each(|a| self.run_action(a)),
                true => members.iter().rev().try_for_each(|a| self.run_action(a)),
            },
            Action::Batch(batch) => self.execute_batch(batch),
            Action::Memset {
                buffer,
                byte_offset,
                bytes,
                value,
            } => self.memset_async(*buffer, *byte_offset, *bytes, *value),
        }
    }

    /// A fused batch: every member's launch, the members side by side
    /// (`check_batch` proved no member touches bytes another writes), each
    /// computing exactly what its own launch computes.
    fn execute_batch(&mut self, batch: &BatchLaunch) -> Result<()> {
        struct Run<'a>(&'a mut CpuDriver, &'a BatchLaunch);
        impl FamilyVisitor for Run<'_> {
            type Output = Result<()>;
            fn visit<K: KernelArgs>(self, _: &Launch) -> Result<()> {
                let members = self.1.launches.iter().map(K::decode).collect::<Result<Vec<K>>>()?;
                self.0.run_batch(&members)
            }
        }
        dispatch(batch.first(), Run(self, batch))
    }

    /// [`CpuDriver::run`] for every member at once: each written buffer is
    /// taken out of the table and split into the members' disjoint ranges,
    /// the read ones are shared. A buffer one member reads and another writes
    /// runs the members one after another instead.
    fn run_batch<K: KernelArgs>(&mut self, members: &[K]) -> Result<()> {
        let uses: Vec<Vec<BufferUse>> = members.iter().map(KernelArgs::buffer_uses).collect();
        let written: BTreeSet<BufferId> = uses
            .iter()
            .flatten()
            .filter(|u| u.access != Access::Read)
            .map(|u| u.buffer.id)
            .collect();
        if uses
            .iter()
            .flatten()
            .any(|u| u.access == Access::Read && written.contains(&u.buffer.id))
        {
            return members.iter().try_for_each(|k| self.run(k));
        }
        for u in uses.iter().flatten() {
            self.get(u.buffer.id)?;
        }
        let mut taken: Vec<(BufferId, HostBuffer)> = written
            .iter()
            .map(|id| (*id, self.buffers[id.0 as usize].take().expect("checked above")))
            .collect();
        let mut views: Vec<HostViews> = (0..members.len()).map(|_| HostViews::default()).collect();
        for (m, own) in uses.iter().enumerate() {
            for u in own.iter().filter(|u| u.access == Access::Read) {
                let b = self.buffers[u.buffer.id.0 as usize].as_ref().expect("checked above");
                let offset = u.buffer.byte_offset as usize;
                views[m].reads.add(u.param, &b.bytes()[offset..offset + u.bytes]);
            }
        }
        for (id, buffer) in taken.iter_mut() {
            // This buffer's written ranges, in order; they are disjoint.
            let mut ranges: Vec<(usize, usize, &'static str, usize)> = uses
                .iter()
                .enumerate()
                .flat_map(|(m, own)| own.iter().map(move |u| (m, u)))
                .filter(|(_, u)| u.buffer.id == *id)
                .map(|(m, u)| (u.buffer.byte_offset as usize, u.bytes, u.param, m))
                .collect();
            ranges.sort_unstable();
            let mut rest = buffer.bytes_mut();
            let mut at = 0;
            for (start, bytes, param, m) in ranges {
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - at);
                let (mine, tail) = tail.split_at_mut(bytes);
                views[m].writes.add(param, mine);
                rest = tail;
                at = start + bytes;
            }
        }
        views
            .par_iter_mut()
            .zip(members)
            .for_each(|(views, k)| k.run_on_host(views));
        drop(views);
        for (id, buffer) in taken {
            self.buffers[id.0 as usize] = Some(buffer);
        }
        Ok(())
    }

    fn restore(&mut self, taken: Vec<(&'static str, crate::device::BufferRef, HostBuffer)>) {
        for (_, r, buffer) in taken {
            self.buffers[r.id.0 as usize] = Some(buffer);
        }
    }
}

/// Bytes of buffer `id` in `buffers`, `None` when it is not live.
fn size_in(buffers: &[Option<HostBuffer>], id: BufferId) -> Option<usize> {
    live_buffer(buffers, id, BACKEND).ok().map(|b| b.bytes)
}

fn unknown(what: &'static str, id: u32) -> Error {
    Error::UnknownHandle {
        backend: BACKEND,
        what,
        id,
    }
}

impl Driver for CpuDriver {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn alloc(&mut self, label: &str, bytes: usize) -> Result<BufferId> {
        let id = BufferId(self.buffers.len() as u32);
        self.buffers.push(Some(HostBuffer::new(label, bytes)));
        Ok(id)
    }

    fn free(&mut self, buffer: BufferId) -> Result<()> {
        self.get(buffer)?;
        self.buffers[buffer.0 as usize] = None;
        self.plans.note_free();
        Ok(())
    }

    fn upload(&mut self, buffer: BufferId, byte_offset: usize, data: &[u8]) -> Result<()> {
        let b = self.get_mut(buffer)?;
        let range = b.range("upload", byte_offset, data.len())?;
        b.bytes_mut()[range].copy_from_slice(data);
        Ok(())
    }

    fn download(&mut self, buffer: BufferId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        let b = self.get(buffer)?;
        let range = b.range("download", byte_offset, out.len())?;
        out.copy_from_slice(&b.bytes()[range]);
        Ok(())
    }

    fn memset_async(&mut self, buffer: BufferId, byte_offset: usize, bytes: usize, value: u8) -> Result<()> {
        let b = self.get_mut(buffer)?;
        let range = b.range("memset", byte_offset, bytes)?;
        b.bytes_mut()[range].fill(value);
        Ok(())
    }

    fn copy_async(
        &mut self,
        src: BufferId,
        src_offset: usize,
        dst: BufferId,
        dst_offset: usize,
        bytes: usize,
    ) -> Result<()> {
        let from = self.get(src)?.range("copy source", src_offset, bytes)?;
        let to = self.get(dst)?.range("copy destination", dst_offset, bytes)?;
        if src == dst {
            self.get_mut(src)?.bytes_mut().copy_within(from, to.start);
            return Ok(());
        }
        let data = self.get(src)?.bytes()[from].to_vec();
        self.get_mut(dst)?.bytes_mut()[to].copy_from_slice(&data);
        Ok(())
    }

    fn launch(&mut self, launch: &Launch) -> Result<()> {
        check_launch(launch, |id| self.size_of(id))?;
        self.execute(launch)
    }

    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }

    fn free_memory(&self) -> Result<u64> {
        host_available_memory().ok_or(Error::NotAvailable {
            what: "free host memory".into(),
            reason: "/proc/meminfo has no MemAvailable line here",
        })
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
        self.event(event)?;
        self.stream(stream)
    }

    fn wait_event(&mut self, stream: StreamId, event: EventId) -> Result<()> {
        self.event(event)?;
        self.stream(stream)
    }

    fn synchronize_event(&mut self, event: EventId) -> Result<()> {
        self.event(event)
    }

    fn alloc_staging(&mut self, label: &str, bytes: usize) -> Result<StagingId> {
        self.staging.push(Some(HostBuffer::new(label, bytes)));
        Ok(StagingId(self.staging.len() as u32 - 1))
    }

    fn free_staging(&mut self, staging: StagingId) -> Result<()> {
        match self.staging.get_mut(staging.0 as usize) {
            Some(slot @ Some(_)) => {
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
        self.stream(stream)?;
        let b = self.get(buffer)?;
        let from = b.range("download", byte_offset, bytes)?;
        let s = self
            .staging
            .get_mut(staging.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(unknown("staging", staging.0))?;
        let to = s.range("download into staging", staging_offset, bytes)?;
        let source = live_buffer(&self.buffers, buffer, BACKEND)?;
        s.bytes_mut()[to].copy_from_slice(&source.bytes()[from]);
        Ok(())
    }

    fn read_staging(&mut self, staging: StagingId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        let s = self
            .staging
            .get(staging.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(unknown("staging", staging.0))?;
        let range = s.range("read staging", byte_offset, out.len())?;
        out.copy_from_slice(&s.bytes()[range]);
        Ok(())
    }

    fn batch_members(&self) -> usize {
        self.batch_members.max(1)
    }

    fn split_min_cells(&self) -> usize {
        self.split_min_cells.unwrap_or(SPLIT_MIN_CELLS)
    }

    fn prepare(&mut self, _label: &str, actions: &[Action]) -> Result<PlanId> {
        let buffers = &self.buffers;
        self.plans.prepare(actions, BACKEND, |id| size_in(buffers, id))
    }

    fn replay(&mut self, plan: PlanId) -> Result<()> {
        let actions = self.plans.replay(plan, BACKEND, |id| self.size_of(id))?;
        // On one of the pool's threads, where each kernel's parallel loop
        // starts in place: from any other thread every loop is handed to the
        // pool and waited for, two thread switches per kernel.
        rayon::scope(|_| actions.iter().try_for_each(|a| self.run_action(a)))
    }

    fn release_plan(&mut self, plan: PlanId) -> Result<()> {
        self.plans.release(plan, BACKEND)
    }
}
