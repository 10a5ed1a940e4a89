//! The one backend choice of every command: `--backend auto|cpu|cuda` becomes
//! a boxed [`Driver`]. `auto` takes CUDA when a device is present, else the
//! CPU; asking for `cuda` without a driver or device is an error, not a crash.
//!
//! `--device N` picks the CUDA device by ordinal (default 0); an ordinal not
//! present is refused with the list of those that are.
//!
//! For the tests of the run's own safety nets, `LBM_INJECT_FAULT=stall-after-replays=N`
//! makes the driver block forever on its next wait after N interval replays
//! (a hung device, as the watchdog sees one).

use clap::ValueEnum;
use serde::Serialize;

use lbm_core::device::{Action, EventId, PeerBuffer, PeerEvent, PeerStream, PlanId, StagingId, StreamId};
use lbm_core::{BufferId, CpuDriver, Driver, Launch};

use crate::AppError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    Auto,
    Cpu,
    Cuda,
}

impl BackendChoice {
    /// Whether the choice goes to CUDA: `auto` picks it when a device is there.
    pub fn is_cuda(self) -> bool {
        match self {
            BackendChoice::Cpu => false,
            BackendChoice::Cuda => true,
            BackendChoice::Auto => lbm_cuda::device_available(),
        }
    }

    /// The driver of the choice on device `ordinal` (CUDA; the CPU backend
    /// has only device 0) and what it runs on.
    pub fn open(self, ordinal: Option<usize>) -> Result<(Box<dyn Driver>, Device), AppError> {
        let (driver, device): (Box<dyn Driver>, Device) = match self.is_cuda() {
            true => {
                let names = lbm_cuda::device_names();
                let ordinal = ordinal.unwrap_or(0);
                if ordinal >= names.len() && !names.is_empty() {
                    return Err(AppError::Flag {
                        flag: "--device",
                        value: ordinal.to_string(),
                        accepted: format!("a CUDA device present: {}", listing(&names)),
                    });
                }
                let driver = lbm_cuda::CudaDriver::new(ordinal).map_err(|e| match names.is_empty() {
                    // Asking for what this machine lacks is a bad argument;
                    // a device that fails to open is not.
                    true => AppError::Flag {
                        flag: "--backend",
                        value: "cuda".into(),
                        accepted: format!("auto or cpu: this machine has no usable CUDA device ({e})"),
                    },
                    false => AppError::NoCuda { reason: e.to_string() },
                })?;
                let device = Device {
                    backend: "cuda",
                    ordinal,
                    name: driver.device_name().to_owned(),
                    memory_bytes: driver.total_memory()?,
                };
                (Box::new(driver), device)
            }
            false => {
                if let Some(n) = ordinal.filter(|n| *n != 0) {
                    let names = lbm_cuda::device_names();
                    let accepted = match names.is_empty() {
                        true => "only 0 (the CPU backend is device 0, and no CUDA device is present)".to_owned(),
                        false => format!("0 with --backend cpu; the CUDA devices are {}", listing(&names)),
                    };
                    return Err(AppError::Flag {
                        flag: "--device",
                        value: n.to_string(),
                        accepted,
                    });
                }
                (Box::new(CpuDriver::new()), Device::host())
            }
        };
        Ok((inject_fault(driver)?, device))
    }
}

/// An opened driver and the device it runs on.
pub type Opened = (Box<dyn Driver>, Device);

impl BackendChoice {
    /// The drivers of a run: one on `device`, or one per slab of a split
    /// (`devices` G, or `device_list` naming each slab's CUDA device, an
    /// ordinal possibly repeated to put several slabs on one device). On
    /// the CPU backend a split's slabs are host drivers side by side.
    pub fn open_split(
        self,
        device: Option<usize>,
        devices: Option<usize>,
        device_list: Option<&[usize]>,
    ) -> Result<Vec<Opened>, AppError> {
        let flag = |flag: &'static str, value: String, accepted: String| AppError::Flag { flag, value, accepted };
        let ordinals: Vec<Option<usize>> = match (devices, device_list, device) {
            (None, None, _) => return Ok(vec![self.open(device)?]),
            (_, _, Some(d)) => {
                return Err(flag(
                    "--device",
                    d.to_string(),
                    "no --device with --devices or --device-list: --device-list names each slab's device".into(),
                ));
            }
            (Some(0), _, _) => return Err(flag("--devices", "0".into(), "1 or more devices".into())),
            (Some(g), Some(list), None) if list.len() != g => {
                return Err(flag(
                    "--device-list",
                    format!("{list:?}"),
                    format!("{g} ordinals, one per device of --devices {g}"),
                ));
            }
            (_, Some([]), None) => return Err(flag("--device-list", "[]".into(), "1 or more CUDA ordinals".into())),
            (_, Some(list), None) => match self.is_cuda() {
                true => list.iter().copied().map(Some).collect(),
                false => {
                    return Err(flag(
                        "--device-list",
                        format!("{list:?}"),
                        "CUDA device ordinals; the CPU backend takes --devices G (G host slabs)".into(),
                    ));
                }
            },
            (Some(g), None, None) => match self.is_cuda() {
                true => {
                    // With no device at all, opening the first says why.
                    let names = lbm_cuda::device_names();
                    if g > names.len() && !names.is_empty() {
                        return Err(flag(
                            "--devices",
                            g.to_string(),
                            format!(
                                "1 to {}, the CUDA devices present ({}); --device-list places several slabs \
                                 on one device (e.g. 0,0)",
                                names.len(),
                                listing(&names)
                            ),
                        ));
                    }
                    (0..g).map(Some).collect()
                }
                false => vec![None; g],
            },
        };
        ordinals.into_iter().map(|o| self.open(o)).collect()
    }
}

fn listing(names: &[String]) -> String {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{i} ({n})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The driver with the fault `LBM_INJECT_FAULT` asks for, if any.
fn inject_fault(driver: Box<dyn Driver>) -> Result<Box<dyn Driver>, AppError> {
    let Ok(spec) = std::env::var("LBM_INJECT_FAULT") else {
        return Ok(driver);
    };
    let replays = spec
        .strip_prefix("stall-after-replays=")
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or_else(|| AppError::Flag {
            flag: "LBM_INJECT_FAULT",
            value: spec.clone(),
            accepted: "stall-after-replays=N".into(),
        })?;
    Ok(Box::new(Stalling {
        inner: driver,
        replays_left: replays,
    }))
}

/// A driver that hangs in its first wait after a number of replays.
struct Stalling {
    inner: Box<dyn Driver>,
    replays_left: u64,
}

impl Driver for Stalling {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn alloc(&mut self, label: &str, bytes: usize) -> lbm_core::Result<BufferId> {
        self.inner.alloc(label, bytes)
    }
    fn free(&mut self, buffer: BufferId) -> lbm_core::Result<()> {
        self.inner.free(buffer)
    }
    fn upload(&mut self, buffer: BufferId, byte_offset: usize, data: &[u8]) -> lbm_core::Result<()> {
        self.inner.upload(buffer, byte_offset, data)
    }
    fn download(&mut self, buffer: BufferId, byte_offset: usize, out: &mut [u8]) -> lbm_core::Result<()> {
        self.inner.download(buffer, byte_offset, out)
    }
    fn memset_async(&mut self, buffer: BufferId, byte_offset: usize, bytes: usize, value: u8) -> lbm_core::Result<()> {
        self.inner.memset_async(buffer, byte_offset, bytes, value)
    }
    fn copy_async(
        &mut self,
        src: BufferId,
        src_offset: usize,
        dst: BufferId,
        dst_offset: usize,
        bytes: usize,
    ) -> lbm_core::Result<()> {
        self.inner.copy_async(src, src_offset, dst, dst_offset, bytes)
    }
    fn launch(&mut self, launch: &Launch) -> lbm_core::Result<()> {
        self.inner.launch(launch)
    }
    fn synchronize(&mut self) -> lbm_core::Result<()> {
        if self.replays_left == 0 {
            loop {
                std::thread::park();
            }
        }
        self.inner.synchronize()
    }
    fn free_memory(&self) -> lbm_core::Result<u64> {
        self.inner.free_memory()
    }
    fn create_stream(&mut self) -> lbm_core::Result<StreamId> {
        self.inner.create_stream()
    }
    fn create_event(&mut self) -> lbm_core::Result<EventId> {
        self.inner.create_event()
    }
    fn record_event(&mut self, event: EventId, stream: StreamId) -> lbm_core::Result<()> {
        self.inner.record_event(event, stream)
    }
    fn wait_event(&mut self, stream: StreamId, event: EventId) -> lbm_core::Result<()> {
        self.inner.wait_event(stream, event)
    }
    fn synchronize_event(&mut self, event: EventId) -> lbm_core::Result<()> {
        self.inner.synchronize_event(event)
    }
    fn share(&mut self, buffer: BufferId) -> lbm_core::Result<Option<PeerBuffer>> {
        self.inner.share(buffer)
    }
    fn record_peer_event(&mut self, event: EventId, stream: StreamId) -> lbm_core::Result<PeerEvent> {
        self.inner.record_peer_event(event, stream)
    }
    fn wait_peer_event(&mut self, stream: StreamId, event: PeerEvent) -> lbm_core::Result<()> {
        self.inner.wait_peer_event(stream, event)
    }
    fn copy_from_peer(&mut self, stream: StreamId, src: PeerBuffer, dst: BufferId) -> lbm_core::Result<()> {
        self.inner.copy_from_peer(stream, src, dst)
    }
    fn share_stream(&mut self, stream: StreamId) -> lbm_core::Result<Option<PeerStream>> {
        self.inner.share_stream(stream)
    }
    fn replay_on(&mut self, stream: StreamId, plan: PlanId) -> lbm_core::Result<()> {
        self.inner.replay_on(stream, plan)
    }
    fn alloc_staging(&mut self, label: &str, bytes: usize) -> lbm_core::Result<StagingId> {
        self.inner.alloc_staging(label, bytes)
    }
    fn free_staging(&mut self, staging: StagingId) -> lbm_core::Result<()> {
        self.inner.free_staging(staging)
    }
    fn download_async(
        &mut self,
        stream: StreamId,
        buffer: BufferId,
        byte_offset: usize,
        staging: StagingId,
        staging_offset: usize,
        bytes: usize,
    ) -> lbm_core::Result<()> {
        self.inner
            .download_async(stream, buffer, byte_offset, staging, staging_offset, bytes)
    }
    fn read_staging(&mut self, staging: StagingId, byte_offset: usize, out: &mut [u8]) -> lbm_core::Result<()> {
        self.inner.read_staging(staging, byte_offset, out)
    }
    fn prepare(&mut self, label: &str, actions: &[Action]) -> lbm_core::Result<PlanId> {
        self.inner.prepare(label, actions)
    }
    fn replay(&mut self, plan: PlanId) -> lbm_core::Result<()> {
        self.replays_left = self.replays_left.saturating_sub(1);
        self.inner.replay(plan)
    }
    fn release_plan(&mut self, plan: PlanId) -> lbm_core::Result<()> {
        self.inner.release_plan(plan)
    }
}

/// What a run runs on, for the manifest and `lbm info`.
#[derive(Clone, Debug, Serialize)]
pub struct Device {
    pub backend: &'static str,
    /// The CUDA device ordinal (0 for the CPU).
    pub ordinal: usize,
    /// The GPU's name, or the CPU model and its thread count.
    pub name: String,
    pub memory_bytes: u64,
}

impl Device {
    /// This machine's CPU and memory, as the CPU backend uses them.
    pub fn host() -> Device {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split(':').nth(1)))
            .map_or_else(|| "unknown CPU".to_owned(), |m| m.trim().to_owned());
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let kib = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        Device {
            backend: "cpu",
            ordinal: 0,
            name: format!("{model} ({threads} threads)"),
            memory_bytes: kib * 1024,
        }
    }
}

/// sha256 of the PTX embedded in this build, hex.
pub fn ptx_sha256() -> String {
    use sha2::Digest;
    crate::plan::hex(&sha2::Sha256::digest(lbm_cuda::PTX.as_bytes()))
}
