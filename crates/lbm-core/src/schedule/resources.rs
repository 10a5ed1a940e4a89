//! The device resources of a run: every buffer the hop plan and the health
//! check name, allocated and filled (flags, wall distances, link tables, inlet
//! tables) before the plans are built from them, with the memory ledger of
//! what was allocated.
//!
//! It decides nothing about the order of work; that is [`super::plan`].

use serde::Serialize;

use crate::config::{Amplitude, ExecConfig, LatticeConfig};
use crate::device::{BufferId, Driver};
use crate::domain::geometry::{self, LINK_WORDS};
use crate::domain::hierarchy::{Hierarchy, Patch};
use crate::domain::order::{fine_covered, ring_cells};
use crate::domain::sides::PatchSides;
use crate::error::Result;
use crate::kernels::exchange::EXCHANGE_WORDS;
use crate::kernels::health::HEALTH_WORDS;
use crate::lattice::Q;
use crate::ledger::MemoryLedger;

/// Device buffers of one patch.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PatchBuffers {
    /// Ping-pong population buffers; which one is `current` follows
    /// [`super::plan::parity_at_interval_start`].
    pub f: [BufferId; 2],
    pub flags: BufferId,
    /// Interface mass flux per parent ring cell (refined patches only).
    pub flux: Option<BufferId>,
    /// Wall distances of body links (patches with bodies only).
    pub wall_distance: Option<BufferId>,
}

/// The inlet's buffers: what every `stream_collide` with an inlet side reads,
/// and the table of a table amplitude.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct InletBuffers {
    pub profile: BufferId,
    /// `[u32 interval, f32 factor]`, advanced by `update_boundary_state`.
    pub state: BufferId,
    pub table: Option<BufferId>,
}

/// Body links of one patch.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExchangeBuffers {
    pub level: usize,
    pub patch: usize,
    pub links: BufferId,
    pub n_links: u32,
}

/// Per-level interval and window accumulators.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Accumulators {
    pub level: usize,
    pub interval: BufferId,
    pub window: Option<BufferId>,
    pub bytes: usize,
}

/// Everything allocated for a run; see the module documentation.
pub struct Resources {
    /// Indexed like `hierarchy.levels`.
    pub patches: Vec<Vec<PatchBuffers>>,
    pub inlet: Option<InletBuffers>,
    pub exchange: Vec<ExchangeBuffers>,
    pub accumulators: Vec<Accumulators>,
    /// Body indices in each level's accumulator slot order.
    pub body_slots: Vec<Vec<usize>>,
    /// The results of `check_health`, [`HEALTH_WORDS`] u32 per patch in the
    /// order of [`Hierarchy::patches`]: one buffer, so one memset resets them
    /// and one download reads them.
    pub health: BufferId,
    pub memory: MemoryLedger,
    /// The buffers the plan writes, in allocation order: what a snapshot holds.
    pub state: Vec<StateBuffer>,
    allocated: Vec<BufferId>,
}

/// A buffer whose contents change as the run advances (populations, interface
/// fluxes, the inlet's time state, the exchange accumulators); the rest are
/// tables filled once from the configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct StateBuffer {
    pub label: String,
    pub id: BufferId,
    pub bytes: usize,
}

impl Resources {
    /// Allocates and fills every buffer. On failure what was allocated is
    /// freed again and the allocation's error is returned.
    pub fn allocate<D: Driver>(
        driver: &mut D,
        hierarchy: &Hierarchy,
        sides: &[Vec<PatchSides>],
        lattice: &LatticeConfig,
        exec: &ExecConfig,
    ) -> Result<Resources> {
        let mut resources = Resources {
            patches: vec![Vec::new(); hierarchy.n_levels()],
            inlet: None,
            exchange: Vec::new(),
            accumulators: Vec::new(),
            body_slots: vec![Vec::new(); hierarchy.n_levels()],
            // Allocated last by `fill`; no buffer has this id until then.
            health: BufferId(u32::MAX),
            memory: MemoryLedger::default(),
            state: Vec::new(),
            allocated: Vec::new(),
        };
        match resources.fill(driver, hierarchy, sides, lattice, exec) {
            Ok(()) => Ok(resources),
            Err(e) => {
                // The allocation error is the one to report; a failure to free
                // what was allocated before it adds nothing the caller could act on.
                let _ = resources.release(driver);
                Err(e)
            }
        }
    }

    /// Frees every buffer, reporting the first failure after trying them all.
    pub fn release<D: Driver>(&mut self, driver: &mut D) -> Result<()> {
        let mut first_error = None;
        for id in std::mem::take(&mut self.allocated) {
            if let Err(e) = driver.free(id) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn alloc<D: Driver>(&mut self, driver: &mut D, label: String, bytes: usize) -> Result<BufferId> {
        let id = driver.alloc(&label, bytes)?;
        self.allocated.push(id);
        self.memory.add(label, bytes as u64);
        Ok(id)
    }

    /// Allocates a buffer the plan writes (see [`StateBuffer`]).
    fn alloc_state<D: Driver>(&mut self, driver: &mut D, label: String, bytes: usize) -> Result<BufferId> {
        let id = self.alloc(driver, label.clone(), bytes)?;
        self.state.push(StateBuffer { label, id, bytes });
        Ok(id)
    }

    fn upload<D: Driver>(&mut self, driver: &mut D, label: String, data: &[u8]) -> Result<BufferId> {
        let id = self.alloc(driver, label, data.len())?;
        driver.upload(id, 0, data)?;
        Ok(id)
    }

    fn fill<D: Driver>(
        &mut self,
        driver: &mut D,
        hierarchy: &Hierarchy,
        sides: &[Vec<PatchSides>],
        lattice: &LatticeConfig,
        exec: &ExecConfig,
    ) -> Result<()> {
        if let Some(inlet) = &lattice.inlet {
            let profile = inlet.profile_samples(hierarchy.base().layout.ny);
            let profile = self.upload(driver, "boundary.inlet_profile".into(), bytemuck::cast_slice(&profile))?;
            let state = self.alloc_state(driver, "boundary.state".into(), 8)?;
            let table = match &inlet.amplitude {
                Amplitude::Table { points } => {
                    let table: Vec<f32> = points.iter().flatten().map(|v| *v as f32).collect();
                    Some(self.upload(driver, "boundary.amplitude_table".into(), bytemuck::cast_slice(&table))?)
                }
                _ => None,
            };
            self.inlet = Some(InletBuffers { profile, state, table });
        }
        for (b, body) in lattice.bodies.iter().enumerate() {
            self.body_slots[body.level].push(b);
        }
        for patch in hierarchy.patches() {
            self.fill_patch(driver, patch, sides[patch.level][patch.index], lattice)?;
        }
        let observe = exec.observe_raw_exchange || exec.observe_window_exchange;
        for level in 0..hierarchy.n_levels() {
            if !observe || self.body_slots[level].is_empty() {
                continue;
            }
            let bytes = self.body_slots[level].len() * EXCHANGE_WORDS * 8;
            let interval = self.alloc_state(driver, format!("L{level}.exchange.interval"), bytes)?;
            let window = match exec.observe_window_exchange {
                true => Some(self.alloc_state(driver, format!("L{level}.exchange.window"), bytes)?),
                false => None,
            };
            self.accumulators.push(Accumulators {
                level,
                interval,
                window,
                bytes,
            });
        }
        // Last, so that the buffers the hop plan names keep their ids.
        let health_bytes = hierarchy.patches().count() * HEALTH_WORDS * 4;
        self.health = self.alloc(driver, "health.results".into(), health_bytes)?;
        Ok(())
    }

    fn fill_patch<D: Driver>(
        &mut self,
        driver: &mut D,
        patch: &Patch,
        sides: PatchSides,
        lattice: &LatticeConfig,
    ) -> Result<()> {
        let name = patch.name();
        let plane = patch.layout.plane_cells();
        let f_bytes = Q * plane * 4;
        let f = [
            self.alloc_state(driver, format!("{name}.f.a"), f_bytes)?,
            self.alloc_state(driver, format!("{name}.f.b"), f_bytes)?,
        ];
        let level_bodies: Vec<(usize, &geometry::Shape)> = lattice
            .bodies
            .iter()
            .enumerate()
            .filter(|(_, b)| b.level == patch.level)
            .map(|(i, b)| (i, &b.shape))
            .collect();
        let (mask, owner) = geometry::rasterize(patch, &level_bodies);
        let flags = self.upload(driver, format!("{name}.flags"), &mask)?;
        let flux = match patch.level {
            0 => None,
            _ => {
                let cells = ring_cells(&fine_covered(&patch.layout), sides.kinds);
                Some(self.alloc_state(driver, format!("{name}.interface_flux"), cells * 4)?)
            }
        };
        let slots = &self.body_slots[patch.level];
        let tables = geometry::wall_tables(patch, &owner, &level_bodies, |b| {
            slots.iter().position(|s| *s == b).expect("body has a slot") as u32
        });
        let wall_distance = match tables.links.is_empty() {
            true => None,
            false => Some(self.upload(
                driver,
                format!("{name}.wall_distance"),
                bytemuck::cast_slice(&tables.wall_distance),
            )?),
        };
        self.patches[patch.level].push(PatchBuffers {
            f,
            flags,
            flux,
            wall_distance,
        });
        if !tables.links.is_empty() {
            let links = self.upload(driver, format!("{name}.links"), bytemuck::cast_slice(&tables.links))?;
            self.exchange.push(ExchangeBuffers {
                level: patch.level,
                patch: patch.index,
                links,
                n_links: (tables.links.len() / LINK_WORDS) as u32,
            });
        }
        Ok(())
    }
}
