//! What a run advances: one [`Stepper`] on one device, or a [`Split`] of
//! the domain over several (`lbm run --devices`), and the output rings that
//! bring their observations off the devices, one per stepper, gathered into
//! the whole domain's patches and bodies.
//!
//! What it does not do: choose the devices (`backend`) or decide when to
//! observe (`run`).

use lbm_core::case::{InitialField, Resolved};
use lbm_core::domain::hierarchy::Hierarchy;
use lbm_core::ledger::{ExchangeRecord, MemoryLedger};
use lbm_core::split::Split;
use lbm_core::stepper::Fields;
use lbm_core::units::UnitSystem;
use lbm_core::{CoveredCells, Driver, ExecConfig, LatticeConfig, Snapshot, Stepper, Unhealthy};

use crate::AppError;
use crate::backend::Device;
use crate::output::fields::ProbeCells;
use crate::output::ring::{OutputRing, RingStats};

/// One stepper, or a split over several devices.
pub(crate) enum Engine<D: Driver> {
    One(Box<Stepper<D>>),
    Split(Box<Split<D>>),
}

/// A sample taken inside a chunk: its interval, each body's exchange
/// window since the sample before, and the point probes' values (as
/// [`Observed::probes`]).
pub(crate) struct Sampled {
    pub step: u64,
    pub records: Vec<ExchangeRecord>,
    pub probes: Option<Vec<Option<[f64; 3]>>>,
}

/// One observation of the whole domain: every patch's lattice fields in
/// hierarchy order (empty when not asked for), each body's exchange window,
/// in body order, and each point probe's (p, u_x, u_y) when the probes were
/// sampled alone (`None` in a row: the probe is outside every patch or reads
/// a solid cell).
pub(crate) struct Observed {
    pub fields: Vec<Fields>,
    pub records: Vec<ExchangeRecord>,
    pub probes: Option<Vec<Option<[f64; 3]>>>,
}

impl<D: Driver> Engine<D> {
    /// A stepper on the one driver, or the split over all of them, on
    /// `devices` (one per driver). A split over CUDA devices moves its
    /// halos through NCCL when the library is found and starts, else device
    /// to device by copies ([`Engine::halo_transport`] says which).
    pub fn open(
        mut drivers: Vec<D>,
        devices: &[Device],
        lattice: LatticeConfig,
        exec: ExecConfig,
    ) -> lbm_core::Result<Self> {
        if drivers.len() == 1 {
            return Ok(Engine::One(Box::new(Stepper::new(drivers.remove(0), lattice, exec)?)));
        }
        let mut split = Split::new(drivers, lattice, exec)?;
        if split.transport() == "device" && devices.iter().all(|d| d.backend == "cuda") {
            let ordinals: Vec<usize> = devices.iter().map(|d| d.ordinal).collect();
            // Without NCCL the copies carry the same bytes: say why, and run.
            match lbm_cuda::Nccl::open(&ordinals) {
                Ok(Some(nccl)) => split.use_collective(Box::new(nccl))?,
                Ok(None) => {
                    tell!("note: NCCL's library (libnccl.so) was not found: halos are copied device to device")
                }
                Err(e) => tell!("note: NCCL did not start ({e}): halos are copied device to device"),
            }
        }
        Ok(Engine::Split(Box::new(split)))
    }

    /// Starts every cell of every level at the equilibrium of `initial`
    /// there (checked cell by cell when the case resolved).
    pub fn initialize(&mut self, initial: &InitialField) -> lbm_core::Result<()> {
        let init = |level, x, y| initial.start_moments(level, x, y);
        match self {
            Engine::One(s) => s.initialize(init),
            Engine::Split(s) => s.initialize(init),
        }
    }

    /// How a split's halos move ("nccl", "device", "host"); `None` on one
    /// device.
    pub fn halo_transport(&self) -> Option<&'static str> {
        match self {
            Engine::One(_) => None,
            Engine::Split(s) => Some(s.transport()),
        }
    }

    /// The steppers, one per device.
    fn steppers(&self) -> &[Stepper<D>] {
        match self {
            Engine::One(s) => std::slice::from_ref(s),
            Engine::Split(s) => s.slabs(),
        }
    }

    /// The whole domain's hierarchy.
    pub fn hierarchy(&self) -> Hierarchy {
        match self {
            Engine::One(s) => s.hierarchy(),
            Engine::Split(s) => s.hierarchy().clone(),
        }
    }

    pub fn total_mass(&self) -> lbm_core::Result<f64> {
        match self {
            Engine::One(s) => s.total_mass(),
            Engine::Split(s) => s.total_mass(),
        }
    }

    pub fn start_exchange_window(&self) -> lbm_core::Result<()> {
        match self {
            Engine::One(s) => s.start_exchange_window(),
            Engine::Split(s) => s.start_exchange_window(),
        }
    }

    /// Enqueues `n` intervals without waiting where the engine can (one
    /// stepper); a split advances them here, its exchange waiting each
    /// interval.
    pub fn begin_step(&mut self, n: u64) -> lbm_core::Result<()> {
        match self {
            Engine::One(s) => s.begin_step(n),
            Engine::Split(s) => s.step(n),
        }
    }

    /// Waits for what [`Engine::begin_step`] enqueued.
    pub fn finish_step(&mut self) -> lbm_core::Result<()> {
        match self {
            Engine::One(s) => s.finish_step(),
            Engine::Split(_) => Ok(()),
        }
    }

    pub fn check_health(&self, speed_limit: f64) -> lbm_core::Result<Option<Unhealthy>> {
        match self {
            Engine::One(s) => s.check_health(speed_limit),
            Engine::Split(s) => s.check_health(speed_limit),
        }
    }

    pub fn snapshot(&self) -> lbm_core::Result<Snapshot> {
        match self {
            Engine::One(s) => s.snapshot(),
            Engine::Split(s) => s.snapshot(),
        }
    }

    pub fn restore(&mut self, snapshot: &Snapshot) -> lbm_core::Result<()> {
        match self {
            Engine::One(s) => s.restore(snapshot),
            Engine::Split(s) => s.restore(snapshot),
        }
    }

    pub fn memory_ledger(&self) -> MemoryLedger {
        match self {
            Engine::One(s) => s.memory_ledger(),
            Engine::Split(s) => s.memory_ledger(),
        }
    }

    pub fn close(&mut self) -> lbm_core::Result<()> {
        match self {
            Engine::One(s) => s.close(),
            Engine::Split(s) => s.close(),
        }
    }

    /// An output ring on each stepper's device. One stepper's ring can
    /// sample `resolved`'s point probes alone, from their own cells; a
    /// split's probes are sampled from whole fields (a probe's cells may lie
    /// on two slabs).
    pub fn rings(&self, capacity: Option<u64>, resolved: &Resolved) -> Result<Rings, AppError> {
        let probes = match self {
            Engine::One(s) => {
                let hierarchy = s.hierarchy();
                let (units, bodies) = (&resolved.units, &resolved.lattice.bodies);
                let cells = resolved.output.probes.iter();
                Some(
                    cells
                        .map(|p| ProbeCells::find(&hierarchy, units, bodies, p.point))
                        .collect::<Vec<_>>(),
                )
            }
            Engine::Split(_) => None,
        };
        let rects: Vec<_> = probes.iter().flatten().flatten().map(|c| (c.patch, c.rect)).collect();
        let rings = self
            .steppers()
            .iter()
            .map(|s| OutputRing::new(s, capacity, &rects))
            .collect::<Result<_, _>>()?;
        Ok(Rings {
            rings,
            probes,
            units: resolved.units,
        })
    }
}

/// The output rings of an engine, one per stepper.
pub(crate) struct Rings {
    rings: Vec<OutputRing>,
    /// Each point probe's cells (`None`: outside every patch), where the
    /// probes can be sampled alone.
    probes: Option<Vec<Option<ProbeCells>>>,
    units: UnitSystem,
}

impl Rings {
    /// What the rings carried, all together.
    pub fn stats(&self) -> RingStats {
        self.rings
            .iter()
            .map(OutputRing::stats)
            .fold(RingStats::default(), |a, b| RingStats {
                capacity_bytes: a.capacity_bytes + b.capacity_bytes,
                records: a.records + b.records,
                bytes: a.bytes + b.bytes,
                batches: a.batches + b.batches,
                waits: a.waits + b.waits,
            })
    }

    /// Whether [`Rings::observe`] can sample the point probes alone, and
    /// [`Rings::begin_sampled`] take samples inside a chunk (one stepper).
    pub fn sample_probes_alone(&self) -> bool {
        self.probes.is_some()
    }

    /// Samples of the exchange windows and the probes that fit the ring
    /// without a wait for it to drain.
    pub fn samples_in_room(&self) -> u64 {
        self.rings.iter().map(OutputRing::samples_in_room).min().unwrap_or(0)
    }

    /// Enqueues one stepper's `n` intervals and the samples due inside the
    /// chunk (after every interval that is a multiple of `every`, the
    /// chunk's last excepted, which the caller observes as before: its save
    /// point, checks and all), taken on the device: each body's exchange
    /// window and, when `probes`, the point probes, each window restarted
    /// after its sample. [`Rings::finish_sampled`] waits and brings them.
    /// Needs [`Rings::sample_probes_alone`].
    pub fn begin_sampled<D: Driver>(
        &mut self,
        engine: &Engine<D>,
        n: u64,
        every: u64,
        probes: bool,
    ) -> Result<(), AppError> {
        let (Engine::One(stepper), [ring]) = (engine, &mut self.rings[..]) else {
            unreachable!("samples inside a chunk need one stepper's ring");
        };
        stepper.begin_step_sampled(n, |driver, view| match view.step_count() % every {
            0 => ring.sample(driver, &view, probes),
            _ => Ok(false),
        })
    }

    /// Waits for what [`Rings::begin_sampled`] enqueued and returns its
    /// samples in order, each with its interval (`probes` as given there).
    pub fn finish_sampled<D: Driver>(&mut self, engine: &Engine<D>, probes: bool) -> Result<Vec<Sampled>, AppError> {
        let (Engine::One(stepper), [ring], Some(cells)) = (engine, &mut self.rings[..], &self.probes) else {
            unreachable!("samples inside a chunk need one stepper's ring");
        };
        stepper.finish_step()?;
        let collected = stepper.with_device(|driver, _| ring.collect(driver))?;
        Ok(collected
            .into_iter()
            .map(|(step, observation)| {
                let mut records = ring.records(&observation, step);
                records.sort_by_key(|r| r.body);
                let probes = probes.then(|| probe_values(cells, &observation.probes, &self.units));
                Sampled { step, records, probes }
            })
            .collect())
    }

    /// This interval's fields (when `fields`), point probes (when `probes`;
    /// only where [`Rings::sample_probes_alone`]) and exchange windows of
    /// the whole domain, through every stepper's ring: a split's base grid
    /// is its slabs' side by side, each patch comes from the slab holding
    /// it, and each body's forces are the slabs' sum.
    pub fn observe<D: Driver>(
        &mut self,
        engine: &Engine<D>,
        fields: Option<CoveredCells>,
        probes: bool,
        done: u64,
    ) -> Result<Observed, AppError> {
        let mut records: Vec<ExchangeRecord> = Vec::new();
        let mut parts = Vec::with_capacity(self.rings.len());
        let mut sampled = Vec::new();
        for (ring, stepper) in self.rings.iter_mut().zip(engine.steppers()) {
            let observation = ring.observe(stepper, fields, probes)?;
            for record in ring.records(&observation, done) {
                match records.iter_mut().find(|r| r.body == record.body) {
                    Some(r) => r.add_part(&record),
                    None => records.push(record),
                }
            }
            sampled.extend(observation.probes);
            parts.push(observation.fields);
        }
        records.sort_by_key(|r| r.body);
        let fields = match (engine, fields) {
            (_, None) => Vec::new(),
            (Engine::One(_), Some(_)) => parts.pop().expect("one ring"),
            (Engine::Split(split), Some(_)) => {
                let whole = split.hierarchy();
                let mut placed: Vec<Vec<Option<Fields>>> = whole.levels.iter().map(|l| vec![None; l.len()]).collect();
                let mut base = Vec::with_capacity(parts.len());
                for (k, (slab_fields, slab)) in parts.into_iter().zip(split.slabs()).enumerate() {
                    for (f, p) in slab_fields.into_iter().zip(slab.hierarchy().patches()) {
                        match p.level {
                            0 => base.push(f),
                            l => placed[l][split.whole_patch(k, l, p.index)] = Some(f),
                        }
                    }
                }
                placed[0][0] = Some(Fields::side_by_side(&base));
                placed
                    .into_iter()
                    .flatten()
                    .map(|f| f.expect("every patch is on one slab"))
                    .collect()
            }
        };
        let probes = match (probes, &self.probes) {
            (false, _) | (true, None) => None,
            (true, Some(cells)) => Some(probe_values(cells, &sampled, &self.units)),
        };
        Ok(Observed {
            fields,
            records,
            probes,
        })
    }
}

/// Each probe's (p, u_x, u_y) from the lattice fields of its cells,
/// `sampled` in the order of the probes that have cells.
fn probe_values(cells: &[Option<ProbeCells>], sampled: &[Fields], units: &UnitSystem) -> Vec<Option<[f64; 3]>> {
    let mut sampled = sampled.iter();
    cells
        .iter()
        .map(|c| {
            c.as_ref()
                .and_then(|c| c.sample(sampled.next().expect("one per probe's cells"), units))
        })
        .collect()
}
