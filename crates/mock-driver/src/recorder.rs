//! The recorder behind a [`crate::MockDriver`] and its handles: the log, the
//! buffers, staging areas and plans it knows, the armed faults, and the CPU
//! twin when executing. Every call logs its event first, then is checked (by
//! lbm-core's launch check for launches and plans) and forwarded.
//!
//! It models no timing and no concurrency.

use lbm_core::device::{Action, EventId, PlanId, StagingId, StreamId};
use lbm_core::kernels::{PlanTable, check_launch};
use lbm_core::{Arg, BufferId, CpuDriver, Driver, Error, Launch, Result};

use crate::event::{BufferName, Event, EventKind, LoggedArg, NamedArg, fnv1a64};
use crate::{BACKEND, DEFAULT_CAPACITY};

pub(crate) struct BufferRecord {
    pub(crate) label: String,
    pub(crate) bytes: usize,
    pub(crate) live: bool,
    /// The twin buffer in the CPU backend when executing.
    pub(crate) cpu: Option<BufferId>,
}

/// The state shared by a [`MockDriver`] and its handles.
pub(crate) struct Recorder {
    pub(crate) log: Vec<Event>,
    /// Indexed by `BufferId.0`; freed buffers stay so their names stay known.
    pub(crate) buffers: Vec<BufferRecord>,
    pub(crate) cpu: Option<CpuDriver>,
    /// Calls left until the armed fault fires, counting the failing one.
    pub(crate) launch_fault: Option<u64>,
    pub(crate) sync_fault: Option<u64>,
    pub(crate) download_fill: u8,
    pub(crate) capacity: u64,
    pub(crate) live_bytes: u64,
    /// Staging areas by id, with their twins when executing.
    pub(crate) staging: Vec<StagingRecord>,
    /// Prepared plans by id; `None` once released.
    pub(crate) plans: PlanTable,
    pub(crate) streams: u32,
    pub(crate) events: u32,
    pub(crate) launches: u64,
    pub(crate) syncs: u64,
}

pub(crate) struct StagingRecord {
    label: String,
    bytes: usize,
    live: bool,
    cpu: Option<StagingId>,
}

fn unknown(what: &'static str, id: u32) -> Error {
    Error::UnknownHandle {
        backend: BACKEND,
        what,
        id,
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
    pub(crate) fn new(cpu: Option<CpuDriver>) -> Self {
        Recorder {
            log: Vec::new(),
            buffers: Vec::new(),
            cpu,
            launch_fault: None,
            sync_fault: None,
            download_fill: 0,
            capacity: DEFAULT_CAPACITY,
            live_bytes: 0,
            staging: Vec::new(),
            plans: PlanTable::default(),
            streams: 0,
            events: 0,
            launches: 0,
            syncs: 0,
        }
    }

    pub(crate) fn name(&self, id: BufferId) -> BufferName {
        BufferName {
            id,
            label: self.buffers.get(id.0 as usize).map(|b| b.label.clone()),
        }
    }

    pub(crate) fn live(&self, id: BufferId) -> Result<&BufferRecord> {
        self.buffers
            .get(id.0 as usize)
            .filter(|b| b.live)
            .ok_or(Error::UnknownBuffer {
                backend: BACKEND,
                buffer: id,
            })
    }

    pub(crate) fn size_of(&self, id: BufferId) -> Option<usize> {
        self.live(id).ok().map(|b| b.bytes)
    }

    pub(crate) fn check_range(&self, operation: &'static str, id: BufferId, offset: usize, bytes: usize) -> Result<()> {
        let b = self.live(id)?;
        in_range(operation, &b.label, b.bytes, offset, bytes)
    }

    /// Logs the outcome of a call whose event is already in the log.
    pub(crate) fn outcome<T>(&mut self, call: EventKind, result: Result<T>) -> Result<T> {
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
    pub(crate) fn on_cpu(
        &mut self,
        call: impl FnOnce(&mut CpuDriver, &dyn Fn(BufferId) -> BufferId) -> Result<()>,
    ) -> Result<()> {
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

    pub(crate) fn alloc(&mut self, label: &str, bytes: usize) -> Result<BufferId> {
        let free = self.capacity.saturating_sub(self.live_bytes);
        if bytes as u64 > free {
            let e = Error::OutOfMemory {
                backend: BACKEND,
                label: label.to_owned(),
                bytes: bytes as u64,
                available: free,
            };
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

    pub(crate) fn free(&mut self, id: BufferId) -> Result<()> {
        self.log.push(Event::Free { buffer: self.name(id) });
        let result = self.live(id).map(|b| (b.bytes, b.cpu)).and_then(|(bytes, cpu)| {
            if let (Some(driver), Some(cpu)) = (self.cpu.as_mut(), cpu) {
                driver.free(cpu)?;
            }
            self.buffers[id.0 as usize].live = false;
            self.live_bytes -= bytes as u64;
            self.plans.note_free();
            Ok(())
        });
        self.outcome(EventKind::Free, result)
    }

    pub(crate) fn upload(&mut self, id: BufferId, offset: usize, data: &[u8]) -> Result<()> {
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

    pub(crate) fn download(&mut self, id: BufferId, offset: usize, out: &mut [u8]) -> Result<()> {
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

    pub(crate) fn memset(&mut self, id: BufferId, offset: usize, bytes: usize, value: u8) -> Result<()> {
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

    pub(crate) fn copy(
        &mut self,
        src: BufferId,
        src_offset: usize,
        dst: BufferId,
        dst_offset: usize,
        bytes: usize,
    ) -> Result<()> {
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

    pub(crate) fn launch(&mut self, launch: &Launch) -> Result<()> {
        self.log_launch(launch);
        let result = self
            .fault()
            .and_then(|()| check_launch(launch, |id| self.size_of(id)))
            .and_then(|()| self.execute(launch));
        self.outcome(EventKind::Launch, result)
    }

    pub(crate) fn log_launch(&mut self, launch: &Launch) {
        let args = self.named_args(launch);
        self.log.push(Event::Launch {
            kernel: launch.kernel,
            grid: launch.grid,
            block: launch.block,
            args,
        });
    }

    fn named_args(&self, launch: &Launch) -> Vec<NamedArg> {
        launch
            .args
            .iter()
            .zip(launch.kernel.params())
            .map(|(arg, param)| NamedArg {
                param,
                value: match *arg {
                    Arg::Buffer { id, byte_offset } => LoggedArg::Buffer {
                        buffer: self.name(id),
                        byte_offset,
                    },
                    Arg::NoBuffer => LoggedArg::NoBuffer,
                    Arg::U32(v) => LoggedArg::U32(v),
                    Arg::U64(v) => LoggedArg::U64(v),
                    Arg::F32(v) => LoggedArg::F32(v),
                    Arg::F64(v) => LoggedArg::F64(v),
                },
            })
            .collect()
    }

    /// Counts a launch against the armed launch fault.
    pub(crate) fn fault(&mut self) -> Result<()> {
        self.launches += 1;
        match fires(&mut self.launch_fault) {
            true => Err(Error::Injected {
                call: "launch",
                count: self.launches,
            }),
            false => Ok(()),
        }
    }

    pub(crate) fn execute(&mut self, launch: &Launch) -> Result<()> {
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

    pub(crate) fn prepare(&mut self, label: &str, actions: &[Action]) -> Result<PlanId> {
        self.log.push(Event::Prepare {
            plan: self.plans.next_id().0,
            label: label.to_owned(),
            actions: actions.len(),
        });
        let buffers = &self.buffers;
        let result = self.plans.prepare(actions, BACKEND, |id| {
            buffers.get(id.0 as usize).filter(|b| b.live).map(|b| b.bytes)
        });
        self.outcome(EventKind::Prepare, result)
    }

    /// Logs one launch of a replayed plan and runs it, failing where an armed
    /// launch fault fires.
    fn replay_launch(&mut self, launch: &Launch) -> Result<()> {
        self.log_launch(launch);
        let result = self.fault().and_then(|()| self.execute(launch));
        self.outcome(EventKind::Launch, result)
    }

    /// Logs the replay, then each action as its own event, failing where an
    /// armed launch fault fires; a plan whose buffers were freed is refused.
    pub(crate) fn replay(&mut self, plan: PlanId) -> Result<()> {
        self.log.push(Event::Replay { plan: plan.0 });
        let actions = match self.plans.replay(plan, BACKEND, |id| self.size_of(id)) {
            Ok(actions) => actions,
            Err(e) => return self.outcome(EventKind::Replay, Err(e)),
        };
        actions.iter().try_for_each(|a| self.replay_action(a))
    }

    /// Logs and runs one action of a replayed plan: a group as its line,
    /// then each of its members.
    fn replay_action(&mut self, action: &Action) -> Result<()> {
        match action {
            Action::Launch(launch) => self.replay_launch(launch),
            Action::Together(members) => {
                self.log.push(Event::Together {
                    launches: members.len(),
                });
                members.iter().try_for_each(|a| self.replay_action(a))
            }
            Action::Batch(batch) => {
                let first = batch.first();
                let args = self.named_args(first);
                self.log.push(Event::BatchLaunch {
                    kernel: first.kernel,
                    members: batch.members(),
                    grid: batch.grid(),
                    block: first.block,
                    args,
                });
                let result = self
                    .fault()
                    .and_then(|()| batch.launches.iter().try_for_each(|l| self.execute(l)));
                self.outcome(EventKind::Launch, result)
            }
            Action::Memset {
                buffer,
                byte_offset,
                bytes,
                value,
            } => self.memset(*buffer, *byte_offset, *bytes, *value),
        }
    }

    pub(crate) fn release_plan(&mut self, plan: PlanId) -> Result<()> {
        self.log.push(Event::ReleasePlan { plan: plan.0 });
        let result = self.plans.release(plan, BACKEND);
        self.outcome(EventKind::ReleasePlan, result)
    }

    pub(crate) fn handle(&mut self, kind: EventKind, what: &'static str, id: u32, limit: u32) -> Result<()> {
        let result = match id < limit {
            true => Ok(()),
            false => Err(unknown(what, id)),
        };
        self.outcome(kind, result)
    }

    pub(crate) fn create_stream(&mut self) -> Result<StreamId> {
        // The CPU twin counts streams and events the same way, so ids agree.
        if let Some(cpu) = self.cpu.as_mut() {
            cpu.create_stream()?;
        }
        self.streams += 1;
        self.log.push(Event::CreateStream { stream: self.streams });
        Ok(StreamId(self.streams))
    }

    pub(crate) fn create_event(&mut self) -> Result<EventId> {
        if let Some(cpu) = self.cpu.as_mut() {
            cpu.create_event()?;
        }
        self.log.push(Event::CreateEvent { event: self.events });
        self.events += 1;
        Ok(EventId(self.events - 1))
    }

    pub(crate) fn record_event(&mut self, event: EventId, stream: StreamId) -> Result<()> {
        self.log.push(Event::RecordEvent {
            event: event.0,
            stream: stream.0,
        });
        let events = self.events;
        self.handle(EventKind::RecordEvent, "event", event.0, events)?;
        self.handle(EventKind::RecordEvent, "stream", stream.0, self.streams + 1)
    }

    pub(crate) fn wait_event(&mut self, stream: StreamId, event: EventId) -> Result<()> {
        self.log.push(Event::WaitEvent {
            stream: stream.0,
            event: event.0,
        });
        let events = self.events;
        self.handle(EventKind::WaitEvent, "event", event.0, events)?;
        self.handle(EventKind::WaitEvent, "stream", stream.0, self.streams + 1)
    }

    pub(crate) fn synchronize_event(&mut self, event: EventId) -> Result<()> {
        self.log.push(Event::SynchronizeEvent { event: event.0 });
        let events = self.events;
        self.handle(EventKind::SynchronizeEvent, "event", event.0, events)
    }

    pub(crate) fn alloc_staging(&mut self, label: &str, bytes: usize) -> Result<StagingId> {
        let staging = self.staging.len() as u32;
        self.log.push(Event::AllocStaging {
            staging,
            label: label.to_owned(),
            bytes,
        });
        let cpu = match self.cpu.as_mut().map(|cpu| cpu.alloc_staging(label, bytes)).transpose() {
            Ok(cpu) => cpu,
            Err(e) => return self.outcome(EventKind::AllocStaging, Err(e)),
        };
        self.staging.push(StagingRecord {
            label: label.to_owned(),
            bytes,
            live: true,
            cpu,
        });
        Ok(StagingId(staging))
    }

    pub(crate) fn live_staging(&self, staging: StagingId) -> Result<&StagingRecord> {
        self.staging
            .get(staging.0 as usize)
            .filter(|s| s.live)
            .ok_or(unknown("staging", staging.0))
    }

    pub(crate) fn free_staging(&mut self, staging: StagingId) -> Result<()> {
        self.log.push(Event::FreeStaging { staging: staging.0 });
        let result = self.live_staging(staging).map(|s| s.cpu).and_then(|twin| {
            if let (Some(cpu), Some(twin)) = (self.cpu.as_mut(), twin) {
                cpu.free_staging(twin)?;
            }
            self.staging[staging.0 as usize].live = false;
            Ok(())
        });
        self.outcome(EventKind::FreeStaging, result)
    }

    pub(crate) fn download_async(
        &mut self,
        stream: StreamId,
        buffer: BufferId,
        byte_offset: usize,
        staging: StagingId,
        staging_offset: usize,
        bytes: usize,
    ) -> Result<()> {
        self.log.push(Event::DownloadAsync {
            stream: stream.0,
            buffer: self.name(buffer),
            byte_offset,
            staging: staging.0,
            staging_offset,
            bytes,
        });
        let streams = self.streams;
        let result = (|| {
            if stream.0 > streams {
                return Err(unknown("stream", stream.0));
            }
            self.check_range("download", buffer, byte_offset, bytes)?;
            let s = self.live_staging(staging)?;
            in_range("download into staging", &s.label, s.bytes, staging_offset, bytes)?;
            let twin_staging = s.cpu;
            self.on_cpu(|cpu, twin| {
                cpu.download_async(
                    stream,
                    twin(buffer),
                    byte_offset,
                    twin_staging.expect("an executing driver twins every staging area"),
                    staging_offset,
                    bytes,
                )
            })
        })();
        self.outcome(EventKind::DownloadAsync, result)
    }

    pub(crate) fn read_staging(&mut self, staging: StagingId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        self.log.push(Event::ReadStaging {
            staging: staging.0,
            byte_offset,
            bytes: out.len(),
        });
        let fill = self.download_fill;
        let result = (|| {
            let s = self.live_staging(staging)?;
            in_range("read staging", &s.label, s.bytes, byte_offset, out.len())?;
            let twin = s.cpu;
            match (self.cpu.as_mut(), twin) {
                (Some(cpu), Some(twin)) => cpu.read_staging(twin, byte_offset, out),
                _ => {
                    out.fill(fill);
                    Ok(())
                }
            }
        })();
        self.outcome(EventKind::ReadStaging, result)
    }

    pub(crate) fn synchronize(&mut self) -> Result<()> {
        self.log.push(Event::Synchronize);
        self.syncs += 1;
        let result = if fires(&mut self.sync_fault) {
            Err(Error::Injected {
                call: "synchronize",
                count: self.syncs,
            })
        } else {
            self.cpu.as_mut().map_or(Ok(()), |cpu| cpu.synchronize())
        };
        self.outcome(EventKind::Synchronize, result)
    }
}

/// `[offset, offset + bytes)` inside `size` bytes of `label`, or the range error.
fn in_range(operation: &'static str, label: &str, size: usize, offset: usize, bytes: usize) -> Result<()> {
    match offset.checked_add(bytes) {
        Some(end) if end <= size => Ok(()),
        end => Err(Error::OutOfRange {
            backend: BACKEND,
            operation,
            label: label.to_owned(),
            start: offset as u64,
            end: end.map_or(u64::MAX, |e| e as u64),
            size: size as u64,
        }),
    }
}
