//! `kernels/lbm.cu`: `stream_collide`, the per-hop update of one patch (pull
//! streaming with boundaries, then TRT collision with Guo forcing),
//! `current -> spare`: its launch struct and CPU reference.
//!
//! What it does not do: no momentum exchange ([`super::exchange`]), no coupling
//! between levels ([`super::refine`]), no update of the inlet factor
//! ([`super::boundary`]).

use crate::config::{Boundary, LevelPhysics};
use crate::device::{Arg, BufferRef, Kernel, Launch};
use crate::domain::geometry::FLAG_FLUID;
use crate::domain::hierarchy::{Layout, Rect};
use crate::domain::order::{inlet_sample, inlet_samples};
use crate::error::{Error, LaunchProblem, Result};
use crate::lattice::{self, C, CS2, OPP, Q, W};

use super::{
    ArgReader, BufferUse, HostViews, KernelArgs, check_patch, par_row_bands, population_bytes, push_layout, push_rect,
    read_cell,
};

/// `stream_collide`: one thread per active cell, row-major over the active region.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamCollide {
    pub src: BufferRef,
    pub dst: BufferRef,
    pub flags: BufferRef,
    /// Wall distances of body links: plane `i` holds, at a fluid cell whose
    /// neighbour `(x, y) - c_i` is solid, the fraction q of that link lying in
    /// fluid. Present: Bouzidi interpolated bounce-back; absent: half-way.
    pub wall_distance: Option<BufferRef>,
    /// Inlet velocities (f32), three per active row, bottom up
    /// ([`inlet_sample`]), scaled by the factor in `boundary_state`; present
    /// exactly when a side is an inlet.
    pub inlet_profile: Option<BufferRef>,
    /// `[u32 interval, f32 inlet factor]`, written by `update_boundary_state`;
    /// present exactly when a side is an inlet.
    pub boundary_state: Option<BufferRef>,
    pub layout: Layout,
    pub active: Rect,
    /// Sides in the order x-min, x-max, y-min, y-max.
    pub boundaries: [Boundary; 4],
    pub wall_velocity: [[f32; 2]; 4],
    pub omega_plus: f32,
    pub omega_minus: f32,
    pub force: [f32; 2],
}

impl StreamCollide {
    /// A whole `nx` x `ny` allocation, row-major, periodic on every side,
    /// without bodies, inlet or force: the benchmark case.
    pub fn periodic(
        src: BufferRef,
        dst: BufferRef,
        flags: BufferRef,
        [nx, ny]: [u32; 2],
        physics: LevelPhysics,
    ) -> Self {
        StreamCollide {
            src,
            dst,
            flags,
            wall_distance: None,
            inlet_profile: None,
            boundary_state: None,
            layout: Layout { nx, ny, tile: [nx, ny] },
            active: Rect::new(0, 0, nx, ny),
            boundaries: [Boundary::Periodic; 4],
            wall_velocity: [[0.0; 2]; 4],
            omega_plus: physics.relaxation.omega_plus(),
            omega_minus: physics.relaxation.omega_minus(),
            force: physics.force,
        }
    }

    fn has_inlet(&self) -> bool {
        self.boundaries.contains(&Boundary::Inlet)
    }
}

impl KernelArgs for StreamCollide {
    const KERNEL: Kernel = Kernel::StreamCollide;
    const PARAMS: &'static [&'static str] = &[
        "src",
        "dst",
        "flags",
        "wall_distance",
        "inlet_profile",
        "boundary_state",
        "nx",
        "ny",
        "tile_x",
        "tile_y",
        "x0",
        "y0",
        "x1",
        "y1",
        "boundary_x_min",
        "boundary_x_max",
        "boundary_y_min",
        "boundary_y_max",
        "wall_x_min_ux",
        "wall_x_min_uy",
        "wall_x_max_ux",
        "wall_x_max_uy",
        "wall_y_min_ux",
        "wall_y_min_uy",
        "wall_y_max_ux",
        "wall_y_max_uy",
        "omega_plus",
        "omega_minus",
        "force_x",
        "force_y",
        "interpolated_walls",
    ];

    fn launch(&self) -> Launch {
        let mut args = vec![
            self.src.into(),
            self.dst.into(),
            self.flags.into(),
            self.wall_distance.into(),
            self.inlet_profile.into(),
            self.boundary_state.into(),
        ];
        push_layout(&mut args, &self.layout);
        push_rect(&mut args, &self.active);
        args.extend(self.boundaries.iter().map(|b| Arg::U32(*b as u32)));
        args.extend(self.wall_velocity.iter().flatten().map(|v| Arg::F32(*v)));
        args.extend([
            Arg::F32(self.omega_plus),
            Arg::F32(self.omega_minus),
            Arg::F32(self.force[0]),
            Arg::F32(self.force[1]),
            Arg::U32(self.wall_distance.is_some() as u32),
        ]);
        Launch::linear(Kernel::StreamCollide, self.active.cells(), args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        let (src, dst, flags) = (r.buffer()?, r.buffer()?, r.buffer()?);
        let wall_distance = r.optional_buffer()?;
        let (inlet_profile, boundary_state) = (r.optional_buffer()?, r.optional_buffer()?);
        let layout = r.layout()?;
        let active = r.rect()?;
        let mut boundaries = [Boundary::Periodic; 4];
        for (side, b) in boundaries.iter_mut().enumerate() {
            let code = r.u32()?;
            *b = Boundary::from_code(code).ok_or(Error::Launch {
                kernel: Self::KERNEL,
                problem: LaunchProblem::ArgValue {
                    param: Self::PARAMS[14 + side],
                    value: code,
                    accepted: "a boundary code 0..=5",
                },
            })?;
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
            boundaries,
            wall_velocity,
            omega_plus: r.f32()?,
            omega_minus: r.f32()?,
            force: [r.f32()?, r.f32()?],
        };
        r.presence("interpolated_walls", wall_distance.is_some())?;
        Ok(decoded)
    }

    fn work_items(&self) -> usize {
        self.active.cells()
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        check_patch(&self.layout, &self.active)?;
        let (a, l) = (self.active, self.layout);
        // An interface side reads one cell beyond the active region.
        let room = [a.x0, l.nx - a.x1, a.y0, l.ny - a.y1];
        for (side, (b, room)) in self.boundaries.iter().zip(room).enumerate() {
            if *b == Boundary::Interface && room == 0 && a.cells() > 0 {
                return Err(LaunchProblem::Shape(format!(
                    "side {side} is an interface but the active region {a} has no band beyond it"
                )));
            }
        }
        for (param, buffer) in [
            ("inlet_profile", self.inlet_profile),
            ("boundary_state", self.boundary_state),
        ] {
            match (self.has_inlet(), buffer) {
                (true, None) => {
                    return Err(LaunchProblem::MissingBuffer {
                        param,
                        why: "a side is an inlet",
                    });
                }
                (false, Some(_)) => {
                    return Err(LaunchProblem::UnexpectedBuffer {
                        param,
                        why: "no side is an inlet, so nothing reads it",
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        let f = population_bytes(&self.layout);
        let mut uses = vec![
            BufferUse::read("src", self.src, f, 4),
            BufferUse::write("dst", self.dst, f, 4),
            BufferUse::read("flags", self.flags, self.layout.plane_cells(), 1),
        ];
        if let Some(q) = self.wall_distance {
            uses.push(BufferUse::read("wall_distance", q, f, 4));
        }
        if let (Some(profile), Some(state)) = (self.inlet_profile, self.boundary_state) {
            uses.push(BufferUse::read(
                "inlet_profile",
                profile,
                inlet_samples(self.active.height()) * 4,
                4,
            ));
            uses.push(BufferUse::read("boundary_state", state, 8, 4));
        }
        uses
    }

    fn run_on_host(&self, views: &mut HostViews) {
        let r = &views.reads;
        let inlet = match self.inlet_profile {
            Some(_) => Inlet {
                profile: r.get("inlet_profile"),
                factor: r.get::<f32>("boundary_state")[1],
            },
            None => Inlet {
                profile: &[],
                factor: 0.0,
            },
        };
        let wall_distance = match self.wall_distance {
            Some(_) => r.get("wall_distance"),
            None => &[],
        };
        let dst = views.writes.get("dst");
        stream_collide(self, r.get("src"), dst, r.get("flags"), wall_distance, &inlet);
    }
}

/// Pull streaming with boundaries, then collision, for every active cell.
/// What an inlet side reads: the velocity shape per active row and the
/// current amplitude factor.
pub struct Inlet<'a> {
    pub profile: &'a [f32],
    pub factor: f32,
}

pub fn stream_collide(
    k: &StreamCollide,
    src: &[f32],
    dst: &mut [f32],
    flags: &[u8],
    wall_distance: &[f32],
    inlet: &Inlet,
) {
    let layout = k.layout;
    let plane = layout.plane_cells();
    let a = k.active;
    // With one tile column the storage is row-major with stride tile[0], so a
    // neighbour is a fixed offset away; cells off the active edge take the
    // general path that handles walls, wrap-around and the ghost band.
    let stride = (layout.tiles_x() == 1).then_some(layout.tile[0] as isize);
    let offsets: Option<[isize; Q]> =
        stride.map(|s| std::array::from_fn(|i| -(C[i][0] as isize + C[i][1] as isize * s)));
    par_row_bands(dst, &layout, |first, rows, band| {
        for y in first.max(a.y0)..(first + rows).min(a.y1) {
            let interior_row = y > a.y0 && y + 1 < a.y1;
            for x in a.x0..a.x1 {
                let index = layout.index(x, y);
                if flags[index] != FLAG_FLUID {
                    band.set(index, &read_cell(src, plane, index));
                    continue;
                }
                let mut f: [f32; Q] = match offsets {
                    Some(offsets) if interior_row && x > a.x0 && x + 1 < a.x1 => std::array::from_fn(|i| {
                        let source = (index as isize + offsets[i]) as usize;
                        if flags[source] != FLAG_FLUID {
                            body_wall(k, src, flags, wall_distance, x, y, i, index, plane)
                        } else {
                            src[i * plane + source]
                        }
                    }),
                    _ => std::array::from_fn(|i| pull(k, src, flags, wall_distance, inlet, x, y, i, index, plane)),
                };
                lattice::collide(&mut f, k.omega_plus, k.omega_minus, k.force);
                band.set(index, &f);
            }
        }
    });
}

/// The population arriving at (x, y) in direction `i`, from the neighbour
/// `(x, y) - c_i` or, where that lies beyond a side of the active region, from
/// the side's rule. At a corner the first matching rule in this order wins:
/// inlet, wall (bounce-back, the y side before the x side), outflow,
/// free-slip, then periodic wrap or ghost.
#[inline]
#[allow(clippy::too_many_arguments)]
fn pull(
    k: &StreamCollide,
    src: &[f32],
    flags: &[u8],
    wall_distance: &[f32],
    inlet: &Inlet,
    x: u32,
    y: u32,
    i: usize,
    index: usize,
    plane: usize,
) -> f32 {
    let a = k.active;
    let mut sx = x as i64 - C[i][0] as i64;
    let mut sy = y as i64 - C[i][1] as i64;
    let side_x = if sx < a.x0 as i64 {
        Some(0)
    } else if sx >= a.x1 as i64 {
        Some(1)
    } else {
        None
    };
    let side_y = if sy < a.y0 as i64 {
        Some(2)
    } else if sy >= a.y1 as i64 {
        Some(3)
    } else {
        None
    };
    let sides = [side_x, side_y];
    // A moving wall or an inlet adds 2 w_i ρ0 (c_i·u_w) / c_s².
    let bounce = |u: [f32; 2]| {
        src[OPP[i] * plane + index] + W[i] * (C[i][0] as f32 * u[0] + C[i][1] as f32 * u[1]) / (0.5 * CS2)
    };
    // At a corner an inlet wins over a wall, so that every row injects exactly
    // its profile's mass flux: with the wall's rule the corner cell would miss
    // a sixth of it, a deficit at the walls of first order in the spacing.
    if sides
        .into_iter()
        .flatten()
        .any(|side| k.boundaries[side] == Boundary::Inlet)
    {
        let u = inlet.profile[inlet_sample(y - a.y0, C[i][1])] * inlet.factor;
        return bounce([u, 0.0]);
    }
    // Between two walls the y side's velocity wins: a lid's two diagonal terms
    // then cancel in the corner cell, so a moving lid adds no mass there.
    if let Some(side) = [side_y, side_x]
        .into_iter()
        .flatten()
        .find(|&side| k.boundaries[side] == Boundary::Wall)
    {
        return bounce(k.wall_velocity[side]);
    }
    if sides
        .into_iter()
        .flatten()
        .any(|side| k.boundaries[side] == Boundary::Outflow)
    {
        return anti_bounce_back(k, src, x, y, i, index, plane);
    }
    // A free-slip side mirrors the direction's normal component: the arriving
    // population left the same row (or column) towards the wall.
    let mut direction = i;
    for (axis, side) in sides.into_iter().enumerate() {
        if let Some(side) = side
            && k.boundaries[side] == Boundary::FreeSlip
        {
            let mut mirrored = C[direction];
            mirrored[axis] = -mirrored[axis];
            direction = C
                .iter()
                .position(|c| *c == mirrored)
                .expect("D2Q9 is closed under mirroring");
            if axis == 0 {
                sx = x as i64;
            } else {
                sy = y as i64;
            }
        }
    }
    if let Some(side) = side_x
        && k.boundaries[side] == Boundary::Periodic
    {
        sx += if side == 0 {
            a.width() as i64
        } else {
            -(a.width() as i64)
        };
    }
    if let Some(side) = side_y
        && k.boundaries[side] == Boundary::Periodic
    {
        sy += if side == 2 {
            a.height() as i64
        } else {
            -(a.height() as i64)
        };
    }
    let source = k.layout.index(sx as u32, sy as u32);
    if flags[source] != FLAG_FLUID {
        body_wall(k, src, flags, wall_distance, x, y, i, index, plane)
    } else {
        src[direction * plane + source]
    }
}

/// The population a body returns into (x, y) along `i`, its neighbour
/// `(x, y) - c_i` being solid: interpolated bounce-back with the link's wall
/// distance when the launch has them, else half-way bounce-back.
#[inline]
#[allow(clippy::too_many_arguments)]
fn body_wall(
    k: &StreamCollide,
    src: &[f32],
    flags: &[u8],
    wall_distance: &[f32],
    x: u32,
    y: u32,
    i: usize,
    index: usize,
    plane: usize,
) -> f32 {
    let q = if k.wall_distance.is_some() {
        wall_distance[i * plane + index]
    } else {
        0.5
    };
    let (bx, by) = (x as i64 + C[i][0] as i64, y as i64 + C[i][1] as i64);
    let a = k.active;
    let behind = (bx >= a.x0 as i64 && by >= a.y0 as i64 && bx < a.x1 as i64 && by < a.y1 as i64)
        .then(|| k.layout.index(bx as u32, by as u32))
        .filter(|b| flags[*b] == FLAG_FLUID);
    bouzidi(src, plane, index, behind, i, q)
}

/// Bouzidi's linear interpolated bounce-back for the population arriving at
/// `index` along `i` from a wall at fraction `q` of the link: for q < 1/2 it
/// interpolates between the leaving populations of the cell and of the fluid
/// cell `behind` it (half-way bounce-back when there is none), for q >= 1/2
/// between the leaving and the cell's own post-collision population along `i`.
/// The weights sum to one, so shifted populations need no correction.
#[inline]
pub fn bouzidi(f: &[f32], plane: usize, index: usize, behind: Option<usize>, i: usize, q: f32) -> f32 {
    let toward = OPP[i];
    let leaving = f[toward * plane + index];
    if q < 0.5 {
        match behind {
            Some(b) => 2.0 * q * leaving + (1.0 - 2.0 * q) * f[toward * plane + b],
            None => leaving,
        }
    } else {
        leaving / (2.0 * q) + (2.0 * q - 1.0) / (2.0 * q) * f[i * plane + index]
    }
}

/// Pressure outlet at rest density, `f_i = -f*_opp(i) + 2 w_i ρ0 (4.5 (c_i·u_b)²
/// − 1.5 u_b²)` in shifted populations, with the boundary velocity `u_b`
/// extrapolated half a cell from the last two cells of the row. It pins the
/// mean pressure, which channel flows need; acoustic waves reflect from it.
#[inline]
fn anti_bounce_back(k: &StreamCollide, src: &[f32], x: u32, y: u32, i: usize, index: usize, plane: usize) -> f32 {
    let reverse = [-k.force[0], -k.force[1]];
    let here = lattice::moments(&read_cell(src, plane, index), reverse);
    let u = if x > k.active.x0 {
        let upstream = lattice::moments(&read_cell(src, plane, k.layout.index(x - 1, y)), reverse);
        [1.5 * here.ux - 0.5 * upstream.ux, 1.5 * here.uy - 0.5 * upstream.uy]
    } else {
        [here.ux, here.uy]
    };
    let cu = C[i][0] as f32 * u[0] + C[i][1] as f32 * u[1];
    -src[OPP[i] * plane + index] + 2.0 * W[i] * (4.5 * cu * cu - 1.5 * (u[0] * u[0] + u[1] * u[1]))
}
