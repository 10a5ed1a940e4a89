//! Typed launch constructors: one struct per [`Kernel`], each with `launch()` to
//! build the argument list and `decode()` to read it back.
//!
//! The argument order of each struct is the parameter order of its `__global__`
//! function in `kernels/`; encoding and decoding sit side by side so they cannot
//! drift apart. Nothing else assembles kernel arguments by hand.

use serde::{Deserialize, Serialize};

use crate::device::{Arg, BLOCK_THREADS, BufferId, Driver, Kernel, Launch};
use crate::error::{Error, Result};
use crate::hierarchy::{GHOST, Layout, Rect};
use crate::lattice::{Q, Relaxation};

/// What lies beyond one side of a patch's active region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u32)]
pub enum Edge {
    /// Wrap around to the opposite side.
    Periodic = 0,
    /// Half-way bounce-back wall, moving with the side's wall velocity.
    Wall = 1,
    /// The allocation's ghost band holds valid populations.
    Ghost = 2,
    /// Velocity inlet (x-min only): bounce-back carrying the inlet profile
    /// times the current amplitude factor, flowing in +x.
    Inlet = 3,
    /// Pressure outlet (x-max only): anti-bounce-back at rest density with the
    /// velocity extrapolated to the boundary. Vortices leave through it; it
    /// pins the mean pressure, so acoustic waves reflect.
    Outflow = 4,
    /// Free-slip wall: populations are mirrored in the wall.
    Symmetry = 5,
}

impl Edge {
    fn from_u32(kernel: Kernel, value: u32) -> Result<Edge> {
        match value {
            0 => Ok(Edge::Periodic),
            1 => Ok(Edge::Wall),
            2 => Ok(Edge::Ghost),
            3 => Ok(Edge::Inlet),
            4 => Ok(Edge::Outflow),
            5 => Ok(Edge::Symmetry),
            other => Err(args_error(kernel, format!("edge kind {other} is not in 0..=5"))),
        }
    }
}

/// What a refined patch's coupling stencils find beyond one side of its
/// active region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[repr(u32)]
pub enum SideKind {
    /// The parent's cells: the side is a coarse-fine interface.
    Interface = 0,
    /// A no-slip wall of the domain, possibly moving along itself.
    Wall = 1,
    /// A free-slip wall of the domain.
    Symmetry = 2,
}

/// The [`SideKind`] of each side (x-min, x-max, y-min, y-max), packed two bits
/// per side, x-min lowest, when passed to a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SideKinds(pub [SideKind; 4]);

impl SideKinds {
    /// Every side an interface: a patch clear of the domain's boundary.
    pub const INTERFACES: SideKinds = SideKinds([SideKind::Interface; 4]);

    pub fn packed(&self) -> u32 {
        self.0.iter().enumerate().map(|(s, k)| (*k as u32) << (2 * s)).sum()
    }
    fn from_packed(kernel: Kernel, packed: u32) -> Result<Self> {
        if packed >> 8 != 0 {
            return Err(args_error(
                kernel,
                format!("side kinds {packed:#x} use more than 8 bits"),
            ));
        }
        let mut kinds = [SideKind::Interface; 4];
        for (s, kind) in kinds.iter_mut().enumerate() {
            *kind = match (packed >> (2 * s)) & 3 {
                0 => SideKind::Interface,
                1 => SideKind::Wall,
                2 => SideKind::Symmetry,
                other => return Err(args_error(kernel, format!("side kind {other} is not in 0..=2"))),
            };
        }
        Ok(SideKinds(kinds))
    }
    /// Whether `side` is a coarse-fine interface.
    pub fn is_interface(&self, side: usize) -> bool {
        self.0[side] == SideKind::Interface
    }
}

/// The sides of a refined patch as its coupling stencils see them: mirror
/// images of the cells inside stand in for the cells beyond a wall, with the
/// velocity normal to the wall reversed and, for a no-slip wall, the
/// tangential velocity reflected about the wall's own.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PatchSides {
    pub kinds: SideKinds,
    /// The velocity of each wall along itself (u_y for x sides, u_x for y
    /// sides), lattice units; ignored for other kinds.
    pub tangential: [f32; 4],
}

impl PatchSides {
    /// Every side an interface.
    pub const INTERFACES: PatchSides = PatchSides {
        kinds: SideKinds::INTERFACES,
        tangential: [0.0; 4],
    };

    fn push(&self, args: &mut Vec<Arg>) {
        args.push(Arg::U32(self.kinds.packed()));
        args.extend(self.tangential.map(Arg::F32));
    }
    fn read(r: &mut ArgReader) -> Result<Self> {
        Ok(PatchSides {
            kinds: SideKinds::from_packed(r.kernel, r.u32()?)?,
            tangential: [r.f32()?, r.f32()?, r.f32()?, r.f32()?],
        })
    }
}

fn args_error(kernel: Kernel, reason: String) -> Error {
    Error::LaunchArgs {
        kernel: kernel.cuda_name().into(),
        reason,
    }
}

/// Reads a launch's arguments in order, checking each one's kind.
struct ArgReader<'a> {
    kernel: Kernel,
    args: std::slice::Iter<'a, Arg>,
}

impl<'a> ArgReader<'a> {
    fn new(launch: &'a Launch, kernel: Kernel) -> Result<Self> {
        if launch.kernel != kernel {
            return Err(args_error(kernel, format!("launch is for {:?}", launch.kernel)));
        }
        Ok(ArgReader {
            kernel,
            args: launch.args.iter(),
        })
    }
    fn next(&mut self) -> Result<&'a Arg> {
        self.args
            .next()
            .ok_or_else(|| args_error(self.kernel, "too few arguments".into()))
    }
    fn buffer(&mut self) -> Result<BufferId> {
        match self.next()? {
            Arg::Buffer { id, byte_offset: 0 } => Ok(*id),
            other => Err(args_error(
                self.kernel,
                format!("expected a buffer at offset 0, got {other:?}"),
            )),
        }
    }
    fn u32(&mut self) -> Result<u32> {
        match self.next()? {
            Arg::U32(v) => Ok(*v),
            other => Err(args_error(self.kernel, format!("expected u32, got {other:?}"))),
        }
    }
    fn f32(&mut self) -> Result<f32> {
        match self.next()? {
            Arg::F32(v) => Ok(*v),
            other => Err(args_error(self.kernel, format!("expected f32, got {other:?}"))),
        }
    }
    fn layout(&mut self) -> Result<Layout> {
        Ok(Layout {
            nx: self.u32()?,
            ny: self.u32()?,
            tile: [self.u32()?, self.u32()?],
        })
    }
    fn rect(&mut self) -> Result<Rect> {
        Ok(Rect::new(self.u32()?, self.u32()?, self.u32()?, self.u32()?))
    }
    fn finish(mut self) -> Result<()> {
        match self.args.next() {
            None => Ok(()),
            Some(_) => Err(args_error(self.kernel, "too many arguments".into())),
        }
    }
}

fn push_layout(args: &mut Vec<Arg>, layout: &Layout) {
    args.extend([
        Arg::U32(layout.nx),
        Arg::U32(layout.ny),
        Arg::U32(layout.tile[0]),
        Arg::U32(layout.tile[1]),
    ]);
}

fn push_rect(args: &mut Vec<Arg>, rect: &Rect) {
    args.extend([
        Arg::U32(rect.x0),
        Arg::U32(rect.y0),
        Arg::U32(rect.x1),
        Arg::U32(rect.y1),
    ]);
}

/// Samples of an inlet profile over `rows` rows: three per row, for the
/// populations arriving with y component 1, 0 and -1 (see [`inlet_sample`]).
pub fn inlet_samples(rows: u32) -> usize {
    3 * rows as usize
}

/// The sample of an inlet profile that a population arriving in row `row`
/// along a direction with y component `cy` takes. The straight one takes the
/// profile at the row's centre; the diagonals cross the inlet half a cell
/// lower (`cy = 1`) or higher (`cy = -1`) and take the centre value minus or
/// plus half the profile's rise across the row. Giving the diagonals the centre
/// value drives a transverse flow of first order in the spacing out of the
/// inlet; tilting them this way keeps the row's inflow at the centre value.
pub fn inlet_sample(row: u32, cy: i32) -> usize {
    (3 * row as i64 + 1 - cy as i64) as usize
}

/// `stream_collide`: one thread per active cell, row-major over the active region.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamCollide {
    pub src: BufferId,
    pub dst: BufferId,
    pub flags: BufferId,
    /// Wall distances: plane `i` holds, at a fluid cell whose neighbour
    /// `(x, y) - c_i` is solid, the fraction q of that link lying in fluid.
    /// Read only when `interpolated_walls` is set.
    pub wall_distance: BufferId,
    /// Inlet velocities (f32), three per active row, bottom up ([`inlet_sample`]),
    /// scaled by the factor in `boundary_state`; read only when a side is an
    /// inlet.
    pub inlet_profile: BufferId,
    /// `[u32 interval, f32 inlet factor]`, written by `update_boundary_state`.
    pub boundary_state: BufferId,
    pub layout: Layout,
    pub active: Rect,
    /// Sides in the order x-min, x-max, y-min, y-max.
    pub edges: [Edge; 4],
    pub wall_velocity: [[f32; 2]; 4],
    pub omega_plus: f32,
    pub omega_minus: f32,
    pub force: [f32; 2],
    /// Bouzidi interpolated bounce-back on body links (else half-way).
    pub interpolated_walls: bool,
}

impl StreamCollide {
    /// A whole `nx` x `ny` allocation, row-major, periodic on every side,
    /// without bodies, inlet or force: the benchmark case. `flags` stands in
    /// for the buffers such a launch never reads.
    pub fn periodic(src: BufferId, dst: BufferId, flags: BufferId, [nx, ny]: [u32; 2], relaxation: Relaxation) -> Self {
        StreamCollide {
            src,
            dst,
            flags,
            wall_distance: flags,
            inlet_profile: flags,
            boundary_state: flags,
            layout: Layout { nx, ny, tile: [nx, ny] },
            active: Rect::new(0, 0, nx, ny),
            edges: [Edge::Periodic; 4],
            wall_velocity: [[0.0; 2]; 4],
            omega_plus: relaxation.omega_plus(),
            omega_minus: relaxation.omega_minus(),
            force: [0.0, 0.0],
            interpolated_walls: false,
        }
    }

    /// Allocates a periodic `n` x `n` benchmark on `driver` (populations at
    /// `src` filled with small deterministic noise) and returns its buffers
    /// and the two ping-pong launches, `src -> dst` then `dst -> src`.
    pub fn periodic_benchmark<D: Driver>(driver: &mut D, n: u32, relaxation: Relaxation) -> Result<PeriodicBenchmark> {
        let cells = (n * n) as usize;
        let bytes = Q * cells * 4;
        let src = driver.alloc("src", bytes)?;
        let dst = driver.alloc("dst", bytes)?;
        let flags = driver.alloc("flags", cells)?;
        let noise: Vec<f32> = (0..Q * cells)
            .map(|i| 1e-3 * ((i * 7919 % 1000) as f32 / 1000.0 - 0.5))
            .collect();
        driver.upload(src, 0, bytemuck::cast_slice(&noise))?;
        let step = |from, to| StreamCollide::periodic(from, to, flags, [n, n], relaxation).launch();
        Ok(PeriodicBenchmark {
            src,
            dst,
            flags,
            population_bytes: bytes,
            launches: [step(src, dst), step(dst, src)],
        })
    }

    pub fn launch(&self) -> Launch {
        let mut args = vec![
            Arg::buffer(self.src),
            Arg::buffer(self.dst),
            Arg::buffer(self.flags),
            Arg::buffer(self.wall_distance),
            Arg::buffer(self.inlet_profile),
            Arg::buffer(self.boundary_state),
        ];
        push_layout(&mut args, &self.layout);
        push_rect(&mut args, &self.active);
        args.extend(self.edges.iter().map(|e| Arg::U32(*e as u32)));
        args.extend(self.wall_velocity.iter().flatten().map(|v| Arg::F32(*v)));
        args.extend([
            Arg::F32(self.omega_plus),
            Arg::F32(self.omega_minus),
            Arg::F32(self.force[0]),
            Arg::F32(self.force[1]),
            Arg::U32(self.interpolated_walls as u32),
        ]);
        Launch::linear(Kernel::StreamCollide, self.active.cells(), args)
    }

    pub fn decode(launch: &Launch) -> Result<Self> {
        let kernel = Kernel::StreamCollide;
        let mut r = ArgReader::new(launch, kernel)?;
        let (src, dst, flags, wall_distance) = (r.buffer()?, r.buffer()?, r.buffer()?, r.buffer()?);
        let (inlet_profile, boundary_state) = (r.buffer()?, r.buffer()?);
        let layout = r.layout()?;
        let active = r.rect()?;
        let mut edges = [Edge::Periodic; 4];
        for e in &mut edges {
            *e = Edge::from_u32(kernel, r.u32()?)?;
        }
        let mut wall_velocity = [[0.0; 2]; 4];
        for v in wall_velocity.iter_mut().flatten() {
            *v = r.f32()?;
        }
        let decoded = StreamCollide {
            src,
            dst,
            flags,
            wall_distance,
            inlet_profile,
            boundary_state,
            layout,
            active,
            edges,
            wall_velocity,
            omega_plus: r.f32()?,
            omega_minus: r.f32()?,
            force: [r.f32()?, r.f32()?],
            interpolated_walls: r.u32()? != 0,
        };
        r.finish()?;
        Ok(decoded)
    }
}

/// What [`StreamCollide::periodic_benchmark`] allocated.
pub struct PeriodicBenchmark {
    pub src: BufferId,
    pub dst: BufferId,
    pub flags: BufferId,
    /// Bytes of one population buffer.
    pub population_bytes: usize,
    pub launches: [Launch; 2],
}

/// `fill_ghost`: one thread per ghost-band cell of the fine patch, bottom rows,
/// then top rows, then the left and right columns between them. Band cells
/// beyond a wall side are left as they are; nothing reads them.
#[derive(Clone, Debug, PartialEq)]
pub struct FillGhost {
    /// Parent populations at the start of its hop (time t).
    pub coarse_t: BufferId,
    /// Parent populations at the end of its hop (time t + 1).
    pub coarse_t1: BufferId,
    pub fine_dst: BufferId,
    pub coarse: Layout,
    /// The parent's active region: stencil cells beyond its sides that are the
    /// domain's walls are read as mirror images (see `sides`).
    pub coarse_active: Rect,
    pub fine: Layout,
    /// Parent allocation coordinates of the parent cell under the fine active
    /// region's lower-left corner.
    pub active_offset: [u32; 2],
    /// The parent's sides as the stencil sees them: walls where the fine patch
    /// touches the domain's boundary, interfaces elsewhere (never reached).
    pub sides: PatchSides,
    /// Weight of `coarse_t1` in the time interpolation (0 or 1/2).
    pub alpha: f32,
    /// The fine level's relaxation times τ⁺ and τ⁻.
    pub tau_plus: f32,
    pub tau_minus: f32,
    /// Body-force density on the parent level, lattice units of the parent.
    pub coarse_force: [f32; 2],
}

impl FillGhost {
    /// Cells of the ghost band of a fine allocation.
    pub fn band_cells(fine: &Layout) -> usize {
        (2 * GHOST * fine.nx + 2 * GHOST * (fine.ny - 2 * GHOST)) as usize
    }

    pub fn launch(&self) -> Launch {
        let mut args = vec![
            Arg::buffer(self.coarse_t),
            Arg::buffer(self.coarse_t1),
            Arg::buffer(self.fine_dst),
        ];
        push_layout(&mut args, &self.coarse);
        push_rect(&mut args, &self.coarse_active);
        push_layout(&mut args, &self.fine);
        args.extend([Arg::U32(self.active_offset[0]), Arg::U32(self.active_offset[1])]);
        self.sides.push(&mut args);
        args.extend([
            Arg::F32(self.alpha),
            Arg::F32(self.tau_plus),
            Arg::F32(self.tau_minus),
            Arg::F32(self.coarse_force[0]),
            Arg::F32(self.coarse_force[1]),
        ]);
        Launch::linear(Kernel::FillGhost, Self::band_cells(&self.fine), args)
    }

    pub fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Kernel::FillGhost)?;
        let decoded = FillGhost {
            coarse_t: r.buffer()?,
            coarse_t1: r.buffer()?,
            fine_dst: r.buffer()?,
            coarse: r.layout()?,
            coarse_active: r.rect()?,
            fine: r.layout()?,
            active_offset: [r.u32()?, r.u32()?],
            sides: PatchSides::read(&mut r)?,
            alpha: r.f32()?,
            tau_plus: r.f32()?,
            tau_minus: r.f32()?,
            coarse_force: [r.f32()?, r.f32()?],
        };
        r.finish()?;
        Ok(decoded)
    }
}

/// `restrict_to_parent`: one thread per covered parent cell, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct RestrictToParent {
    pub fine_src: BufferId,
    pub coarse_dst: BufferId,
    pub fine: Layout,
    pub coarse: Layout,
    /// The parent cells the fine active region covers, parent allocation coordinates.
    pub covered: Rect,
    /// Fine allocation coordinates of the first active cell (the ghost width).
    pub fine_active_origin: u32,
    /// The fine patch's sides: its stencil reads mirror images of fine active
    /// cells beyond a wall side, and the ghost band beyond an interface.
    pub sides: PatchSides,
    /// The parent level's relaxation times τ⁺ and τ⁻.
    pub tau_plus: f32,
    pub tau_minus: f32,
    pub coarse_force: [f32; 2],
}

impl RestrictToParent {
    pub fn launch(&self) -> Launch {
        let mut args = vec![Arg::buffer(self.fine_src), Arg::buffer(self.coarse_dst)];
        push_layout(&mut args, &self.fine);
        push_layout(&mut args, &self.coarse);
        push_rect(&mut args, &self.covered);
        args.push(Arg::U32(self.fine_active_origin));
        self.sides.push(&mut args);
        args.extend([
            Arg::F32(self.tau_plus),
            Arg::F32(self.tau_minus),
            Arg::F32(self.coarse_force[0]),
            Arg::F32(self.coarse_force[1]),
        ]);
        Launch::linear(Kernel::RestrictToParent, self.covered.cells(), args)
    }

    pub fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Kernel::RestrictToParent)?;
        let decoded = RestrictToParent {
            fine_src: r.buffer()?,
            coarse_dst: r.buffer()?,
            fine: r.layout()?,
            coarse: r.layout()?,
            covered: r.rect()?,
            fine_active_origin: r.u32()?,
            sides: PatchSides::read(&mut r)?,
            tau_plus: r.f32()?,
            tau_minus: r.f32()?,
            coarse_force: [r.f32()?, r.f32()?],
        };
        r.finish()?;
        Ok(decoded)
    }
}

/// How the inlet amplitude factor varies with time (base intervals in a
/// `LatticeConfig`, seconds in a case file).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Amplitude {
    /// Always 1.
    #[default]
    Constant,
    /// From 0 to 1 linearly over `duration`, then 1.
    Ramp { duration: f64 },
    /// `sin(2π t / period)`.
    Sine { period: f64 },
    /// Piecewise linear through `(t, factor)` points, constant beyond the ends.
    Table { points: Vec<[f64; 2]> },
}

impl Amplitude {
    /// The same amplitude with every time multiplied by `scale`.
    pub fn rescaled(&self, scale: f64) -> Amplitude {
        match self {
            Amplitude::Constant => Amplitude::Constant,
            Amplitude::Ramp { duration } => Amplitude::Ramp {
                duration: duration * scale,
            },
            Amplitude::Sine { period } => Amplitude::Sine { period: period * scale },
            Amplitude::Table { points } => Amplitude::Table {
                points: points.iter().map(|[t, f]| [t * scale, *f]).collect(),
            },
        }
    }

    /// The largest factor the amplitude reaches, for the Mach number check.
    pub fn peak(&self) -> f64 {
        match self {
            Amplitude::Table { points } => points.iter().map(|p| p[1].abs()).fold(0.0, f64::max),
            _ => 1.0,
        }
    }

    fn code(&self) -> u32 {
        match self {
            Amplitude::Constant => 0,
            Amplitude::Ramp { .. } => 1,
            Amplitude::Sine { .. } => 2,
            Amplitude::Table { .. } => 3,
        }
    }

    fn parameter(&self) -> f32 {
        match self {
            Amplitude::Ramp { duration } => *duration as f32,
            Amplitude::Sine { period } => *period as f32,
            Amplitude::Constant | Amplitude::Table { .. } => 0.0,
        }
    }
}

/// The amplitude factor at time `t` (base intervals) for the kernel's encoding:
/// `kind` 0 constant, 1 ramp over `parameter`, 2 sine of period `parameter`,
/// 3 table of `(t, factor)` pairs.
pub fn amplitude_factor(kind: u32, parameter: f32, table: &[f32], t: f32) -> f32 {
    match kind {
        1 if parameter > 0.0 => (t / parameter).min(1.0),
        2 => (2.0 * std::f32::consts::PI * t / parameter).sin(),
        3 if table.len() >= 2 => {
            let points = table.len() / 2;
            if t <= table[0] {
                return table[1];
            }
            for k in 1..points {
                let (t0, f0, t1, f1) = (table[2 * k - 2], table[2 * k - 1], table[2 * k], table[2 * k + 1]);
                if t <= t1 {
                    return f0 + (f1 - f0) * ((t - t0) / (t1 - t0));
                }
            }
            table[2 * points - 1]
        }
        _ => 1.0,
    }
}

/// `update_boundary_state`: one thread. Advances the interval counter in
/// `state` and stores the inlet factor for the interval's end time.
#[derive(Clone, Debug, PartialEq)]
pub struct UpdateBoundaryState {
    pub state: BufferId,
    /// `(t, factor)` pairs as f32 for the table amplitude (any buffer otherwise).
    pub table: BufferId,
    pub table_points: u32,
    pub kind: u32,
    pub parameter: f32,
}

impl UpdateBoundaryState {
    pub fn new(state: BufferId, table: BufferId, amplitude: &Amplitude) -> Self {
        let table_points = match amplitude {
            Amplitude::Table { points } => points.len() as u32,
            _ => 0,
        };
        UpdateBoundaryState {
            state,
            table,
            table_points,
            kind: amplitude.code(),
            parameter: amplitude.parameter(),
        }
    }

    pub fn launch(&self) -> Launch {
        let args = vec![
            Arg::buffer(self.state),
            Arg::buffer(self.table),
            Arg::U32(self.table_points),
            Arg::U32(self.kind),
            Arg::F32(self.parameter),
        ];
        Launch::linear(Kernel::UpdateBoundaryState, 1, args)
    }

    pub fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Kernel::UpdateBoundaryState)?;
        let decoded = UpdateBoundaryState {
            state: r.buffer()?,
            table: r.buffer()?,
            table_points: r.u32()?,
            kind: r.u32()?,
            parameter: r.f32()?,
        };
        r.finish()?;
        Ok(decoded)
    }
}

/// Number of parent cells in the ring around a covered rectangle: those at
/// Chebyshev distance exactly one from it, beyond its interface sides only
/// (a wall side has no ring).
pub fn ring_cells(covered: &Rect, kinds: SideKinds) -> usize {
    let open = |s: usize| kinds.is_interface(s) as usize;
    let (w, h) = (covered.width() as usize, covered.height() as usize);
    let row = w + open(0) + open(1);
    (open(2) + open(3)) * row + (open(0) + open(1)) * h
}

/// The `k`-th ring cell around `covered`: the row below (left to right, corners
/// included), the row above, then the left and right columns between them,
/// each only beyond an interface side.
pub fn ring_cell(covered: &Rect, kinds: SideKinds, k: usize) -> (u32, u32) {
    let open = |s: usize| kinds.is_interface(s) as usize;
    let (w, h) = (covered.width() as usize, covered.height() as usize);
    let row = w + open(0) + open(1);
    let bottom = open(2) * row;
    let top = bottom + open(3) * row;
    let left = top + open(0) * h;
    // A ring cell beyond an interface side has a coordinate one less than the
    // covered rectangle's, which the margin keeps at zero or above.
    let first_x = covered.x0 as usize - open(0);
    let (x, y) = if k < bottom {
        (first_x + k, covered.y0 as usize - 1)
    } else if k < top {
        (first_x + k - bottom, covered.y1 as usize)
    } else if k < left {
        (covered.x0 as usize - 1, covered.y0 as usize + k - top)
    } else {
        (covered.x1 as usize, covered.y0 as usize + k - left)
    };
    (x as u32, y as u32)
}

/// The parent cells a fine allocation covers, in "fine allocation, parent
/// resolution" coordinates: fine cell (fx, fy) lies in cell (fx / 2, fy / 2).
pub fn fine_covered(fine: &Layout) -> Rect {
    let g = GHOST / 2;
    Rect::new(g, g, fine.nx / 2 - g, fine.ny / 2 - g)
}

/// `accumulate_fine_flux`: one thread per parent ring cell of a fine patch. Adds a
/// quarter of the mass its ghost cells send into the active region minus the
/// mass the active region sends into them, for the coming fine hop.
#[derive(Clone, Debug, PartialEq)]
pub struct AccumulateFineFlux {
    /// Fine populations just after `fill_ghost`: ghost band and active region.
    pub fine: BufferId,
    /// One f32 per ring cell, in [`ring_cell`] order.
    pub flux: BufferId,
    pub layout: Layout,
    /// The fine patch's sides; the ring lies beyond its interfaces only.
    pub kinds: SideKinds,
}

impl AccumulateFineFlux {
    pub fn launch(&self) -> Launch {
        let mut args = vec![Arg::buffer(self.fine), Arg::buffer(self.flux)];
        push_layout(&mut args, &self.layout);
        args.push(Arg::U32(self.kinds.packed()));
        Launch::linear(
            Kernel::AccumulateFineFlux,
            ring_cells(&fine_covered(&self.layout), self.kinds),
            args,
        )
    }

    pub fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Kernel::AccumulateFineFlux)?;
        let decoded = AccumulateFineFlux {
            fine: r.buffer()?,
            flux: r.buffer()?,
            layout: r.layout()?,
            kinds: SideKinds::from_packed(Kernel::AccumulateFineFlux, r.u32()?)?,
        };
        r.finish()?;
        Ok(decoded)
    }
}

/// `correct_interface_mass`: one block of 256 threads striding over the parent
/// ring cells. The mass the parent exchanged with its covered cells over its hop
/// (from `coarse_t`) and the fine flux measured over the two fine hops should
/// cancel; their sum over the ring is taken out of the ring cells of
/// `coarse_t1` in equal shares, and the flux slots are zeroed. One block makes
/// the sum a deterministic block reduction.
#[derive(Clone, Debug, PartialEq)]
pub struct CorrectInterfaceMass {
    pub coarse_t: BufferId,
    pub coarse_t1: BufferId,
    pub flux: BufferId,
    pub coarse: Layout,
    /// Covered parent cells, parent allocation coordinates.
    pub covered: Rect,
    /// The fine patch's sides; the ring lies beyond its interfaces only.
    pub kinds: SideKinds,
}

impl CorrectInterfaceMass {
    pub fn launch(&self) -> Launch {
        let mut args = vec![
            Arg::buffer(self.coarse_t),
            Arg::buffer(self.coarse_t1),
            Arg::buffer(self.flux),
        ];
        push_layout(&mut args, &self.coarse);
        push_rect(&mut args, &self.covered);
        args.push(Arg::U32(self.kinds.packed()));
        Launch::linear(Kernel::CorrectInterfaceMass, BLOCK_THREADS as usize, args)
    }

    pub fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Kernel::CorrectInterfaceMass)?;
        let decoded = CorrectInterfaceMass {
            coarse_t: r.buffer()?,
            coarse_t1: r.buffer()?,
            flux: r.buffer()?,
            coarse: r.layout()?,
            covered: r.rect()?,
            kinds: SideKinds::from_packed(Kernel::CorrectInterfaceMass, r.u32()?)?,
        };
        r.finish()?;
        Ok(decoded)
    }
}

/// Words per body link in the link table: the fluid cell's storage index; the
/// direction pointing into the body plus 16 x the body's accumulator slot; the
/// lever arm (x, y) from the body centre to the link's wall point as f32 bits;
/// the wall distance q as f32 bits; and the storage index of the fluid cell
/// behind (`cell - c_dir`), or `u32::MAX` when that is not fluid.
pub const LINK_WORDS: usize = 6;
/// `LINK_WORDS` value for "no fluid cell behind".
pub const NO_CELL: u32 = u32::MAX;
/// f64 words per body in an exchange accumulator: Fx, Fy, torque, unused.
pub const EXCHANGE_WORDS: usize = 4;

/// `accumulate_exchange`: one thread per body link. The exchange of the
/// streaming that leaves `f`: each link gives the body `c_d (f*_d + f_in)`
/// (real populations), `f_in` being the population the wall rule returns.
#[derive(Clone, Debug, PartialEq)]
pub struct AccumulateExchange {
    /// Post-collision populations of the body's patch before the hop's streaming.
    pub f: BufferId,
    pub plane_cells: u32,
    pub links: BufferId,
    pub n_links: u32,
    pub interval: BufferId,
    /// The window accumulator, or `interval` again when no window is observed.
    pub window: BufferId,
    pub window_on: bool,
}

impl AccumulateExchange {
    pub fn launch(&self) -> Launch {
        let args = vec![
            Arg::buffer(self.f),
            Arg::U32(self.plane_cells),
            Arg::buffer(self.links),
            Arg::U32(self.n_links),
            Arg::buffer(self.interval),
            Arg::buffer(self.window),
            Arg::U32(self.window_on as u32),
        ];
        Launch::linear(Kernel::AccumulateExchange, self.n_links as usize, args)
    }

    pub fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Kernel::AccumulateExchange)?;
        let decoded = AccumulateExchange {
            f: r.buffer()?,
            plane_cells: r.u32()?,
            links: r.buffer()?,
            n_links: r.u32()?,
            interval: r.buffer()?,
            window: r.buffer()?,
            window_on: r.u32()? != 0,
        };
        r.finish()?;
        Ok(decoded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_launch_round_trips_through_its_arguments() {
        let layout = Layout {
            nx: 12,
            ny: 10,
            tile: [4, 4],
        };
        let sc = StreamCollide {
            src: BufferId(1),
            dst: BufferId(2),
            flags: BufferId(3),
            wall_distance: BufferId(6),
            inlet_profile: BufferId(4),
            boundary_state: BufferId(5),
            layout,
            active: Rect::new(4, 4, 8, 6),
            edges: [Edge::Inlet, Edge::Outflow, Edge::Symmetry, Edge::Wall],
            wall_velocity: [[0.0, 0.0], [0.1, 0.0], [0.0, 0.2], [0.3, 0.4]],
            omega_plus: 1.2,
            omega_minus: 1.5,
            force: [1e-5, -2e-5],
            interpolated_walls: true,
        };
        assert_eq!(StreamCollide::decode(&sc.launch()).unwrap(), sc);
        let fg = FillGhost {
            coarse_t: BufferId(1),
            coarse_t1: BufferId(2),
            fine_dst: BufferId(3),
            coarse: layout,
            coarse_active: Rect::new(0, 0, 12, 10),
            fine: layout,
            active_offset: [5, 6],
            sides: PatchSides {
                kinds: SideKinds([SideKind::Interface, SideKind::Wall, SideKind::Symmetry, SideKind::Wall]),
                tangential: [0.0, 0.1, 0.0, -0.2],
            },
            alpha: 0.5,
            tau_plus: 0.6,
            tau_minus: 0.9,
            coarse_force: [0.0, 1e-6],
        };
        assert_eq!(FillGhost::decode(&fg.launch()).unwrap(), fg);
        let rs = RestrictToParent {
            fine_src: BufferId(4),
            coarse_dst: BufferId(5),
            fine: layout,
            coarse: layout,
            covered: Rect::new(1, 2, 3, 4),
            fine_active_origin: 4,
            sides: PatchSides::INTERFACES,
            tau_plus: 0.6,
            tau_minus: 0.9,
            coarse_force: [0.0, 0.0],
        };
        assert_eq!(RestrictToParent::decode(&rs.launch()).unwrap(), rs);
        let ax = AccumulateExchange {
            f: BufferId(1),
            plane_cells: 120,
            links: BufferId(2),
            n_links: 33,
            interval: BufferId(3),
            window: BufferId(4),
            window_on: true,
        };
        assert_eq!(AccumulateExchange::decode(&ax.launch()).unwrap(), ax);
        let ff = AccumulateFineFlux {
            fine: BufferId(1),
            flux: BufferId(2),
            layout,
            kinds: SideKinds([
                SideKind::Wall,
                SideKind::Interface,
                SideKind::Interface,
                SideKind::Symmetry,
            ]),
        };
        assert_eq!(AccumulateFineFlux::decode(&ff.launch()).unwrap(), ff);
        let cm = CorrectInterfaceMass {
            coarse_t: BufferId(1),
            coarse_t1: BufferId(2),
            flux: BufferId(3),
            coarse: layout,
            covered: Rect::new(3, 3, 7, 6),
            kinds: SideKinds::INTERFACES,
        };
        assert_eq!(CorrectInterfaceMass::decode(&cm.launch()).unwrap(), cm);
        let ub = UpdateBoundaryState::new(BufferId(1), BufferId(2), &Amplitude::Sine { period: 400.0 });
        assert_eq!(UpdateBoundaryState::decode(&ub.launch()).unwrap(), ub);
    }

    #[test]
    fn amplitude_factors_follow_their_definitions() {
        let table = [0.0f32, 0.0, 10.0, 1.0, 20.0, 0.5];
        for (kind, parameter, t, want) in [
            (0, 0.0, 7.0, 1.0),
            (1, 100.0, 25.0, 0.25),
            (1, 100.0, 250.0, 1.0),
            (2, 400.0, 100.0, 1.0),
            (3, 0.0, 5.0, 0.5),
            (3, 0.0, 15.0, 0.75),
            (3, 0.0, 99.0, 0.5),
            (3, 0.0, -1.0, 0.0),
        ] {
            let got = amplitude_factor(kind, parameter, &table, t);
            assert!((got - want).abs() < 1e-6, "kind {kind} at t {t}: {got} vs {want}");
        }
    }

    #[test]
    fn the_ring_visits_each_neighbour_beyond_an_interface_once() {
        let covered = Rect::new(3, 4, 7, 6);
        let (i, w) = (SideKind::Interface, SideKind::Wall);
        for (kinds, expected) in [
            ([i, i, i, i], 2 * (4 + 2) + 2 * 2),
            ([w, i, i, i], 2 * (4 + 1) + 2),
            ([i, i, w, SideKind::Symmetry], 2 * 2),
            ([w, w, w, w], 0),
        ] {
            let kinds = SideKinds(kinds);
            let mut seen = std::collections::BTreeSet::new();
            for k in 0..ring_cells(&covered, kinds) {
                let (x, y) = ring_cell(&covered, kinds, k);
                let outside = !covered.contains(x, y);
                let touching = x + 1 >= covered.x0 && x <= covered.x1 && y + 1 >= covered.y0 && y <= covered.y1;
                assert!(outside && touching, "({x},{y}) is not a ring cell");
                let beyond_wall = (x < covered.x0 && !kinds.is_interface(0))
                    || (x >= covered.x1 && !kinds.is_interface(1))
                    || (y < covered.y0 && !kinds.is_interface(2))
                    || (y >= covered.y1 && !kinds.is_interface(3));
                assert!(!beyond_wall, "({x},{y}) lies beyond a wall side");
                assert!(seen.insert((x, y)), "({x},{y}) visited twice");
            }
            assert_eq!(seen.len(), expected, "{kinds:?}");
        }
    }

    #[test]
    fn side_kinds_refuse_an_unknown_code() {
        let mut launch = AccumulateFineFlux {
            fine: BufferId(1),
            flux: BufferId(2),
            layout: Layout {
                nx: 12,
                ny: 12,
                tile: [12, 12],
            },
            kinds: SideKinds::INTERFACES,
        }
        .launch();
        *launch.args.last_mut().unwrap() = Arg::U32(3 << 4);
        let message = AccumulateFineFlux::decode(&launch).unwrap_err().to_string();
        assert!(message.contains("side kind 3"), "{message}");
    }

    #[test]
    fn decoding_refuses_a_foreign_or_short_argument_list() {
        let mut launch = AccumulateExchange {
            f: BufferId(1),
            plane_cells: 1,
            links: BufferId(2),
            n_links: 1,
            interval: BufferId(3),
            window: BufferId(3),
            window_on: false,
        }
        .launch();
        assert!(
            StreamCollide::decode(&launch)
                .unwrap_err()
                .to_string()
                .contains("launch is for")
        );
        launch.args.pop();
        let message = AccumulateExchange::decode(&launch).unwrap_err().to_string();
        assert!(
            message.contains("accumulate_exchange") && message.contains("too few"),
            "{message}"
        );
    }
}
