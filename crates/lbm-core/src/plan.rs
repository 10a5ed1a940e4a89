//! The hop plan: one base interval of the recursive refinement time step,
//! flattened into a list of named steps that the stepper replays.
//!
//! `hop(l)` is, in this order:
//! 1. `stream_collide` on every patch of level `l` (`current -> spare`);
//! 2. `accumulate_exchange` on every patch of level `l` that has body links;
//! 3. if level `l + 1` exists, twice: `fill_ghost` on every child patch (parent
//!    at t and t+1 are the parent's `current` and `spare`; the first child hop
//!    uses t, the second t + 1/2), then `hop(l + 1)`;
//!    right after each `fill_ghost`, `accumulate_fine_flux` records the mass the
//!    coming fine hop moves across the interface; after both child hops:
//!    `restrict_to_parent` of every child into the parent's `spare`, then
//!    `correct_interface_mass` (reflux) on the parent cells around it;
//! 4. swap `current` and `spare` of level `l` (host handles only).
//!
//! Each interval starts with zeroing the raw-exchange integral (when observed)
//! and, when a side is an inlet, `update_boundary_state`.
//!
//! Level 0 takes one hop per interval, so its ping-pong parity alternates and the
//! plan is built for both parities; every finer level takes an even number of
//! hops and starts each interval on the same buffer. The plan is data: it is
//! built once and executed as often as needed, and it never waits.

use serde::Serialize;

use crate::device::{BufferId, Launch};
use crate::error::{Error, Result};
use crate::hierarchy::{GHOST, Hierarchy, Patch, Rect, SIDE_NAMES};
use crate::lattice::Relaxation;
use crate::launch::{
    AccumulateExchange, AccumulateFineFlux, CorrectInterfaceMass, Edge, FillGhost, PatchSides, RestrictToParent,
    SideKind, StreamCollide,
};

/// What one plan step does.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Action {
    Launch(Launch),
    Memset { buffer: BufferId, bytes: usize },
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanStep {
    pub name: String,
    pub action: Action,
}

/// Device buffers of one patch.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PatchBuffers {
    /// Ping-pong population buffers; `f[0]` is `current` at step 0.
    pub f: [BufferId; 2],
    pub flags: BufferId,
    /// Interface mass flux per parent ring cell (refined patches only).
    pub flux: Option<BufferId>,
    /// Wall distances of body links (patches with bodies only).
    pub wall_distance: Option<BufferId>,
}

/// Buffers every `stream_collide` receives for inlet handling, and the
/// boundary-state update that runs once per interval when there is an inlet.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BoundaryBuffers {
    pub inlet_profile: BufferId,
    pub state: BufferId,
    /// The amplitude's update, present when a side is an inlet.
    pub update: Option<Launch>,
}

/// Body links of one patch and the accumulators of its level.
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

/// Everything the plan needs to know about one level's physics.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LevelPhysics {
    pub relaxation: Relaxation,
    /// Body-force density in this level's lattice units.
    pub force: [f32; 2],
}

/// The sides of a refined patch as its coupling and its `stream_collide` see
/// them: where it touches the domain's boundary, that side's wall (moving
/// along itself with the side's wall velocity) or free-slip wall; an interface
/// with its parent elsewhere. Touching any other kind of side is refused.
pub fn patch_sides(patch: &Patch, edges: [Edge; 4], wall_velocity: [[f32; 2]; 4]) -> Result<PatchSides> {
    let mut sides = PatchSides::INTERFACES;
    for side in (0..4).filter(|&s| patch.on_domain[s]) {
        sides.kinds.0[side] = match edges[side] {
            Edge::Wall => SideKind::Wall,
            Edge::Symmetry => SideKind::Symmetry,
            other => {
                return Err(Error::Layout {
                    patch: format!("level {} patch {} {}", patch.level, patch.index, patch.rect),
                    reason: format!(
                        "touches the domain's {} side, which is {other:?}; a patch may touch only a wall, \
                         moving wall or symmetry side: keep it 4 parent cells away from this one",
                        SIDE_NAMES[side]
                    ),
                });
            }
        };
        // A wall moves along itself: u_y on an x side, u_x on a y side.
        sides.tangential[side] = wall_velocity[side][if side < 2 { 1 } else { 0 }];
    }
    Ok(sides)
}

/// Inputs of [`HopPlan::build`].
pub struct PlanInputs<'a> {
    pub hierarchy: &'a Hierarchy,
    pub buffers: &'a [Vec<PatchBuffers>],
    /// [`patch_sides`] of every patch, indexed like `hierarchy.levels`.
    pub sides: &'a [Vec<PatchSides>],
    pub physics: &'a [LevelPhysics],
    pub base_edges: [Edge; 4],
    pub wall_velocity: [[f32; 2]; 4],
    pub boundary: &'a BoundaryBuffers,
    pub exchange: &'a [ExchangeBuffers],
    pub accumulators: &'a [Accumulators],
    /// Zero each interval's integral first (observing raw exchange).
    pub zero_interval: bool,
    /// Launch the momentum exchange at all (raw exchange or window observed).
    pub accumulate: bool,
}

/// One base interval as a flat list of steps, for each parity of level 0.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HopPlan {
    pub intervals: [Vec<PlanStep>; 2],
}

impl HopPlan {
    pub fn build(inputs: &PlanInputs) -> HopPlan {
        let intervals = [0, 1].map(|parity| {
            let mut builder = Builder {
                inputs,
                steps: Vec::new(),
                parity: vec![0; inputs.hierarchy.n_levels()],
            };
            builder.parity[0] = parity;
            if inputs.zero_interval {
                for acc in inputs.accumulators {
                    builder.steps.push(PlanStep {
                        name: format!("L{}.zero_interval_integral", acc.level),
                        action: Action::Memset {
                            buffer: acc.interval,
                            bytes: acc.bytes,
                        },
                    });
                }
            }
            if let Some(update) = &inputs.boundary.update {
                builder.steps.push(PlanStep {
                    name: "L0.update_boundary_state".into(),
                    action: Action::Launch(update.clone()),
                });
            }
            builder.hop(0);
            builder.steps
        });
        HopPlan { intervals }
    }

    /// The steps of the interval that starts at `step_count`.
    pub fn interval(&self, step_count: u64) -> &[PlanStep] {
        &self.intervals[(step_count % 2) as usize]
    }
}

struct Builder<'a> {
    inputs: &'a PlanInputs<'a>,
    steps: Vec<PlanStep>,
    parity: Vec<usize>,
}

impl Builder<'_> {
    fn current(&self, patch: &Patch) -> BufferId {
        self.inputs.buffers[patch.level][patch.index].f[self.parity[patch.level]]
    }
    fn spare(&self, patch: &Patch) -> BufferId {
        self.inputs.buffers[patch.level][patch.index].f[1 - self.parity[patch.level]]
    }
    fn flux(&self, patch: &Patch) -> BufferId {
        self.inputs.buffers[patch.level][patch.index]
            .flux
            .expect("refined patches have a flux buffer")
    }
    fn push(&mut self, name: String, launch: Launch) {
        self.steps.push(PlanStep {
            name,
            action: Action::Launch(launch),
        });
    }

    fn hop(&mut self, level: usize) {
        let inputs = self.inputs;
        let hierarchy = inputs.hierarchy;
        let physics = inputs.physics[level];
        for patch in &hierarchy.levels[level] {
            let buffers = inputs.buffers[level][patch.index];
            // A refined patch touches only wall and free-slip sides of the
            // domain (`patch_sides` refuses others) and takes their rule there.
            let edges = std::array::from_fn(|s| {
                if patch.on_domain[s] {
                    inputs.base_edges[s]
                } else {
                    Edge::Ghost
                }
            });
            let launch = StreamCollide {
                src: self.current(patch),
                dst: self.spare(patch),
                flags: inputs.buffers[level][patch.index].flags,
                // Without bodies nothing reads it; any buffer serves.
                wall_distance: buffers.wall_distance.unwrap_or(buffers.flags),
                inlet_profile: inputs.boundary.inlet_profile,
                boundary_state: inputs.boundary.state,
                layout: patch.layout,
                active: patch.active,
                edges,
                wall_velocity: inputs.wall_velocity,
                omega_plus: physics.relaxation.omega_plus(),
                omega_minus: physics.relaxation.omega_minus(),
                force: physics.force,
                interpolated_walls: buffers.wall_distance.is_some(),
            }
            .launch();
            self.push(format!("{}.stream_collide", patch.name()), launch);
        }
        if inputs.accumulate {
            for ex in inputs.exchange.iter().filter(|e| e.level == level) {
                let patch = &hierarchy.levels[level][ex.patch];
                let acc = inputs
                    .accumulators
                    .iter()
                    .find(|a| a.level == level)
                    .expect("a level with links has accumulators");
                let launch = AccumulateExchange {
                    // The streaming just enqueued left `current`, which still
                    // holds the populations it read.
                    f: self.current(patch),
                    plane_cells: patch.layout.plane_cells() as u32,
                    links: ex.links,
                    n_links: ex.n_links,
                    interval: acc.interval,
                    window: acc.window.unwrap_or(acc.interval),
                    window_on: acc.window.is_some(),
                }
                .launch();
                self.push(format!("{}.accumulate_exchange", patch.name()), launch);
            }
        }
        if level + 1 < hierarchy.n_levels() {
            let child_physics = inputs.physics[level + 1];
            for sub in 0..2 {
                for child in &hierarchy.levels[level + 1] {
                    let parent = &hierarchy.levels[level][child.parent.expect("refined patches have parents")];
                    let sides = inputs.sides[level + 1][child.index];
                    let launch = FillGhost {
                        coarse_t: self.current(parent),
                        coarse_t1: self.spare(parent),
                        fine_dst: self.current(child),
                        coarse: parent.layout,
                        coarse_active: parent.active,
                        fine: child.layout,
                        active_offset: child_offset(child, parent),
                        // The parent's sides the child touches are the same walls.
                        sides,
                        alpha: 0.5 * sub as f32,
                        tau_plus: child_physics.relaxation.tau_plus as f32,
                        tau_minus: child_physics.relaxation.tau_minus as f32,
                        coarse_force: physics.force,
                    }
                    .launch();
                    self.push(format!("{}.fill_ghost.{sub}", child.name()), launch);
                    let launch = AccumulateFineFlux {
                        fine: self.current(child),
                        flux: self.flux(child),
                        layout: child.layout,
                        kinds: sides.kinds,
                    }
                    .launch();
                    self.push(format!("{}.accumulate_fine_flux.{sub}", child.name()), launch);
                }
                self.hop(level + 1);
            }
            for child in &hierarchy.levels[level + 1] {
                let parent = &hierarchy.levels[level][child.parent.expect("refined patches have parents")];
                let [ox, oy] = child_offset(child, parent);
                let sides = inputs.sides[level + 1][child.index];
                let covered = Rect::new(ox, oy, ox + child.rect.width(), oy + child.rect.height());
                let launch = RestrictToParent {
                    fine_src: self.current(child),
                    coarse_dst: self.spare(parent),
                    fine: child.layout,
                    coarse: parent.layout,
                    covered,
                    fine_active_origin: GHOST,
                    sides,
                    tau_plus: physics.relaxation.tau_plus as f32,
                    tau_minus: physics.relaxation.tau_minus as f32,
                    coarse_force: physics.force,
                }
                .launch();
                self.push(format!("{}.restrict_to_parent", child.name()), launch);
                let launch = CorrectInterfaceMass {
                    coarse_t: self.current(parent),
                    coarse_t1: self.spare(parent),
                    flux: self.flux(child),
                    coarse: parent.layout,
                    covered,
                    kinds: sides.kinds,
                }
                .launch();
                self.push(format!("{}.correct_interface_mass", child.name()), launch);
            }
        }
        self.parity[level] ^= 1;
    }
}

/// Parent allocation coordinates of the parent cell under the child's active
/// region's lower-left corner (the child's rectangle is given in parent-level
/// global coordinates, and lies inside the parent's active region).
fn child_offset(child: &Patch, parent: &Patch) -> [u32; 2] {
    [0, 1].map(|k| ([child.rect.x0, child.rect.y0][k] as i64 - parent.origin[k]) as u32)
}
