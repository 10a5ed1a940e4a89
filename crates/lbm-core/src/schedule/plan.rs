//! The hop plan: one base interval of the recursive refinement time step,
//! flattened into a list of named steps that the stepper replays.
//!
//! `hop(l)` is, in this order:
//! 1. for every patch of level `l`, one group (`Action::Together`) of what
//!    reads its `current`: `stream_collide` (`current -> spare`, split into
//!    the bulk and the general kernel on large patches),
//!    `accumulate_exchange` when it has body links, and on a refined patch
//!    `accumulate_fine_flux`, the mass the hop moves across the interface;
//! 2. if level `l + 1` exists: per child patch, one group of both its
//!    `fill_ghost`s (parent at t and t+1 are the parent's `current` and
//!    `spare`; the first child hop uses t, filled into the child's
//!    `current`, the second t + 1/2, into its `spare`, whose ghost band
//!    nothing in the first hop touches), then `hop(l + 1)` twice; after
//!    both child hops, per child, one group of
//!    `restrict_to_parent` into the covered cells of the parent's `spare`
//!    and `correct_interface_mass` (reflux) on the ring of parent cells
//!    around them;
//! 3. swap `current` and `spare` of level `l` (host handles only).
//!
//! Each interval starts with zeroing the raw-exchange integral (when observed)
//! and, when a side is an inlet, `update_boundary_state`.
//!
//! Restriction inside an interval writes only the covered cells that the
//! interval reads back ([`restriction_holes`]): `fill_ghost` reads the
//! parent's t + 1 two cells deep into the covered region, which its update
//! computes from t three cells deep, and the parent's streaming and the
//! reflux read one cell deep. The deeper cells evolve on the parent's own
//! update and nothing reads them until the settle plan (`HopPlan::settle`)
//! restricts every covered cell again, finest level first, before the
//! stepper's state is read; what a read sees is what restricting every
//! covered cell every interval gives, bit for bit.
//!
//! Level 0 takes one hop per interval, so its ping-pong parity alternates and the
//! plan is built for both parities; every finer level takes an even number of
//! hops and starts each interval on the same buffer. The plan is data: it is
//! built once and executed as often as needed, and it never waits.
//!
//! Beside it, `health_steps`: the divergence check of every patch on the
//! buffers that are current between intervals.

use serde::Serialize;

use crate::config::{Boundary, InletSpec, LevelPhysics};
use crate::device::{Action, BufferId, BufferRef, Launch};
use crate::domain::hierarchy::{GHOST, Hierarchy, PARENT_MARGIN, Patch, Rect};
use crate::domain::sides::{PatchSides, is_interface};
use crate::kernels::KernelArgs;
use crate::kernels::boundary::UpdateBoundaryState;
use crate::kernels::exchange::{AccumulateExchange, blocks_per_slot};
use crate::kernels::health::{CheckHealth, HEALTH_WORDS};
use crate::kernels::lbm::{CellList, StreamCollide, StreamCollideBulk, WallDistances, bulk_sides};
use crate::kernels::refine::{FillGhost, RestrictToParent};
use crate::kernels::reflux::{AccumulateFineFlux, CorrectInterfaceMass, RefluxPhase};

use super::resources::{Resources, patch_boundaries};

/// One named step of the plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanStep {
    pub name: String,
    pub action: Action,
}

/// Which of a patch's two population buffers is `current` at the start of the
/// interval that begins at `step_count`: level 0 takes one hop per interval,
/// so it alternates; every finer level takes an even number of hops and comes
/// back to buffer 0.
pub fn parity_at_interval_start(level: usize, step_count: u64) -> usize {
    match level {
        0 => (step_count % 2) as usize,
        _ => 0,
    }
}

/// Inputs of [`HopPlan::build`] besides the resources.
pub(crate) struct PlanInputs<'a> {
    pub hierarchy: &'a Hierarchy,
    /// How each patch's coupling sees its sides, indexed like `hierarchy.levels`.
    pub sides: &'a [Vec<PatchSides>],
    pub physics: &'a [LevelPhysics],
    pub boundaries: [Boundary; 4],
    pub wall_velocity: [[f32; 2]; 4],
    pub inlet: Option<&'a InletSpec>,
    /// Zero each interval's integral first (observing raw exchange).
    pub zero_interval: bool,
    /// Launch the momentum exchange at all (raw exchange or window observed).
    pub accumulate: bool,
}

/// Covered parent cells from an interface side that every interval
/// restricts: `fill_ghost` reads the parent's t + 1 to depth 2 (its 4x4
/// stencil around the floor of the ghost cell nearest the patch), and the
/// update computes depth 2 at t + 1 from depth 3 at t.
pub const RESTRICT_BAND: u32 = 3;

/// One base interval as a flat list of steps, for each parity of level 0,
/// and the settle plan that completes its restrictions, for the parity of
/// the interval that comes next (empty when no restriction leaves a hole).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HopPlan {
    pub intervals: [Vec<PlanStep>; 2],
    pub settle: [Vec<PlanStep>; 2],
}

impl HopPlan {
    pub(crate) fn build(inputs: &PlanInputs, resources: &Resources) -> HopPlan {
        let holes = restriction_holes(inputs.hierarchy, inputs.sides);
        let builder = |step_count: u64| Builder {
            inputs,
            resources,
            holes: &holes,
            steps: Vec::new(),
            parity: (0..inputs.hierarchy.n_levels())
                .map(|l| parity_at_interval_start(l, step_count))
                .collect(),
        };
        let intervals = [0, 1].map(|step_count| {
            let mut builder = builder(step_count);
            if inputs.zero_interval {
                for acc in &resources.accumulators {
                    builder.steps.push(PlanStep {
                        name: format!("L{}.zero_interval_integral", acc.level),
                        action: Action::Memset {
                            buffer: acc.interval,
                            byte_offset: 0,
                            bytes: acc.bytes,
                            value: 0,
                        },
                    });
                }
            }
            if let (Some(spec), Some(inlet)) = (inputs.inlet, resources.inlet) {
                let update = UpdateBoundaryState::new(inlet.state.into(), inlet.table.map(Into::into), &spec.amplitude);
                builder.push("L0.update_boundary_state".into(), update.launch());
            }
            builder.hop(0);
            builder.steps
        });
        let holes_left = holes.iter().flatten().any(|h| h.cells() > 0);
        let settle = [0, 1].map(|step_count| match holes_left {
            true => builder(step_count).settle(),
            false => Vec::new(),
        });
        HopPlan { intervals, settle }
    }

    /// The steps of the interval that starts at `step_count`.
    pub fn interval(&self, step_count: u64) -> &[PlanStep] {
        &self.intervals[parity_at_interval_start(0, step_count)]
    }

    /// The actions of the interval that starts at `step_count`, as a driver
    /// prepares them.
    pub fn actions(&self, step_count: u64) -> Vec<Action> {
        self.interval(step_count).iter().map(|s| s.action.clone()).collect()
    }

    /// The actions of the settle plan after `step_count` completed intervals.
    pub fn settle_actions(&self, step_count: u64) -> Vec<Action> {
        self.settle[parity_at_interval_start(0, step_count)]
            .iter()
            .map(|s| s.action.clone())
            .collect()
    }
}

/// The covered cells each patch's restriction leaves to the settle plan
/// (parent allocation coordinates), indexed like `hierarchy.levels` (empty on
/// level 0 and where it restricts everything): the covered region less
/// [`RESTRICT_BAND`] cells from each interface side.
///
/// Where the parent is itself refined, its own restriction reads its fine
/// cells up to `2 RESTRICT_BAND + 1` from an interface side, and those must
/// be current at the end of its hop: a child's hole begins
/// [`PARENT_MARGIN`] + [`RESTRICT_BAND`] cells from there at the nearest,
/// which the assertion below keeps beyond them (and a parent too narrow for
/// a hole of its own holds no child wide enough for one).
pub fn restriction_holes(hierarchy: &Hierarchy, sides: &[Vec<PatchSides>]) -> Vec<Vec<Rect>> {
    const _: () = assert!(PARENT_MARGIN + RESTRICT_BAND > 2 * RESTRICT_BAND);
    let level_holes = |(level, patches): (usize, &Vec<Patch>)| -> Vec<Rect> {
        patches
            .iter()
            .map(|child| match child.parent {
                None => Rect::default(),
                Some(parent) => {
                    let covered = covered_by(child, &hierarchy.levels[level - 1][parent]);
                    let kinds = sides[level][child.index].kinds;
                    let inset = |side: usize| if is_interface(kinds, side) { RESTRICT_BAND } else { 0 };
                    let hole = Rect::new(
                        covered.x0 + inset(0),
                        covered.y0 + inset(2),
                        covered.x1.saturating_sub(inset(1)),
                        covered.y1.saturating_sub(inset(3)),
                    );
                    if hole.cells() > 0 { hole } else { Rect::default() }
                }
            })
            .collect()
    };
    hierarchy.levels.iter().enumerate().map(level_holes).collect()
}

/// The parent cells a child's active region covers, parent allocation coordinates.
fn covered_by(child: &Patch, parent: &Patch) -> Rect {
    let [ox, oy] = child_offset(child, parent);
    Rect::new(ox, oy, ox + child.rect.width(), oy + child.rect.height())
}

/// The population buffer of a patch that holds its state after `step_count`
/// completed intervals.
pub(crate) fn current_buffer(resources: &Resources, level: usize, patch: usize, step_count: u64) -> BufferId {
    resources.patches[level][patch].f[parity_at_interval_start(level, step_count)]
}

/// The health check of every patch on the buffers current after
/// `step_count` completed intervals: one memset sets every result to "no
/// cell" (0xFF bytes), then one `check_health` per patch, in
/// [`Hierarchy::patches`] order, writes its own [`HEALTH_WORDS`] at its
/// byte offset of `resources.health`.
pub(crate) fn health_steps(
    hierarchy: &Hierarchy,
    resources: &Resources,
    step_count: u64,
    speed_limit: f32,
) -> Vec<PlanStep> {
    let mut steps = vec![PlanStep {
        name: "health.reset".into(),
        action: Action::Memset {
            buffer: resources.health,
            byte_offset: 0,
            bytes: hierarchy.patches().count() * HEALTH_WORDS * 4,
            value: 0xFF,
        },
    }];
    for (slot, patch) in hierarchy.patches().enumerate() {
        let launch = CheckHealth {
            f: current_buffer(resources, patch.level, patch.index, step_count).into(),
            flags: resources.patches[patch.level][patch.index].flags.into(),
            result: BufferRef {
                id: resources.health,
                byte_offset: (slot * HEALTH_WORDS * 4) as u64,
            },
            layout: patch.layout,
            active: patch.active,
            speed_limit,
        }
        .launch();
        steps.push(PlanStep {
            name: format!("{}.check_health", patch.name()),
            action: Action::Launch(launch),
        });
    }
    steps
}

struct Builder<'a> {
    inputs: &'a PlanInputs<'a>,
    resources: &'a Resources,
    /// [`restriction_holes`].
    holes: &'a [Vec<Rect>],
    steps: Vec<PlanStep>,
    parity: Vec<usize>,
}

impl Builder<'_> {
    fn current(&self, patch: &Patch) -> BufferRef {
        self.resources.patches[patch.level][patch.index].f[self.parity[patch.level]].into()
    }
    fn spare(&self, patch: &Patch) -> BufferRef {
        self.resources.patches[patch.level][patch.index].f[1 - self.parity[patch.level]].into()
    }
    fn flux(&self, patch: &Patch) -> BufferRef {
        self.resources.patches[patch.level][patch.index]
            .flux
            .expect("refined patches have a flux buffer")
            .into()
    }
    fn reflux_arrivals(&self, patch: &Patch) -> BufferRef {
        self.resources.patches[patch.level][patch.index]
            .reflux_arrivals
            .expect("refined patches have an arrival counter")
            .into()
    }
    fn push(&mut self, name: String, launch: Launch) {
        self.steps.push(PlanStep {
            name,
            action: Action::Launch(launch),
        });
    }

    /// The momentum exchange over `patch`'s body links, when it has any: the
    /// populations the hop's streaming reads (`current`, which the update
    /// leaves as it is) into the level's accumulators.
    fn exchange_launch(&self, level: usize, patch: &Patch) -> Option<Launch> {
        let ex = self
            .resources
            .exchange
            .iter()
            .find(|e| e.level == level && e.patch == patch.index)?;
        let acc = self
            .resources
            .accumulators
            .iter()
            .find(|a| a.level == level)
            .expect("a level with links has accumulators");
        Some(
            AccumulateExchange {
                f: self.current(patch),
                plane_cells: patch.layout.plane_cells() as u32,
                links: ex.links.into(),
                n_links: ex.n_links,
                n_slots: self.resources.body_slots[level].len() as u32,
                blocks_per_slot: blocks_per_slot(ex.n_links),
                partials: ex.partials.expect("observed exchange has scratch").into(),
                arrivals: ex.arrivals.expect("observed exchange has scratch").into(),
                interval: acc.interval.into(),
                window: acc.window.map(Into::into),
            }
            .launch(),
        )
    }

    /// `restrict_to_parent` of `child` from `fine_src` into `coarse_dst`,
    /// leaving `hole`.
    fn restriction(&self, child: &Patch, fine_src: BufferRef, coarse_dst: BufferRef, hole: Rect) -> Launch {
        let level = child.level;
        let parent = &self.inputs.hierarchy.levels[level - 1][child.parent.expect("refined patches have parents")];
        let physics = self.inputs.physics[level - 1];
        RestrictToParent {
            fine_src,
            coarse_dst,
            fine: child.layout,
            coarse: parent.layout,
            covered: covered_by(child, parent),
            hole,
            fine_active_origin: GHOST,
            sides: self.inputs.sides[level][child.index],
            tau_plus: physics.relaxation.tau_plus as f32,
            tau_minus: physics.relaxation.tau_minus as f32,
            coarse_force: physics.force,
        }
        .launch()
    }

    /// The settle plan: every covered cell restricted from the child's
    /// current populations into the parent's, finest level first, so that
    /// each restriction reads a settled child.
    fn settle(&self) -> Vec<PlanStep> {
        let hierarchy = self.inputs.hierarchy;
        (1..hierarchy.n_levels())
            .rev()
            .flat_map(|level| &hierarchy.levels[level])
            .map(|child| {
                let parent = &hierarchy.levels[child.level - 1][child.parent.expect("refined patches have parents")];
                PlanStep {
                    name: format!("{}.settle", child.name()),
                    action: Action::Launch(self.restriction(
                        child,
                        self.current(child),
                        self.current(parent),
                        Rect::default(),
                    )),
                }
            })
            .collect()
    }

    /// `hop(level)`.
    fn hop(&mut self, level: usize) {
        let inputs = self.inputs;
        let hierarchy = inputs.hierarchy;
        let physics = inputs.physics[level];
        for patch in &hierarchy.levels[level] {
            let buffers = self.resources.patches[level][patch.index];
            let boundaries = patch_boundaries(patch, inputs.boundaries);
            let inlet = self.resources.inlet.filter(|_| boundaries.contains(&Boundary::Inlet));
            // A hop's update of a patch and what else reads the same
            // populations are one group (see `Action::Together`): the bulk
            // kernel, the general kernel over the cells the bulk leaves (the
            // rim and a span around each body's cells per row, which the bulk
            // skips), the momentum exchange, which writes only the level's
            // accumulators, and on a refined patch the interface flux, which
            // writes only the flux slots. None writes what another touches,
            // so a device runs the small ones beside the largest one (the
            // first) and hides them.
            let mut group = Vec::new();
            if let Some(list) = buffers.boundary_cells {
                group.push(
                    StreamCollideBulk {
                        src: self.current(patch),
                        dst: self.spare(patch),
                        skip: list.skip.map(Into::into),
                        layout: patch.layout,
                        interior: list.bulk,
                        sides: bulk_sides(&patch.active, &list.bulk, boundaries, inputs.wall_velocity),
                        omega_plus: physics.relaxation.omega_plus(),
                        omega_minus: physics.relaxation.omega_minus(),
                        force: physics.force,
                    }
                    .launch(),
                );
            }
            // The general kernel over every cell, over the split's list, or
            // not at all where the bulk kernel is the whole update.
            let cells = match buffers.boundary_cells {
                None => Some(None),
                Some(split) => split.list.map(|(cells, count)| {
                    Some(CellList {
                        cells: cells.into(),
                        count,
                    })
                }),
            };
            if let Some(cells) = cells {
                let launch = StreamCollide {
                    src: self.current(patch),
                    dst: self.spare(patch),
                    flags: buffers.flags.into(),
                    wall_distance: buffers.wall_distance.map(|w| WallDistances {
                        table: w.id.into(),
                        cells: w.cells,
                    }),
                    inlet_profile: inlet.map(|i| i.profile.into()),
                    boundary_state: inlet.map(|i| i.state.into()),
                    cells,
                    layout: patch.layout,
                    active: patch.active,
                    boundaries,
                    wall_velocity: inputs.wall_velocity,
                    omega_plus: physics.relaxation.omega_plus(),
                    omega_minus: physics.relaxation.omega_minus(),
                    force: physics.force,
                }
                .launch();
                group.push(launch);
            }
            if inputs.accumulate {
                group.extend(self.exchange_launch(level, patch));
            }
            if level > 0 {
                group.push(
                    AccumulateFineFlux {
                        fine: self.current(patch),
                        flux: self.flux(patch),
                        layout: patch.layout,
                        kinds: inputs.sides[level][patch.index].kinds,
                    }
                    .launch(),
                );
            }
            let name = format!("{}.stream_collide", patch.name());
            match group.len() {
                1 => self.push(name, group.pop().expect("one launch")),
                _ => self.steps.push(PlanStep {
                    name,
                    action: Action::Together(group.into_iter().map(Action::Launch).collect()),
                }),
            }
        }
        if level + 1 < hierarchy.n_levels() {
            let child_physics = inputs.physics[level + 1];
            // The ghost band for each child hop, interpolated between the
            // parent's t (alpha 0) and t + 1 (alpha 1/2), written into the
            // buffer that hop pulls from: `current` for the first, `spare`
            // (the first hop's destination) for the second.
            let fill = |this: &Self, child: &Patch, sub: usize| {
                let parent = &hierarchy.levels[level][child.parent.expect("refined patches have parents")];
                FillGhost {
                    coarse_t: this.current(parent),
                    coarse_t1: this.spare(parent),
                    fine_dst: [this.current(child), this.spare(child)][sub],
                    coarse: parent.layout,
                    coarse_active: parent.active,
                    fine: child.layout,
                    active_offset: child_offset(child, parent),
                    // The parent's sides the child touches are the same walls.
                    sides: inputs.sides[level + 1][child.index],
                    alpha: 0.5 * sub as f32,
                    tau_plus: child_physics.relaxation.tau_plus as f32,
                    tau_minus: child_physics.relaxation.tau_minus as f32,
                    coarse_force: physics.force,
                }
                .launch()
            };
            // Both fills read only the parent and write different buffers'
            // ghost bands: one group, a stage of small kernels side by side
            // (the second beside the first hop's update was not hidden by it).
            for child in &hierarchy.levels[level + 1] {
                let both = [0, 1].map(|sub| Action::Launch(fill(self, child, sub)));
                self.steps.push(PlanStep {
                    name: format!("{}.fill_ghost", child.name()),
                    action: Action::Together(both.to_vec()),
                });
            }
            self.hop(level + 1);
            self.hop(level + 1);
            for child in &hierarchy.levels[level + 1] {
                let parent = &hierarchy.levels[level][child.parent.expect("refined patches have parents")];
                let sides = inputs.sides[level + 1][child.index];
                let covered = covered_by(child, parent);
                let hole = self.holes[level + 1][child.index];
                let restrict = self.restriction(child, self.current(child), self.spare(parent), hole);
                let reflux = |phase| {
                    CorrectInterfaceMass {
                        coarse_t: self.current(parent),
                        coarse_t1: self.spare(parent),
                        flux: self.flux(child),
                        arrivals: self.reflux_arrivals(child),
                        coarse: parent.layout,
                        covered,
                        kinds: sides.kinds,
                        phase,
                    }
                    .launch()
                };
                let launches: Vec<Launch> = RefluxPhase::of_ring(&covered, sides.kinds)
                    .iter()
                    .map(|phase| reflux(*phase))
                    .collect();
                // Restriction writes the covered cells of the parent's
                // `spare`; the reflux reads the parent's `current` and writes
                // only the ring around them (siblings keep a gap of a parent
                // cell, so no ring is another child's covered cell): one group,
                // and the apply of a longer ring's share after it.
                let mut launches = launches.into_iter();
                let first = launches.next().expect("a reflux launch at least");
                self.steps.push(PlanStep {
                    name: format!("{}.restrict_to_parent", child.name()),
                    action: Action::Together(vec![Action::Launch(restrict), Action::Launch(first)]),
                });
                for launch in launches {
                    self.push(format!("{}.correct_interface_mass", child.name()), launch);
                }
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
