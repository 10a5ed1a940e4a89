//! Deterministic setups for benchmarks and for testing a driver against the
//! CPU reference: a periodic benchmark grid, one sample launch of every
//! kernel family over buffers sized exactly as the launch check demands, and
//! the ways of spoiling a launch that every driver must refuse alike.
//!
//! Nothing here is physics; the samples are valid launches, not meaningful
//! flows. Whoever runs them fills their inputs (random data, poisoned
//! outputs).

use crate::config::{Amplitude, Boundary, LevelPhysics};
use crate::device::{Arg, BLOCK_THREADS, BufferId, BufferRef, Driver, Kernel, Launch};
use crate::domain::hierarchy::{Layout, Rect};
use crate::domain::sides::{PatchSide, PatchSides};
use crate::error::Result;
use crate::kernels::KernelArgs;
use crate::kernels::boundary::UpdateBoundaryState;
use crate::kernels::exchange::AccumulateExchange;
use crate::kernels::halo::{HaloColumn, PackHalo, UnpackHalo};
use crate::kernels::health::CheckHealth;
use crate::kernels::lbm::{
    BulkSide, CellList, StreamCollide, StreamCollideBulk, WallDistances, boundary_cells, bulk_interior, bulk_open,
    bulk_sides,
};
use crate::kernels::moments::SaveMoments;
use crate::kernels::producer::{ProduceChunked, ProducePrefix, ProduceRecord, ProduceStatic, RingTarget};
use crate::kernels::refine::{FillGhost, RestrictToParent};
use crate::kernels::reflux::{AccumulateFineFlux, CorrectInterfaceMass, RefluxPhase};
use crate::lattice::{Collision, Q, Relaxation};

/// A periodic `n` x `n` grid on a driver: two population buffers (`src`
/// filled with small deterministic noise), flags, the boundary cells of an
/// inset split (the rim), and the ping-pong steps, `src -> dst` then
/// `dst -> src`, each as the stepper enqueues it (the bulk kernel wrapping
/// both axes, alone), as the inset split (the bulk kernel over the interior
/// one cell in from every side, then the general one over the rim) and as
/// the general kernel over every cell.
pub struct PeriodicBenchmark {
    pub src: BufferId,
    pub dst: BufferId,
    pub flags: BufferId,
    pub cells: BufferId,
    /// Bytes of one population buffer.
    pub population_bytes: usize,
    pub launches: [Vec<Launch>; 2],
    pub inset: [Vec<Launch>; 2],
    pub whole: [Launch; 2],
}

impl PeriodicBenchmark {
    pub fn allocate<D: Driver + ?Sized>(driver: &mut D, n: u32, physics: LevelPhysics) -> Result<PeriodicBenchmark> {
        let cells = (n * n) as usize;
        let bytes = Q * cells * 4;
        let src = driver.alloc("src", bytes)?;
        let dst = driver.alloc("dst", bytes)?;
        let flags = driver.alloc("flags", cells)?;
        let noise: Vec<f32> = (0..Q * cells)
            .map(|i| 1e-3 * ((i * 7919 % 1000) as f32 / 1000.0 - 0.5))
            .collect();
        driver.upload(src, 0, bytemuck::cast_slice(&noise))?;
        let general = |from: BufferId, to: BufferId| {
            StreamCollide::periodic(from.into(), to.into(), flags.into(), [n, n], physics)
        };
        let sample = general(src, dst);
        let bulk = |from: BufferId, to: BufferId, interior: Rect| StreamCollideBulk {
            src: from.into(),
            dst: to.into(),
            skip: None,
            layout: sample.layout,
            interior,
            sides: bulk_sides(&sample.active, &interior, sample.boundaries, sample.wall_velocity),
            omega_plus: sample.omega_plus,
            omega_minus: sample.omega_minus,
            force: sample.force,
        };
        let open = bulk_open(&sample.layout, &sample.active, sample.boundaries);
        let whole = bulk_interior(&sample.layout, &sample.active, open).expect("a row-major grid of at least 3 x 3");
        let interior =
            bulk_interior(&sample.layout, &sample.active, [false; 4]).expect("a row-major grid of at least 3 x 3");
        let rim = boundary_cells(&vec![0; cells], &sample.layout, &sample.active, &interior);
        let list = driver.alloc("cells", rim.len() * 4)?;
        driver.upload(list, 0, bytemuck::cast_slice(&rim))?;
        let inset = |from: BufferId, to: BufferId| {
            let boundary = StreamCollide {
                cells: Some(CellList {
                    cells: list.into(),
                    count: rim.len() as u32,
                }),
                ..general(from, to)
            };
            vec![bulk(from, to, interior).launch(), boundary.launch()]
        };
        Ok(PeriodicBenchmark {
            src,
            dst,
            flags,
            cells: list,
            population_bytes: bytes,
            launches: [
                vec![bulk(src, dst, whole).launch()],
                vec![bulk(dst, src, whole).launch()],
            ],
            inset: [inset(src, dst), inset(dst, src)],
            whole: [general(src, dst).launch(), general(dst, src).launch()],
        })
    }
}

/// The physics of the benchmarks and samples: TRT at τ = 0.625, no force.
pub fn benchmark_physics() -> LevelPhysics {
    LevelPhysics {
        relaxation: Relaxation::new(Collision::default(), 0.625),
        force: [0.0, 0.0],
    }
}

/// One sample launch per kernel, in [`Kernel::ALL`] order, over buffers named
/// by `buffer(k)` (k counts a sample's buffers from 0). Each sample exercises
/// the kernel's less common paths: tiles, a wall side, an inlet, a window, a
/// speed limit that random flows exceed here and there; producers into a ring
/// of odd capacity (so a random head wraps), on grids that do not match their
/// bytes, the chunked one with fewer blocks than chunks.
pub fn sample_launches(buffer: impl Fn(u32) -> BufferRef) -> Vec<Launch> {
    let b = &buffer;
    let coarse = Layout {
        nx: 24,
        ny: 20,
        tile: [8, 4],
    };
    let fine = Layout {
        nx: 24,
        ny: 24,
        tile: [8, 8],
    };
    let walled = PatchSides {
        kinds: [
            PatchSide::Interface,
            PatchSide::Interface,
            PatchSide::Wall,
            PatchSide::Interface,
        ],
        tangential: [0.0, 0.0, 0.05, 0.0],
    };
    let physics = benchmark_physics();
    vec![
        StreamCollide {
            wall_distance: Some(WallDistances { table: b(3), cells: 64 }),
            inlet_profile: Some(b(4)),
            boundary_state: Some(b(5)),
            active: Rect::new(2, 2, 22, 18),
            boundaries: [Boundary::Inlet, Boundary::Outflow, Boundary::Wall, Boundary::Interface],
            wall_velocity: [[0.0; 2], [0.0; 2], [0.0; 2], [0.02, 0.0]],
            force: [1e-6, -2e-6],
            layout: coarse,
            ..StreamCollide::periodic(b(0), b(1), b(2), [coarse.nx, coarse.ny], physics)
        }
        .launch(),
        StreamCollideBulk {
            src: b(0),
            dst: b(1),
            skip: Some(b(2)),
            layout: Layout {
                nx: 24,
                ny: 20,
                tile: [24, 20],
            },
            interior: Rect::new(3, 3, 21, 17),
            sides: [BulkSide::Neighbour; 4],
            omega_plus: physics.relaxation.omega_plus(),
            omega_minus: physics.relaxation.omega_minus(),
            force: [1e-6, -2e-6],
        }
        .launch(),
        StreamCollideBulk {
            src: b(0),
            dst: b(1),
            skip: Some(b(2)),
            layout: Layout {
                nx: 24,
                ny: 20,
                tile: [24, 20],
            },
            interior: Rect::new(3, 3, 21, 17),
            sides: [
                BulkSide::Neighbour,
                BulkSide::Wall([0.01, -0.02]),
                BulkSide::Neighbour,
                BulkSide::Wall([0.03, 0.0]),
            ],
            omega_plus: physics.relaxation.omega_plus(),
            omega_minus: physics.relaxation.omega_minus(),
            force: [1e-6, -2e-6],
        }
        .launch(),
        FillGhost {
            coarse_t: b(0),
            coarse_t1: b(1),
            fine_dst: b(2),
            coarse,
            coarse_active: Rect::new(0, 0, 24, 20),
            fine,
            active_offset: [6, 0],
            sides: walled,
            alpha: 0.5,
            tau_plus: 0.75,
            tau_minus: 0.9,
            coarse_force: [1e-6, 0.0],
        }
        .launch(),
        RestrictToParent {
            fine_src: b(0),
            coarse_dst: b(1),
            fine,
            coarse,
            covered: Rect::new(6, 0, 14, 8),
            hole: Rect::new(9, 0, 11, 5),
            fine_active_origin: 4,
            sides: walled,
            tau_plus: 0.625,
            tau_minus: 0.8,
            coarse_force: [0.0, 1e-6],
        }
        .launch(),
        AccumulateFineFlux {
            fine: b(0),
            flux: b(1),
            layout: fine,
            kinds: walled.kinds,
        }
        .launch(),
        CorrectInterfaceMass {
            coarse_t: b(0),
            coarse_t1: b(1),
            flux: b(2),
            arrivals: b(3),
            coarse,
            covered: Rect::new(6, 0, 14, 8),
            kinds: walled.kinds,
            phase: RefluxPhase::Whole,
        }
        .launch(),
        AccumulateExchange {
            f: b(0),
            plane_cells: coarse.plane_cells() as u32,
            links: b(1),
            // More links than a slot's two blocks have threads, over several
            // slots: the first block takes a second stride.
            n_links: 600,
            n_slots: 3,
            blocks_per_slot: 2,
            partials: b(2),
            arrivals: b(3),
            interval: b(4),
            window: Some(b(5)),
        }
        .launch(),
        UpdateBoundaryState::new(
            b(0),
            Some(b(1)),
            &Amplitude::Table {
                points: vec![[0.0, 0.0], [10.0, 1.0], [20.0, 0.5]],
            },
        )
        .launch(),
        // A tiled patch's last column and first column, as a slab's halo
        // exchange packs and unpacks them.
        PackHalo(HaloColumn {
            f: b(0),
            halo: b(1),
            layout: coarse,
            column: Rect::new(23, 0, 24, 20),
            towards: 0,
        })
        .launch(),
        UnpackHalo(HaloColumn {
            f: b(0),
            halo: b(1),
            layout: coarse,
            column: Rect::new(0, 1, 1, 19),
            towards: 1,
        })
        .launch(),
        CheckHealth {
            f: b(0),
            flags: b(1),
            result: b(2),
            layout: coarse,
            active: Rect::new(2, 2, 22, 18),
            speed_limit: 0.1,
        }
        .launch(),
        SaveMoments {
            f: b(0),
            out: b(1),
            layout: coarse,
            active: Rect::new(2, 2, 22, 18),
            force: [1e-5, -2e-5],
        }
        .launch(),
        ProduceStatic {
            src: b(0),
            ring: sample_ring(b(1), b(2)),
            nbytes: 700,
            blocks: 3,
        }
        .launch(),
        ProducePrefix {
            src: b(0),
            row_count: b(1),
            ring: sample_ring(b(2), b(3)),
            row_bytes: 12,
            max_rows: 40,
            blocks: 2,
        }
        .launch(),
        ProduceChunked {
            src: b(0),
            chunks: b(1),
            ring: sample_ring(b(2), b(3)),
            src_bytes: 600,
            n_chunks: 5,
            total_bytes: 500,
            blocks: 3,
        }
        .launch(),
        ProduceRecord {
            payload: b(0),
            ring: sample_ring(b(1), b(2)),
            payload_bytes: 300,
            kind: 7,
            step: 123_456_789,
            blocks: 2,
        }
        .launch(),
    ]
}

/// The samples' ring: 777 bytes, so that positions wrap at an odd place.
fn sample_ring(data: BufferRef, control: BufferRef) -> RingTarget {
    RingTarget {
        data,
        control,
        capacity: 777,
    }
}

/// [`sample_launches`] over buffers allocated on `driver` (zeroed), each as
/// large as its launch needs; returns each launch with its buffers.
pub fn allocate_samples<D: Driver + ?Sized>(driver: &mut D) -> Result<Vec<(Launch, Vec<BufferId>)>> {
    let placeholders = sample_launches(|k| BufferId(k).into());
    let mut out = Vec::with_capacity(placeholders.len());
    for (index, placeholder) in placeholders.iter().enumerate() {
        let mut sizes: Vec<usize> = Vec::new();
        for u in crate::kernels::uses_of(placeholder)? {
            let k = u.buffer.id.0 as usize;
            if sizes.len() <= k {
                sizes.resize(k + 1, 0);
            }
            sizes[k] = sizes[k].max(u.bytes);
        }
        let kernel = Kernel::ALL[index].cuda_name();
        let ids = sizes
            .iter()
            .enumerate()
            .map(|(k, bytes)| driver.alloc(&format!("{kernel}.{k}"), *bytes))
            .collect::<Result<Vec<_>>>()?;
        // The other samples are built too and dropped; only this one's ids matter.
        let launch = sample_launches(|k| ids.get(k as usize).copied().unwrap_or(BufferId(k)).into()).swap_remove(index);
        out.push((launch, ids));
    }
    Ok(out)
}

/// One way to spoil a launch: its name, and the spoiled launch (or `None`
/// where it does not apply to this kernel).
type Spoil = fn(&Launch) -> Option<Launch>;

fn with(launch: &Launch, edit: impl FnOnce(&mut Launch)) -> Option<Launch> {
    let mut l = launch.clone();
    edit(&mut l);
    Some(l)
}

/// Index of the `n`-th buffer argument.
fn buffer_arg(launch: &Launch, n: usize) -> Option<usize> {
    launch
        .args
        .iter()
        .enumerate()
        .filter(|(_, a)| matches!(a, Arg::Buffer { .. }))
        .nth(n)
        .map(|(i, _)| i)
}

/// Whether `kernel` takes one exact shape (it reduces inside its blocks, or
/// its threads find their cell from the grid's dimensions).
fn exact_shape(kernel: Kernel) -> bool {
    matches!(
        kernel,
        Kernel::CorrectInterfaceMass
            | Kernel::AccumulateExchange
            | Kernel::StreamCollideBulk
            | Kernel::StreamCollideBulkWalled
    )
}

/// Index of the first buffer argument whose use needs more than byte alignment.
fn aligned_buffer_arg(launch: &Launch) -> Option<usize> {
    let uses = crate::kernels::uses_of(launch).ok()?;
    launch.args.iter().position(|a| match a {
        Arg::Buffer { id, .. } => uses.iter().any(|u| u.buffer.id == *id && u.align > 1),
        _ => false,
    })
}

/// Index of the `capacity` argument of a producer launch.
fn capacity_arg(launch: &Launch) -> Option<usize> {
    launch.kernel.params().iter().position(|p| *p == "capacity")
}

/// The ways [`spoiled_launches`] spoils a launch.
const SPOILINGS: &[(&str, Spoil)] = &[
    ("a zero grid", |l| with(l, |l| l.grid = [0, 1, 1])),
    ("a block over 1024 threads", |l| with(l, |l| l.block = [2048, 1, 1])),
    ("a grid short of the work", |l| {
        // Only kernels with more than one block of work can be short; a
        // grid-stride kernel covers its work with any grid; an exact
        // shape's grid is spoiled below.
        let one_less = l.threads() - u64::from(l.block[0]);
        let items = crate::kernels::work_items_of(l).ok()? as u64;
        (l.threads() > u64::from(BLOCK_THREADS) && !exact_shape(l.kernel) && items > one_less)
            .then(|| with(l, |l| l.grid[0] -= 1))
            .flatten()
    }),
    ("an exact shape's block of another size", |l| {
        // Enough threads in all, but the tree or the cell mapping is written for its block.
        exact_shape(l.kernel)
            .then(|| {
                with(l, |l| {
                    l.block[0] /= 2;
                    l.grid[0] *= 2;
                })
            })
            .flatten()
    }),
    ("an exact shape's grid of another size", |l| {
        exact_shape(l.kernel).then(|| with(l, |l| l.grid[0] += 1)).flatten()
    }),
    ("one argument too few", |l| {
        with(l, |l| {
            l.args.pop();
        })
    }),
    ("a scalar where a buffer goes", |l| with(l, |l| l.args[0] = Arg::U32(0))),
    ("an unknown buffer", |l| {
        let at = buffer_arg(l, 0)?;
        with(l, |l| l.args[at] = Arg::from(BufferRef::from(BufferId(9999))))
    }),
    ("a misaligned offset", |l| {
        let at = aligned_buffer_arg(l)?;
        with(l, |l| {
            if let Arg::Buffer { byte_offset, .. } = &mut l.args[at] {
                *byte_offset = 2;
            }
        })
    }),
    ("an offset past what the launch needs", |l| {
        let at = buffer_arg(l, 0)?;
        with(l, |l| {
            if let Arg::Buffer { byte_offset, .. } = &mut l.args[at] {
                *byte_offset = 64;
            }
        })
    }),
    ("a written buffer also read", |l| {
        // The first buffer is read and some later one written in every family;
        // naming the first everywhere aliases them.
        let first = buffer_arg(l, 0)?;
        let Arg::Buffer { id, .. } = l.args[first] else {
            unreachable!()
        };
        with(l, |l| {
            for a in &mut l.args {
                if let Arg::Buffer { id: other, .. } = a {
                    *other = id;
                }
            }
        })
    }),
    ("a required optional buffer absent", |l| match l.kernel {
        // The sample has an inlet side; its profile is required.
        Kernel::StreamCollide => with(l, |l| l.args[4] = Arg::NoBuffer),
        Kernel::UpdateBoundaryState => with(l, |l| l.args[1] = Arg::NoBuffer),
        _ => None,
    }),
    ("a producer moving more than its ring holds", |l| {
        let at = capacity_arg(l)?;
        with(l, |l| l.args[at] = Arg::U64(1))
    }),
    ("a presence flag that contradicts its buffer", |l| match l.kernel {
        Kernel::StreamCollide | Kernel::AccumulateExchange => with(l, |l| *l.args.last_mut().unwrap() = Arg::U32(0)),
        _ => None,
    }),
];

/// Every way of spoiling `launch` that applies to its kernel, each a launch
/// the launch check must refuse: (what was spoiled, the bad launch).
pub fn spoiled_launches(launch: &Launch) -> Vec<(&'static str, Launch)> {
    SPOILINGS
        .iter()
        .filter_map(|(what, spoil)| spoil(launch).map(|bad| (*what, bad)))
        .collect()
}

/// Names of every spoiling [`spoiled_launches`] knows.
pub fn spoiling_names() -> impl Iterator<Item = &'static str> {
    SPOILINGS.iter().map(|(what, _)| *what)
}
