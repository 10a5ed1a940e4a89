//! A run split over several devices: one [`Stepper`] per slab of the base
//! grid ([`Decomposition`], each on its own [`Driver`]), advanced interval by
//! interval with the halo exchange between them, and read back as the
//! whole domain.
//!
//! After each base interval, and after the state is set, every cut's
//! crossing populations move both ways: `pack_halo` on the sending slab's
//! driver gathers its edge column's three crossing populations into a send
//! buffer, the transport carries the bytes into the receiving slab's
//! buffer, and `unpack_halo` writes them into the receiver's halo column,
//! from which its next update pulls them. Two transports, through the
//! [`Driver`] seam:
//! - **device** ([`Split::transport`]), when every slab's driver shares its
//!   buffers ([`Driver::share`]; CUDA), on a second stream of each slab:
//!   after the update's tail the sender packs (once its receivers copied the
//!   last packs); the receiver waits for the packs (a peer event), copies
//!   the send buffer device to device and unpacks while its next interval's
//!   head (up to the base grid's bulk update, which never reads the halo
//!   column) runs; only the tail waits for the halo
//!   ([`Stepper::step_in_parts`]). The intervals of a `step(n)` are all
//!   enqueued before any is waited for. With a collective library attached
//!   ([`Split::use_collective`]: NCCL on CUDA, what `lbm run --devices`
//!   attaches when the library is found), the copies become one group of
//!   sends and receives per interval, each send on its sender's exchange
//!   stream after its packs and each receive on its receiver's before its
//!   unpacks; the library orders the two ends;
//! - **host** otherwise (the CPU backend, the mock): after each interval, a
//!   download and an upload through the two drivers, in process.
//!
//! Patches and bodies stay whole on one slab, and refined levels never cross
//! a cut, so one exchange per base interval (the level-0 hop) is all the
//! coupling there is: each slab computes the bits one device would.
//!
//! Reads are of the whole domain in its own numbering: the base grid's
//! fields are the slabs' owned columns side by side, a patch is read from
//! the slab that holds it, forces and the exchange ledgers are the slabs'
//! sums, total mass too.
//!
//! What it does not do: overlap the pack with the update (it follows the
//! tail), or span processes.

use ndarray::{Array3, Axis, concatenate};

use crate::config::{ExecConfig, LatticeConfig};
use crate::device::{Action, BufferId, Collective, Driver, EventId, PeerBuffer, PeerEvent, PlanId, StreamId, Transfer};
use crate::domain::decompose::{Decomposition, SlabWindow};
use crate::domain::hierarchy::{Hierarchy, Rect};
use crate::error::{Error, Result};
use crate::kernels::KernelArgs;
use crate::kernels::halo::{HaloColumn, PackHalo, UnpackHalo, halo_bytes};
use crate::lattice::Moments;
use crate::ledger::{ExchangeRecord, MemoryLedger};
use crate::stepper::{Fields, Snapshot, Stepper, Unhealthy};

/// One direction of one cut: slab `from`'s edge column into slab `to`'s
/// halo column.
#[derive(Clone, Debug)]
struct HaloLink {
    from: usize,
    to: usize,
    /// 0: populations moving towards x-min; 1: towards x-max.
    towards: u32,
    send: BufferId,
    recv: BufferId,
    bytes: usize,
    /// The send buffer as the receiver's driver copies it, when every
    /// slab's driver shares its buffers (the device transport).
    peer: Option<PeerBuffer>,
}

/// What a slab's device transport orders its work with: the stream its
/// exchange runs on beside the update, and its events (each recorded once
/// per interval): its packs done (two, by interval parity, so that an update
/// two intervals on waits for the right one), its halo received and
/// unpacked, and its update's tail done.
#[derive(Clone, Copy, Debug)]
struct SlabEvents {
    side: StreamId,
    packed: [EventId; 2],
    received: EventId,
    updated: EventId,
}

/// A slab's prepared halo plans, one per level-0 parity: its packs, then
/// its unpacks.
#[derive(Clone, Copy, Debug)]
struct SlabPlans {
    pack: [PlanId; 2],
    unpack: [PlanId; 2],
}

/// A collective library the halos travel through, and the transfers of one
/// exchange (the links in order).
struct Attached {
    collective: Box<dyn Collective>,
    transfers: Vec<Transfer>,
}

/// A run split over `drivers.len()` devices; see the module documentation.
pub struct Split<D: Driver> {
    /// Declared first so that it is dropped before the slabs' drivers.
    attached: Option<Attached>,
    hierarchy: Hierarchy,
    decomposition: Decomposition,
    slabs: Vec<Stepper<D>>,
    /// For each slab and level, the whole hierarchy's index of each of the
    /// slab's patches.
    whole_index: Vec<Vec<Vec<usize>>>,
    links: Vec<HaloLink>,
    plans: Vec<SlabPlans>,
    /// Each slab's events, with the device transport.
    events: Option<Vec<SlabEvents>>,
    step_count: u64,
}

/// Tags a slab's error with its index.
fn on_slab(slab: usize) -> impl Fn(Error) -> Error {
    move |e| match e {
        Error::Slab { .. } => e,
        e => Error::Slab {
            slab,
            source: Box::new(e),
        },
    }
}

impl<D: Driver> Split<D> {
    /// Plans the split of `lattice` over one slab per driver, builds each
    /// slab's stepper on its driver (`exec.slab` set to its window), its
    /// halo buffers and plans, and fills the lattice at rest.
    pub fn new(drivers: Vec<D>, lattice: LatticeConfig, exec: ExecConfig) -> Result<Self> {
        if exec.slab.is_some() {
            return Err(Error::parameter(
                "exec.slab",
                "a window",
                "none: the split chooses each slab's window",
            ));
        }
        let (hierarchy, _) = lattice.validate(&exec.tiles)?;
        let decomposition = Decomposition::plan(&hierarchy, &lattice, drivers.len())?;
        let windows: Vec<SlabWindow> = (0..drivers.len()).map(|k| decomposition.window(k)).collect();
        let mut slabs = Vec::with_capacity(drivers.len());
        for (k, driver) in drivers.into_iter().enumerate() {
            let exec = ExecConfig {
                slab: Some(windows[k]),
                ..exec.clone()
            };
            slabs.push(Stepper::new(driver, lattice.clone(), exec).map_err(on_slab(k))?);
        }
        let whole_index = slabs
            .iter()
            .map(|s| {
                s.hierarchy()
                    .levels
                    .iter()
                    .enumerate()
                    .map(|(level, patches)| {
                        patches
                            .iter()
                            .map(|p| match level {
                                0 => 0,
                                _ => hierarchy.levels[level]
                                    .iter()
                                    .position(|w| w.rect == p.rect)
                                    .expect("a slab's patch is one of the whole hierarchy's"),
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let mut split = Split {
            attached: None,
            hierarchy,
            decomposition,
            slabs,
            whole_index,
            links: Vec::new(),
            plans: Vec::new(),
            events: None,
            step_count: 0,
        };
        if let Err(e) = split.connect(&windows).and_then(|()| split.exchange()) {
            // The refusal is what to report; closing adds nothing to act on.
            let _ = split.close();
            return Err(e);
        }
        Ok(split)
    }

    /// Allocates both ends of every cut's two links and prepares each
    /// slab's packs and unpacks.
    fn connect(&mut self, windows: &[SlabWindow]) -> Result<()> {
        let g = self.slabs.len();
        let bytes = halo_bytes(self.decomposition.rows);
        // Each slab with a halo beyond its x-max side meets the next one
        // (the first, across a periodic side) there.
        for left in (0..g).filter(|&k| windows[k].halo[1]) {
            let right = (left + 1) % g;
            for (from, to, towards) in [(right, left, 0), (left, right, 1)] {
                let label = format!("halo.{from}to{to}");
                let send = self.slabs[from]
                    .with_device(|d, _| d.alloc(&format!("{label}.send"), bytes))
                    .map_err(on_slab(from))?;
                let recv = self.slabs[to]
                    .with_device(|d, _| d.alloc(&format!("{label}.recv"), bytes))
                    .map_err(on_slab(to))?;
                let peer = self.slabs[from]
                    .with_device(|d, _| d.share(send))
                    .map_err(on_slab(from))?;
                self.links.push(HaloLink {
                    from,
                    to,
                    towards,
                    send,
                    recv,
                    bytes,
                    peer,
                });
            }
        }
        for s in 0..g {
            let plans = self.slabs[s]
                .with_device(|d, view| {
                    let (base, f) = view.base();
                    let (layout, active) = (base.layout, base.active);
                    let column = |x: u32| Rect::new(x, active.y0, x + 1, active.y1);
                    let mut ids = [[PlanId(0); 2]; 2];
                    for parity in 0..2 {
                        let at = |halo: BufferId, x: u32, towards: u32| HaloColumn {
                            f: f[parity].into(),
                            halo: halo.into(),
                            layout,
                            column: column(x),
                            towards,
                        };
                        // The edge column a link sends from, and the halo column it fills.
                        let edge = |towards: u32| if towards == 0 { active.x0 } else { active.x1 - 1 };
                        let halo = |towards: u32| if towards == 0 { active.x1 } else { active.x0 - 1 };
                        let packs: Vec<Action> = self
                            .links
                            .iter()
                            .filter(|l| l.from == s)
                            .map(|l| Action::Launch(PackHalo(at(l.send, edge(l.towards), l.towards)).launch()))
                            .collect();
                        let unpacks: Vec<Action> = self
                            .links
                            .iter()
                            .filter(|l| l.to == s)
                            .map(|l| Action::Launch(UnpackHalo(at(l.recv, halo(l.towards), l.towards)).launch()))
                            .collect();
                        ids[0][parity] = d.prepare(&format!("halo.pack.{parity}"), &packs)?;
                        ids[1][parity] = d.prepare(&format!("halo.unpack.{parity}"), &unpacks)?;
                    }
                    Ok::<_, Error>(SlabPlans {
                        pack: ids[0],
                        unpack: ids[1],
                    })
                })
                .map_err(on_slab(s))?;
            self.plans.push(plans);
        }
        if !self.links.is_empty() && self.links.iter().all(|l| l.peer.is_some()) {
            let events = (0..g)
                .map(|s| {
                    self.slabs[s].prepare_parts().map_err(on_slab(s))?;
                    self.slabs[s]
                        .with_device(|d, _| {
                            Ok::<_, Error>(SlabEvents {
                                side: d.create_stream()?,
                                packed: [d.create_event()?, d.create_event()?],
                                received: d.create_event()?,
                                updated: d.create_event()?,
                            })
                        })
                        .map_err(on_slab(s))
                })
                .collect::<Result<Vec<_>>>()?;
            self.events = Some(events);
        }
        Ok(())
    }

    /// How halos move: the collective's name ("nccl"), "device" (every
    /// slab's driver copies from its neighbours' buffers on its own stream)
    /// or "host" (a download and an upload).
    pub fn transport(&self) -> &'static str {
        match (&self.attached, &self.events) {
            (Some(a), _) => a.collective.name(),
            (None, Some(_)) => "device",
            (None, None) => "host",
        }
    }

    /// Moves the halos through `collective` from the next interval on,
    /// instead of the device transport's copies. Refused, with the split
    /// unchanged, where there is no device transport (a backend that moves
    /// bytes only through the host) or a slab's driver does not share its
    /// exchange stream.
    pub fn use_collective(&mut self, collective: Box<dyn Collective>) -> Result<()> {
        let Some(events) = self.events.clone() else {
            return Err(Error::NotAvailable {
                what: format!("halos through {}", collective.name()),
                reason: "the slabs' drivers move bytes only through the host",
            });
        };
        let mut transfers = Vec::with_capacity(self.links.len());
        for link in &self.links {
            let stream = |s: usize| {
                self.slabs[s]
                    .with_device(|d, _| d.share_stream(events[s].side))
                    .map_err(on_slab(s))?
                    .ok_or_else(|| {
                        on_slab(s)(Error::NotAvailable {
                            what: format!("halos through {}", collective.name()),
                            reason: "the slab's driver does not share its streams",
                        })
                    })
            };
            let dst = self.slabs[link.to]
                .with_device(|d, _| d.share(link.recv))
                .map_err(on_slab(link.to))?
                .expect("the device transport shares every buffer");
            transfers.push(Transfer {
                src: link.peer.expect("the device transport shares every buffer"),
                dst,
                send_on: stream(link.from)?,
                recv_on: stream(link.to)?,
            });
        }
        self.attached = Some(Attached { collective, transfers });
        Ok(())
    }

    /// Fills every halo column from the neighbours' current populations.
    fn exchange(&mut self) -> Result<()> {
        let parity = (self.step_count % 2) as usize;
        for (s, plans) in self.plans.iter().enumerate() {
            self.slabs[s]
                .with_device(|d, _| d.replay(plans.pack[parity]))
                .map_err(on_slab(s))?;
        }
        for link in &self.links {
            let mut bytes = vec![0u8; link.bytes];
            self.slabs[link.from]
                .with_device(|d, _| d.download(link.send, 0, &mut bytes))
                .map_err(on_slab(link.from))?;
            self.slabs[link.to]
                .with_device(|d, _| d.upload(link.recv, 0, &bytes))
                .map_err(on_slab(link.to))?;
        }
        for (s, plans) in self.plans.iter().enumerate() {
            self.slabs[s]
                .with_device(|d, _| d.replay(plans.unpack[parity]))
                .map_err(on_slab(s))?;
        }
        Ok(())
    }

    /// The whole domain's hierarchy.
    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }

    pub fn decomposition(&self) -> &Decomposition {
        &self.decomposition
    }

    /// The slabs' steppers, in slab order.
    pub fn slabs(&self) -> &[Stepper<D>] {
        &self.slabs
    }

    pub fn step_count(&self) -> u64 {
        self.step_count
    }

    /// Sets every slab's state from `init` (as [`Stepper::initialize`]) and
    /// fills the halos.
    pub fn initialize(&mut self, init: impl Fn(usize, f64, f64) -> Moments) -> Result<()> {
        for (s, slab) in self.slabs.iter().enumerate() {
            slab.initialize(&init).map_err(on_slab(s))?;
        }
        self.exchange()
    }

    /// Advances `n` base intervals with the halo exchange after each: on
    /// the device transport every interval enqueued before any wait; on the
    /// host transport, interval by interval, every slab's enqueued, each
    /// waited for, then the exchange.
    pub fn step(&mut self, n: u64) -> Result<()> {
        match self.events.clone() {
            Some(events) => self.step_on_devices(n, &events),
            None => (0..n).try_for_each(|_| {
                let begun = self.each_slab(|_, slab| slab.begin_step(1));
                self.finish_all(begun)?;
                self.step_count += 1;
                self.exchange()
            }),
        }
    }

    /// `work` on every slab in order, up to the first failure.
    fn each_slab(&self, mut work: impl FnMut(usize, &Stepper<D>) -> Result<()>) -> Result<()> {
        self.slabs
            .iter()
            .enumerate()
            .try_for_each(|(s, slab)| work(s, slab).map_err(on_slab(s)))
    }

    /// Waits for every slab with work in flight, whatever `begun` says, so
    /// none is left in flight; the first error, `begun`'s first.
    fn finish_all(&self, begun: Result<()>) -> Result<()> {
        let mut first = begun.err();
        for (s, slab) in self.slabs.iter().enumerate() {
            if slab.status() == crate::stepper::Status::Advancing
                && let Err(e) = slab.finish_step()
            {
                first.get_or_insert(on_slab(s)(e));
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// `n` intervals with the device transport (every slab sends and
    /// receives: each meets a neighbour), every slab's work enqueued before
    /// any is waited for. Each interval, on every slab: the update's
    /// head (the base grid's bulk update) on the main stream, then its tail
    /// once the halo of the interval before is unpacked; on the side stream
    /// meanwhile, after the tail, the packs (once the receivers copied the
    /// last ones), then the copies of the neighbours' packs and the unpack,
    /// which the next interval's head overlaps.
    fn step_on_devices(&mut self, n: u64, events: &[SlabEvents]) -> Result<()> {
        if n == 0 {
            return self.each_slab(|_, slab| slab.step(0));
        }
        let g = self.slabs.len();
        let mut packed: Vec<[Option<PeerEvent>; 2]> = vec![[None; 2]; g];
        let mut received: Vec<Option<PeerEvent>> = vec![None; g];
        let main = StreamId::MAIN;
        let enqueued = (0..n).try_for_each(|k| {
            let parity = ((self.step_count + k + 1) % 2) as usize;
            let turn = (k % 2) as usize;
            self.each_slab(|s, slab| {
                let e = events[s];
                // The update overwrites what the packs of two intervals ago read.
                slab.enqueue_on_device(|d| d.wait_event(main, e.packed[turn]))?;
                slab.step_in_parts(|d| d.wait_event(main, e.received))?;
                slab.enqueue_on_device(|d| {
                    d.record_event(e.updated, main)?;
                    d.wait_event(e.side, e.updated)
                })
            })?;
            for (s, slab) in self.slabs.iter().enumerate() {
                let (plans, e) = (self.plans[s], events[s]);
                // A collective's send completes only once received, so the
                // next pack, behind it on the same stream, needs no wait.
                let waits: Vec<PeerEvent> = match self.attached {
                    Some(_) => Vec::new(),
                    None => (self.links.iter().filter(|l| l.from == s))
                        .filter_map(|l| received[l.to])
                        .collect(),
                };
                packed[s][turn] = Some(
                    slab.enqueue_on_device(|d| {
                        waits.iter().try_for_each(|w| d.wait_peer_event(e.side, *w))?;
                        d.replay_on(e.side, plans.pack[parity])?;
                        d.record_peer_event(e.packed[turn], e.side)
                    })
                    .map_err(on_slab(s))?,
                );
            }
            if let Some(a) = self.attached.as_mut() {
                a.collective.transfer(&a.transfers)?;
            }
            for (r, slab) in self.slabs.iter().enumerate() {
                let (plans, e) = (self.plans[r], events[r]);
                let links: Vec<&HaloLink> = match self.attached {
                    Some(_) => Vec::new(),
                    None => self.links.iter().filter(|l| l.to == r).collect(),
                };
                received[r] = Some(
                    slab.enqueue_on_device(|d| {
                        for link in &links {
                            let sent = packed[link.from][turn].expect("every sender packed this interval");
                            d.wait_peer_event(e.side, sent)?;
                            let peer = link.peer.expect("the device transport shares every buffer");
                            d.copy_from_peer(e.side, peer, link.recv)?;
                        }
                        d.replay_on(e.side, plans.unpack[parity])?;
                        d.record_peer_event(e.received, e.side)
                    })
                    .map_err(on_slab(r))?,
                );
            }
            Ok(())
        });
        self.finish_all(enqueued)?;
        self.step_count += n;
        Ok(())
    }

    /// The whole hierarchy's index of patch `local` of `level` on slab `slab`.
    pub fn whole_patch(&self, slab: usize, level: usize, local: usize) -> usize {
        self.whole_index[slab][level][local]
    }

    /// Every slab's device buffers, as `slab/{k}/{name}`.
    pub fn memory_ledger(&self) -> MemoryLedger {
        let mut ledger = MemoryLedger::default();
        for (k, slab) in self.slabs.iter().enumerate() {
            for (name, bytes) in slab.memory_ledger().entries {
                ledger.entries.insert(format!("slab/{k}/{name}"), bytes);
            }
        }
        ledger
    }

    /// Every slab's [`Stepper::snapshot`], each buffer labelled
    /// `slab/{k}/{label}`: [`Split::restore`] of a split into as many slabs
    /// continues from it bit for bit.
    pub fn snapshot(&self) -> Result<Snapshot> {
        let mut buffers = Vec::new();
        let mut first = None;
        for (k, slab) in self.slabs.iter().enumerate() {
            let snapshot = slab.snapshot().map_err(on_slab(k))?;
            first.get_or_insert((snapshot.step_count, snapshot.window_start));
            buffers.extend(
                snapshot
                    .buffers
                    .into_iter()
                    .map(|(label, bytes)| (format!("slab/{k}/{label}"), bytes)),
            );
        }
        let (step_count, window_start) = first.expect("a split has a slab");
        Ok(Snapshot {
            step_count,
            window_start,
            buffers,
        })
    }

    /// Puts back what [`Split::snapshot`] took from a split of the same
    /// configuration over as many slabs, then fills the halos; a snapshot
    /// of another split (or of one device) is refused.
    pub fn restore(&mut self, snapshot: &Snapshot) -> Result<()> {
        let ours: usize = self.slabs.iter().map(|s| s.snapshot_buffers()).sum();
        if ours != snapshot.buffers.len() {
            return Err(Error::Snapshot {
                reason: format!(
                    "it holds {} state buffers, a split over {} devices has {ours}",
                    snapshot.buffers.len(),
                    self.slabs.len()
                ),
            });
        }
        for (k, slab) in self.slabs.iter().enumerate() {
            let prefix = format!("slab/{k}/");
            let buffers: Vec<(String, Vec<u8>)> = snapshot
                .buffers
                .iter()
                .filter_map(|(label, bytes)| Some((label.strip_prefix(&prefix)?.to_owned(), bytes.clone())))
                .collect();
            let part = Snapshot {
                step_count: snapshot.step_count,
                window_start: snapshot.window_start,
                buffers,
            };
            slab.restore(&part).map_err(|e| match e {
                Error::Snapshot { reason } => Error::Snapshot {
                    reason: format!("slab {k} of a split over {} devices: {reason}", self.slabs.len()),
                },
                e => on_slab(k)(e),
            })?;
        }
        self.step_count = snapshot.step_count;
        self.exchange()
    }

    /// The slab holding `patch` of `level` (whole numbering) and its index there.
    fn locate(&self, level: usize, patch: usize) -> Result<(usize, usize)> {
        self.whole_index
            .iter()
            .enumerate()
            .find_map(|(s, levels)| {
                let local = levels.get(level)?.iter().position(|&w| w == patch)?;
                Some((s, local))
            })
            .ok_or_else(|| {
                Error::parameter(
                    "patch",
                    format!("level {level} patch {patch}"),
                    "a patch of the hierarchy",
                )
            })
    }

    /// The fields of one patch's active region; the base grid's are the
    /// slabs' side by side.
    pub fn fields(&self, level: usize, patch: usize) -> Result<Fields> {
        if level == 0 && patch == 0 {
            let parts = self
                .slabs
                .iter()
                .enumerate()
                .map(|(s, slab)| slab.fields(0, 0).map_err(on_slab(s)))
                .collect::<Result<Vec<_>>>()?;
            return Ok(Fields::side_by_side(&parts));
        }
        let (s, local) = self.locate(level, patch)?;
        self.slabs[s].fields(level, local).map_err(on_slab(s))
    }

    /// The populations of one patch's active region, indexed
    /// `[direction, y, x]`; the base grid's are the slabs' side by side.
    pub fn active_populations(&self, level: usize, patch: usize) -> Result<Array3<f32>> {
        if level == 0 && patch == 0 {
            let parts = self
                .slabs
                .iter()
                .enumerate()
                .map(|(s, slab)| slab.active_populations(0, 0).map_err(on_slab(s)))
                .collect::<Result<Vec<_>>>()?;
            let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
            return Ok(concatenate(Axis(2), &views).expect("every slab holds every row"));
        }
        let (s, local) = self.locate(level, patch)?;
        self.slabs[s].active_populations(level, local).map_err(on_slab(s))
    }

    /// One body's exchange record over the slabs, their forces and torques
    /// summed.
    fn reduce(&self, read: impl Fn(&Stepper<D>) -> Result<ExchangeRecord>) -> Result<ExchangeRecord> {
        let mut parts = self
            .slabs
            .iter()
            .enumerate()
            .map(|(s, slab)| read(slab).map_err(on_slab(s)));
        let mut total = parts.next().expect("a split has a slab")?;
        for part in parts {
            total.add_part(&part?);
        }
        Ok(total)
    }

    /// [`Stepper::read_raw_exchange`] of the whole domain.
    pub fn read_raw_exchange(&self, body: usize) -> Result<ExchangeRecord> {
        self.reduce(|s| s.read_raw_exchange(body))
    }

    /// [`Stepper::read_exchange_window`] of the whole domain.
    pub fn read_exchange_window(&self, body: usize) -> Result<ExchangeRecord> {
        self.reduce(|s| s.read_exchange_window(body))
    }

    /// Opens (or reopens) every slab's exchange window at the current step.
    pub fn start_exchange_window(&self) -> Result<()> {
        for (s, slab) in self.slabs.iter().enumerate() {
            slab.start_exchange_window().map_err(on_slab(s))?;
        }
        Ok(())
    }

    /// The slabs' total mass, summed in slab order (so not the bits of one
    /// device's sum).
    pub fn total_mass(&self) -> Result<f64> {
        let mut total = 0.0;
        for (s, slab) in self.slabs.iter().enumerate() {
            total += slab.total_mass().map_err(on_slab(s))?;
        }
        Ok(total)
    }

    /// [`Stepper::check_health`] of every slab, in the whole domain's
    /// numbering: the first finding in finest-level, patch and cell order,
    /// as one device finds it (each slab's first is its own; a base-grid
    /// cell's row-major order spans the slabs).
    pub fn check_health(&self, speed_limit: f64) -> Result<Option<Unhealthy>> {
        let mut first: Option<Unhealthy> = None;
        for (s, slab) in self.slabs.iter().enumerate() {
            if let Some(mut found) = slab.check_health(speed_limit).map_err(on_slab(s))? {
                if found.level == 0 {
                    found.cell[0] += self.decomposition.slabs[s].x0;
                }
                found.patch = self.whole_index[s][found.level][found.patch];
                let order = |u: &Unhealthy| (std::cmp::Reverse(u.level), u.patch, u.cell[1], u.cell[0]);
                if first.as_ref().is_none_or(|f| order(&found) < order(f)) {
                    first = Some(found);
                }
            }
        }
        Ok(first)
    }

    /// Frees every halo buffer and plan and closes every slab, even when
    /// one fails (a failed slab too); reports the first failure.
    pub fn close(&mut self) -> Result<()> {
        let plans = std::mem::take(&mut self.plans);
        let links = std::mem::take(&mut self.links);
        let mut first: Option<Error> = None;
        for (s, slab) in self.slabs.iter().enumerate() {
            let closed = slab.close_with(|d| {
                let mut released: Result<()> = Ok(());
                let mut keep = |r: Result<()>| {
                    if released.is_ok() {
                        released = r;
                    }
                };
                if let Some(p) = plans.get(s) {
                    p.pack
                        .into_iter()
                        .chain(p.unpack)
                        .for_each(|id| keep(d.release_plan(id)));
                }
                for link in &links {
                    if link.from == s {
                        keep(d.free(link.send));
                    }
                    if link.to == s {
                        keep(d.free(link.recv));
                    }
                }
                released
            });
            if let Err(e) = closed {
                first.get_or_insert(on_slab(s)(e));
            }
        }
        // Every stream is done: the communicator has nothing in flight.
        self.attached = None;
        first.map_or(Ok(()), Err)
    }
}

impl<D: Driver> Drop for Split<D> {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; `close` reports them.
        let _ = self.close();
    }
}
