//! Typed launch constructors: one struct per [`Kernel`], each with `launch()` to
//! build the argument list and `decode()` to read it back.
//!
//! The argument order of each struct is the parameter order of its `__global__`
//! function in `kernels/`; encoding and decoding sit side by side so they cannot
//! drift apart. Nothing else assembles kernel arguments by hand.

use serde::{Deserialize, Serialize};

use crate::device::{Arg, BLOCK_THREADS, BufferId, Kernel, Launch};
use crate::error::{Error, Result};
use crate::hierarchy::{GHOST, Layout, Rect};

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
}

impl Edge {
    fn from_u32(kernel: Kernel, value: u32) -> Result<Edge> {
        match value {
            0 => Ok(Edge::Periodic),
            1 => Ok(Edge::Wall),
            2 => Ok(Edge::Ghost),
            other => Err(args_error(kernel, format!("edge kind {other} is not 0, 1 or 2"))),
        }
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

/// `stream_collide`: one thread per active cell, row-major over the active region.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamCollide {
    pub src: BufferId,
    pub dst: BufferId,
    pub flags: BufferId,
    pub layout: Layout,
    pub active: Rect,
    /// Sides in the order x-min, x-max, y-min, y-max.
    pub edges: [Edge; 4],
    pub wall_velocity: [[f32; 2]; 4],
    pub omega_plus: f32,
    pub omega_minus: f32,
    pub force: [f32; 2],
}

impl StreamCollide {
    pub fn launch(&self) -> Launch {
        let mut args = vec![Arg::buffer(self.src), Arg::buffer(self.dst), Arg::buffer(self.flags)];
        push_layout(&mut args, &self.layout);
        push_rect(&mut args, &self.active);
        args.extend(self.edges.iter().map(|e| Arg::U32(*e as u32)));
        args.extend(self.wall_velocity.iter().flatten().map(|v| Arg::F32(*v)));
        args.extend([
            Arg::F32(self.omega_plus),
            Arg::F32(self.omega_minus),
            Arg::F32(self.force[0]),
            Arg::F32(self.force[1]),
        ]);
        Launch::linear(Kernel::StreamCollide, self.active.cells(), args)
    }

    pub fn decode(launch: &Launch) -> Result<Self> {
        let kernel = Kernel::StreamCollide;
        let mut r = ArgReader::new(launch, kernel)?;
        let (src, dst, flags) = (r.buffer()?, r.buffer()?, r.buffer()?);
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
            layout,
            active,
            edges,
            wall_velocity,
            omega_plus: r.f32()?,
            omega_minus: r.f32()?,
            force: [r.f32()?, r.f32()?],
        };
        r.finish()?;
        Ok(decoded)
    }
}

/// `fill_ghost`: one thread per ghost-band cell of the fine patch, bottom rows,
/// then top rows, then the left and right columns between them.
#[derive(Clone, Debug, PartialEq)]
pub struct FillGhost {
    /// Parent populations at the start of its hop (time t).
    pub coarse_t: BufferId,
    /// Parent populations at the end of its hop (time t + 1).
    pub coarse_t1: BufferId,
    pub fine_dst: BufferId,
    pub coarse: Layout,
    pub fine: Layout,
    /// Parent allocation coordinates of the fine allocation's lower-left corner.
    pub offset: [u32; 2],
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
        push_layout(&mut args, &self.fine);
        args.extend([
            Arg::U32(self.offset[0]),
            Arg::U32(self.offset[1]),
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
            fine: r.layout()?,
            offset: [r.u32()?, r.u32()?],
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
        args.extend([
            Arg::U32(self.fine_active_origin),
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
            tau_plus: r.f32()?,
            tau_minus: r.f32()?,
            coarse_force: [r.f32()?, r.f32()?],
        };
        r.finish()?;
        Ok(decoded)
    }
}

/// Number of parent cells in the ring around a covered rectangle of `w x h`
/// parent cells: those at Chebyshev distance exactly one from it.
pub fn ring_cells(w: u32, h: u32) -> usize {
    (2 * (w + 2) + 2 * h) as usize
}

/// The `k`-th ring cell around `covered`: the row below (left to right, corners
/// included), the row above, then the left and right columns between them.
pub fn ring_cell(covered: &Rect, k: usize) -> (u32, u32) {
    let (w, h) = (covered.width() as usize, covered.height() as usize);
    let row = w + 2;
    let (x, y) = if k < row {
        (covered.x0 as usize + k, covered.y0 as usize)
    } else if k < 2 * row {
        (covered.x0 as usize + k - row, covered.y1 as usize + 1)
    } else if k < 2 * row + h {
        (covered.x0 as usize, covered.y0 as usize + 1 + k - 2 * row)
    } else {
        (covered.x1 as usize + 1, covered.y0 as usize + 1 + k - 2 * row - h)
    };
    // Computed one cell up and right so nothing goes below zero; shift back.
    (x as u32 - 1, y as u32 - 1)
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
}

impl AccumulateFineFlux {
    pub fn launch(&self) -> Launch {
        let mut args = vec![Arg::buffer(self.fine), Arg::buffer(self.flux)];
        push_layout(&mut args, &self.layout);
        let covered = fine_covered(&self.layout);
        Launch::linear(
            Kernel::AccumulateFineFlux,
            ring_cells(covered.width(), covered.height()),
            args,
        )
    }

    pub fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Kernel::AccumulateFineFlux)?;
        let decoded = AccumulateFineFlux {
            fine: r.buffer()?,
            flux: r.buffer()?,
            layout: r.layout()?,
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
        };
        r.finish()?;
        Ok(decoded)
    }
}

/// Words per body link in the link table: storage cell index, direction plus
/// 16 x body index, and the lever arm (x, y) from the body centre as f32 bits.
pub const LINK_WORDS: usize = 4;
/// f64 words per body in an exchange accumulator: Fx, Fy, torque, unused.
pub const EXCHANGE_WORDS: usize = 4;

/// `accumulate_exchange`: one thread per body link.
#[derive(Clone, Debug, PartialEq)]
pub struct AccumulateExchange {
    /// Post-collision populations of the body's patch.
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
            layout,
            active: Rect::new(4, 4, 8, 6),
            edges: [Edge::Periodic, Edge::Wall, Edge::Ghost, Edge::Wall],
            wall_velocity: [[0.0, 0.0], [0.1, 0.0], [0.0, 0.2], [0.3, 0.4]],
            omega_plus: 1.2,
            omega_minus: 1.5,
            force: [1e-5, -2e-5],
        };
        assert_eq!(StreamCollide::decode(&sc.launch()).unwrap(), sc);
        let fg = FillGhost {
            coarse_t: BufferId(1),
            coarse_t1: BufferId(2),
            fine_dst: BufferId(3),
            coarse: layout,
            fine: layout,
            offset: [5, 6],
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
        };
        assert_eq!(AccumulateFineFlux::decode(&ff.launch()).unwrap(), ff);
        let cm = CorrectInterfaceMass {
            coarse_t: BufferId(1),
            coarse_t1: BufferId(2),
            flux: BufferId(3),
            coarse: layout,
            covered: Rect::new(3, 3, 7, 6),
        };
        assert_eq!(CorrectInterfaceMass::decode(&cm.launch()).unwrap(), cm);
    }

    #[test]
    fn the_ring_visits_each_neighbour_of_the_rectangle_once() {
        let covered = Rect::new(3, 4, 7, 6);
        let mut seen = std::collections::BTreeSet::new();
        for k in 0..ring_cells(covered.width(), covered.height()) {
            let (x, y) = ring_cell(&covered, k);
            let outside = !covered.contains(x, y);
            let touching = x + 1 >= covered.x0 && x <= covered.x1 && y + 1 >= covered.y0 && y <= covered.y1;
            assert!(outside && touching, "({x},{y}) is not a ring cell");
            assert!(seen.insert((x, y)), "({x},{y}) visited twice");
        }
        assert_eq!(seen.len(), 2 * (4 + 2) + 2 * 2);
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
