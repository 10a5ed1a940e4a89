//! What the CPU references run on: the views of a launch's buffers by
//! parameter, and the row bands rayon spreads over threads.
//!
//! No kernel arithmetic lives here.

use rayon::prelude::*;

use crate::domain::hierarchy::Layout;
use crate::lattice::Q;

/// Host memory of one launch's buffers, from each byte offset to the buffer's
/// end, by parameter name: what a CPU reference reads and writes. Buffers
/// written in any way are in `writes`, the others in `reads`, so a reference
/// borrows both at once.
#[derive(Default)]
pub struct HostViews<'a> {
    pub reads: ReadViews<'a>,
    pub writes: WriteViews<'a>,
}

#[derive(Default)]
pub struct ReadViews<'a>(Vec<(&'static str, &'a [u8])>);

#[derive(Default)]
pub struct WriteViews<'a>(Vec<(&'static str, &'a mut [u8])>);

fn whole<T>(len: usize) -> usize {
    len / size_of::<T>() * size_of::<T>()
}

impl<'a> ReadViews<'a> {
    pub fn add(&mut self, param: &'static str, bytes: &'a [u8]) {
        self.0.push((param, bytes));
    }
    /// The view of `param` as elements of `T`, whole elements only.
    pub fn get<T: bytemuck::Pod>(&self, param: &str) -> &[T] {
        let (_, b) = self
            .0
            .iter()
            .find(|(p, _)| *p == param)
            .unwrap_or_else(|| panic!("the launch check passed, so `{param}` has a view"));
        bytemuck::cast_slice(&b[..whole::<T>(b.len())])
    }
}

impl<'a> WriteViews<'a> {
    pub fn add(&mut self, param: &'static str, bytes: &'a mut [u8]) {
        self.0.push((param, bytes));
    }
    /// The view of `param` as elements of `T`, whole elements only.
    pub fn get<T: bytemuck::Pod>(&mut self, param: &str) -> &mut [T] {
        self.pair::<T, T>(param, None).0
    }
    /// The view of `param` taken out of the set, so that it can be held beside
    /// the views of other parameters (kernels that write more than two).
    pub fn take<T: bytemuck::Pod>(&mut self, param: &str) -> &'a mut [T] {
        let at = self
            .0
            .iter()
            .position(|(p, _)| *p == param)
            .unwrap_or_else(|| panic!("the launch check passed, so `{param}` is writable"));
        let bytes = self.0.swap_remove(at).1;
        let n = whole::<T>(bytes.len());
        bytemuck::cast_slice_mut(&mut bytes[..n])
    }
    /// Two written views at once (kernels that write two buffers).
    pub fn get2<T: bytemuck::Pod>(&mut self, a: &str, b: &str) -> (&mut [T], &mut [T]) {
        let (first, second) = self.pair::<T, T>(a, Some(b));
        (first, second.expect("asked for"))
    }
    fn pair<T: bytemuck::Pod, U: bytemuck::Pod>(&mut self, a: &str, b: Option<&str>) -> (&mut [T], Option<&mut [U]>) {
        let (mut first, mut second) = (None, None);
        for (p, bytes) in self.0.iter_mut() {
            if *p == a {
                let n = whole::<T>(bytes.len());
                first = Some(bytemuck::cast_slice_mut(&mut bytes[..n]));
            } else if Some(*p) == b {
                let n = whole::<U>(bytes.len());
                second = Some(bytemuck::cast_slice_mut(&mut bytes[..n]));
            }
        }
        let missing = |param: &str| -> ! { panic!("the launch check passed, so `{param}` is writable") };
        let first = first.unwrap_or_else(|| missing(a));
        if let Some(b) = b
            && second.is_none()
        {
            missing(b);
        }
        (first, second)
    }
}

/// Mutable views of the nine population planes, restricted to one band of rows
/// that is contiguous in every plane; `offset` is the band's first storage index.
pub(super) struct BandPlanes<'a> {
    planes: Vec<&'a mut [f32]>,
    offset: usize,
}

impl BandPlanes<'_> {
    #[inline]
    pub(super) fn set(&mut self, index: usize, f: &[f32; Q]) {
        for (plane, value) in self.planes.iter_mut().zip(f) {
            plane[index - self.offset] = *value;
        }
    }

    /// The `n` cells from storage index `index` on, in each of the nine planes.
    #[inline]
    pub(super) fn row(&mut self, index: usize, n: usize) -> [&mut [f32]; Q] {
        let start = index - self.offset;
        let mut planes = self.planes.iter_mut();
        std::array::from_fn(|_| {
            let plane = planes.next().expect("nine planes");
            &mut plane[start..start + n]
        })
    }
}

/// Cells a band of a row-major layout holds at least: a rayon task on fewer
/// costs more to hand out than the vectorised bulk update spends on them.
pub(crate) const BAND_CELLS: u32 = 2 * 1024;

/// Bands per thread of rayon's pool, at least: a patch of a few tens of
/// thousands of cells still keeps every thread busy, with some slack for
/// uneven bands.
const BANDS_PER_THREAD: u32 = 4;

/// Splits the nine planes of `dst` into bands of rows that are contiguous in
/// storage (when tiles span the whole width: whole rows, about
/// [`BANDS_PER_THREAD`] bands per thread but none under [`BAND_CELLS`] cells;
/// one tile row otherwise) and runs `body(first_row, rows, band)` on each
/// band in parallel.
pub(super) fn par_row_bands(dst: &mut [f32], layout: &Layout, body: impl Fn(u32, u32, &mut BandPlanes) + Sync) {
    let plane = layout.plane_cells();
    let band_rows = match layout.tiles_x() {
        1 => {
            let bands = BANDS_PER_THREAD * rayon::current_num_threads() as u32;
            let balanced = layout.ny.div_ceil(bands);
            balanced.max(BAND_CELLS.div_ceil(layout.tile[0])).min(layout.tile[1])
        }
        _ => layout.tile[1],
    };
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
pub(super) fn read_cell(f: &[f32], plane: usize, index: usize) -> [f32; Q] {
    std::array::from_fn(|i| f[i * plane + index])
}
