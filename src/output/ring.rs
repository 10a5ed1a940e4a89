//! The output ring: everything a run writes leaves the device through a ring
//! of device-to-device producers (`ring-producer`), never through a download
//! of the populations.
//!
//! At each observation (a force sample, a probe sample, a save point) the
//! stepper's main stream gets, after the interval that ends there:
//! `save_moments` of every patch into one staging arena (three f32 per active
//! cell), then one self-describing record per patch and one per exchange
//! window. A sample of the point probes alone (between save points) takes
//! `save_moments` of each probe's few cells instead of every patch, so a
//! probe sampled every interval costs a few bytes, not the whole grid's
//! moments. The bytes published since the last drain come off the device in
//! one asynchronous copy per batch, on the ring's own stream, into pinned
//! staging; each record's header is checked (magic, check, sequence, step,
//! kind, length) before its payload is used.
//!
//! Back-pressure: a record is never enqueued where it would overwrite bytes
//! not yet drained. When the ring is too full for the next record, the
//! records before it are drained first; each such wait is counted in
//! [`RingStats`]. Nothing is dropped or duplicated: the sequence numbers of
//! the drained records must follow one another. The samples due inside a
//! chunk of intervals ([`OutputRing::sample`] during
//! `Stepper::begin_step_sampled`) stay on the device until the chunk's one wait
//! and come back together ([`OutputRing::collect`]). The decisions that
//! depend on what comes out (a non-finite force stops the run) are taken
//! when the observations return, naming the same interval on every backend
//! and machine (a run stops at the end of the chunk that holds it); the
//! files are then written by [`super::thread::WriterThread`] while the next
//! intervals run.

use serde::Serialize;

use lbm_core::device::{EventId, StagingId, StreamId};
use lbm_core::domain::hierarchy::Rect;
use lbm_core::kernels::moments::{MOMENT_PLANES, SaveMoments};
use lbm_core::kernels::producer::record_bytes;
use lbm_core::ledger::ExchangeRecord;
use lbm_core::stepper::{DeviceView, Fields};
use lbm_core::{BufferId, CoveredCells, Driver, Stepper, WindowBuffer};
use ring_producer::{Ring, RingError, parse_records};

use super::fields::ProbeCells;
use crate::AppError;

/// Record kinds: the high half says what, the low half which one.
const KIND_FIELDS: u32 = 1 << 16;
const KIND_WINDOW: u32 = 2 << 16;
const KIND_PROBE: u32 = 3 << 16;

/// What the ring carried over a run, for `summary.json`.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct RingStats {
    pub capacity_bytes: u64,
    pub records: u64,
    pub bytes: u64,
    /// Device-to-host copies, one per drained batch.
    pub batches: u64,
    /// Times a record had to wait for the ring to be drained first.
    pub waits: u64,
}

/// One observation as it came out of the ring.
pub struct Observation {
    /// Where the exchange windows opened, if they are open.
    pub window_start: Option<u64>,
    /// Every patch's lattice fields in hierarchy order (empty when the
    /// observation did not ask for fields).
    pub fields: Vec<Fields>,
    /// Every exchange window's accumulator words, in the order of the
    /// stepper's windows (`DeviceView::windows`; [`OutputRing::records`]
    /// turns them into each body's record).
    pub windows: Vec<Vec<f64>>,
    /// The lattice fields of each probe's cells, in the order the ring was
    /// given them (empty when the observation did not ask for them).
    pub probes: Vec<Fields>,
}

/// A ring and its staging on a stepper's device; see the module documentation.
pub struct OutputRing {
    ring: Ring,
    arena: BufferId,
    /// Byte offset of each patch's moments in the arena, hierarchy order.
    offsets: Vec<usize>,
    actives: Vec<Rect>,
    /// Each probe's patch (hierarchy order), cells and byte offset in the
    /// arena.
    probes: Vec<(usize, Rect, usize)>,
    windows: Vec<WindowBuffer>,
    staging: StagingId,
    stream: StreamId,
    event: EventId,
    /// Bytes drained so far: the consumer's tail.
    tail: u64,
    /// The sequence number of the last record drained.
    sequence: u64,
    /// Observations enqueued since the last collect.
    pending: Vec<Pending>,
    stats: RingStats,
}

/// A record's payload as the f32 planes `save_moments` wrote.
fn floats(payload: &[u8]) -> Vec<f32> {
    payload
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("four bytes")))
        .collect()
}

/// Bytes a region of `cells` cells takes in the arena: 16-byte aligned
/// records copy in 16-byte words.
fn arena_slot(cells: usize) -> usize {
    (MOMENT_PLANES * cells * 4).next_multiple_of(16)
}

/// Bytes of one observation's records: the moments of regions of `cells`
/// cells each, and exchange windows of `windows` bytes each. A ring made
/// with no capacity holds one.
fn observation_bytes(cells: impl Iterator<Item = usize>, windows: impl Iterator<Item = u64>) -> u64 {
    cells
        .map(|c| (MOMENT_PLANES * c * 4) as u64)
        .chain(windows)
        .map(|b| record_bytes(b).expect("a record of a patch fits u64"))
        .sum()
}

/// What a run's ring takes, as [`OutputRing::new`] allocates it with no
/// capacity given, for patches of `cells` cells each, `probes` point probes
/// and exchange windows of `windows` bytes each: the device's bytes (the
/// arena and the ring) and the host's pinned staging.
pub fn ring_memory(cells: &[usize], probes: usize, windows: &[u64]) -> (u64, u64) {
    let probe = ProbeCells::MAX_CELLS;
    let arena: usize = cells.iter().map(|c| arena_slot(*c)).sum::<usize>() + probes * arena_slot(probe);
    let regions = cells.iter().copied().chain(std::iter::repeat_n(probe, probes));
    let observation = observation_bytes(regions, windows.iter().copied());
    (arena.max(16) as u64 + observation, observation)
}

fn ring_error(e: RingError) -> AppError {
    AppError::Ring { source: e }
}

impl OutputRing {
    /// A ring of `capacity` bytes (`None`: room for one whole observation)
    /// with its arena and staging, on the stepper's device; `probes` are the
    /// cells (a patch in hierarchy order and a rect in its storage
    /// coordinates) an observation may sample alone.
    pub fn new<D: Driver>(
        stepper: &Stepper<D>,
        capacity: Option<u64>,
        probes: &[(usize, Rect)],
    ) -> Result<OutputRing, AppError> {
        let hierarchy = stepper.hierarchy();
        let actives: Vec<Rect> = hierarchy.patches().map(|p| p.active).collect();
        let mut offsets = Vec::with_capacity(actives.len());
        let mut arena_bytes = 0usize;
        for a in &actives {
            offsets.push(arena_bytes);
            arena_bytes += arena_slot(a.cells());
        }
        let probes: Vec<(usize, Rect, usize)> = probes
            .iter()
            .map(|(patch, rect)| {
                let at = arena_bytes;
                arena_bytes += arena_slot(rect.cells());
                (*patch, *rect, at)
            })
            .collect();
        stepper.with_device(|driver, view| {
            let windows = view.windows();
            let cells = actives.iter().chain(probes.iter().map(|(_, r, _)| r)).map(Rect::cells);
            let observation = observation_bytes(cells, windows.iter().map(|w| w.bytes as u64));
            let capacity = capacity.unwrap_or(observation);
            let ring = Ring::new(driver, "output.ring", capacity).map_err(ring_error)?;
            let arena = driver.alloc("output.moments", arena_bytes.max(16))?;
            let staging = driver.alloc_staging("output.ring.staging", capacity as usize)?;
            let stream = driver.create_stream()?;
            let event = driver.create_event()?;
            Ok(OutputRing {
                ring,
                arena,
                offsets,
                actives: actives.clone(),
                probes,
                windows,
                staging,
                stream,
                event,
                tail: 0,
                sequence: 0,
                pending: Vec::new(),
                stats: RingStats {
                    capacity_bytes: capacity,
                    ..RingStats::default()
                },
            })
        })
    }

    pub fn stats(&self) -> RingStats {
        self.stats
    }

    /// Samples of the probes' cells and the exchange windows the ring
    /// holds at once.
    pub fn samples_in_room(&self) -> u64 {
        let sample: u64 = (self.probes.iter().map(|(_, r, _)| SaveMoments::out_bytes(r) as u64))
            .chain(self.windows.iter().map(|w| w.bytes as u64))
            .map(|b| record_bytes(b).expect("a record of a probe fits u64"))
            .sum();
        self.stats.capacity_bytes / sample.max(1)
    }

    /// Each body's record from `observation`'s windows over the intervals
    /// since its window opened, to `end` (none where no window is open).
    pub fn records(&self, observation: &Observation, end: u64) -> Vec<ExchangeRecord> {
        let Some(start) = observation.window_start else {
            return Vec::new();
        };
        (self.windows.iter().zip(&observation.windows))
            .flat_map(|(w, words)| w.records(words, start, end))
            .collect()
    }

    /// Sends this interval's fields (when `fields` says what they need of
    /// the covered cells), the probes' cells (when `probes`) and exchange
    /// windows through the ring and returns them.
    pub fn observe<D: Driver>(
        &mut self,
        stepper: &Stepper<D>,
        fields: Option<CoveredCells>,
        probes: bool,
    ) -> Result<Observation, AppError> {
        // The windows read only the ledgers.
        if fields == Some(CoveredCells::Settled) {
            stepper.settle()?;
        }
        stepper.with_device(|driver, view| {
            self.enqueue(driver, view, fields, probes)?;
            let mut taken = self.collect(driver)?;
            Ok(taken.pop().expect("the observation just enqueued").1)
        })
    }

    /// Enqueues a sample of the probes' cells (when `probes`) and the
    /// exchange windows after the interval `view` is at, inside a chunk of
    /// intervals (`Stepper::begin_step_sampled`); [`OutputRing::collect`] brings
    /// it back with the others. Says whether it enqueued anything.
    pub fn sample<D: Driver>(&mut self, driver: &mut D, view: &DeviceView<'_>, probes: bool) -> Result<bool, AppError> {
        if !probes && self.windows.is_empty() {
            return Ok(false);
        }
        self.enqueue(driver, view, None, probes)?;
        Ok(true)
    }

    /// Every observation enqueued since the last collect, in order, with
    /// the interval each was taken after, once all of them are off the
    /// device and complete.
    pub fn collect<D: Driver>(&mut self, driver: &mut D) -> Result<Vec<(u64, Observation)>, AppError> {
        self.drain(driver)?;
        for p in &self.pending {
            let got = p.got();
            if got != p.expected {
                return Err(AppError::RingRecord {
                    sequence: self.sequence,
                    reason: format!(
                        "interval {} brought {} field, {} window and {} probe records, not {}, {} and {}",
                        p.step, got[0], got[1], got[2], p.expected[0], p.expected[1], p.expected[2]
                    ),
                });
            }
        }
        Ok(self.pending.drain(..).map(|p| (p.step, p.observation)).collect())
    }

    /// Enqueues the moments `fields` and `probes` ask for and one record per
    /// patch, probe and window, draining first whatever a record would
    /// overwrite.
    fn enqueue<D: Driver>(
        &mut self,
        driver: &mut D,
        view: &DeviceView<'_>,
        fields: Option<CoveredCells>,
        probes: bool,
    ) -> Result<(), AppError> {
        let step = view.step_count();
        let mut sources = Vec::new();
        if let Some(covered) = fields {
            for launch in view.moments_launches(self.arena, &self.offsets, covered) {
                driver.launch(&launch)?;
            }
            for (k, (offset, active)) in self.offsets.iter().zip(&self.actives).enumerate() {
                let src = lbm_core::BufferRef {
                    id: self.arena,
                    byte_offset: *offset as u64,
                };
                sources.push((KIND_FIELDS | k as u32, src, SaveMoments::out_bytes(active) as u64));
            }
        }
        if probes {
            for (k, (patch, rect, offset)) in self.probes.iter().enumerate() {
                driver.launch(&view.moments_launch_of(self.arena, *offset, *patch, *rect))?;
                let src = lbm_core::BufferRef {
                    id: self.arena,
                    byte_offset: *offset as u64,
                };
                sources.push((KIND_PROBE | k as u32, src, SaveMoments::out_bytes(rect) as u64));
            }
        }
        for (k, w) in self.windows.iter().enumerate() {
            sources.push((KIND_WINDOW | k as u32, w.buffer, w.bytes as u64));
        }
        self.pending.push(Pending {
            step,
            expected: [
                fields.map_or(0, |_| self.actives.len()),
                self.windows.len(),
                if probes { self.probes.len() } else { 0 },
            ],
            observation: Observation {
                window_start: view.window_start(),
                fields: Vec::new(),
                windows: Vec::new(),
                probes: Vec::new(),
            },
        });
        for (kind, src, bytes) in sources {
            let launch = self.ring.record_launch(src, bytes, kind, step).map_err(ring_error)?;
            let need = record_bytes(bytes).expect("a record of a patch fits u64");
            if self.ring.would_overwrite(need, self.tail) {
                self.stats.waits += 1;
                self.drain(driver)?;
            }
            self.ring.enqueue(driver, &launch, self.tail).map_err(ring_error)?;
        }
        Ok(())
    }

    /// Copies what was published since the last drain off the device in one
    /// batch and checks and sorts its records into the pending observation
    /// of their interval.
    fn drain<D: Driver>(&mut self, driver: &mut D) -> Result<(), AppError> {
        let head = self.ring.reserved_head();
        if head == self.tail {
            return Ok(());
        }
        let spans = self.ring.spans(self.tail, head).map_err(ring_error)?;
        driver.record_event(self.event, StreamId::MAIN)?;
        driver.wait_event(self.stream, self.event)?;
        let mut at = 0usize;
        for span in spans.iter().filter(|s| !s.is_empty()) {
            let len = (span.end - span.start) as usize;
            driver.download_async(
                self.stream,
                self.ring.data(),
                span.start as usize,
                self.staging,
                at,
                len,
            )?;
            at += len;
        }
        driver.record_event(self.event, self.stream)?;
        driver.synchronize_event(self.event)?;
        let mut bytes = vec![0u8; at];
        driver.read_staging(self.staging, 0, &mut bytes)?;
        let records = parse_records(&bytes, self.sequence + 1).map_err(ring_error)?;
        for r in &records {
            let (what, index) = (r.header.kind & 0xFFFF_0000, (r.header.kind & 0xFFFF) as usize);
            let refuse = |reason: String| AppError::RingRecord {
                sequence: r.header.sequence,
                reason,
            };
            // Records come in the order they were enqueued: into the first
            // pending observation of their interval that still lacks them.
            let Some(p) = self
                .pending
                .iter_mut()
                .find(|p| p.step == r.header.step && p.got() != p.expected)
            else {
                return Err(refuse(format!(
                    "it is of interval {}, which no pending observation awaits",
                    r.header.step
                )));
            };
            let out = &mut p.observation;
            match what {
                KIND_FIELDS if index == out.fields.len() && index < self.actives.len() => {
                    out.fields
                        .push(Fields::from_planes(&self.actives[index], &floats(r.payload)));
                }
                KIND_PROBE if index == out.probes.len() && index < self.probes.len() => {
                    out.probes
                        .push(Fields::from_planes(&self.probes[index].1, &floats(r.payload)));
                }
                KIND_WINDOW if index == out.windows.len() && index < self.windows.len() => {
                    let words = r.payload.chunks_exact(8);
                    out.windows.push(
                        words
                            .map(|b| f64::from_le_bytes(b.try_into().expect("eight bytes")))
                            .collect(),
                    );
                }
                _ => {
                    return Err(refuse(format!(
                        "its kind {:#x} is not the one expected next",
                        r.header.kind
                    )));
                }
            }
            self.stats.records += 1;
        }
        self.sequence += records.len() as u64;
        self.stats.bytes += head - self.tail;
        self.stats.batches += 1;
        self.tail = head;
        Ok(())
    }
}

/// An observation enqueued and not yet collected: its interval, the field,
/// window and probe records it awaits, and those it has.
struct Pending {
    step: u64,
    expected: [usize; 3],
    observation: Observation,
}

impl Pending {
    /// The field, window and probe records it has.
    fn got(&self) -> [usize; 3] {
        let o = &self.observation;
        [o.fields.len(), o.windows.len(), o.probes.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendChoice;
    use crate::output::fields::{PatchFields, ProbeCells, finest_at, gather, physical};
    use lbm_core::ExecConfig;
    use lbm_core::case::Case;

    /// DFG 2D-1 (two levels, a cylinder), on CUDA where there is a device.
    fn stepper() -> (Stepper<Box<dyn Driver>>, lbm_core::case::Resolved) {
        let resolved = Case::from_toml(include_str!("../../cases/dfg-2d1.toml"))
            .and_then(|c| c.resolve())
            .unwrap();
        let (driver, _) = BackendChoice::Auto.open(None).unwrap();
        let exec = ExecConfig {
            tiles: resolved.tiles.clone(),
            observe_window_exchange: true,
            ..ExecConfig::default()
        };
        (Stepper::new(driver, resolved.lattice.clone(), exec).unwrap(), resolved)
    }

    fn bits(f: &Fields) -> Vec<u32> {
        f.delta_rho
            .iter()
            .chain(&f.ux)
            .chain(&f.uy)
            .map(|v| v.to_bits())
            .collect()
    }

    /// What the ring brings equals a direct download bit for bit, fields and
    /// windows, with a ring of room for one observation and with one so
    /// small that records wait for it to drain (nothing lost, counted); the
    /// files written from either are the same bytes.
    #[test]
    fn the_ring_brings_what_a_direct_download_reads_bit_for_bit() {
        // The largest record, a patch of DFG 2D-1 at its defaults, is 275568 bytes.
        for capacity in [None, Some(280_000)] {
            let (stepper, resolved) = stepper();
            let mut ring = OutputRing::new(&stepper, capacity, &[]).unwrap();
            stepper.step(23).unwrap();
            stepper.start_exchange_window().unwrap();
            for round in 0..3 {
                stepper.step(5 + round).unwrap();
                let observation = ring.observe(&stepper, Some(CoveredCells::Settled), false).unwrap();
                let hierarchy = stepper.hierarchy();
                assert_eq!(observation.fields.len(), hierarchy.patches().count());
                for (f, p) in observation.fields.iter().zip(hierarchy.patches()) {
                    let direct = stepper.fields(p.level, p.index).unwrap();
                    assert!(
                        bits(f) == bits(&direct),
                        "{capacity:?} round {round}: patch {}",
                        p.name()
                    );
                }
                assert!(observation.window_start.is_some());
                let records = ring.records(&observation, stepper.step_count());
                let direct = stepper.read_exchange_window(0).unwrap();
                assert_eq!(format!("{:?}", records), format!("{:?}", [direct]));
                let units = &resolved.units;
                let mut lattice = observation.fields.into_iter();
                let from_ring = physical(&hierarchy, units, &resolved.lattice, |_, _| {
                    Ok::<_, AppError>(lattice.next().unwrap())
                })
                .unwrap();
                let from_download = gather(&stepper, units, &resolved.lattice).unwrap();
                for (a, b) in from_ring.iter().zip(&from_download) {
                    for field in [
                        lbm_core::output::FieldName::Pressure,
                        lbm_core::output::FieldName::Vorticity,
                    ] {
                        let (a, b) = (a.values(field), b.values(field));
                        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
                    }
                }
                // Windows only: the fields stay on the device.
                let windows_only = ring.observe(&stepper, None, false).unwrap();
                assert!(windows_only.fields.is_empty() && windows_only.windows.len() == 1);
            }
            let stats = ring.stats();
            let patches = stepper.hierarchy().patches().count() as u64;
            assert_eq!(stats.records, 3 * (patches + 1) + 3, "{stats:?}");
            match capacity {
                None => assert_eq!(stats.waits, 0, "{stats:?}"),
                Some(_) => assert!(stats.waits >= 3 && stats.batches > 6, "{stats:?}"),
            }
        }
    }

    /// A probe or a line needs no settle: sampled from fields read without
    /// it ([`CoveredCells::Band`]) at points a fraction of the finest cell
    /// apart over the whole domain, crossing every patch edge, they give the
    /// bits the settled fields give, although the deeper covered cells
    /// differ.
    #[test]
    fn probes_sample_the_same_bits_without_the_settle() {
        let (stepper, resolved) = stepper();
        let mut ring = OutputRing::new(&stepper, None, &[]).unwrap();
        stepper.step(40).unwrap();
        let hierarchy = stepper.hierarchy();
        let mut read = |covered| {
            let observation = ring.observe(&stepper, Some(covered), false).unwrap();
            let lattice: Vec<Fields> = observation.fields;
            let mut patches = lattice.clone().into_iter();
            let physical = physical(&hierarchy, &resolved.units, &resolved.lattice, |_, _| {
                Ok::<_, AppError>(patches.next().unwrap())
            })
            .unwrap();
            (lattice, physical)
        };
        let (band_lattice, band) = read(CoveredCells::Band);
        let (settled_lattice, settled) = read(CoveredCells::Settled);
        assert!(
            band_lattice
                .iter()
                .zip(&settled_lattice)
                .any(|(a, b)| bits(a) != bits(b)),
            "the settle changed no covered cell: the comparison below shows nothing"
        );
        let base = &band[0];
        let step = 0.7 * band.iter().map(|p| p.spacing).fold(f64::INFINITY, f64::min);
        let [nx, ny] = [0, 1].map(|k| (base.size[k] as f64 * base.spacing / step) as usize);
        let mut sampled = 0;
        for (i, j) in (0..nx).flat_map(|i| (0..ny).map(move |j| (i, j))) {
            let point = [
                base.origin[0] + (i as f64 + 0.3) * step,
                base.origin[1] + (j as f64 + 0.6) * step,
            ];
            let at = |patches: &[PatchFields]| finest_at(patches, point).and_then(|p| p.sample(point));
            let (a, b) = (at(&band), at(&settled));
            assert_eq!(
                a.map(|v| v.map(f64::to_bits)),
                b.map(|v| v.map(f64::to_bits)),
                "point {point:?}"
            );
            sampled += a.is_some() as usize;
        }
        assert!(sampled > nx * ny / 2, "{sampled} of {} points sampled", nx * ny);
    }

    /// Point probes sampled alone, each from its own few cells, give the
    /// bits the whole fields give, at points a few finest cells apart over
    /// the whole domain and at the patches' and the domain's edges and
    /// corners, inside the cylinder (solid: no value) and outside the
    /// domain (no patch); and the ring carries a few bytes per probe, not
    /// the grid's moments.
    #[test]
    fn probes_sampled_alone_give_the_bits_of_the_whole_fields() {
        let (stepper, resolved) = stepper();
        let hierarchy = stepper.hierarchy();
        let (units, bodies) = (&resolved.units, &resolved.lattice.bodies);
        let finest = units.dx / 2f64.powi(hierarchy.n_levels() as i32 - 1);
        let [lx, ly] = [2.2, 0.41];
        let mut points = vec![
            [0.0, 0.0],
            [lx, ly],
            [0.0, ly],
            [lx, 0.0],
            [0.2, 0.2],
            [0.25, 0.2],
            [-1.0, 0.1],
        ];
        for x in [0.05, 0.1, 0.45, 1.2] {
            points.extend([
                [x, 0.0],
                [x, 0.2],
                [x, ly],
                [x - finest / 4.0, 0.1],
                [x + finest / 4.0, 0.3],
            ]);
        }
        let step = 3.1 * finest;
        let [nx, ny] = [lx / step, ly / step].map(|n| n as usize);
        points.extend((0..nx).flat_map(|i| (0..ny).map(move |j| [(i as f64 + 0.3) * step, (j as f64 + 0.6) * step])));
        let cells: Vec<Option<ProbeCells>> = points
            .iter()
            .map(|p| ProbeCells::find(&hierarchy, units, bodies, *p))
            .collect();
        let rects: Vec<_> = cells.iter().flatten().map(|c| (c.patch, c.rect)).collect();
        let mut ring = OutputRing::new(&stepper, None, &rects).unwrap();
        stepper.step(40).unwrap();
        let alone = ring.observe(&stepper, None, true).unwrap();
        let bytes = ring.stats().bytes;
        assert!(alone.fields.is_empty() && alone.probes.len() == rects.len());
        assert!(
            bytes < 200 * rects.len() as u64 + 4096,
            "{bytes} bytes for {} probes",
            rects.len()
        );
        let whole = ring.observe(&stepper, Some(CoveredCells::Band), false).unwrap();
        assert!(whole.probes.is_empty());
        let mut lattice = whole.fields.into_iter();
        let patches = physical(&hierarchy, units, &resolved.lattice, |_, _| {
            Ok::<_, AppError>(lattice.next().unwrap())
        })
        .unwrap();
        let mut sampled = alone.probes.iter();
        let (mut values, mut solid, mut outside) = (0, 0, 0);
        for (point, c) in points.iter().zip(&cells) {
            let want = finest_at(&patches, *point).and_then(|f| f.sample(*point));
            let got = c.as_ref().and_then(|c| c.sample(sampled.next().unwrap(), units));
            assert_eq!(
                got.map(|v| v.map(f64::to_bits)),
                want.map(|v| v.map(f64::to_bits)),
                "point {point:?}"
            );
            match (c, got) {
                (None, _) => outside += 1,
                (Some(_), None) => solid += 1,
                (Some(_), Some(_)) => values += 1,
            }
        }
        assert!(sampled.next().is_none());
        assert!(
            outside == 1 && solid > 1 && values > points.len() * 9 / 10,
            "{values} values, {solid} solid, {outside} outside"
        );
    }

    /// Samples taken on the device inside a chunk (`Stepper::begin_step_sampled`,
    /// each window restarted after its sample) bring the bits that a wait,
    /// an observation and a window restart after every interval bring:
    /// windows, their starts and the probes' cells, interval by interval,
    /// with a ring too small for the chunk's samples (records wait for it
    /// to drain, nothing lost) and one large enough.
    #[test]
    fn samples_inside_a_chunk_equal_one_observation_per_interval() {
        let (reference, resolved) = stepper();
        let hierarchy = reference.hierarchy();
        let points = [[0.4, 0.2], [0.15, 0.3], [1.5, 0.1]];
        let rects: Vec<_> = points
            .iter()
            .filter_map(|p| ProbeCells::find(&hierarchy, &resolved.units, &resolved.lattice.bodies, *p))
            .map(|c| (c.patch, c.rect))
            .collect();
        let mut ring = OutputRing::new(&reference, None, &rects).unwrap();
        reference.step(20).unwrap();
        reference.start_exchange_window().unwrap();
        let mut want = Vec::new();
        for _ in 0..9 {
            reference.step(1).unwrap();
            want.push((reference.step_count(), ring.observe(&reference, None, true).unwrap()));
            reference.start_exchange_window().unwrap();
        }
        for capacity in [Some(2048), None] {
            let (chunked, _) = stepper();
            let mut ring = OutputRing::new(&chunked, capacity, &rects).unwrap();
            chunked.step(20).unwrap();
            chunked.start_exchange_window().unwrap();
            chunked
                .begin_step_sampled(9, |driver, view| ring.sample(driver, &view, true))
                .unwrap();
            chunked.finish_step().unwrap();
            let mut got = chunked.with_device(|driver, _| ring.collect(driver)).unwrap();
            got.push((chunked.step_count(), ring.observe(&chunked, None, true).unwrap()));
            assert_eq!(got.len(), want.len());
            for ((step, a), (wstep, b)) in got.iter().zip(&want) {
                assert_eq!((step, a.window_start), (wstep, b.window_start), "{capacity:?}");
                let words = |o: &Observation| -> Vec<u64> { o.windows.iter().flatten().map(|v| v.to_bits()).collect() };
                assert_eq!(words(a), words(b), "{capacity:?}: interval {step}");
                assert!(
                    words(a).iter().any(|w| *w != 0),
                    "interval {step}: an empty window shows nothing"
                );
                let probes = |o: &Observation| -> Vec<Vec<u32>> { o.probes.iter().map(bits).collect() };
                assert_eq!(probes(a), probes(b), "{capacity:?}: interval {step}");
                assert_eq!(a.probes.len(), rects.len());
            }
            if capacity.is_some() {
                assert!(ring.stats().waits > 0, "{:?}", ring.stats());
            }
        }
    }

    #[test]
    fn a_ring_too_small_for_one_record_is_refused() {
        let (stepper, _) = stepper();
        let mut ring = OutputRing::new(&stepper, Some(4096), &[]).unwrap();
        stepper.step(1).unwrap();
        let error = ring
            .observe(&stepper, Some(CoveredCells::Settled), false)
            .err()
            .expect("a patch's record exceeds 4 KiB");
        assert!(error.to_string().contains("output ring"), "{error}");
    }
}
