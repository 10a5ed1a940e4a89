//! `kernels/halo.cu`: `pack_halo` and `unpack_halo`, the two ends of the
//! halo exchange between the slabs of a run split over several devices
//! (`crate::split`). `pack_halo` gathers, from one column of a patch, the
//! populations that cross the cut beside it into a contiguous buffer;
//! `unpack_halo` scatters such a buffer into the neighbour's halo column, from
//! which its general update pulls them. Launch structs and CPU references.
//!
//! What it does not do: move the buffer between devices (the split's
//! transport does), or touch the populations that do not cross.

use crate::device::{Arg, BufferRef, Kernel, Launch};
use crate::domain::hierarchy::{Layout, Rect};
use crate::error::{LaunchProblem, Result};
use crate::lattice::C;

use super::{ArgReader, BufferUse, HostViews, KernelArgs, check_patch, population_bytes, push_layout, push_rect};

/// Populations that cross a cut per cell of it, in each direction.
pub const CROSSING_POPULATIONS: usize = 3;

/// Bytes of a packed halo of `rows` cells: the crossing populations as f32.
pub fn halo_bytes(rows: u32) -> usize {
    CROSSING_POPULATIONS * rows as usize * 4
}

/// The directions that cross a cut, in increasing order: `CROSSING[0]`
/// those moving towards x-min (`c_x = -1`), `CROSSING[1]` towards x-max.
pub const CROSSING: [[usize; CROSSING_POPULATIONS]; 2] = [crossing(-1), crossing(1)];

const fn crossing(cx: i32) -> [usize; CROSSING_POPULATIONS] {
    let mut out = [0; CROSSING_POPULATIONS];
    let (mut i, mut k) = (0, 0);
    while i < C.len() {
        if C[i][0] == cx {
            out[k] = i;
            k += 1;
        }
        i += 1;
    }
    out
}

/// One column of a patch and the populations of it that cross a cut; what
/// both kernels take.
#[derive(Clone, Debug, PartialEq)]
pub struct HaloColumn {
    /// The patch's populations.
    pub f: BufferRef,
    /// [`CROSSING_POPULATIONS`] planes of `column.height()` f32, bottom up.
    pub halo: BufferRef,
    pub layout: Layout,
    /// One column wide: `[x, x + 1) x [y0, y1)` of the allocation.
    pub column: Rect,
    /// 0: the populations moving towards x-min; 1: towards x-max.
    pub towards: u32,
}

const PARAMS: &[&str] = &[
    "f", "halo", "nx", "ny", "tile_x", "tile_y", "x0", "y0", "x1", "y1", "towards",
];

impl HaloColumn {
    /// Bytes of the packed buffer.
    pub fn halo_bytes(&self) -> usize {
        halo_bytes(self.column.height())
    }

    fn launch(&self, kernel: Kernel) -> Launch {
        let mut args = vec![self.f.into(), self.halo.into()];
        push_layout(&mut args, &self.layout);
        push_rect(&mut args, &self.column);
        args.push(Arg::U32(self.towards));
        Launch::linear(kernel, self.work_items(), args)
    }

    fn decode(launch: &Launch, kernel: Kernel) -> Result<Self> {
        let mut r = ArgReader::new(launch, kernel, PARAMS)?;
        Ok(HaloColumn {
            f: r.buffer()?,
            halo: r.buffer()?,
            layout: r.layout()?,
            column: r.rect()?,
            towards: r.u32()?,
        })
    }

    fn work_items(&self) -> usize {
        CROSSING_POPULATIONS * self.column.height() as usize
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        check_patch(&self.layout, &self.column)?;
        if self.column.width() != 1 {
            return Err(LaunchProblem::Shape(format!(
                "halo column {} is {} cells wide; it must be one",
                self.column,
                self.column.width()
            )));
        }
        if self.towards > 1 {
            return Err(LaunchProblem::ArgValue {
                param: "towards",
                value: self.towards,
                accepted: "0 (towards x-min) or 1 (towards x-max)",
            });
        }
        Ok(())
    }

    /// Index in the packed buffer and in the populations of each crossing
    /// population of each cell of the column.
    fn pairs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let plane = self.layout.plane_cells();
        let rows = self.column.height() as usize;
        CROSSING[self.towards as usize]
            .into_iter()
            .enumerate()
            .flat_map(move |(k, i)| {
                (0..rows).map(move |r| {
                    let y = self.column.y0 + r as u32;
                    (k * rows + r, i * plane + self.layout.index(self.column.x0, y))
                })
            })
    }
}

/// The [`KernelArgs`] methods both kernels take from their [`HaloColumn`].
macro_rules! column_args {
    () => {
        fn launch(&self) -> Launch {
            self.0.launch(Self::KERNEL)
        }
        fn decode(launch: &Launch) -> Result<Self> {
            HaloColumn::decode(launch, Self::KERNEL).map(Self)
        }
        fn work_items(&self) -> usize {
            self.0.work_items()
        }
        fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
            self.0.check_shape()
        }
    };
}

/// `pack_halo`: one thread per crossing population of each cell of the
/// column, into `halo`.
#[derive(Clone, Debug, PartialEq)]
pub struct PackHalo(pub HaloColumn);

impl KernelArgs for PackHalo {
    const KERNEL: Kernel = Kernel::PackHalo;
    const PARAMS: &'static [&'static str] = PARAMS;

    column_args!();
    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![
            BufferUse::read("f", self.0.f, population_bytes(&self.0.layout), 4),
            BufferUse::write("halo", self.0.halo, self.0.halo_bytes(), 4),
        ]
    }
    fn run_on_host(&self, views: &mut HostViews) {
        let f = views.reads.get::<f32>("f");
        let halo = views.writes.get::<f32>("halo");
        for (h, i) in self.0.pairs() {
            halo[h] = f[i];
        }
    }
}

/// `unpack_halo`: one thread per crossing population of each cell of the
/// column, from `halo`; every other population of the patch is left as it is.
#[derive(Clone, Debug, PartialEq)]
pub struct UnpackHalo(pub HaloColumn);

impl KernelArgs for UnpackHalo {
    const KERNEL: Kernel = Kernel::UnpackHalo;
    const PARAMS: &'static [&'static str] = PARAMS;

    column_args!();
    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![
            BufferUse::read_write("f", self.0.f, population_bytes(&self.0.layout), 4),
            BufferUse::read("halo", self.0.halo, self.0.halo_bytes(), 4),
        ]
    }
    fn run_on_host(&self, views: &mut HostViews) {
        let halo = views.reads.get::<f32>("halo");
        let f = views.writes.get::<f32>("f");
        for (h, i) in self.0.pairs() {
            f[i] = halo[h];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crossing_directions_are_those_with_an_x_component() {
        assert_eq!(CROSSING, [[3, 6, 7], [1, 5, 8]]);
        for (side, cx) in [(0, -1), (1, 1)] {
            assert!(CROSSING[side].iter().all(|&i| C[i][0] == cx));
        }
    }
}
