//! GPU tests: every kernel on `CudaDriver` against the `CpuDriver` reference on
//! random inputs, a whole refined run with a body on both backends, and the
//! ring producers' case matrix (`ring_producer::fixtures`) byte for byte.
//!
//! They need an NVIDIA GPU and are `#[ignore]`d so that plain `cargo test` passes
//! everywhere; run them on the device machine with `--include-ignored` (as
//! `gpu-pack/run.sh` does). With `LBM_KERNEL_EMU` naming the host build of the
//! kernels (`cargo xtask kernel-emu` sets it up), the same tests run the same
//! kernel source on the CPU instead, through `lbm_cuda::emu::EmuDriver`
//! (`lbm_cuda::testing::open_device` picks). Outputs are poisoned (NaN, or
//! random garbage for kernels that accumulate) before each launch, so a cell the GPU forgets to
//! write shows up as a mismatch; nothing is ever tested on zeros. The f64
//! exchange sums, kernel and stepper ledgers alike, and the populations that
//! `correct_interface_mass` corrects must match bit for bit (both sides sum
//! in one fixed order); other results are compared with a
//! tolerance (1e-5 relative and absolute for f32), and how many values agree
//! bit for bit is printed as well, since the kernels are meant to round exactly
//! like the CPU. The one exception is the sine amplitude of `update_boundary_state`:
//! CUDA's `sinf` is not the host libm's, so its factor is compared within 1e-6
//! while every other amplitude must match bit for bit. Buffers a launch passes
//! but must not read (wall distances without interpolated walls, the inlet
//! buffers without an inlet side, the table of a non-table amplitude) are
//! absent (null pointers), so a kernel that reads them faults. What these tests do not do: time anything
//! (that is `cargo xtask bench`).

use bytemuck::Pod;
use lbm_core::config::{Amplitude, InletSpec, Profile};
use lbm_core::device::{Action, BLOCK_THREADS, StreamId};
use lbm_core::domain::geometry::{Body, FLAG_FLUID, FLAG_SOLID, LINK_WORDS, NO_CELL, Shape};
use lbm_core::domain::hierarchy::{HierarchySpec, Layout, Rect};
use lbm_core::domain::order::{fine_covered, inlet_samples, ring_cells};
use lbm_core::kernels::KernelArgs;
use lbm_core::kernels::boundary::UpdateBoundaryState;
use lbm_core::kernels::exchange::{AccumulateExchange, EXCHANGE_WORDS, PARTIAL_WORDS, blocks_per_slot};
use lbm_core::kernels::halo::{HaloColumn, PackHalo, UnpackHalo};
use lbm_core::kernels::health::CheckHealth;
use lbm_core::kernels::lbm::{
    BulkSide, CellList, StreamCollide, StreamCollideBulk, WallDistances, boundary_cells, bulk_interior, bulk_open,
    bulk_sides, bulk_skip, cell_list_words,
};
use lbm_core::kernels::moments::SaveMoments;
use lbm_core::kernels::producer::{ProduceChunked, RingControl};
use lbm_core::kernels::refine::{FillGhost, RestrictToParent};
use lbm_core::kernels::reflux::{AccumulateFineFlux, CorrectInterfaceMass, RefluxPhase};
use lbm_core::lattice::{self, Collision, Moments, Q};
use lbm_core::split::Split;
use lbm_core::{
    Boundary, BufferId, CpuDriver, DIVERGED_MACH, Driver, ExecConfig, HealthProblem, Kernel, LatticeConfig, Launch,
    Stepper,
};

/// splitmix64: small, seeded, good enough for test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: f64, hi: f64) -> f32 {
        (lo + (hi - lo) * self.unit()) as f32
    }
    fn below(&mut self, n: u32) -> u32 {
        (self.next() % n as u64) as u32
    }
}

/// Shifted populations of a plausible flow: per cell the equilibrium of random
/// moments plus random non-equilibrium noise; the padding of partial tiles too.
fn random_populations(rng: &mut Rng, plane: usize) -> Vec<f32> {
    let mut f = vec![0.0f32; Q * plane];
    for cell in 0..plane {
        let feq = lattice::equilibrium(Moments {
            delta_rho: rng.range(-0.05, 0.05),
            ux: rng.range(-0.08, 0.08),
            uy: rng.range(-0.08, 0.08),
        });
        for (i, v) in feq.iter().enumerate() {
            f[i * plane + cell] = v + rng.range(-2e-3, 2e-3);
        }
    }
    f
}

fn garbage(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.range(-1e-2, 1e-2)).collect()
}

/// A wall distance in (0, 1], now and then exactly 1/2 or 1 (the branch point
/// of Bouzidi's rule and the largest q).
fn wall_q(rng: &mut Rng) -> f32 {
    match rng.below(8) {
        0 => 0.5,
        1 => 1.0,
        _ => (1.0 - rng.unit()) as f32,
    }
}

/// A wall-distance table ([`WallDistances`]) of `cells` cells of a layout of
/// `plane` storage cells, spread over it in ascending order, with a random q
/// for every direction (0 for some, as for a direction without a link).
fn random_wall_table(rng: &mut Rng, plane: usize, cells: usize) -> (Vec<u32>, u32) {
    let mut listed: Vec<u32> = (0..plane as u32).collect();
    while listed.len() > cells {
        listed.swap_remove(rng.below(listed.len() as u32) as usize);
    }
    listed.sort_unstable();
    let q = (0..cells * Q).map(|_| match rng.below(5) {
        0 => 0,
        _ => wall_q(rng).to_bits(),
    });
    let table: Vec<u32> = listed.iter().copied().chain(q.collect::<Vec<_>>()).collect();
    (table, cells as u32)
}

/// The words of a cell list for `launch`: with a wall table, the cells'
/// slots after them as the host writes them (`cell_list_words`), a tenth of
/// them spoiled (beyond the table, or naming another of its cells), which
/// the kernel must notice and bisect instead.
fn with_slots(rng: &mut Rng, cells: &[u32], launch: &StreamCollide, table: &[u32], layout: &Layout) -> Vec<u32> {
    let Some(walls) = launch.wall_distance else {
        return cells.to_vec();
    };
    let n = walls.cells as usize;
    let mut words = cell_list_words(cells, table, n, layout, &launch.active);
    assert!(
        words[cells.len()..].iter().any(|s| *s < walls.cells),
        "some listed cells have slots"
    );
    for slot in &mut words[cells.len()..] {
        if rng.below(10) == 0 {
            *slot = match rng.below(2) {
                0 => walls.cells + rng.below(5),
                _ => rng.below(walls.cells),
            };
        }
    }
    words
}

/// Cell flags: a solid disc of radius 3 in the middle of the allocation and
/// 8% scattered solid cells, some of them next to the sides.
fn body_flags(rng: &mut Rng, layout: &Layout) -> Vec<u8> {
    let mut flags = vec![FLAG_FLUID; layout.plane_cells()];
    let (cx, cy) = (layout.nx as f64 / 2.0, layout.ny as f64 / 2.0);
    for y in 0..layout.ny {
        for x in 0..layout.nx {
            let (dx, dy) = (x as f64 + 0.5 - cx, y as f64 + 0.5 - cy);
            if dx * dx + dy * dy <= 9.0 || rng.below(100) < 8 {
                flags[layout.index(x, y)] = FLAG_SOLID;
            }
        }
    }
    flags
}

/// The same buffers on both backends, allocated in the same order so that their
/// ids agree and one `Launch` serves both.
struct Twin {
    cpu: CpuDriver,
    gpu: Box<dyn Driver>,
    /// The real GPU, not the host build of the kernels.
    is_cuda: bool,
}

impl Twin {
    fn new() -> Twin {
        let device = lbm_cuda::testing::open_device();
        eprintln!("device: {}", device.name);
        Twin {
            cpu: CpuDriver::new(),
            gpu: device.driver,
            is_cuda: device.is_cuda,
        }
    }

    fn buffer<T: Pod>(&mut self, label: &str, data: &[T]) -> BufferId {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let id = self.cpu.alloc(label, bytes.len()).unwrap();
        assert_eq!(self.gpu.alloc(label, bytes.len()).unwrap(), id, "buffer ids diverged");
        self.cpu.upload(id, 0, bytes).unwrap();
        self.gpu.upload(id, 0, bytes).unwrap();
        id
    }

    fn launch(&mut self, launch: &Launch) {
        self.cpu.launch(launch).unwrap();
        self.gpu.launch(launch).unwrap();
        self.gpu.synchronize().unwrap();
    }

    fn download<T: Pod>(&mut self, id: BufferId, n: usize) -> (Vec<T>, Vec<T>) {
        let mut cpu = vec![T::zeroed(); n];
        let mut gpu = vec![T::zeroed(); n];
        self.cpu.download(id, 0, bytemuck::cast_slice_mut(&mut cpu)).unwrap();
        self.gpu.download(id, 0, bytemuck::cast_slice_mut(&mut gpu)).unwrap();
        (cpu, gpu)
    }

    fn compare_f32(&mut self, what: &str, id: BufferId, n: usize) {
        let (cpu, gpu) = self.download::<f32>(id, n);
        assert_close(what, &cpu, &gpu, 1e-5);
    }

    fn compare_bits(&mut self, what: &str, id: BufferId, n: usize) {
        let (cpu, gpu) = self.download::<f32>(id, n);
        assert_bitwise(what, &cpu, &gpu);
    }
}

/// Every value bit for bit (a NaN too, payload included: widening to f64
/// keeps every bit of an f32).
fn assert_bitwise<T: Copy + Into<f64>>(what: &str, cpu: &[T], gpu: &[T]) {
    assert_eq!(cpu.len(), gpu.len(), "{what}: lengths differ");
    let bad: Vec<String> = cpu
        .iter()
        .zip(gpu)
        .map(|(c, g)| -> (f64, f64) { ((*c).into(), (*g).into()) })
        .enumerate()
        .filter(|(_, (c, g))| c.to_bits() != g.to_bits())
        .map(|(k, (c, g))| format!("[{k}] cpu {c:e} gpu {g:e}"))
        .collect();
    eprintln!(
        "{what}: {} of {} values bit-identical",
        cpu.len() - bad.len(),
        cpu.len()
    );
    assert!(
        bad.is_empty(),
        "{what}: {} of {} values differ in their bits; first: {}",
        bad.len(),
        cpu.len(),
        bad.iter().take(8).cloned().collect::<Vec<_>>().join(", ")
    );
}

/// Element-wise `|gpu - cpu| <= tol * (1 + |cpu|)`, NaN only where the CPU has
/// NaN (a poisoned value neither backend wrote). Prints how many agree exactly.
fn assert_close<T: Copy + Into<f64>>(what: &str, cpu: &[T], gpu: &[T], tol: f64) {
    assert_eq!(cpu.len(), gpu.len(), "{what}: lengths differ");
    let mut exact = 0usize;
    let mut worst = (0.0f64, 0usize);
    let mut bad = Vec::new();
    for (k, (c, g)) in cpu.iter().zip(gpu).enumerate() {
        let (c, g): (f64, f64) = ((*c).into(), (*g).into());
        if c.is_nan() || g.is_nan() {
            if c.is_nan() != g.is_nan() {
                bad.push(format!("[{k}] cpu {c} gpu {g}"));
            }
            exact += 1;
            continue;
        }
        if c.to_bits() == g.to_bits() {
            exact += 1;
        }
        let diff = (g - c).abs();
        if diff > worst.0 {
            worst = (diff, k);
        }
        if diff.is_nan() || diff > tol * (1.0 + c.abs()) {
            bad.push(format!("[{k}] cpu {c:e} gpu {g:e} diff {diff:e}"));
        }
    }
    eprintln!(
        "{what}: {exact} of {} values bit-identical, max |diff| {:e} at {}",
        cpu.len(),
        worst.0,
        worst.1
    );
    assert!(
        bad.is_empty(),
        "{what}: {} of {} values differ beyond {tol:e}; first: {}",
        bad.len(),
        cpu.len(),
        bad.iter().take(8).cloned().collect::<Vec<_>>().join(", ")
    );
}

const TRT_OMEGA_PLUS: f32 = 1.0 / 0.8;
/// ω⁻ for τ⁺ = 0.8 and the magic parameter 3/16.
const TRT_OMEGA_MINUS: f32 = 1.0 / (0.5 + 0.1875 / 0.3);
/// BGK near τ = ½: ω⁻ above 1, where the outflow drops the odd
/// non-equilibrium it would reflect.
const BGK_NEAR_HALF_OMEGA: f32 = 1.0 / 0.51;

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn stream_collide_matches_the_cpu_for_every_edge_kind_and_tile() {
    use Boundary::{FreeSlip as S, Inlet as I, Interface as G, Outflow as O, Periodic as P, Wall as W};
    let mut twin = Twin::new();
    let mut rng = Rng(1);
    let (nx, ny) = (21, 19);
    let inner = Rect::new(2, 3, 19, 17);
    let whole = Rect::new(0, 0, nx, ny);
    // Every kind on every side it may take (an inlet on x-min, an outflow on
    // x-max), and corners where two different rules meet.
    let cases: [([Boundary; 4], Rect); 16] = [
        ([P, P, P, P], inner),
        ([P, P, P, P], whole),
        ([W, W, W, W], inner),
        ([W, W, P, P], whole),
        ([G, G, G, G], inner),
        ([P, P, W, W], inner),
        ([W, G, P, P], inner),
        ([G, W, W, G], inner),
        ([I, O, W, W], inner),
        ([I, O, W, W], whole),
        ([I, O, S, S], whole),
        ([I, O, P, P], inner),
        ([I, O, G, S], inner),
        ([S, S, S, S], inner),
        ([S, G, W, S], inner),
        ([G, O, S, P], inner),
    ];
    for tile in [[nx, ny], [4, 4], [8, 3]] {
        let layout = Layout { nx, ny, tile };
        let plane = layout.plane_cells();
        for (case, (edges, active)) in cases.iter().enumerate() {
            for (force, interpolated_walls) in [
                ([0.0, 0.0], false),
                ([0.0, 0.0], true),
                ([1e-4, -5e-5], false),
                ([1e-4, -5e-5], true),
            ] {
                let flag_bytes = body_flags(&mut rng, &layout);
                let src_values = random_populations(&mut rng, plane);
                let src = twin.buffer("src", &src_values);
                let dst = twin.buffer("dst", &vec![f32::NAN; Q * plane]);
                let flags = twin.buffer("flags", &flag_bytes);
                let (table, wall_cells) = random_wall_table(&mut rng, plane, 2 * plane / 3);
                let wall_distance = twin.buffer("wall_distance", &table);
                let samples = inlet_samples(active.height());
                let (profile, state) = if edges.contains(&Boundary::Inlet) {
                    // A third of the rows lie outside the inlet's span:
                    // zeros, where the rule is a resting wall's.
                    let profile: Vec<f32> = (0..active.height())
                        .flat_map(|_| match rng.below(3) {
                            0 => [0.0; 3],
                            _ => [(); 3].map(|_| rng.range(0.0, 0.08)),
                        })
                        .collect();
                    (profile, [rng.below(1000), rng.range(0.0, 1.2).to_bits()])
                } else {
                    (vec![f32::NAN; samples], [f32::NAN.to_bits(); 2])
                };
                let inlet_profile = twin.buffer("inlet_profile", &profile);
                let boundary_state = twin.buffer("boundary_state", &state);
                let wall_velocity = std::array::from_fn(|_| [rng.range(-0.05, 0.05), rng.range(-0.05, 0.05)]);
                let inlet = edges.contains(&Boundary::Inlet);
                // Every other case with ω⁻ above 1, where the outflow's rule differs.
                let relaxation = match case % 2 {
                    0 => [TRT_OMEGA_PLUS, TRT_OMEGA_MINUS],
                    _ => [BGK_NEAR_HALF_OMEGA; 2],
                };
                let launch = StreamCollide {
                    src: src.into(),
                    dst: dst.into(),
                    flags: flags.into(),
                    wall_distance: interpolated_walls.then_some(WallDistances {
                        table: wall_distance.into(),
                        cells: wall_cells,
                    }),
                    inlet_profile: inlet.then_some(inlet_profile.into()),
                    boundary_state: inlet.then_some(boundary_state.into()),
                    cells: None,
                    layout,
                    active: *active,
                    boundaries: *edges,
                    wall_velocity,
                    omega_plus: relaxation[0],
                    omega_minus: relaxation[1],
                    force,
                }
                .launch();
                twin.launch(&launch);
                let what = format!(
                    "stream_collide tile {tile:?} case {case} edges {edges:?} force {force:?} \
                     interpolated {interpolated_walls} relaxation {relaxation:?}"
                );
                twin.compare_bits(&what, dst, Q * plane);
                let general = StreamCollide::decode(&launch).unwrap();
                let (whole_cpu, whole_gpu) = twin.download::<f32>(dst, Q * plane);
                // A random ascending list, with numbers beyond the active
                // region at its end (skipped): only those cells are written.
                let mut listed: Vec<u32> = (0..active.cells() as u32).filter(|_| rng.below(3) == 0).collect();
                listed.extend([active.cells() as u32, active.cells() as u32 + 7]);
                let cells = twin.buffer("cells", &with_slots(&mut rng, &listed, &general, &table, &layout));
                let dst_listed = twin.buffer("dst.listed", &vec![f32::NAN; Q * plane]);
                let list = CellList {
                    cells: cells.into(),
                    count: listed.len() as u32,
                };
                twin.launch(
                    &StreamCollide {
                        dst: dst_listed.into(),
                        cells: Some(list),
                        ..general.clone()
                    }
                    .launch(),
                );
                twin.compare_bits(&format!("{what}, listed cells"), dst_listed, Q * plane);
                let (listed_cpu, _) = twin.download::<f32>(dst_listed, Q * plane);
                let width = active.width();
                for c in listed.iter().filter(|c| (**c as usize) < active.cells()) {
                    let index = layout.index(active.x0 + c % width, active.y0 + c / width);
                    for i in 0..Q {
                        assert_eq!(
                            listed_cpu[i * plane + index].to_bits(),
                            whole_cpu[i * plane + index].to_bits(),
                            "{what}: listed cell {c} differs from the whole update"
                        );
                    }
                }
                // The split update of a row-major patch: the bulk kernel, then
                // the general one over the boundary cells, gives the whole
                // update's bits on both backends, where the destination's
                // solid cells already hold the source's, as a stepper's two
                // buffers do (neither kernel copies the solid cells of a row's
                // span around a body).
                // Periodic sides are inset where solid cells are (a row's
                // span around a body does not wrap); walls and interfaces
                // the bulk region takes.
                let solid = flag_bytes.contains(&FLAG_SOLID);
                let open = bulk_open(&layout, active, general.boundaries);
                let open = std::array::from_fn(|s| open[s] && !(solid && general.boundaries[s] == Boundary::Periodic));
                let Some(interior) = bulk_interior(&layout, active, open) else {
                    continue;
                };
                let sides = bulk_sides(active, &interior, general.boundaries, general.wall_velocity);
                let boundary = boundary_cells(&flag_bytes, &layout, active, &interior);
                let cells = twin.buffer(
                    "cells.boundary",
                    &with_slots(&mut rng, &boundary, &general, &table, &layout),
                );
                let skip = twin.buffer("skip", &bulk_skip(&flag_bytes, &layout, &interior));
                let mut solid_copied = vec![f32::NAN; Q * plane];
                for (x, y) in (interior.y0..interior.y1).flat_map(|y| (interior.x0..interior.x1).map(move |x| (x, y))) {
                    let c = layout.index(x, y);
                    if flag_bytes[c] == FLAG_SOLID {
                        (0..Q).for_each(|i| solid_copied[i * plane + c] = src_values[i * plane + c]);
                    }
                }
                let dst_split = twin.buffer("dst.split", &solid_copied);
                let bulk = StreamCollideBulk {
                    src: src.into(),
                    dst: dst_split.into(),
                    skip: (!sides.contains(&BulkSide::Wrap)).then_some(skip.into()),
                    layout,
                    interior,
                    sides,
                    omega_plus: general.omega_plus,
                    omega_minus: general.omega_minus,
                    force,
                };
                twin.launch(&bulk.launch());
                twin.launch(
                    &StreamCollide {
                        dst: dst_split.into(),
                        cells: Some(CellList {
                            cells: cells.into(),
                            count: boundary.len() as u32,
                        }),
                        ..general
                    }
                    .launch(),
                );
                let (split_cpu, split_gpu) = twin.download::<f32>(dst_split, Q * plane);
                assert_bitwise(&format!("{what}, split on the CPU"), &whole_cpu, &split_cpu);
                assert_bitwise(&format!("{what}, split on the GPU"), &whole_gpu, &split_gpu);
            }
        }
    }
}

/// The bulk kernel over rows several blocks wide, regions that do not start
/// at a block boundary, with and without a force, without and with a skip
/// table of random spans (some empty, some reaching past the region): the
/// CPU's bits, and nothing written outside the region or in a skipped span.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn stream_collide_bulk_matches_the_cpu_bit_for_bit() {
    let mut twin = Twin::new();
    let mut rng = Rng(23);
    let wide = Layout {
        nx: 613,
        ny: 37,
        tile: [613, 37],
    };
    // A small patch's allocation: its interior's short rows launch as one
    // run over the storage indices.
    let narrow = Layout {
        nx: 150,
        ny: 41,
        tile: [150, 41],
    };
    const NO: [BulkSide; 4] = [BulkSide::Neighbour; 4];
    const WRAP: [BulkSide; 4] = [BulkSide::Wrap; 4];
    const WRAP_X: [BulkSide; 4] = [BulkSide::Wrap, BulkSide::Wrap, BulkSide::Neighbour, BulkSide::Neighbour];
    const WRAP_Y: [BulkSide; 4] = [BulkSide::Neighbour, BulkSide::Neighbour, BulkSide::Wrap, BulkSide::Wrap];
    let wall = |u: f32| BulkSide::Wall([u, -0.5 * u]);
    let narrow_cases = [
        (Rect::new(4, 4, 146, 37), [1e-5, 2e-5], NO),
        (Rect::new(1, 1, 149, 40), [0.0, 0.0], NO),
        (Rect::new(0, 0, 150, 41), [1e-4, -5e-5], WRAP),
        (Rect::new(0, 2, 150, 39), [0.0, 0.0], WRAP_X),
        (
            Rect::new(0, 0, 150, 41),
            [2e-5, 0.0],
            [wall(0.0), wall(0.01), wall(-0.02), wall(0.05)],
        ),
        (
            Rect::new(5, 0, 145, 41),
            [0.0, 1e-5],
            [BulkSide::Neighbour, BulkSide::Neighbour, wall(0.0), wall(0.1)],
        ),
        (Rect::new(3, 7, 147, 8), [0.0, 0.0], NO),
    ];
    let wide_cases = [
        (Rect::new(1, 1, 612, 36), [0.0, 0.0], NO),
        (Rect::new(5, 2, 530, 30), [1e-4, -5e-5], NO),
        (Rect::new(300, 10, 301, 11), [0.0, 0.0], NO),
        // 256 cells from an unaligned start: the lead makes it two blocks.
        (Rect::new(29, 3, 285, 20), [0.0, 0.0], NO),
        (Rect::new(357, 4, 612, 9), [2e-5, 0.0], NO),
        // Short rows: blocks of eight rows of 32, the last block partly
        // past the region.
        (Rect::new(40, 2, 102, 35), [1e-5, 2e-5], NO),
        (Rect::new(3, 1, 200, 12), [0.0, 0.0], NO),
        // Wrapped axes: the whole allocation, one axis reaching the
        // allocation's sides, a region inside it, a single column and row.
        (Rect::new(0, 0, 613, 37), [1e-4, -5e-5], WRAP),
        (Rect::new(0, 1, 613, 36), [0.0, 0.0], WRAP_X),
        (Rect::new(1, 0, 612, 37), [2e-5, 0.0], WRAP_Y),
        (Rect::new(40, 2, 102, 35), [1e-5, 2e-5], WRAP),
        (Rect::new(300, 0, 301, 37), [0.0, 0.0], WRAP),
        (Rect::new(0, 10, 613, 11), [0.0, 1e-5], WRAP),
        // Walls, moving and at rest, on every side, with a periodic axis,
        // with interfaces beside them (a neighbour beyond), on short rows.
        (
            Rect::new(0, 0, 613, 37),
            [1e-4, -5e-5],
            [wall(0.0), wall(0.01), wall(-0.02), wall(0.05)],
        ),
        (
            Rect::new(0, 3, 613, 30),
            [0.0, 0.0],
            [BulkSide::Wrap, BulkSide::Wrap, wall(0.0), wall(0.1)],
        ),
        (
            Rect::new(5, 0, 600, 37),
            [2e-5, 0.0],
            [BulkSide::Neighbour, wall(0.03), BulkSide::Wrap, BulkSide::Wrap],
        ),
        (
            Rect::new(40, 2, 102, 35),
            [1e-5, 2e-5],
            [wall(0.02), BulkSide::Neighbour, BulkSide::Neighbour, wall(0.0)],
        ),
        (
            Rect::new(300, 0, 301, 37),
            [0.0, 0.0],
            [wall(0.0), wall(0.04), wall(0.01), wall(0.0)],
        ),
    ];
    let mut runs = 0;
    let cases = (wide_cases.iter().map(|c| (wide, c))).chain(narrow_cases.iter().map(|c| (narrow, c)));
    for (layout, &(interior, force, sides)) in cases {
        let plane = layout.plane_cells();
        let wraps = sides.contains(&BulkSide::Wrap);
        for skipping in [false, true].into_iter().filter(|s| !*s || !wraps) {
            let src = twin.buffer("src", &random_populations(&mut rng, plane));
            let dst = twin.buffer("dst", &vec![f32::NAN; Q * plane]);
            let spans: Vec<u32> = (0..interior.height())
                .flat_map(|_| {
                    // Around a cell of the row, reaching past the region now and then.
                    let x = interior.x0 + rng.below(interior.width());
                    [x.saturating_sub(rng.below(6)), x + 1 + rng.below(40)]
                })
                .collect();
            let skipped: usize = spans
                .chunks(2)
                .map(|s| (s[1].min(interior.x1).saturating_sub(s[0].max(interior.x0))) as usize)
                .sum();
            let skip = twin.buffer("skip", &spans);
            let launch = StreamCollideBulk {
                src: src.into(),
                dst: dst.into(),
                skip: skipping.then_some(skip.into()),
                layout,
                interior,
                sides,
                omega_plus: TRT_OMEGA_PLUS,
                omega_minus: TRT_OMEGA_MINUS,
                force,
            }
            .launch();
            runs += usize::from(launch.grid[1] == 1 && launch.block == [256, 1, 1] && interior.height() > 1);
            twin.launch(&launch);
            let (cpu, gpu) = twin.download::<f32>(dst, Q * plane);
            let written = cpu.iter().filter(|v| !v.is_nan()).count();
            let expected = interior.cells() - if skipping { skipped } else { 0 };
            assert!(!skipping || skipped > 0);
            assert_eq!(
                written,
                Q * expected,
                "{interior}: the CPU writes the region only, less what it skips"
            );
            assert_bitwise(
                &format!("stream_collide_bulk {interior} force {force:?} sides {sides:?} skipping {skipping}"),
                &cpu,
                &gpu,
            );
        }
    }
    assert!(
        runs >= 6,
        "the narrow patch's several-row regions launch as runs ({runs})"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn update_boundary_state_matches_the_cpu_for_every_amplitude() {
    let mut twin = Twin::new();
    let mut rng = Rng(5);
    let amplitudes = [
        Amplitude::Constant,
        Amplitude::Ramp { duration: 37.0 },
        Amplitude::Ramp { duration: 0.0 },
        Amplitude::Sine { period: 23.5 },
        Amplitude::Sine { period: 4000.0 },
        Amplitude::Table {
            points: vec![[5.0, -0.5], [12.0, 1.0], [12.5, 0.25], [40.0, 0.75]],
        },
        Amplitude::Table {
            points: vec![[3.0, 0.6]],
        },
    ];
    for amplitude in &amplitudes {
        let values: Vec<f32> = match amplitude {
            Amplitude::Table { points } => points.iter().flatten().map(|v| *v as f32).collect(),
            // Not read: poisoned.
            _ => vec![f32::NAN; 2],
        };
        let table = twin.buffer("table", &values);
        let (mut cpu_factors, mut gpu_factors) = (Vec::new(), Vec::new());
        for start in [0, 1, 2, 4, 11, 12, 35, 36, 37, 39, 40, 1000 + rng.below(100_000)] {
            // The counter, and a garbage factor the update must overwrite.
            let state = twin.buffer("state", &[start, rng.range(-5.0, 5.0).to_bits()]);
            let table = matches!(amplitude, Amplitude::Table { .. }).then_some(table.into());
            let launch = UpdateBoundaryState::new(state.into(), table, amplitude).launch();
            for n in 1..=3 {
                twin.launch(&launch);
                let (cpu, gpu) = twin.download::<u32>(state, 2);
                assert_eq!(cpu[0], start + n, "{amplitude:?}: the CPU counts intervals");
                assert_eq!(gpu[0], cpu[0], "{amplitude:?} from {start}: interval counter");
                cpu_factors.push(f32::from_bits(cpu[1]));
                gpu_factors.push(f32::from_bits(gpu[1]));
            }
        }
        let what = format!("update_boundary_state {amplitude:?}");
        if let Amplitude::Sine { .. } = amplitude {
            // CUDA's sinf and the host libm's sinf may differ in the last bits.
            assert_close(&what, &cpu_factors, &gpu_factors, 1e-6);
        } else {
            assert_close(&what, &cpu_factors, &gpu_factors, 0.0);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&gpu_factors), bits(&cpu_factors), "{what}: must match bit for bit");
        }
    }
}

/// A three-level hierarchy with two patches on level 1, as the stepper builds it.
fn refined_lattice(bodies: Vec<Body>) -> LatticeConfig {
    LatticeConfig {
        hierarchy: HierarchySpec {
            base: [48, 40],
            levels: vec![
                vec![Rect::new(8, 8, 24, 24), Rect::new(30, 10, 40, 30)],
                vec![Rect::new(24, 24, 40, 40)],
            ],
        },
        collision: Collision::default(),
        tau: 0.7,
        force: [2e-6, -1e-6],
        boundaries: [Boundary::Periodic, Boundary::Periodic, Boundary::Wall, Boundary::Wall],
        wall_velocity: [[0.0; 2], [0.0; 2], [0.0; 2], [0.03, 0.0]],
        inlet: None,
        bodies,
    }
}

/// [`refined_lattice`] with its patches on the domain's sides: a moving wall
/// (x-min), a free-slip side (x-max), a wall (y-min) and a lid (y-max); the
/// level-2 patch sits in a corner.
fn walled_lattice() -> LatticeConfig {
    let mut lattice = refined_lattice(Vec::new());
    lattice.hierarchy.levels = vec![
        vec![Rect::new(0, 0, 16, 20), Rect::new(30, 20, 48, 40)],
        vec![Rect::new(0, 0, 16, 20)],
    ];
    lattice.boundaries = [Boundary::Wall, Boundary::FreeSlip, Boundary::Wall, Boundary::Wall];
    lattice.wall_velocity = [[0.0, 0.02], [0.0; 2], [0.0; 2], [0.03, 0.0]];
    lattice
}

/// Patches wide and tall enough for several `fill_ghost` runs along each
/// side and a short last run, one of them against the y-min wall.
fn wide_lattice() -> LatticeConfig {
    let mut lattice = refined_lattice(Vec::new());
    lattice.hierarchy = HierarchySpec {
        base: [120, 96],
        levels: vec![
            vec![Rect::new(10, 0, 85, 71), Rect::new(90, 20, 113, 90)],
            vec![Rect::new(30, 20, 100, 111)],
        ],
    };
    lattice
}

const TILINGS: [&[Option<[u32; 2]>]; 3] = [
    &[],
    &[Some([4, 4]), Some([4, 4]), Some([4, 4])],
    &[Some([8, 4]), None, Some([3, 5])],
];

/// Runs every coupling launch of a real hop plan on both backends, each on
/// fresh random inputs with the plan's geometry (layouts, offsets, covered
/// rectangles, relaxation times, forces) and buffers of its own.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn coupling_kernels_match_the_cpu_on_plan_geometry() {
    let mut twin = Twin::new();
    let mut rng = Rng(2);
    // Restrictions without a hole and with one.
    let mut holes = [0; 2];
    for (tiles, lattice) in TILINGS.into_iter().flat_map(|t| {
        [
            (t, refined_lattice(Vec::new())),
            (t, walled_lattice()),
            (t, wide_lattice()),
        ]
    }) {
        let exec = ExecConfig {
            tiles: tiles.to_vec(),
            ..ExecConfig::default()
        };
        let plan = Stepper::new(CpuDriver::new(), lattice, exec).unwrap().plan();
        let mut seen = std::collections::BTreeSet::new();
        // The interval's restrictions leave their holes; the settle's restrict everything.
        for (step, launch) in plan
            .interval(0)
            .iter()
            .chain(&plan.settle[0])
            .flat_map(|s| s.action.launches().into_iter().map(move |l| (s, l)))
        {
            let what = format!("{} (tiles {tiles:?})", step.name);
            match launch.kernel {
                Kernel::FillGhost => {
                    let mut k = FillGhost::decode(launch).unwrap();
                    let (coarse, fine) = (k.coarse.plane_cells(), k.fine.plane_cells());
                    k.coarse_t = twin.buffer("coarse_t", &random_populations(&mut rng, coarse)).into();
                    k.coarse_t1 = twin.buffer("coarse_t1", &random_populations(&mut rng, coarse)).into();
                    k.fine_dst = twin.buffer("fine_dst", &vec![f32::NAN; Q * fine]).into();
                    twin.launch(&k.launch());
                    twin.compare_f32(&what, k.fine_dst.id, Q * fine);
                }
                Kernel::RestrictToParent => {
                    let mut k = RestrictToParent::decode(launch).unwrap();
                    holes[(k.hole.cells() > 0) as usize] += 1;
                    let (coarse, fine) = (k.coarse.plane_cells(), k.fine.plane_cells());
                    k.fine_src = twin.buffer("fine_src", &random_populations(&mut rng, fine)).into();
                    // The plan's hole, then a random one (its tiles left out
                    // of the grid where whole), one from a corner to the
                    // far sides, and the whole covered region.
                    let c = k.covered;
                    let (x0, y0) = (c.x0 + rng.below(c.width()), c.y0 + rng.below(c.height()));
                    let (x1, y1) = (x0 + 1 + rng.below(c.x1 - x0), y0 + 1 + rng.below(c.y1 - y0));
                    let corner = Rect::new(c.x0 + c.width() / 3, c.y0 + c.height() / 2, c.x1, c.y1);
                    for hole in [k.hole, Rect::new(x0, y0, x1, y1), corner, c] {
                        k.hole = hole;
                        k.coarse_dst = twin.buffer("coarse_dst", &vec![f32::NAN; Q * coarse]).into();
                        twin.launch(&k.launch());
                        twin.compare_f32(&format!("{what} hole {hole}"), k.coarse_dst.id, Q * coarse);
                    }
                }
                Kernel::AccumulateFineFlux => {
                    let mut k = AccumulateFineFlux::decode(launch).unwrap();
                    let n_ring = ring_cells(&fine_covered(&k.layout), k.kinds);
                    k.fine = twin
                        .buffer("fine", &random_populations(&mut rng, k.layout.plane_cells()))
                        .into();
                    k.flux = twin.buffer("flux", &garbage(&mut rng, n_ring)).into();
                    twin.launch(&k.launch());
                    twin.compare_f32(&what, k.flux.id, n_ring);
                }
                Kernel::CorrectInterfaceMass => {
                    let mut k = CorrectInterfaceMass::decode(launch).unwrap();
                    let plane = k.coarse.plane_cells();
                    let n_ring = ring_cells(&k.covered, k.kinds);
                    k.coarse_t = twin.buffer("coarse_t", &random_populations(&mut rng, plane)).into();
                    k.coarse_t1 = twin.buffer("coarse_t1", &random_populations(&mut rng, plane)).into();
                    k.flux = twin.buffer("flux", &garbage(&mut rng, n_ring)).into();
                    // An apply finds the share a sum left.
                    let share = rng.range(-1e-3, 1e-3).to_bits();
                    let arrivals = twin.buffer("arrivals", &[0u32, share]);
                    k.arrivals = arrivals.into();
                    twin.launch(&k.launch());
                    // The ring's sum is taken in one order on both sides,
                    // whatever the number of blocks.
                    let (cpu, gpu) = twin.download::<f32>(k.coarse_t1.id, Q * plane);
                    assert_bitwise(&what, &cpu, &gpu);
                    twin.compare_f32(&format!("{what} flux"), k.flux.id, n_ring);
                    let (cpu, gpu) = twin.download::<u32>(arrivals, 2);
                    assert_eq!(cpu, gpu, "{what}: the arrival buffer");
                    assert_eq!(gpu[0], 0, "{what}: the last block resets the arrival counter");
                }
                _ => continue,
            }
            seen.insert(launch.kernel);
        }
        assert_eq!(seen.len(), 4, "the plan lacks a coupling kernel: saw {seen:?}");
    }
    assert!(
        holes[0] > 0 && holes[1] > 0,
        "restrictions without and with a hole: {holes:?}"
    );
    // A ring of several blocks (4 x 180 + 4 cells), of exactly one block's
    // threads and of one more, and of one block, in a row-major and a tiled
    // parent.
    for (tile, covered) in [
        ([200, 200], Rect::new(10, 10, 190, 190)),
        ([8, 8], Rect::new(10, 10, 73, 73)),
        ([200, 200], Rect::new(10, 10, 73, 74)),
        ([8, 8], Rect::new(10, 10, 40, 31)),
    ] {
        let coarse = Layout { nx: 200, ny: 200, tile };
        let plane = coarse.plane_cells();
        let kinds = [lbm_core::domain::sides::PatchSide::Interface; 4];
        let n_ring = ring_cells(&covered, kinds);
        let twin_buffer = |twin: &mut Twin, rng: &mut Rng, name| twin.buffer(name, &random_populations(rng, plane));
        let mut k = CorrectInterfaceMass {
            coarse_t: twin_buffer(&mut twin, &mut rng, "coarse_t").into(),
            coarse_t1: twin_buffer(&mut twin, &mut rng, "coarse_t1").into(),
            flux: twin.buffer("flux", &garbage(&mut rng, n_ring)).into(),
            arrivals: twin.buffer("arrivals", &[0u32, 0]).into(),
            coarse,
            covered,
            kinds,
            phase: RefluxPhase::Whole,
        };
        let phases = RefluxPhase::of_ring(&covered, kinds);
        assert_eq!(phases.len() > 1, n_ring > BLOCK_THREADS as usize);
        for round in 0..2 {
            for phase in phases {
                k.phase = *phase;
                let what = format!("correct_interface_mass {phase:?} on a ring of {n_ring} cells, tile {tile:?}");
                let blocks = match phase {
                    RefluxPhase::Whole => 1,
                    _ => n_ring.div_ceil(BLOCK_THREADS as usize),
                };
                assert_eq!(k.launch().grid[0] as usize, blocks, "{what}");
                twin.launch(&k.launch());
                let (cpu, gpu) = twin.download::<f32>(k.coarse_t1.id, Q * plane);
                assert_bitwise(&format!("{what}, round {round}"), &cpu, &gpu);
                twin.compare_f32(&format!("{what} flux"), k.flux.id, n_ring);
                let (cpu, gpu) = twin.download::<u32>(k.arrivals.id, 2);
                assert_eq!(cpu, gpu, "{what}: the arrival buffer");
                assert_eq!(gpu[0], 0, "{what}: the last block resets the arrival counter");
            }
        }
    }
}

/// `accumulate_exchange` on random tables over several body slots (and a
/// slot beyond them, whose links count for no body), with one and several
/// blocks per slot and fewer links than a block has threads, exactly as many
/// and more, and below, at and above the threads of all a slot's blocks, from
/// accumulators and partials poisoned with garbage and arrival counters at 0:
/// the accumulators, the partials and the counters (back at 0) must hold the
/// CPU's bits, a closed window must stay untouched, and a second launch from
/// the same start, over the partials the first left and other garbage, must
/// give the same bits again (no order left to chance, the scratch's contents
/// on entry of no account).
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn accumulate_exchange_matches_the_cpu() {
    let mut twin = Twin::new();
    let mut rng = Rng(3);
    let plane = 700usize;
    let n_slots = 3u32;
    let block = BLOCK_THREADS;
    let cases = [
        (0, 1, "own"),
        (1, 1, "own"),
        (block - 1, 1, "own"),
        (block, 1, "own"),
        (block + 1, 1, "closed"),
        (5000, 1, "own"),
        (5000, 1, "closed"),
        (1, 3, "own"),
        (block + 1, 3, "own"),
        (3 * block - 1, 3, "own"),
        (3 * block, 3, "closed"),
        (3 * block + 1, 3, "own"),
        (5000, 3, "own"),
        (10_000, blocks_per_slot(10_000), "own"),
        (40_000, 64, "closed"),
    ];
    for (n_links, blocks_per_slot, window) in cases {
        let f = twin.buffer("f", &random_populations(&mut rng, plane));
        let links: Vec<u32> = (0..n_links)
            .flat_map(|_| {
                let behind = if rng.below(10) < 3 {
                    NO_CELL
                } else {
                    rng.below(plane as u32)
                };
                [
                    rng.below(plane as u32),
                    (1 + rng.below(8)) | (rng.below(n_slots + 1) << 4),
                    rng.range(-6.0, 6.0).to_bits(),
                    rng.range(-6.0, 6.0).to_bits(),
                    wall_q(&mut rng).to_bits(),
                    behind,
                ]
            })
            .collect();
        assert_eq!(links.len(), LINK_WORDS * n_links as usize);
        let links = twin.buffer("links", &links);
        let words = n_slots as usize * EXCHANGE_WORDS;
        let start: Vec<f64> = (0..words).map(|_| rng.range(-10.0, 10.0) as f64).collect();
        let interval = twin.buffer("interval", &start);
        // A closed window is absent from the launch; its buffer must stay untouched.
        let window_buffer = twin.buffer("window", &start);
        let n_partials = (n_slots * blocks_per_slot) as usize * PARTIAL_WORDS;
        let poison = |rng: &mut Rng| -> Vec<f64> {
            (0..n_partials)
                .map(|i| match i % 3 {
                    0 => f64::NAN,
                    1 => rng.range(-1e6, 1e6) as f64,
                    _ => f64::INFINITY,
                })
                .collect()
        };
        let partials = twin.buffer("partials", &poison(&mut rng));
        let arrivals = twin.buffer("arrivals", &vec![0u32; n_slots as usize]);
        let launch = AccumulateExchange {
            f: f.into(),
            plane_cells: plane as u32,
            links: links.into(),
            n_links,
            n_slots,
            blocks_per_slot,
            partials: partials.into(),
            arrivals: arrivals.into(),
            interval: interval.into(),
            window: (window == "own").then_some(window_buffer.into()),
        }
        .launch();
        twin.launch(&launch);
        let what = format!("{n_links} links, {blocks_per_slot} blocks per slot, window {window}");
        let (cpu, first) = twin.download::<f64>(interval, words);
        assert_bitwise(&format!("exchange interval, {what}"), &cpu, &first);
        let (cpu, gpu) = twin.download::<f64>(window_buffer, words);
        assert_bitwise(&format!("exchange window, {what}"), &cpu, &gpu);
        if window == "closed" {
            assert_bitwise(&format!("closed window, {what}"), &start, &gpu);
        }
        let (cpu, gpu) = twin.download::<f64>(partials, n_partials);
        assert_bitwise(&format!("exchange partials, {what}"), &cpu, &gpu);
        let (cpu, gpu) = twin.download::<u32>(arrivals, n_slots as usize);
        assert_eq!(gpu, vec![0; n_slots as usize], "{what}: the counters left behind");
        assert_eq!(cpu, gpu, "{what}: counters");
        // Again from the same start, the first run's counters and fresh garbage
        // in the partials.
        twin.gpu.upload(interval, 0, bytemuck::cast_slice(&start)).unwrap();
        twin.gpu.upload(window_buffer, 0, bytemuck::cast_slice(&start)).unwrap();
        twin.gpu
            .upload(partials, 0, bytemuck::cast_slice(&poison(&mut rng)))
            .unwrap();
        twin.gpu.launch(&launch).unwrap();
        twin.gpu.synchronize().unwrap();
        let (_, again) = twin.download::<f64>(interval, words);
        assert_bitwise(&format!("exchange interval run again, {what}"), &first, &again);
        let (_, again) = twin.download::<u32>(arrivals, n_slots as usize);
        assert_eq!(
            again,
            vec![0; n_slots as usize],
            "{what}: the counters left behind again"
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn driver_operations_match_the_cpu() {
    let mut twin = Twin::new();
    if !twin.is_cuda {
        eprintln!("skipped: this test is about CudaDriver itself, not the kernels");
        return;
    }
    let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    let a = twin.buffer("a", &bytes);
    // A fresh buffer is zeroed.
    let b = twin.cpu.alloc("b", 300).unwrap();
    assert_eq!(twin.gpu.alloc("b", 300).unwrap(), b);
    let (cpu, gpu) = twin.download::<u8>(b, 300);
    assert_eq!(gpu, cpu);
    assert!(gpu.iter().all(|v| *v == 0));
    for d in [&mut twin.cpu as &mut dyn Driver, &mut *twin.gpu] {
        d.memset_async(a, 10, 20, 0xAB).unwrap();
        d.copy_async(a, 100, b, 50, 200).unwrap();
        d.copy_async(a, 0, a, 600, 100).unwrap();
        d.upload(b, 290, &[7; 10]).unwrap();
        d.synchronize().unwrap();
    }
    let (cpu, gpu) = twin.download::<u8>(a, 1000);
    assert_eq!(gpu, cpu);
    let (cpu, gpu) = twin.download::<u8>(b, 300);
    assert_eq!(gpu, cpu);
    let mut tail = [0u8; 4];
    twin.gpu.download(a, 996, &mut tail).unwrap();
    assert_eq!(&tail, &bytes[996..]);

    // Out-of-range and unknown buffers are errors, as on the CPU.
    let message = twin.gpu.upload(b, 299, &[1, 2]).unwrap_err().to_string();
    assert!(
        message.contains("cuda upload: byte range [299, 301) is outside `b` (300 bytes)"),
        "{message}"
    );
    twin.gpu.free(b).unwrap();
    let message = twin.gpu.download(b, 0, &mut tail).unwrap_err().to_string();
    assert!(message.contains(&format!("unknown buffer {b}")), "{message}");
    let message = twin.gpu.copy_async(a, 0, a, 50, 100).unwrap_err().to_string();
    assert!(message.contains("overlap"), "{message}");
    assert!(twin.gpu.free_memory().unwrap() > 0);
    // A zero-byte buffer is allowed.
    let empty = twin.gpu.alloc("empty", 0).unwrap();
    twin.gpu.upload(empty, 0, &[]).unwrap();
    twin.gpu.synchronize().unwrap();
}

/// Streams, events, staging and prepared plans: a plan replayed twice, then
/// its output downloaded on a second stream into staging after an event,
/// give the CPU's bytes; a plan whose buffer was freed is refused.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn streams_events_staging_and_plans_match_the_cpu() {
    let mut twin = Twin::new();
    let mut rng = Rng(11);
    let n = 64u32;
    let plane = (n * n) as usize;
    let src = twin.buffer("src", &random_populations(&mut rng, plane));
    let dst = twin.buffer("dst", &vec![f32::NAN; Q * plane]);
    let flags = twin.buffer("flags", &vec![FLAG_FLUID; plane]);
    let physics = lbm_core::fixtures::benchmark_physics();
    let step = |from: BufferId, to: BufferId| {
        StreamCollide::periodic(from.into(), to.into(), flags.into(), [n, n], physics).launch()
    };
    let actions = [
        Action::Launch(step(src, dst)),
        Action::Launch(step(dst, src)),
        Action::Memset {
            buffer: dst,
            byte_offset: 0,
            bytes: 64,
            value: 0,
        },
    ];
    let bytes = Q * plane * 4;
    let mut staged = Vec::new();
    for d in [&mut twin.cpu as &mut dyn Driver, &mut *twin.gpu] {
        let plan = d.prepare("pingpong", &actions).unwrap();
        d.replay(plan).unwrap();
        d.replay(plan).unwrap();
        let copy = d.create_stream().unwrap();
        let [computed, landed] = [d.create_event().unwrap(), d.create_event().unwrap()];
        let staging = d.alloc_staging("out", bytes).unwrap();
        d.record_event(computed, StreamId::MAIN).unwrap();
        d.wait_event(copy, computed).unwrap();
        d.download_async(copy, src, 0, staging, 0, bytes).unwrap();
        d.record_event(landed, copy).unwrap();
        d.synchronize_event(landed).unwrap();
        let mut out = vec![0u8; bytes];
        d.read_staging(staging, 0, &mut out).unwrap();
        staged.push(out);
        d.free_staging(staging).unwrap();
        d.release_plan(plan).unwrap();
        let message = d.replay(plan).unwrap_err().to_string();
        assert!(message.contains("unknown plan"), "{message}");
    }
    assert!(staged[0] == staged[1], "the staged populations differ from the CPU's");
    let (cpu, gpu) = twin.download::<f32>(src, Q * plane);
    assert_eq!(bytemuck::cast_slice::<f32, u8>(&cpu), &staged[0][..]);
    assert_close("populations after two replays", &cpu, &gpu, 1e-5);
    let (cpu, gpu) = twin.download::<u8>(dst, 64);
    assert_eq!((cpu, gpu), (vec![0; 64], vec![0; 64]), "the plan's memset ran last");
    let plan = twin
        .gpu
        .prepare(
            "stale",
            &[Action::Memset {
                buffer: dst,
                byte_offset: 0,
                bytes: 4,
                value: 0,
            }],
        )
        .unwrap();
    twin.gpu.free(dst).unwrap();
    let message = twin.gpu.replay(plan).unwrap_err().to_string();
    assert!(message.contains("freed since it was prepared"), "{message}");
}

/// A cylinder on level 1 of a refined channel, with exchange observed.
fn body_lattice() -> LatticeConfig {
    let mut lattice = refined_lattice(vec![Body {
        shape: Shape::Circle {
            center: [15.0, 16.0],
            radius: 2.5,
        },
        level: 1,
    }]);
    // The level-2 patch away from the cylinder, which it would otherwise
    // cover (refused: a body belongs to the finest level over it).
    lattice.hierarchy.levels[1] = vec![Rect::new(64, 26, 74, 44)];
    lattice.force = [5e-6, 0.0];
    lattice
}

fn initial_flow(_level: usize, x: f64, y: f64) -> Moments {
    let (tx, ty) = (std::f64::consts::TAU * x / 48.0, std::f64::consts::TAU * y / 40.0);
    Moments {
        delta_rho: (0.01 * tx.sin() * ty.cos()) as f32,
        ux: (0.04 + 0.01 * ty.sin()) as f32,
        uy: (0.01 * tx.cos()) as f32,
    }
}

/// A refined channel: a parabolic inlet ramped up over four intervals on
/// x-min, an outflow on x-max, walls at rest on y, and the cylinder of
/// [`body_lattice`] on level 1 with interpolated walls.
fn channel_lattice() -> LatticeConfig {
    let mut lattice = body_lattice();
    lattice.force = [0.0, 0.0];
    lattice.boundaries = [Boundary::Inlet, Boundary::Outflow, Boundary::Wall, Boundary::Wall];
    lattice.wall_velocity = [[0.0; 2]; 4];
    lattice.inlet = Some(InletSpec {
        profile: Profile::Parabolic,
        velocity: 0.06,
        amplitude: Amplitude::Ramp { duration: 4.0 },
        span: None,
    });
    lattice
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn stepper_runs_match_the_cpu_on_a_refined_case_with_a_body() {
    check_stepper_runs(body_lattice);
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn stepper_runs_match_the_cpu_on_a_refined_channel_with_an_inlet() {
    check_stepper_runs(channel_lattice);
}

/// [`channel_lattice`] with the inlet over rows 12 to 32 only, a resting
/// wall below and above it on the same side.
fn spanned_inlet_lattice() -> LatticeConfig {
    let mut lattice = channel_lattice();
    if let Some(inlet) = &mut lattice.inlet {
        inlet.span = Some([12, 32]);
    }
    lattice
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn stepper_runs_match_the_cpu_with_an_inlet_over_part_of_its_side() {
    check_stepper_runs(spanned_inlet_lattice);
}

/// [`channel_lattice`] with the cylinder's patch spanning the channel from
/// wall to wall and a level-2 patch on the bottom wall.
fn walled_channel_lattice() -> LatticeConfig {
    let mut lattice = channel_lattice();
    lattice.hierarchy.levels = vec![
        vec![Rect::new(8, 0, 24, 40), Rect::new(30, 10, 40, 30)],
        vec![Rect::new(24, 0, 40, 16)],
    ];
    lattice
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn stepper_runs_match_the_cpu_with_patches_on_the_channel_walls() {
    check_stepper_runs(walled_channel_lattice);
}

/// [`walled_channel_lattice`] with a block standing on the floor in the
/// level-2 patch and, with the ceiling made free-slip, half a disc on it in
/// the level-1 patch: cells beside a wall and a body at once, the wall's
/// rule and the body's links side by side, and links to the disc's mirror
/// image across the free-slip side.
fn wall_bodies_lattice() -> LatticeConfig {
    let mut lattice = walled_channel_lattice();
    lattice.boundaries[3] = Boundary::FreeSlip;
    lattice.bodies.push(Body {
        shape: Shape::Rectangle {
            min: [15.0, 0.0],
            max: [17.0, 3.0],
        },
        level: 2,
    });
    lattice.bodies.push(Body {
        shape: Shape::Circle {
            center: [20.0, 40.0],
            radius: 1.5,
        },
        level: 1,
    });
    lattice
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn stepper_runs_match_the_cpu_with_bodies_on_the_walls() {
    check_stepper_runs(wall_bodies_lattice);
}

/// [`channel_lattice`] large enough that both levels take the split update
/// (bulk kernel, then the boundary cells) when stored row-major: a 300 x 240
/// channel, the cylinder on a 280 x 240 patch, a small level-2 patch in its
/// wake.
fn split_channel_lattice() -> LatticeConfig {
    let mut lattice = channel_lattice();
    lattice.hierarchy = HierarchySpec {
        base: [300, 240],
        levels: vec![vec![Rect::new(60, 60, 200, 180)], vec![Rect::new(280, 220, 320, 260)]],
    };
    lattice.bodies = vec![Body {
        shape: Shape::Circle {
            center: [110.0, 121.0],
            radius: 9.5,
        },
        level: 1,
    }];
    lattice
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn stepper_runs_match_the_cpu_with_split_updates() {
    let exec = ExecConfig {
        observe_raw_exchange: true,
        ..ExecConfig::default()
    };
    // The plan a GPU replays (the host splits smaller patches too).
    let cpu = CpuDriver::splitting_from(lbm_core::schedule::BULK_MIN_CELLS);
    let plan = Stepper::new(cpu, split_channel_lattice(), exec).unwrap().plan();
    let bulk = plan
        .interval(0)
        .iter()
        .flat_map(|s| s.action.launches())
        .filter(|l| l.kernel.is_bulk())
        .count();
    assert_eq!(
        bulk, 7,
        "row-major, levels 0 and 1 split, level 2 the bulk kernel alone: one per hop"
    );
    // Every hop's update is one group, branches of the graph: level 0's
    // bulk update (its walls' entry: the channel's walls are in its region)
    // and the rim's (inlet and outflow); each of level 1's two hops with the bulk kernel
    // over the whole patch skipping a span around the cylinder, the general
    // kernel over those spans, the momentum exchange and the interface flux; each
    // of level 2's four hops (a patch too small to split, but whose bulk
    // region is all of it: no body, every side an interface) with its flux.
    // Both fills of a pair of hops are one group before it, and each
    // restriction is grouped with its reflux correction.
    let groups: Vec<Vec<Kernel>> = plan
        .interval(0)
        .iter()
        .filter_map(|s| match &s.action {
            Action::Together(members) => Some(members.iter().flat_map(Action::launches).map(|l| l.kernel).collect()),
            _ => None,
        })
        .collect();
    use Kernel::{
        AccumulateExchange as E, AccumulateFineFlux as F, CorrectInterfaceMass as C, FillGhost as H,
        RestrictToParent as R, StreamCollide as G, StreamCollideBulk as B, StreamCollideBulkWalled as W,
    };
    let level_2 = [vec![H, H], vec![B, F], vec![B, F], vec![R, C]];
    let expected: Vec<Vec<Kernel>> = [vec![vec![W, G], vec![H, H], vec![B, G, E, F]], level_2.to_vec()]
        .into_iter()
        .chain([vec![vec![B, G, E, F]], level_2.to_vec(), vec![vec![R, C]]])
        .flatten()
        .collect();
    assert_eq!(groups, expected);
    check_stepper_runs(split_channel_lattice);
}

/// Runs `lattice` on both backends for seven intervals in batches and compares
/// populations, fields, both exchange ledgers, the total mass and the health
/// check after each.
fn check_stepper_runs(lattice: fn() -> LatticeConfig) {
    for tiles in [TILINGS[0], TILINGS[2]] {
        let exec = ExecConfig {
            tiles: tiles.to_vec(),
            observe_raw_exchange: true,
            observe_window_exchange: true,
            ..ExecConfig::default()
        };
        let device = lbm_cuda::testing::open_device().driver;
        // The host driver split as the device splits, so that both replay
        // one plan; and one that splits as the host does, whose bits must
        // be the same.
        let cpu = Stepper::new(
            CpuDriver::splitting_from(device.split_min_cells()),
            lattice(),
            exec.clone(),
        )
        .unwrap();
        let host = Stepper::new(CpuDriver::new(), lattice(), exec.clone()).unwrap();
        let gpu = Stepper::new(device, lattice(), exec).unwrap();
        assert_eq!(gpu.plan(), cpu.plan(), "both backends must replay the same plan");
        cpu.initialize(initial_flow).unwrap();
        host.initialize(initial_flow).unwrap();
        gpu.initialize(initial_flow).unwrap();
        cpu.step(1).unwrap();
        host.step(1).unwrap();
        gpu.step(1).unwrap();
        cpu.start_exchange_window().unwrap();
        gpu.start_exchange_window().unwrap();
        for batch in [1u64, 3, 2] {
            cpu.step(batch).unwrap();
            host.step(batch).unwrap();
            gpu.step(batch).unwrap();
            let at = format!("tiles {tiles:?}, step {}", cpu.step_count());
            let hierarchy = cpu.hierarchy();
            for (level, patches) in hierarchy.levels.iter().enumerate() {
                for p in 0..patches.len() {
                    let (c, g) = (cpu.download(level, p).unwrap(), gpu.download(level, p).unwrap());
                    assert_close(&format!("populations L{level}.p{p}, {at}"), &c, &g, 1e-5);
                    let h = host.download(level, p).unwrap();
                    assert_bitwise(&format!("host split, populations L{level}.p{p}, {at}"), &h, &c);
                    let (c, g) = (cpu.fields(level, p).unwrap(), gpu.fields(level, p).unwrap());
                    for (name, c, g) in [
                        ("delta_rho", &c.delta_rho, &g.delta_rho),
                        ("ux", &c.ux, &g.ux),
                        ("uy", &c.uy, &g.uy),
                    ] {
                        let (c, g): (Vec<f32>, Vec<f32>) = (c.iter().copied().collect(), g.iter().copied().collect());
                        assert_close(&format!("{name} L{level}.p{p}, {at}"), &c, &g, 1e-5);
                    }
                }
            }
            let (c, g) = (cpu.read_raw_exchange(0).unwrap(), gpu.read_raw_exchange(0).unwrap());
            assert_eq!(
                (g.time_start, g.time_end, g.sample_count),
                (c.time_start, c.time_end, c.sample_count)
            );
            assert_bitwise(
                &format!("raw exchange, {at}"),
                &[c.force[0], c.force[1], c.torque],
                &[g.force[0], g.force[1], g.torque],
            );
            assert!(c.force[0].abs() > 0.0, "the body feels the flow");
            let (c, g) = (
                cpu.read_exchange_window(0).unwrap(),
                gpu.read_exchange_window(0).unwrap(),
            );
            assert_eq!(
                (g.time_start, g.time_end, g.sample_count),
                (c.time_start, c.time_end, c.sample_count)
            );
            assert_bitwise(
                &format!("exchange window, {at}"),
                &[c.force[0], c.force[1], c.torque],
                &[g.force[0], g.force[1], g.torque],
            );
            let (c, g) = (cpu.total_mass().unwrap(), gpu.total_mass().unwrap());
            assert!((c - g).abs() <= 1e-6 * c.abs(), "total mass, {at}: cpu {c} gpu {g}");
            let diverged = DIVERGED_MACH / 3f64.sqrt();
            assert_eq!(cpu.check_health(diverged).unwrap(), None, "{at}");
            assert_eq!(gpu.check_health(diverged).unwrap(), None, "{at}");
            // A limit every moving cell exceeds: both find the same first cell.
            let (c, g) = (cpu.check_health(1e-6).unwrap(), gpu.check_health(1e-6).unwrap());
            let (c, g) = (c.expect("the flow moves"), g.expect("the flow moves"));
            assert_eq!(
                (g.level, g.patch, g.cell, g.position),
                (c.level, c.patch, c.cell, c.position),
                "{at}"
            );
            let (HealthProblem::TooFast { speed: cs }, HealthProblem::TooFast { speed: gs }) = (c.problem, g.problem)
            else {
                panic!("{at}: cpu {c}, gpu {g}");
            };
            assert!((cs - gs).abs() <= 1e-5 * cs, "health speed, {at}: cpu {cs} gpu {gs}");
        }
        cpu.close().unwrap();
        gpu.close().unwrap();
    }
}

/// `check_health` on random flows in every storage tiling, with the active
/// region whole or inset by a ghost band, solid cells, and non-finite
/// populations (NaN, both infinities) and too-fast cells scattered over
/// fluid, solid and ghost cells alike. The result sits at a byte offset of a
/// larger buffer, poisoned with garbage and then reset to 0xFF bytes by a
/// memset as the stepper does; the words around it must stay as they were.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn check_health_matches_the_cpu() {
    let mut twin = Twin::new();
    let mut rng = Rng(23);
    let (nx, ny) = (23, 18);
    let mut found = [0usize; 2];
    for tile in [[nx, ny], [4, 4], [8, 3]] {
        let layout = Layout { nx, ny, tile };
        let plane = layout.plane_cells();
        for active in [Rect::new(0, 0, nx, ny), Rect::new(4, 4, nx - 4, ny - 4)] {
            // Clean, a few bad cells, many (contention on both words).
            for (bad, fast) in [(0, 0), (1, 0), (0, 1), (3, 4), (40, 60)] {
                let mut f = random_populations(&mut rng, plane);
                for _ in 0..bad {
                    let value = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][rng.below(3) as usize];
                    f[rng.below(Q as u32) as usize * plane + rng.below(plane as u32) as usize] = value;
                }
                for _ in 0..fast {
                    let cell = rng.below(plane as u32) as usize;
                    let speed = 0.4 + rng.range(0.0, 0.3);
                    let angle = rng.range(0.0, std::f64::consts::TAU);
                    let feq = lattice::equilibrium(Moments {
                        delta_rho: rng.range(-0.05, 0.05),
                        ux: speed * angle.cos(),
                        uy: speed * angle.sin(),
                    });
                    for (i, v) in feq.iter().enumerate() {
                        f[i * plane + cell] = *v;
                    }
                }
                let f = twin.buffer("f", &f);
                let flags = twin.buffer("flags", &body_flags(&mut rng, &layout));
                let poison: Vec<u32> = (0..6).map(|_| rng.next() as u32).collect();
                let result = twin.buffer("result", &poison);
                for d in [&mut twin.cpu as &mut dyn Driver, &mut *twin.gpu] {
                    d.memset_async(result, 8, 8, 0xFF).unwrap();
                }
                let launch = CheckHealth {
                    f: f.into(),
                    flags: flags.into(),
                    result: lbm_core::BufferRef {
                        id: result,
                        byte_offset: 8,
                    },
                    layout,
                    active,
                    speed_limit: 0.3,
                }
                .launch();
                twin.launch(&launch);
                let (cpu, gpu) = twin.download::<u32>(result, 6);
                let what = format!("check_health tile {tile:?} active {active} bad {bad} fast {fast}");
                assert_eq!(gpu, cpu, "{what}");
                assert_eq!(
                    [&cpu[..2], &cpu[4..]],
                    [&poison[..2], &poison[4..]],
                    "{what}: outside the result"
                );
                for (k, word) in cpu[2..4].iter().enumerate() {
                    found[k] += (*word != NO_CELL) as usize;
                }
                if bad + fast == 0 {
                    assert_eq!(cpu[2..4], [NO_CELL; 2], "{what}: a clean flow");
                }
            }
        }
    }
    eprintln!(
        "check_health: {} non-finite and {} too-fast findings",
        found[0], found[1]
    );
    assert!(found.iter().all(|n| *n >= 6), "the cases find too little: {found:?}");
}

/// `save_moments` in every storage tiling, whole and inset active regions,
/// with and without a body force, at a byte offset of a poisoned buffer:
/// the GPU's moments equal the CPU reference bit for bit (the outputs a
/// ring writes must equal a direct download's), and nothing around them is
/// touched.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn save_moments_matches_the_cpu_bit_for_bit() {
    let mut twin = Twin::new();
    let mut rng = Rng(29);
    let (nx, ny) = (23, 18);
    for tile in [[nx, ny], [4, 4], [8, 3]] {
        let layout = Layout { nx, ny, tile };
        let plane = layout.plane_cells();
        for active in [Rect::new(0, 0, nx, ny), Rect::new(4, 4, nx - 4, ny - 4)] {
            for force in [[0.0, 0.0], [3e-5, -7e-6]] {
                let f = twin.buffer("f", &random_populations(&mut rng, plane));
                let bytes = SaveMoments::out_bytes(&active);
                let poison: Vec<u32> = (0..bytes / 4 + 8).map(|_| rng.next() as u32 | 0x7F80_0001).collect();
                let out = twin.buffer("out", &poison);
                let launch = SaveMoments {
                    f: f.into(),
                    out: lbm_core::BufferRef {
                        id: out,
                        byte_offset: 16,
                    },
                    layout,
                    active,
                    force,
                }
                .launch();
                twin.launch(&launch);
                let (cpu, gpu) = twin.download::<u32>(out, poison.len());
                let what = format!("save_moments tile {tile:?} active {active} force {force:?}");
                assert_eq!(gpu, cpu, "{what}");
                assert_eq!(&cpu[..4], &poison[..4], "{what}: before the output");
                assert_eq!(
                    &cpu[4 + bytes / 4..],
                    &poison[4 + bytes / 4..],
                    "{what}: after the output"
                );
                assert!(
                    cpu[4..4 + bytes / 4].iter().all(|w| f32::from_bits(*w).is_finite()),
                    "{what}"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn halo_kernels_match_the_cpu_bit_for_bit() {
    let mut twin = Twin::new();
    let mut rng = Rng(31);
    let (nx, ny) = (21, 17);
    for tile in [[nx, ny], [4, 4], [8, 3]] {
        let layout = Layout { nx, ny, tile };
        let plane = layout.plane_cells();
        for (column, towards) in [(Rect::new(nx - 2, 0, nx - 1, ny), 0), (Rect::new(0, 2, 1, ny - 3), 1)] {
            let rows = column.height() as usize;
            let what = format!("halo tile {tile:?} column {column} towards {towards}");
            // Pack into a poisoned buffer at an offset, then unpack random
            // values into random populations.
            let f = twin.buffer("f", &random_populations(&mut rng, plane));
            let poison: Vec<u32> = (0..3 * rows + 8).map(|_| rng.next() as u32 | 0x7F80_0001).collect();
            let halo = twin.buffer("halo", &poison);
            let at = lbm_core::BufferRef {
                id: halo,
                byte_offset: 16,
            };
            let pack = PackHalo(HaloColumn {
                f: f.into(),
                halo: at,
                layout,
                column,
                towards,
            });
            twin.launch(&pack.launch());
            let (cpu, gpu) = twin.download::<u32>(halo, poison.len());
            assert_eq!(gpu, cpu, "pack: {what}");
            assert_eq!(&cpu[..4], &poison[..4], "pack: {what}: before the halo");
            assert_eq!(&cpu[4 + 3 * rows..], &poison[4 + 3 * rows..], "pack: {what}: after it");
            assert!(
                cpu[4..4 + 3 * rows].iter().all(|w| f32::from_bits(*w).is_finite()),
                "{what}"
            );
            let into = twin.buffer("f", &random_populations(&mut rng, plane));
            let before = twin.download::<u32>(into, 9 * plane).0;
            twin.launch(
                &UnpackHalo(HaloColumn {
                    f: into.into(),
                    ..pack.0
                })
                .launch(),
            );
            let (cpu, gpu) = twin.download::<u32>(into, 9 * plane);
            assert_eq!(gpu, cpu, "unpack: {what}");
            let changed = cpu.iter().zip(&before).filter(|(a, b)| a != b).count();
            assert!(
                changed > 0 && changed <= 3 * rows,
                "unpack: {what}: {changed} values changed"
            );
        }
    }
}

/// A refined channel for the split: two levels around a cylinder on the
/// finest near the inlet and a level-1 patch downstream, so that the cuts
/// fall between them and beyond.
fn split_lattice() -> LatticeConfig {
    let mut lattice = channel_lattice();
    lattice.hierarchy = HierarchySpec {
        base: [96, 40],
        levels: vec![
            vec![Rect::new(10, 8, 36, 32), Rect::new(56, 12, 72, 28)],
            vec![Rect::new(28, 26, 56, 54)],
        ],
    };
    lattice.bodies = vec![Body {
        shape: Shape::Circle {
            center: [20.0, 20.2],
            radius: 2.5,
        },
        level: 2,
    }];
    lattice
}

/// A channel large enough that each of two or three slabs takes the bulk
/// update, whose head the halo exchange overlaps.
fn split_bulk_lattice() -> LatticeConfig {
    let mut lattice = split_lattice();
    lattice.hierarchy = HierarchySpec {
        base: [900, 240],
        levels: Vec::new(),
    };
    lattice.bodies = vec![Body {
        shape: Shape::Circle {
            center: [150.0, 120.5],
            radius: 20.0,
        },
        level: 0,
    }];
    lattice
}

/// Split over two and three drivers of the one device under test, the run's
/// populations, fields and forces equal one device's (and the CPU split's)
/// bit for bit, with the halos copied device to device and through NCCL
/// (every slab on the device's one rank, sending to itself).
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn split_runs_match_one_device_bit_for_bit() {
    let exec = ExecConfig {
        observe_raw_exchange: true,
        ..ExecConfig::default()
    };
    for (devices, split_lattice) in [
        (2, split_lattice as fn() -> LatticeConfig),
        (3, split_lattice),
        (2, split_bulk_lattice),
        (3, split_bulk_lattice),
    ] {
        let one = Stepper::new(lbm_cuda::testing::open_device().driver, split_lattice(), exec.clone()).unwrap();
        let gpus = (0..devices).map(|_| lbm_cuda::testing::open_device().driver).collect();
        let mut split = Split::new(gpus, split_lattice(), exec.clone()).unwrap();
        let cpus = (0..devices)
            .map(|_| Box::new(CpuDriver::new()) as Box<dyn Driver>)
            .collect();
        let mut cpu = Split::new(cpus, split_lattice(), exec.clone()).unwrap();
        // NCCL on the GPU; the host build of the kernels has none.
        let mut nccl = lbm_cuda::testing::open_device().is_cuda.then(|| {
            let gpus = (0..devices).map(|_| lbm_cuda::testing::open_device().driver).collect();
            let mut nccl = Split::new(gpus, split_lattice(), exec.clone()).unwrap();
            let library = lbm_cuda::Nccl::open(&vec![0; devices])
                .unwrap()
                .expect("the device machine has NCCL's library");
            nccl.use_collective(Box::new(library)).unwrap();
            assert_eq!(nccl.transport(), "nccl");
            nccl
        });
        assert_eq!(split.transport(), "device", "the device's drivers copy from each other");
        assert_eq!(cpu.transport(), "host");
        one.initialize(initial_flow).unwrap();
        split.initialize(initial_flow).unwrap();
        cpu.initialize(initial_flow).unwrap();
        if let Some(nccl) = nccl.as_mut() {
            nccl.initialize(initial_flow).unwrap();
        }
        for chunk in [1, 9, 20] {
            one.step(chunk).unwrap();
            split.step(chunk).unwrap();
            cpu.step(chunk).unwrap();
            if let Some(nccl) = nccl.as_mut() {
                nccl.step(chunk).unwrap();
            }
            let at = format!("{devices} slabs after {} intervals", one.step_count());
            for p in one.hierarchy().patches() {
                let want: Vec<u32> = one
                    .active_populations(p.level, p.index)
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                let runs = [("gpu", Some(&split)), ("nccl", nccl.as_ref()), ("cpu", Some(&cpu))];
                for (name, run) in runs.into_iter().filter_map(|(n, r)| r.map(|r| (n, r))) {
                    let got: Vec<u32> = run
                        .active_populations(p.level, p.index)
                        .unwrap()
                        .iter()
                        .map(|v| v.to_bits())
                        .collect();
                    assert!(got == want, "{at}: {name} split, populations of {}", p.name());
                }
            }
            for run in std::iter::once(&split).chain(nccl.as_ref()) {
                assert_eq!(
                    run.read_raw_exchange(0).unwrap(),
                    one.read_raw_exchange(0).unwrap(),
                    "{at}"
                );
            }
        }
        split.close().unwrap();
        if let Some(mut nccl) = nccl {
            nccl.close().unwrap();
        }
        cpu.close().unwrap();
    }
}

/// What a link table of a sample may name: cells of its population planes
/// and body slots.
struct LinkSpace {
    plane_cells: u32,
    n_slots: u32,
}

/// Whether `kernel` is a ring producer, whose buffers are bytes.
fn is_producer(kernel: Kernel) -> bool {
    matches!(
        kernel,
        Kernel::ProduceStatic | Kernel::ProducePrefix | Kernel::ProduceChunked | Kernel::ProduceRecord
    )
}

/// Random contents for buffer `param` of a producer's sample `launch`: any
/// bytes to move, a control block with a large head and a counter at 0 (as
/// between launches), a row count now and then over the bound, and a valid
/// chunk table (a spoiled one is a case of `producers_match_the_cpu`).
fn producer_contents(rng: &mut Rng, launch: &Launch, param: &str, bytes: usize) -> Vec<u8> {
    match param {
        "control" => RingControl {
            head: rng.next() >> 24,
            tail: 0,
            sequence: rng.next() >> 8,
            arrival: 0,
            flags: rng.below(4),
        }
        .to_bytes()
        .to_vec(),
        "row_count" => rng.below(50).to_le_bytes().to_vec(),
        "chunks" => {
            let k = ProduceChunked::decode(launch).unwrap();
            // Random cuts of total_bytes into n_chunks pieces, each placed
            // anywhere in the source it fits.
            let mut cuts: Vec<u64> = (1..k.n_chunks).map(|_| rng.next() % (k.total_bytes + 1)).collect();
            cuts.extend([0, k.total_bytes]);
            cuts.sort_unstable();
            cuts.windows(2)
                .flat_map(|w| {
                    let size = w[1] - w[0];
                    [rng.next() % (k.src_bytes - size + 1), size]
                })
                .flat_map(u64::to_le_bytes)
                .collect()
        }
        _ => (0..bytes).map(|_| rng.next() as u8).collect(),
    }
}

/// Random contents for buffer `param` of a sample launch (`bytes` long): the
/// kind of data the kernel expects there, so that its paths are exercised.
fn sample_contents(rng: &mut Rng, param: &str, bytes: usize, table: &LinkSpace) -> Vec<u8> {
    let plane_cells = table.plane_cells;
    let floats = bytes / 4;
    let words: Vec<u32> = match param {
        "flags" => return (0..bytes).map(|_| (rng.below(100) < 10) as u8).collect(),
        "wall_distance" => random_wall_table(rng, plane_cells as usize, floats / (1 + Q)).0,
        "inlet_profile" => (0..floats).map(|_| rng.range(0.0, 0.08).to_bits()).collect(),
        "state" | "boundary_state" => vec![rng.below(50), rng.range(0.0, 1.2).to_bits()],
        "table" => (0..floats)
            .map(|k| {
                if k % 2 == 0 {
                    (5.0 * k as f32 + 1.0).to_bits()
                } else {
                    rng.range(-1.0, 1.0).to_bits()
                }
            })
            .collect(),
        "links" => (0..floats / LINK_WORDS)
            .flat_map(|_| {
                let behind = if rng.below(4) == 0 {
                    NO_CELL
                } else {
                    rng.below(plane_cells)
                };
                [
                    rng.below(plane_cells),
                    (1 + rng.below(8)) | (rng.below(table.n_slots) << 4),
                    rng.range(-3.0, 3.0).to_bits(),
                    rng.range(-3.0, 3.0).to_bits(),
                    wall_q(rng).to_bits(),
                    behind,
                ]
            })
            .collect(),
        // What the allocation leaves and every launch leaves behind.
        "arrivals" => vec![0; floats],
        // Scratch: garbage on entry must not matter.
        "partials" => {
            return (0..bytes / 8)
                .flat_map(|k| match k % 2 {
                    0 => f64::NAN.to_le_bytes(),
                    _ => (rng.range(-1e6, 1e6) as f64).to_le_bytes(),
                })
                .collect();
        }
        "interval" | "window" => {
            return (0..bytes / 8)
                .flat_map(|_| (rng.range(-1.0, 1.0) as f64).to_le_bytes())
                .collect();
        }
        "flux" => (0..floats).map(|_| rng.range(-1e-3, 1e-3).to_bits()).collect(),
        // What the caller's memset leaves: no cell found yet.
        "result" => vec![NO_CELL; floats],
        // Population planes, nine per allocation.
        _ => random_populations(rng, floats / Q)
            .iter()
            .map(|v| v.to_bits())
            .collect(),
    };
    bytemuck::cast_slice(&words).to_vec()
}

/// The fixtures' sample launch of every kernel family, on random contents of
/// the right kind, gives the CPU's outputs in every buffer it writes.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn every_family_sample_matches_the_cpu() {
    let mut twin = Twin::new();
    let mut rng = Rng(17);
    let samples = lbm_core::fixtures::allocate_samples(&mut twin.cpu).unwrap();
    let gpu_samples = lbm_core::fixtures::allocate_samples(&mut *twin.gpu).unwrap();
    assert_eq!(samples, gpu_samples, "the samples got the same buffers on both drivers");
    for (launch, _) in &samples {
        let uses = lbm_core::kernels::uses_of(launch).unwrap();
        let table = match launch.kernel {
            Kernel::AccumulateExchange => {
                let k = AccumulateExchange::decode(launch).unwrap();
                LinkSpace {
                    plane_cells: k.plane_cells,
                    n_slots: k.n_slots,
                }
            }
            _ => LinkSpace {
                plane_cells: 1,
                n_slots: 1,
            },
        };
        for u in &uses {
            let data = match is_producer(launch.kernel) {
                true => producer_contents(&mut rng, launch, u.param, u.bytes),
                false => sample_contents(&mut rng, u.param, u.bytes, &table),
            };
            twin.cpu.upload(u.buffer.id, 0, &data).unwrap();
            twin.gpu.upload(u.buffer.id, 0, &data).unwrap();
        }
        twin.launch(launch);
        for u in uses.iter().filter(|u| u.access != lbm_core::kernels::Access::Read) {
            let what = format!("{} sample, {}", launch.kernel, u.param);
            match u.align {
                // Bytes moved and control words: exact.
                _ if is_producer(launch.kernel) => {
                    let (cpu, gpu) = twin.download::<u8>(u.buffer.id, u.bytes);
                    assert!(cpu == gpu, "{what}: the bytes differ");
                }
                // Cell indices, which an f32 comparison would take for tiny
                // denormals all within tolerance of each other.
                _ if launch.kernel == Kernel::CheckHealth => {
                    let (cpu, gpu) = twin.download::<u32>(u.buffer.id, u.bytes / 4);
                    eprintln!("{what}: cpu {cpu:?} gpu {gpu:?}");
                    assert_eq!(gpu, cpu, "{what}");
                    assert!(cpu[1] != NO_CELL, "{what}: the sample's limit finds a fast cell");
                }
                8 => {
                    let (cpu, gpu) = twin.download::<f64>(u.buffer.id, u.bytes / 8);
                    assert_bitwise(&what, &cpu, &gpu);
                }
                _ => twin.compare_f32(&what, u.buffer.id, u.bytes / 4),
            }
        }
    }
}

/// The first byte at which two rings differ, for the message.
fn first_difference(cpu: &[u8], gpu: &[u8]) -> Option<usize> {
    cpu.iter().zip(gpu).position(|(c, g)| c != g)
}

/// Every producer case of `ring_producer::fixtures` (static copies at the
/// 16 KiB boundaries and wrapping, prefixes of 0, 1 and a few rows under a
/// large bound, 1, 3 and 64 chunks and a spoiled table, records across the
/// ring's end, mixed grids on one counter, a counter left behind) on the
/// device and on the CPU, rings poisoned: after every launch the whole ring
/// and its control block agree byte for byte, and with the case's
/// expectation. Then the widest static and chunked grids alternate on one
/// ring, many times on a GPU, where blocks really race to arrive.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn producers_match_the_cpu_byte_for_byte() {
    let mut twin = Twin::new();
    for case in ring_producer::fixtures::producer_cases() {
        let cpu = case.run(&mut twin.cpu).unwrap();
        let gpu = case.run(&mut *twin.gpu).unwrap();
        for (k, ((c, g), (control, data))) in cpu.iter().zip(&gpu).zip(case.expected()).enumerate() {
            let what = format!("{}, launch {k} of {}", case.name, c.launch.kernel);
            assert_eq!(g.launch, c.launch, "{what}: the launches");
            assert_eq!(g.control, c.control, "{what}: the control block");
            if let Some(at) = first_difference(&c.data, &g.data) {
                panic!(
                    "{what}: ring byte {at} is {} on the device, {} on the CPU",
                    g.data[at], c.data[at]
                );
            }
            assert_eq!(c.control, control, "{what}: the CPU's control block");
            assert!(c.data == data, "{what}: the CPU's ring");
        }
        let grids: Vec<u32> = cpu.iter().map(|p| p.launch.grid[0]).collect();
        eprintln!("{}: grids {grids:?}, rings and control blocks identical", case.name);
    }
    let repeats = if twin.is_cuda { 200 } else { 2 };
    race_the_widest_grids(&mut twin, repeats);
}

/// `repeats` pairs of a 264-block static copy and a 256-block chunked copy of
/// 64 chunks on one ring, with no wait between them; then the counter is at
/// 0, every launch was published once, and the ring is the CPU's.
fn race_the_widest_grids(twin: &mut Twin, repeats: u64) {
    use ring_producer::{Chunk, ChunkTable, PRODUCER_BYTES_PER_BLOCK, Ring};
    let nbytes = 264 * PRODUCER_BYTES_PER_BLOCK + 5;
    let chunk_bytes = 4 * PRODUCER_BYTES_PER_BLOCK + 3;
    let chunks: Vec<Chunk> = (0..64)
        .map(|k| Chunk {
            offset: k * chunk_bytes,
            bytes: chunk_bytes,
        })
        .collect();
    let mut cpu_and_gpu = Vec::new();
    for d in [&mut twin.cpu as &mut dyn Driver, &mut *twin.gpu] {
        let ring = Ring::new(d, "race", 3 * nbytes + 11).unwrap();
        let src = d.alloc("race.src", nbytes as usize).unwrap();
        d.upload(src, 0, &ring_producer::fixtures::pattern(9, nbytes as usize))
            .unwrap();
        let table = ChunkTable::new(d, "race.chunks", nbytes, &chunks).unwrap();
        let launches = [
            ring.static_launch(src.into(), nbytes).unwrap(),
            ring.chunked_launch(src.into(), &table).unwrap(),
        ];
        assert_eq!([launches[0].grid[0], launches[1].grid[0]], [264, 256]);
        for _ in 0..repeats {
            for launch in &launches {
                d.launch(launch).unwrap();
            }
        }
        d.synchronize().unwrap();
        let control = ring.read_control(d).unwrap();
        let mut data = vec![0u8; ring.capacity() as usize];
        d.download(ring.data(), 0, &mut data).unwrap();
        cpu_and_gpu.push((control, data));
    }
    let (cpu, gpu) = (&cpu_and_gpu[0], &cpu_and_gpu[1]);
    let want = RingControl {
        head: repeats * (nbytes + 64 * chunk_bytes),
        sequence: 2 * repeats,
        ..RingControl::default()
    };
    assert_eq!(gpu.0, want, "the control block after {repeats} races");
    assert_eq!(cpu.0, want, "the CPU's control block");
    if let Some(at) = first_difference(&cpu.1, &gpu.1) {
        panic!(
            "race: ring byte {at} is {} on the device, {} on the CPU",
            gpu.1[at], cpu.1[at]
        );
    }
    eprintln!(
        "race: {} launches of 264 and 256 blocks, each published once, the counter at 0",
        2 * repeats
    );
}

/// A refined channel with a body, stepped with its plans captured as CUDA
/// graphs (the default) and with them enqueued launch by launch: the same
/// bits after every batch, the same exchange ledger, and the plan released
/// with its graph refused like any other. Graph capture is CUDA's, so this
/// runs on the GPU only.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn graph_replays_match_plain_launches_bit_for_bit() {
    use lbm_cuda::{CudaDriver, PlanMode};
    if std::env::var_os("LBM_KERNEL_EMU").is_some() {
        eprintln!("not run: graph capture needs CUDA, and LBM_KERNEL_EMU names the host build of the kernels");
        return;
    }
    let open = |mode| {
        let mut driver = CudaDriver::new(0).expect("a CUDA device");
        driver.set_plan_mode(mode);
        let exec = ExecConfig {
            observe_raw_exchange: true,
            ..ExecConfig::default()
        };
        let stepper = Stepper::new(driver, channel_lattice(), exec).unwrap();
        stepper.initialize(initial_flow).unwrap();
        stepper
    };
    let (graphs, launches) = (open(PlanMode::Graphs), open(PlanMode::Launches));
    for batch in [1u64, 2, 5] {
        graphs.step(batch).unwrap();
        launches.step(batch).unwrap();
        let at = format!("step {}", graphs.step_count());
        for (level, patches) in graphs.hierarchy().levels.iter().enumerate() {
            for p in 0..patches.len() {
                let (g, l) = (graphs.download(level, p).unwrap(), launches.download(level, p).unwrap());
                assert_bitwise(&format!("populations L{level}.p{p}, {at}"), &l, &g);
            }
        }
        let (g, l) = (
            graphs.read_raw_exchange(0).unwrap(),
            launches.read_raw_exchange(0).unwrap(),
        );
        assert_bitwise(
            &format!("raw exchange, {at}"),
            &[l.force[0], l.force[1], l.torque],
            &[g.force[0], g.force[1], g.torque],
        );
    }
    graphs.close().unwrap();
    launches.close().unwrap();

    // A graph's pointers are baked in: a plan whose buffer was freed is refused.
    let mut driver = CudaDriver::new(0).unwrap();
    let buffer = driver.alloc("poisoned", 64).unwrap();
    let plan = driver
        .prepare(
            "memset",
            &[Action::Memset {
                buffer,
                byte_offset: 0,
                bytes: 64,
                value: 0xAB,
            }],
        )
        .unwrap();
    driver.replay(plan).unwrap();
    driver.synchronize().unwrap();
    let mut out = [0u8; 64];
    driver.download(buffer, 0, &mut out).unwrap();
    assert_eq!(out, [0xAB; 64], "the captured memset ran");
    driver.free(buffer).unwrap();
    let refused = driver.replay(plan);
    assert!(
        matches!(refused, Err(lbm_core::Error::StalePlan { buffer: b, .. }) if b == buffer),
        "{refused:?}"
    );
    driver.release_plan(plan).unwrap();
}

/// A lockstep batch of three members (viscosity and inflow differ) of a
/// refined channel with a body, on CUDA (each member on its own driver and
/// stream) and on the CPU: the same stops, each member's populations, mass
/// and diagnostic norms alike.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn lockstep_batches_match_the_cpu() {
    use lbm_core::member::{FixedSchedule, Member};
    use lockstep::LockstepRunner;
    let exec = ExecConfig {
        observe_window_exchange: true,
        schedule: Some(FixedSchedule::new(6, 3).unwrap().with_diagnostics_every(2).unwrap()),
        ..ExecConfig::default()
    };
    let lattice = |k: usize| {
        let mut l = channel_lattice();
        l.tau += 0.05 * k as f64;
        if let Some(inlet) = &mut l.inlet {
            inlet.velocity *= 1.0 + 0.2 * k as f64;
        }
        l
    };
    let mut cpu = LockstepRunner::new(
        (0..3)
            .map(|k| Stepper::new(CpuDriver::new(), lattice(k), exec.clone()).unwrap())
            .collect(),
    )
    .unwrap();
    let mut gpu = LockstepRunner::new(
        (0..3)
            .map(|k| Stepper::new(lbm_cuda::testing::open_device().driver, lattice(k), exec.clone()).unwrap())
            .collect(),
    )
    .unwrap();
    cpu.run().unwrap();
    gpu.run().unwrap();
    for k in 0..3 {
        let (c, g) = (&cpu.members()[k], &gpu.members()[k]);
        for (level, patches) in c.hierarchy().levels.iter().enumerate() {
            for p in 0..patches.len() {
                let what = format!("member {k} L{level}.p{p}");
                assert_close(
                    &what,
                    &c.download(level, p).unwrap(),
                    &g.download(level, p).unwrap(),
                    1e-5,
                );
            }
        }
        let (cn, gn) = (&cpu.norms()[k], &gpu.norms()[k]);
        assert_eq!(cn.iter().map(|r| r.step).collect::<Vec<_>>(), vec![2, 4, 6]);
        for (a, b) in cn.iter().zip(gn) {
            assert!(
                (a.norm - b.norm).abs() <= 1e-4 * a.norm,
                "member {k}: norms {a:?} {b:?}"
            );
        }
        let (cm, gm) = (Member::observe(c).unwrap(), Member::observe(g).unwrap());
        assert!((cm.mass - gm.mass).abs() <= 1e-6 * cm.mass.abs(), "member {k}");
    }
    cpu.close().unwrap();
    gpu.close().unwrap();
}

/// A fused batch (one `_batch` launch per kernel per hop for all members) on
/// the device against the lockstep runner on the device, members on their
/// own drivers: the same kernels on the same arguments, so every member's
/// populations, norms, statistics and windows agree bit for bit; and against
/// the CPU's fused batch within the tolerance of the test above. The members
/// differ in viscosity, inflow and where their cylinder lies and how large
/// it is.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn fused_batches_match_lockstep_bit_for_bit() {
    use lbm_core::member::{FieldQuantity, FixedSchedule, Statistic, StatsSpec};
    let lattice = channel_lattice();
    let (hierarchy, _) = lattice.validate(&ExecConfig::default().tiles).unwrap();
    let mut statistics = vec![Statistic::Mass];
    for (level, patches) in hierarchy.levels.iter().enumerate() {
        for patch in 0..patches.len() {
            for quantity in [FieldQuantity::DeltaRho, FieldQuantity::Ux, FieldQuantity::Uy] {
                statistics.push(Statistic::Field { level, patch, quantity });
            }
        }
    }
    let spec = StatsSpec { statistics };
    let exec = ExecConfig {
        observe_window_exchange: true,
        schedule: Some(FixedSchedule::new(6, 3).unwrap().with_diagnostics_every(2).unwrap()),
        stats: spec.clone(),
        ..ExecConfig::default()
    };
    // The cylinder moves and grows from member to member: each has body
    // links and wall tables of its own lengths.
    let member = |k: usize| {
        let mut l = channel_lattice();
        l.tau += 0.05 * k as f64;
        if let Some(inlet) = &mut l.inlet {
            inlet.velocity *= 1.0 + 0.2 * k as f64;
        }
        l.bodies[0].shape = Shape::Circle {
            center: [15.0 + 0.3 * k as f64, 16.0],
            radius: 2.5 + 0.2 * k as f64,
        };
        (l, exec.clone())
    };
    fused_matches_lockstep(5, member, &spec);
}

/// A fused batch of members whose updates split (their list kernels of
/// other lengths launched with the largest member's grid) against the
/// lockstep runner on the device, bit for bit: 300 x 240 channels, each with
/// its cylinder elsewhere.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on the device machine"]
fn fused_members_with_lists_of_other_lengths_match_lockstep_bit_for_bit() {
    use lbm_core::member::{FieldQuantity, FixedSchedule, Statistic, StatsSpec};
    let spec = StatsSpec {
        statistics: vec![
            Statistic::Mass,
            Statistic::Field {
                level: 0,
                patch: 0,
                quantity: FieldQuantity::Ux,
            },
            Statistic::Exchange { body: 0 },
        ],
    };
    let member = |k: usize| {
        let mut l = channel_lattice();
        l.hierarchy = HierarchySpec {
            base: [300, 240],
            levels: Vec::new(),
        };
        l.tau = 0.6 + 0.02 * k as f64;
        l.bodies = vec![Body {
            shape: Shape::Circle {
                center: [60.0 + 1.7 * k as f64, 118.0 + 0.6 * k as f64],
                radius: 9.0 + 1.3 * k as f64,
            },
            level: 0,
        }];
        let exec = ExecConfig {
            observe_raw_exchange: true,
            schedule: Some(FixedSchedule::new(6, 3).unwrap().with_diagnostics_every(3).unwrap()),
            stats: spec.clone(),
            ..ExecConfig::default()
        };
        (l, exec)
    };
    // Split on the device, with lists of other lengths.
    let device = lbm_cuda::testing::open_device().driver;
    let sizes = lbm_core::fused::check(&(0..4).map(member).collect::<Vec<_>>(), device.split_min_cells()).unwrap();
    assert!(sizes.0.keys().any(|k| k.ends_with("boundary_cells")), "{sizes:?}");
    fused_matches_lockstep(4, member, &spec);
}

/// `members` members built by `member` as a fused batch on the device,
/// against the lockstep runner on the device (bit for bit) and the fused
/// batch on the CPU (within the tolerance of the stepper tests above).
fn fused_matches_lockstep(
    members: usize,
    member: impl Fn(usize) -> (LatticeConfig, ExecConfig),
    spec: &lbm_core::member::StatsSpec,
) {
    use lockstep::LockstepRunner;
    let mut lockstep = LockstepRunner::new(
        (0..members)
            .map(|k| {
                let (l, e) = member(k);
                Stepper::new(lbm_cuda::testing::open_device().driver, l, e).unwrap()
            })
            .collect(),
    )
    .unwrap();
    let mut fused = LockstepRunner::new(
        lbm_core::fused::batch(
            lbm_cuda::testing::open_device().driver,
            (0..members).map(&member).collect(),
        )
        .unwrap(),
    )
    .unwrap();
    let mut cpu =
        LockstepRunner::new(lbm_core::fused::batch(CpuDriver::new(), (0..members).map(&member).collect()).unwrap())
            .unwrap();
    lockstep.run().unwrap();
    fused.run().unwrap();
    cpu.run().unwrap();
    assert_eq!(fused.norms(), lockstep.norms(), "every member's norms, to the bit");
    let (a, b) = (fused.observe_members().unwrap(), lockstep.observe_members().unwrap());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.observation, y.observation, "member {}", x.index);
        assert_eq!(x.rows, y.rows, "member {}: statistics at the save points", x.index);
    }
    let (f, l, c) = (
        fused.stats(spec).unwrap(),
        lockstep.stats(spec).unwrap(),
        cpu.stats(spec).unwrap(),
    );
    for (name, values) in &f {
        assert_eq!(values.shape()[0], members);
        let ours: Vec<u64> = values.iter().map(|x| x.to_bits()).collect();
        let theirs: Vec<u64> = l[name].iter().map(|x| x.to_bits()).collect();
        assert_eq!(ours, theirs, "{name}: fused and lockstep on the device");
        let host: Vec<f32> = c[name].iter().map(|v| *v as f32).collect();
        let device: Vec<f32> = values.iter().map(|v| *v as f32).collect();
        assert_close(name, &host, &device, 1e-5);
    }
    fused.close().unwrap();
    lockstep.close().unwrap();
    cpu.close().unwrap();
}
