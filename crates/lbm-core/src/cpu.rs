//! `CpuDriver`: every [`Kernel`] executed in Rust over host memory.
//!
//! It is the default backend without a GPU and the numerical reference that GPU
//! results are compared against, so each kernel here is written for clarity and
//! determinism first: every cell's arithmetic is independent of the storage tile
//! and of the thread that computes it, and reductions run in link order. Rows are
//! spread over threads with rayon. Work "enqueued" here runs at once, so
//! `synchronize` never fails; this driver does not simulate asynchronous errors
//! (the mock driver does).

use rayon::prelude::*;

use crate::device::{BufferId, Driver, Kernel, Launch, live_buffer, live_buffer_mut};
use crate::error::{Error, Result};
use crate::hierarchy::{GHOST, Layout, Rect};
use crate::lattice::{self, C, CS2, Moments, OPP, Q, W};
use crate::launch::{
    AccumulateExchange, AccumulateFineFlux, CorrectInterfaceMass, EXCHANGE_WORDS, Edge, FillGhost, LINK_WORDS, NO_CELL,
    PatchSides, RestrictToParent, SideKind, StreamCollide, UpdateBoundaryState, amplitude_factor, fine_covered,
    inlet_sample, inlet_samples, ring_cell, ring_cells,
};

/// Cell flag values shared with `kernels/common.cuh`.
pub const FLAG_FLUID: u8 = 0;
pub const FLAG_SOLID: u8 = 1;

struct HostBuffer {
    label: String,
    /// u64 words so that any element type up to f64 can be viewed in place.
    words: Vec<u64>,
    bytes: usize,
}

impl HostBuffer {
    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.bytes]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.bytes]
    }
    fn f32s(&self) -> &[f32] {
        &bytemuck::cast_slice(&self.words)[..self.bytes / 4]
    }
    fn f32s_mut(&mut self) -> &mut [f32] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.bytes / 4]
    }
}

/// Host-memory backend; see the module documentation.
#[derive(Default)]
pub struct CpuDriver {
    buffers: Vec<Option<HostBuffer>>,
}

impl CpuDriver {
    pub fn new() -> Self {
        CpuDriver::default()
    }

    fn get(&self, id: BufferId) -> Result<&HostBuffer> {
        live_buffer(&self.buffers, id, "cpu")
    }

    fn get_mut(&mut self, id: BufferId) -> Result<&mut HostBuffer> {
        live_buffer_mut(&mut self.buffers, id, "cpu")
    }

    /// Takes a buffer out for writing while others are read; [`Self::put`] returns it.
    fn take(&mut self, id: BufferId) -> Result<HostBuffer> {
        self.get(id)?;
        Ok(self.buffers[id.0 as usize].take().expect("checked above"))
    }

    fn put(&mut self, id: BufferId, buffer: HostBuffer) {
        self.buffers[id.0 as usize] = Some(buffer);
    }

    /// Runs `body` with `dst` writable and every other buffer readable.
    fn with_dst<T>(&mut self, dst: BufferId, body: impl FnOnce(&Self, &mut HostBuffer) -> Result<T>) -> Result<T> {
        let mut out = self.take(dst)?;
        let result = body(self, &mut out);
        self.put(dst, out);
        result
    }
}

fn check_len(kernel: Kernel, what: &str, have: usize, need: usize) -> Result<()> {
    if have < need {
        return Err(Error::LaunchArgs {
            kernel: kernel.cuda_name().into(),
            reason: format!("{what} holds {have} elements, the launch needs {need}"),
        });
    }
    Ok(())
}

impl Driver for CpuDriver {
    fn backend(&self) -> &'static str {
        "cpu"
    }

    fn alloc(&mut self, label: &str, bytes: usize) -> Result<BufferId> {
        let id = BufferId(self.buffers.len() as u32);
        self.buffers.push(Some(HostBuffer {
            label: label.to_owned(),
            words: vec![0; bytes.div_ceil(8)],
            bytes,
        }));
        Ok(id)
    }

    fn free(&mut self, buffer: BufferId) -> Result<()> {
        self.get(buffer)?;
        self.buffers[buffer.0 as usize] = None;
        Ok(())
    }

    fn upload(&mut self, buffer: BufferId, byte_offset: usize, data: &[u8]) -> Result<()> {
        let b = self.get_mut(buffer)?;
        let end = byte_offset + data.len();
        if end > b.bytes {
            return Err(out_of_range("upload", &b.label, end, b.bytes));
        }
        b.bytes_mut()[byte_offset..end].copy_from_slice(data);
        Ok(())
    }

    fn download(&mut self, buffer: BufferId, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        let b = self.get(buffer)?;
        let end = byte_offset + out.len();
        if end > b.bytes {
            return Err(out_of_range("download", &b.label, end, b.bytes));
        }
        out.copy_from_slice(&b.bytes()[byte_offset..end]);
        Ok(())
    }

    fn memset_async(&mut self, buffer: BufferId, byte_offset: usize, bytes: usize, value: u8) -> Result<()> {
        let b = self.get_mut(buffer)?;
        let end = byte_offset + bytes;
        if end > b.bytes {
            return Err(out_of_range("memset", &b.label, end, b.bytes));
        }
        b.bytes_mut()[byte_offset..end].fill(value);
        Ok(())
    }

    fn copy_async(
        &mut self,
        src: BufferId,
        src_offset: usize,
        dst: BufferId,
        dst_offset: usize,
        bytes: usize,
    ) -> Result<()> {
        if src == dst {
            let b = self.get_mut(src)?;
            let end = src_offset.max(dst_offset) + bytes;
            if end > b.bytes {
                return Err(out_of_range("copy", &b.label, end, b.bytes));
            }
            b.bytes_mut().copy_within(src_offset..src_offset + bytes, dst_offset);
            return Ok(());
        }
        self.with_dst(dst, |me, out| {
            let s = me.get(src)?;
            if src_offset + bytes > s.bytes {
                return Err(out_of_range("copy source", &s.label, src_offset + bytes, s.bytes));
            }
            if dst_offset + bytes > out.bytes {
                return Err(out_of_range(
                    "copy destination",
                    &out.label,
                    dst_offset + bytes,
                    out.bytes,
                ));
            }
            out.bytes_mut()[dst_offset..dst_offset + bytes].copy_from_slice(&s.bytes()[src_offset..src_offset + bytes]);
            Ok(())
        })
    }

    fn launch(&mut self, launch: &Launch) -> Result<()> {
        match launch.kernel {
            Kernel::StreamCollide => {
                let k = StreamCollide::decode(launch)?;
                self.with_dst(k.dst, |me, dst| {
                    let src = me.get(k.src)?.f32s();
                    let flags = me.get(k.flags)?.bytes();
                    let plane = k.layout.plane_cells();
                    check_len(launch.kernel, "src", src.len(), Q * plane)?;
                    check_len(launch.kernel, "dst", dst.f32s().len(), Q * plane)?;
                    check_len(launch.kernel, "flags", flags.len(), plane)?;
                    let wall_distance = if k.interpolated_walls {
                        let q = me.get(k.wall_distance)?.f32s();
                        check_len(launch.kernel, "wall_distance", q.len(), Q * plane)?;
                        q
                    } else {
                        &[]
                    };
                    let inlet = if k.edges.contains(&Edge::Inlet) {
                        let profile = me.get(k.inlet_profile)?.f32s();
                        let state = me.get(k.boundary_state)?.f32s();
                        check_len(
                            launch.kernel,
                            "inlet_profile",
                            profile.len(),
                            inlet_samples(k.active.height()),
                        )?;
                        check_len(launch.kernel, "boundary_state", state.len(), 2)?;
                        Inlet {
                            profile,
                            factor: state[1],
                        }
                    } else {
                        Inlet {
                            profile: &[],
                            factor: 0.0,
                        }
                    };
                    stream_collide(&k, src, dst.f32s_mut(), flags, wall_distance, &inlet);
                    Ok(())
                })
            }
            Kernel::FillGhost => {
                let k = FillGhost::decode(launch)?;
                self.with_dst(k.fine_dst, |me, dst| {
                    let t0 = me.get(k.coarse_t)?.f32s();
                    let t1 = me.get(k.coarse_t1)?.f32s();
                    check_len(
                        launch.kernel,
                        "coarse",
                        t0.len().min(t1.len()),
                        Q * k.coarse.plane_cells(),
                    )?;
                    check_len(launch.kernel, "fine", dst.f32s().len(), Q * k.fine.plane_cells())?;
                    fill_ghost(&k, t0, t1, dst.f32s_mut());
                    Ok(())
                })
            }
            Kernel::RestrictToParent => {
                let k = RestrictToParent::decode(launch)?;
                self.with_dst(k.coarse_dst, |me, dst| {
                    let fine = me.get(k.fine_src)?.f32s();
                    check_len(launch.kernel, "fine", fine.len(), Q * k.fine.plane_cells())?;
                    check_len(launch.kernel, "coarse", dst.f32s().len(), Q * k.coarse.plane_cells())?;
                    restrict_to_parent(&k, fine, dst.f32s_mut());
                    Ok(())
                })
            }
            Kernel::AccumulateFineFlux => {
                let k = AccumulateFineFlux::decode(launch)?;
                self.with_dst(k.flux, |me, flux| {
                    let fine = me.get(k.fine)?.f32s();
                    let covered = fine_covered(&k.layout);
                    check_len(launch.kernel, "fine", fine.len(), Q * k.layout.plane_cells())?;
                    check_len(launch.kernel, "flux", flux.f32s().len(), ring_cells(&covered, k.kinds))?;
                    accumulate_fine_flux(&k, fine, flux.f32s_mut());
                    Ok(())
                })
            }
            Kernel::CorrectInterfaceMass => {
                let k = CorrectInterfaceMass::decode(launch)?;
                let mut flux = self.take(k.flux)?;
                let result = self.with_dst(k.coarse_t1, |me, t1| {
                    let t0 = me.get(k.coarse_t)?.f32s();
                    let plane = k.coarse.plane_cells();
                    check_len(launch.kernel, "coarse", t0.len().min(t1.f32s().len()), Q * plane)?;
                    check_len(
                        launch.kernel,
                        "flux",
                        flux.f32s().len(),
                        ring_cells(&k.covered, k.kinds),
                    )?;
                    correct_interface_mass(&k, t0, t1.f32s_mut(), flux.f32s_mut());
                    Ok(())
                });
                self.put(k.flux, flux);
                result
            }
            Kernel::UpdateBoundaryState => {
                let k = UpdateBoundaryState::decode(launch)?;
                let table: Vec<f32> = self.get(k.table)?.f32s().to_vec();
                check_len(launch.kernel, "table", table.len(), 2 * k.table_points as usize)?;
                let state = self.get_mut(k.state)?;
                check_len(launch.kernel, "state", state.f32s().len(), 2)?;
                update_boundary_state(&k, &table[..2 * k.table_points as usize], state.f32s_mut());
                Ok(())
            }
            Kernel::AccumulateExchange => {
                let k = AccumulateExchange::decode(launch)?;
                let mut window = if k.window_on {
                    if k.window == k.interval {
                        return Err(Error::LaunchArgs {
                            kernel: launch.kernel.cuda_name().into(),
                            reason: "an open window needs its own accumulator".into(),
                        });
                    }
                    Some(self.take(k.window)?)
                } else {
                    None
                };
                let result = self.with_dst(k.interval, |me, interval| {
                    let f = me.get(k.f)?.f32s();
                    let links: &[u32] = bytemuck::cast_slice(me.get(k.links)?.bytes());
                    check_len(launch.kernel, "f", f.len(), Q * k.plane_cells as usize)?;
                    check_len(launch.kernel, "links", links.len(), LINK_WORDS * k.n_links as usize)?;
                    let interval: &mut [f64] = bytemuck::cast_slice_mut(&mut interval.words);
                    let window = window
                        .as_mut()
                        .map(|w| bytemuck::cast_slice_mut::<u64, f64>(&mut w.words));
                    accumulate_exchange(&k, f, links, interval, window);
                    Ok(())
                });
                if let Some(w) = window {
                    self.put(k.window, w);
                }
                result
            }
        }
    }

    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }

    fn free_memory(&self) -> Result<u64> {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        Ok(kib * 1024)
    }
}

fn out_of_range(operation: &str, label: &str, end: usize, size: usize) -> Error {
    Error::Device {
        backend: "cpu".into(),
        operation: operation.into(),
        message: format!("byte range ends at {end}, past the {size} bytes of `{label}`"),
    }
}

/// Mutable views of the nine population planes, restricted to one band of rows
/// that is contiguous in every plane; `offset` is the band's first storage index.
struct BandPlanes<'a> {
    planes: Vec<&'a mut [f32]>,
    offset: usize,
}

impl BandPlanes<'_> {
    #[inline]
    fn set(&mut self, index: usize, f: &[f32; Q]) {
        for (plane, value) in self.planes.iter_mut().zip(f) {
            plane[index - self.offset] = *value;
        }
    }
}

/// Splits the nine planes of `dst` into bands of rows that are contiguous in
/// storage (one row when tiles span the whole width, one tile row otherwise) and
/// runs `body(first_row, rows, band)` on each band in parallel.
fn par_row_bands(dst: &mut [f32], layout: &Layout, body: impl Fn(u32, u32, &mut BandPlanes) + Sync) {
    let plane = layout.plane_cells();
    let band_rows = if layout.tiles_x() == 1 { 1 } else { layout.tile[1] };
    let band_len = band_rows as usize * layout.tiles_x() as usize * layout.tile[0] as usize;
    let n_bands = layout.ny.div_ceil(band_rows) as usize;
    let mut bands: Vec<BandPlanes> = (0..n_bands)
        .map(|b| BandPlanes {
            planes: Vec::with_capacity(Q),
            offset: b * band_len,
        })
        .collect();
    for p in dst[..Q * plane].chunks_mut(plane) {
        for (band, chunk) in bands.iter_mut().zip(p.chunks_mut(band_len)) {
            band.planes.push(chunk);
        }
    }
    bands.into_par_iter().enumerate().for_each(|(b, mut band)| {
        let first = b as u32 * band_rows;
        body(first, band_rows.min(layout.ny - first), &mut band);
    });
}

#[inline]
fn read_cell(f: &[f32], plane: usize, index: usize) -> [f32; Q] {
    std::array::from_fn(|i| f[i * plane + index])
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
    if sides.into_iter().flatten().any(|side| k.edges[side] == Edge::Inlet) {
        let u = inlet.profile[inlet_sample(y - a.y0, C[i][1])] * inlet.factor;
        return bounce([u, 0.0]);
    }
    // Between two walls the y side's velocity wins: a lid's two diagonal terms
    // then cancel in the corner cell, so a moving lid adds no mass there.
    if let Some(side) = [side_y, side_x]
        .into_iter()
        .flatten()
        .find(|&side| k.edges[side] == Edge::Wall)
    {
        return bounce(k.wall_velocity[side]);
    }
    if sides.into_iter().flatten().any(|side| k.edges[side] == Edge::Outflow) {
        return anti_bounce_back(k, src, x, y, i, index, plane);
    }
    // A free-slip side mirrors the direction's normal component: the arriving
    // population left the same row (or column) towards the wall.
    let mut direction = i;
    for (axis, side) in sides.into_iter().enumerate() {
        if let Some(side) = side
            && k.edges[side] == Edge::Symmetry
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
        && k.edges[side] == Edge::Periodic
    {
        sx += if side == 0 {
            a.width() as i64
        } else {
            -(a.width() as i64)
        };
    }
    if let Some(side) = side_y
        && k.edges[side] == Edge::Periodic
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
    let q = if k.interpolated_walls {
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

/// Advances the interval counter of `state` (`[u32 interval, f32 factor]`) and
/// stores the inlet factor for the end of the new interval.
pub fn update_boundary_state(k: &UpdateBoundaryState, table: &[f32], state: &mut [f32]) {
    let interval = state[0].to_bits() + 1;
    state[0] = f32::from_bits(interval);
    state[1] = amplitude_factor(k.kind, k.parameter, table, interval as f32);
}

/// The cell a coupling stencil reads for cell (x, y) of a patch whose active
/// region is `active`: (x, y) itself, or beyond a wall side of `sides` its
/// mirror image in that side, with the sides crossed (x first, then y) for
/// [`reflect`].
#[inline]
pub fn mirrored_cell(sides: &PatchSides, active: &Rect, x: i32, y: i32) -> (u32, u32, [Option<usize>; 2]) {
    let axis = |c: i32, lo: u32, hi: u32, low_side: usize| {
        let (lo, hi) = (lo as i32, hi as i32);
        if c < lo && !sides.kinds.is_interface(low_side) {
            ((2 * lo - 1 - c) as u32, Some(low_side))
        } else if c >= hi && !sides.kinds.is_interface(low_side + 1) {
            ((2 * hi - 1 - c) as u32, Some(low_side + 1))
        } else {
            (c as u32, None)
        }
    };
    let (mx, crossed_x) = axis(x, active.x0, active.x1, 0);
    let (my, crossed_y) = axis(y, active.y0, active.y1, 2);
    (mx, my, [crossed_x, crossed_y])
}

/// The moments of a mirror image in wall side `side`: the same density, the
/// normal velocity reversed and the tangential one reflected about the wall's
/// (a no-slip wall) or kept (a free-slip wall).
#[inline]
pub fn reflect(m: Moments, sides: &PatchSides, side: usize) -> Moments {
    let no_slip = sides.kinds.0[side] == SideKind::Wall;
    let along = |u: f32| if no_slip { 2.0 * sides.tangential[side] - u } else { u };
    if side < 2 {
        Moments {
            delta_rho: m.delta_rho,
            ux: -m.ux,
            uy: along(m.uy),
        }
    } else {
        Moments {
            delta_rho: m.delta_rho,
            ux: along(m.ux),
            uy: -m.uy,
        }
    }
}

/// The moments of a stencil cell read at its mirror image: reflected in each
/// side [`mirrored_cell`] reported crossing, x first.
#[inline]
pub fn reflect_crossed(m: Moments, sides: &PatchSides, crossed: [Option<usize>; 2]) -> Moments {
    crossed.into_iter().flatten().fold(m, |m, side| reflect(m, sides, side))
}

/// Mixed-in-time moments of a parent cell, with the physical velocity (the
/// post-collision momentum minus half the force); beyond a wall side, those of
/// its mirror image.
#[inline]
fn parent_moments(k: &FillGhost, t0: &[f32], t1: &[f32], x: i32, y: i32) -> Moments {
    let (x, y, crossed) = mirrored_cell(&k.sides, &k.coarse_active, x, y);
    let plane = k.coarse.plane_cells();
    let index = k.coarse.index(x, y);
    let f: [f32; Q] = std::array::from_fn(|i| {
        let a = t0[i * plane + index];
        let b = t1[i * plane + index];
        a + k.alpha * (b - a)
    });
    let m = lattice::moments(&f, [-k.coarse_force[0], -k.coarse_force[1]]);
    reflect_crossed(m, &k.sides, crossed)
}

/// Coarse-to-fine coupling of one ghost-band cell: density and velocity
/// interpolated bicubically from the parent, gradients of velocity and momentum
/// flux by central differences there, all time-interpolated by `alpha`, and
/// rebuilt as fine post-collision populations with the fine τ⁺, τ⁻. Gradients
/// are halved because the fine lattice unit of length is half the parent's.
/// Band cells beyond a wall side are left as they are: nothing reads them.
pub fn fill_ghost(k: &FillGhost, t0: &[f32], t1: &[f32], fine: &mut [f32]) {
    let fine_plane = k.fine.plane_cells();
    // Each parent cell feeds up to sixteen ghost cells' stencils: take its
    // moments once (the same arithmetic as per use, so the same bits as the
    // device, which does recompute them), over the parent cells under the fine
    // allocation plus the two-cell reach of the stencil. Only the frame that
    // the band's stencils reach is needed: two cells of reach, the band's
    // GHOST / 2 cells and two more, from each side; the interior stays unset.
    let origin = k.active_offset.map(|o| o as i32 - GHOST as i32);
    let size = [k.fine.nx / 2 + 4, k.fine.ny / 2 + 4];
    let frame = (GHOST / 2 + 4) as i32;
    let in_frame =
        |i: i32, j: i32| i < frame || j < frame || i >= size[0] as i32 - frame || j >= size[1] as i32 - frame;
    let parent: Vec<Moments> = (0..size[1] as i32)
        .into_par_iter()
        .flat_map_iter(|j| (0..size[0] as i32).map(move |i| (i, j)))
        .map(|(i, j)| {
            if in_frame(i, j) {
                parent_moments(k, t0, t1, origin[0] + i, origin[1] + j)
            } else {
                Moments::default()
            }
        })
        .collect();
    let cells: Vec<(usize, [f32; Q])> = (0..FillGhost::band_cells(&k.fine))
        .into_par_iter()
        .filter_map(|cell| {
            let (fx, fy) = band_cell(&k.fine, GHOST, cell);
            (!beyond_wall(&k.fine, &k.sides, fx, fy)).then(|| {
                (
                    k.fine.index(fx, fy),
                    ghost_populations(k, &parent, origin, size[0], fx, fy),
                )
            })
        })
        .collect();
    for (index, post) in cells {
        for (i, value) in post.iter().enumerate() {
            fine[i * fine_plane + index] = *value;
        }
    }
}

/// Whether allocation cell (fx, fy) lies in the ghost band beyond a wall side
/// of the patch, where the fine level applies the wall's rule instead.
#[inline]
pub fn beyond_wall(layout: &Layout, sides: &PatchSides, fx: u32, fy: u32) -> bool {
    let walled = |side: usize| !sides.kinds.is_interface(side);
    (fx < GHOST && walled(0))
        || (fx >= layout.nx - GHOST && walled(1))
        || (fy < GHOST && walled(2))
        || (fy >= layout.ny - GHOST && walled(3))
}

/// The fine post-collision populations of ghost cell (fx, fy) from the parent
/// moments `parent` (row-major, `width` wide, starting at parent cell `origin`).
fn ghost_populations(k: &FillGhost, parent: &[Moments], origin: [i32; 2], width: u32, fx: u32, fy: u32) -> [f32; Q] {
    // The fine allocation starts GHOST / 2 parent cells before its active region.
    let half = (GHOST / 2) as i32;
    let px = (k.active_offset[0] as i32 - half) as f32 + (fx as f32 + 0.5) * 0.5 - 0.5;
    let py = (k.active_offset[1] as i32 - half) as f32 + (fy as f32 + 0.5) * 0.5 - 0.5;
    let (x0, y0) = (px.floor() as i32, py.floor() as i32);
    let (wx, wy) = (px - x0 as f32, py - y0 as f32);
    // Moments on the 4x4 parent stencil around the four interpolation points.
    let m: [[Moments; 4]; 4] = std::array::from_fn(|j| {
        std::array::from_fn(|i| {
            let (x, y) = (x0 + i as i32 - 1 - origin[0], y0 + j as i32 - 1 - origin[1]);
            parent[(y as u32 * width + x as u32) as usize]
        })
    });
    // Density and velocity: bicubic (4-point Lagrange in each direction),
    // because bilinear interpolation damps every mode a little at each of
    // the many fills and that adds up to visible extra dissipation.
    let (lx, ly) = (lagrange4(wx), lagrange4(wy));
    let mut acc = [0.0f32; 3];
    for (j, weight_y) in ly.iter().enumerate() {
        for (i, weight_x) in lx.iter().enumerate() {
            let w = weight_x * weight_y;
            let c = m[j][i];
            for (slot, value) in acc.iter_mut().zip([c.delta_rho, c.ux, c.uy]) {
                *slot += w * value;
            }
        }
    }
    // Gradients: central differences at the four inner points, bilinear
    // between them; they only enter the small non-equilibrium part.
    let mut gradients = [[0.0f32; GRADIENT_FIELDS]; 2];
    let mut curvature = [[0.0f32; 3]; 2];
    for (dj, weight_y) in [(0usize, 1.0 - wy), (1, wy)] {
        for (di, weight_x) in [(0usize, 1.0 - wx), (1, wx)] {
            let (i, j) = (di + 1, dj + 1);
            let w = weight_x * weight_y;
            let [d_dx, d_dy] = &mut gradients;
            for (f, (gx, gy)) in d_dx.iter_mut().zip(d_dy.iter_mut()).enumerate() {
                *gx += w * 0.5 * (gradient_field(&m[j][i + 1], f) - gradient_field(&m[j][i - 1], f));
                *gy += w * 0.5 * (gradient_field(&m[j + 1][i], f) - gradient_field(&m[j - 1][i], f));
            }
            // Curvature of the velocity: second differences, likewise.
            for (component, d2) in curvature.iter_mut().enumerate() {
                let u = |jj: usize, ii: usize| gradient_field(&m[jj][ii], component);
                d2[0] += w * (u(j, i + 1) - 2.0 * u(j, i) + u(j, i - 1));
                d2[1] += w * (u(j + 1, i) - 2.0 * u(j, i) + u(j - 1, i));
                d2[2] += w * 0.25 * ((u(j + 1, i + 1) - u(j + 1, i - 1)) - (u(j - 1, i + 1) - u(j - 1, i - 1)));
            }
        }
    }
    let [delta_rho, ux, uy] = acc;
    let fine_force = [0.5 * k.coarse_force[0], 0.5 * k.coarse_force[1]];
    // One fine lattice unit of length is half the parent's: first derivatives
    // halve, second derivatives quarter.
    rebuild_post_collision(
        delta_rho,
        [ux + 0.5 * fine_force[0], uy + 0.5 * fine_force[1]],
        [k.tau_plus, k.tau_minus],
        gradients.map(|g| g.map(|v| 0.5 * v)),
        curvature.map(|c| c.map(|v| 0.25 * v)),
    )
}

/// Weights of the 4-point Lagrange interpolation at `t` in [0, 1] between the
/// second and third of four equally spaced points.
#[inline]
pub fn lagrange4(t: f32) -> [f32; 4] {
    [
        -t * (t - 1.0) * (t - 2.0) / 6.0,
        (t + 1.0) * (t - 1.0) * (t - 2.0) / 2.0,
        -(t + 1.0) * t * (t - 2.0) / 2.0,
        (t + 1.0) * t * (t - 1.0) / 6.0,
    ]
}

/// Allocation coordinates of ghost-band cell `cell`: bottom rows, top rows, then
/// the left and right columns between them (the order kernels/refine.cu uses).
pub fn band_cell(layout: &Layout, ghost: u32, cell: usize) -> (u32, u32) {
    let cell = cell as u32;
    let strip = ghost * layout.nx;
    if cell < strip {
        (cell % layout.nx, cell / layout.nx)
    } else if cell < 2 * strip {
        let c = cell - strip;
        (c % layout.nx, layout.ny - ghost + c / layout.nx)
    } else {
        let c = cell - 2 * strip;
        let row = ghost + c / (2 * ghost);
        let col = c % (2 * ghost);
        let x = if col < ghost { col } else { layout.nx - 2 * ghost + col };
        (x, row)
    }
}

/// Fields whose gradients rebuild the non-equilibrium part: `u_x`, `u_y` and
/// the momentum flux `u_x u_x`, `u_y u_y`, `u_x u_y` (ρ0 = 1).
const GRADIENT_FIELDS: usize = 5;

#[inline]
fn gradient_field(m: &Moments, field: usize) -> f32 {
    match field {
        0 => m.ux,
        1 => m.uy,
        2 => m.ux * m.ux,
        3 => m.uy * m.uy,
        _ => m.ux * m.uy,
    }
}

/// Post-collision populations for given moments, gradients (`[d/dx, d/dy]` of
/// the [`gradient_field`]s) and velocity curvature (`[∂xx, ∂yy, ∂xy]` of `u_x`,
/// `u_y`), all in lattice units of the target level: equilibrium plus the
/// non-equilibrium parts after one relaxation, the even (strain) part with τ⁺
/// and the odd (momentum-flux and curvature) parts with τ⁻.
#[inline]
fn rebuild_post_collision(
    delta_rho: f32,
    u: [f32; 2],
    [tau_plus, tau_minus]: [f32; 2],
    [d_dx, d_dy]: [[f32; GRADIENT_FIELDS]; 2],
    curvature: [[f32; 3]; 2],
) -> [f32; Q] {
    let m = Moments {
        delta_rho,
        ux: u[0],
        uy: u[1],
    };
    let feq = lattice::equilibrium(m);
    let strain = [d_dx[0], d_dy[1], 0.5 * (d_dy[0] + d_dx[1])];
    let even = lattice::non_equilibrium(tau_plus, strain);
    let odd = lattice::non_equilibrium_odd(tau_minus, [[d_dx[2], d_dx[3], d_dx[4]], [d_dy[2], d_dy[3], d_dy[4]]]);
    let curved = lattice::non_equilibrium_odd_curvature(tau_plus, tau_minus, curvature);
    let (keep_even, keep_odd) = (1.0 - 1.0 / tau_plus, 1.0 - 1.0 / tau_minus);
    std::array::from_fn(|i| feq[i] + keep_even * even[i] + keep_odd * (odd[i] + curved[i]))
}

/// Weights of the 4-point Lagrange interpolation at the midpoint, `lagrange4(0.5)`.
const CENTRE4: [f32; 4] = [-1.0 / 16.0, 9.0 / 16.0, 9.0 / 16.0, -1.0 / 16.0];

/// Fine-to-coarse coupling of every covered parent cell: the mass- and
/// momentum-weighted average of its 2x2 fine cells, with the gradients of that
/// block doubled into parent lattice units and rebuilt with the parent's τ⁺, τ⁻.
pub fn restrict_to_parent(k: &RestrictToParent, fine: &[f32], coarse: &mut [f32]) {
    let fine_plane = k.fine.plane_cells();
    let fine_force = [0.5 * k.coarse_force[0], 0.5 * k.coarse_force[1]];
    let cov = k.covered;
    let g = k.fine_active_origin;
    let fine_active = Rect::new(g, g, k.fine.nx - g, k.fine.ny - g);
    // Each fine cell feeds up to sixteen parent cells' stencils: take the
    // moments of the covered fine cells and the ring around them once (the
    // same arithmetic as per use, so the same bits as the device, which does
    // recompute them), row-major from fine cell (g - 1, g - 1).
    let reach = [2 * cov.width() + 2, 2 * cov.height() + 2];
    let moments: Vec<Moments> = (0..reach[1])
        .into_par_iter()
        .flat_map_iter(|j| (0..reach[0]).map(move |i| (i, j)))
        .map(|(i, j)| {
            let index = k.fine.index(g - 1 + i, g - 1 + j);
            lattice::moments(&read_cell(fine, fine_plane, index), [-fine_force[0], -fine_force[1]])
        })
        .collect();
    par_row_bands(coarse, &k.coarse, |first, rows, band| {
        for cy in first.max(cov.y0)..(first + rows).min(cov.y1) {
            for cx in cov.x0..cov.x1 {
                let fx0 = k.fine_active_origin + 2 * (cx - cov.x0);
                let fy0 = k.fine_active_origin + 2 * (cy - cov.y0);
                // The 2x2 block and the ring of fine cells around it, for the
                // curvature; at an interface that ring reaches into the ghost
                // band, which holds the last fill (half a fine hop old), at a
                // wall it reads mirror images.
                let g: [[Moments; 4]; 4] = std::array::from_fn(|dy| {
                    std::array::from_fn(|dx| {
                        let (x, y) = ((fx0 + dx as u32) as i32 - 1, (fy0 + dy as u32) as i32 - 1);
                        let (x, y, crossed) = mirrored_cell(&k.sides, &fine_active, x, y);
                        let m = moments[((y + 1 - g) * reach[0] + (x + 1 - g)) as usize];
                        reflect_crossed(m, &k.sides, crossed)
                    })
                });
                let m = [[g[1][1], g[1][2]], [g[2][1], g[2][2]]];
                // Density and momentum: cubic interpolation to the block centre
                // over the 4x4 stencil; the plain 2x2 average smooths every mode
                // a little at each restriction, which adds up at the interface.
                let mut sums = [0.0f32; 3];
                for (dy, wy) in CENTRE4.iter().enumerate() {
                    for (dx, wx) in CENTRE4.iter().enumerate() {
                        let c = g[dy][dx];
                        let w = wx * wy;
                        for (sum, value) in sums.iter_mut().zip([c.delta_rho, c.ux, c.uy]) {
                            *sum += w * value;
                        }
                    }
                }
                let [delta_rho, ux, uy] = sums;
                // Differences across the 2x2 block are centred on the parent cell;
                // one fine spacing is half a parent spacing, hence no 1/2 here.
                let v = |dy: usize, dx: usize, f: usize| gradient_field(&m[dy][dx], f);
                let gradients = [
                    std::array::from_fn(|f| (v(0, 1, f) + v(1, 1, f)) - (v(0, 0, f) + v(1, 0, f))),
                    std::array::from_fn(|f| (v(1, 0, f) + v(1, 1, f)) - (v(0, 0, f) + v(0, 1, f))),
                ];
                // Second differences centred on the block: each row's
                // `u0 - u1 - u2 + u3` is twice the fine second derivative, so the
                // sum over the two middle rows is four times it, which is the
                // second derivative in parent lattice units; the mixed one is
                // one fine difference of differences, times four.
                let curvature: [[f32; 3]; 2] = std::array::from_fn(|component| {
                    let u = |dy: usize, dx: usize| gradient_field(&g[dy][dx], component);
                    let d2x = (u(1, 0) - u(1, 1) - u(1, 2) + u(1, 3)) + (u(2, 0) - u(2, 1) - u(2, 2) + u(2, 3));
                    let d2y = (u(0, 1) - u(1, 1) - u(2, 1) + u(3, 1)) + (u(0, 2) - u(1, 2) - u(2, 2) + u(3, 2));
                    let dxy = (u(2, 2) - u(2, 1)) - (u(1, 2) - u(1, 1));
                    [d2x, d2y, 4.0 * dxy]
                });
                let post = rebuild_post_collision(
                    delta_rho,
                    [ux + 0.5 * k.coarse_force[0], uy + 0.5 * k.coarse_force[1]],
                    [k.tau_plus, k.tau_minus],
                    gradients,
                    curvature,
                );
                band.set(k.coarse.index(cx, cy), &post);
            }
        }
    });
}

/// Mass-flux bookkeeping of one fine hop at the coarse-fine interface.
///
/// For every ghost cell `g` of a ring cell and every direction `j` with
/// `g + c_j` active, the fine hop moves `f_j(g)` in and `f_opp(j)(g + c_j)` out;
/// a quarter (the fine cell's area in parent cells) of the difference is added
/// to the ring cell's slot. In and out directions pair up with equal weights, so
/// the shifted populations give the difference without cancellation error.
pub fn accumulate_fine_flux(k: &AccumulateFineFlux, fine: &[f32], flux: &mut [f32]) {
    let layout = k.layout;
    let plane = layout.plane_cells();
    let covered = fine_covered(&layout);
    let active = Rect::new(GHOST, GHOST, layout.nx - GHOST, layout.ny - GHOST);
    for (slot, value) in flux.iter_mut().enumerate().take(ring_cells(&covered, k.kinds)) {
        let (cx, cy) = ring_cell(&covered, k.kinds, slot);
        let mut net = 0.0f32;
        for (a, b) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            let (gx, gy) = (2 * cx + a, 2 * cy + b);
            let g = layout.index(gx, gy);
            for j in 1..Q {
                let (nx, ny) = (gx as i64 + C[j][0] as i64, gy as i64 + C[j][1] as i64);
                if nx < 0 || ny < 0 || !active.contains(nx as u32, ny as u32) {
                    continue;
                }
                let n = layout.index(nx as u32, ny as u32);
                net += fine[j * plane + g] - fine[OPP[j] * plane + n];
            }
        }
        *value += 0.25 * net;
    }
}

/// Reflux at the coarse-fine interface. Over the parent's hop, the mass the
/// parent moved between the ring and the covered cells (read from `t0`, the
/// post-collision state the hop pulled from) plus the fine flux of the two fine
/// hops is what the coupling created or lost. Its sum over the ring is taken out
/// of the ring cells of `t1` in equal shares, each spread over the populations in
/// proportion to the weights, which leaves momentum unchanged. Only the sum is
/// used: per cell, coarse and fine links attribute corner fluxes to different ring
/// cells, so a cell-by-cell correction would move mass along the ring even in a
/// uniform flow that the coupling already carries exactly. The flux slots are
/// reset for the next hop.
pub fn correct_interface_mass(k: &CorrectInterfaceMass, t0: &[f32], t1: &mut [f32], flux: &mut [f32]) {
    let layout = k.coarse;
    let plane = layout.plane_cells();
    let cov = k.covered;
    let n_ring = ring_cells(&cov, k.kinds);
    if n_ring == 0 {
        return;
    }
    let mut excess = 0.0f64;
    for (slot, fine_flux) in flux.iter_mut().enumerate().take(n_ring) {
        let (x, y) = ring_cell(&cov, k.kinds, slot);
        let index = layout.index(x, y);
        let mut coarse_net = 0.0f32;
        for j in 1..Q {
            let (nx, ny) = (x as i64 + C[j][0] as i64, y as i64 + C[j][1] as i64);
            if nx < 0 || ny < 0 || !cov.contains(nx as u32, ny as u32) {
                continue;
            }
            let n = layout.index(nx as u32, ny as u32);
            coarse_net += t0[OPP[j] * plane + n] - t0[j * plane + index];
        }
        excess += (coarse_net + *fine_flux) as f64;
        *fine_flux = 0.0;
    }
    let share = (excess / n_ring as f64) as f32;
    for slot in 0..n_ring {
        let (x, y) = ring_cell(&cov, k.kinds, slot);
        let index = layout.index(x, y);
        for (i, w) in W.iter().enumerate() {
            t1[i * plane + index] -= share * w;
        }
    }
}

/// Momentum exchange on body links for the streaming that leaves `f`: a link
/// from a fluid cell along `d` into the body gives it `c_d (f*_d + f_in)` in
/// real populations, `f_in` being what [`bouzidi`] returns along `-d` (the
/// stationary-wall form of the Galilean-invariant exchange). Torque is taken
/// about the body centre with the lever arm in the table. Sums run in link
/// order so the result is reproducible.
pub fn accumulate_exchange(
    k: &AccumulateExchange,
    f: &[f32],
    links: &[u32],
    interval: &mut [f64],
    mut window: Option<&mut [f64]>,
) {
    let plane = k.plane_cells as usize;
    for link in links.chunks_exact(LINK_WORDS).take(k.n_links as usize) {
        let cell = link[0] as usize;
        let d = (link[1] & 15) as usize;
        let body = (link[1] >> 4) as usize;
        let (rx, ry) = (f32::from_bits(link[2]) as f64, f32::from_bits(link[3]) as f64);
        let q = f32::from_bits(link[4]);
        let behind = (link[5] != NO_CELL).then_some(link[5] as usize);
        let returned = bouzidi(f, plane, cell, behind, OPP[d], q);
        let both = (f[d * plane + cell] + returned + 2.0 * W[d]) as f64;
        let fx = C[d][0] as f64 * both;
        let fy = C[d][1] as f64 * both;
        let contribution = [fx, fy, rx * fy - ry * fx];
        let base = body * EXCHANGE_WORDS;
        for (slot, value) in interval[base..base + 3].iter_mut().zip(contribution) {
            *slot += value;
        }
        if let Some(w) = window.as_deref_mut() {
            for (slot, value) in w[base..base + 3].iter_mut().zip(contribution) {
                *slot += value;
            }
        }
    }
}
