//! Index orders the CPU reference and the kernels share: the inlet profile's
//! samples, the cells of a ghost band and of the interface ring around a
//! covered rectangle. Each order is a function here and the same arithmetic in
//! `kernels/`; the emulator and GPU tests compare their results cell by cell.
//!
//! These are orders only: which cells exist is the hierarchy's business.

use crate::domain::hierarchy::{GHOST, Layout, Rect};
use crate::domain::sides::{PatchSide, is_interface};

/// Inlet profile samples per row: for the populations arriving with y
/// component 1, 0 and -1, in that order (see [`inlet_sample`]).
pub const INLET_SAMPLES_PER_ROW: u32 = 3;

/// Samples of an inlet profile over `rows` rows.
pub fn inlet_samples(rows: u32) -> usize {
    (INLET_SAMPLES_PER_ROW * rows) as usize
}

/// The sample of an inlet profile that a population arriving in row `row`
/// along a direction with y component `cy` takes. The straight one takes the
/// profile at the row's centre; the diagonals cross the inlet half a cell
/// lower (`cy = 1`) or higher (`cy = -1`) and take the centre value minus or
/// plus half the profile's rise across the row. Giving the diagonals the centre
/// value drives a transverse flow of first order in the spacing out of the
/// inlet; tilting them this way keeps the row's inflow at the centre value.
pub fn inlet_sample(row: u32, cy: i32) -> usize {
    (INLET_SAMPLES_PER_ROW as i64 * row as i64 + 1 - cy as i64) as usize
}

/// Cells of the ghost band's inner layer of a fine allocation: the band cells
/// next to the active region (diagonal neighbours at its corners), the only
/// ones the fine level's update, the restriction and the reflux read, and so
/// the only ones `fill_ghost` writes.
pub fn inner_band_cells(fine: &Layout) -> usize {
    (2 * (fine.nx - 2 * GHOST + 2) + 2 * (fine.ny - 2 * GHOST)) as usize
}

/// Allocation coordinates of inner-band cell `cell`: the bottom row (corners
/// included), the top row, then the left and right columns between them (the
/// order kernels/refine.cu uses).
pub fn inner_band_cell(layout: &Layout, cell: usize) -> (u32, u32) {
    let cell = cell as u32;
    let row = layout.nx - 2 * GHOST + 2;
    let column = layout.ny - 2 * GHOST;
    if cell < row {
        (GHOST - 1 + cell, GHOST - 1)
    } else if cell < 2 * row {
        (GHOST - 1 + cell - row, layout.ny - GHOST)
    } else if cell < 2 * row + column {
        (GHOST - 1, GHOST + cell - 2 * row)
    } else {
        (layout.nx - GHOST, GHOST + cell - 2 * row - column)
    }
}

/// Number of parent cells in the ring around a covered rectangle: those at
/// Chebyshev distance exactly one from it, beyond its interface sides only
/// (a wall side has no ring).
pub fn ring_cells(covered: &Rect, kinds: [PatchSide; 4]) -> usize {
    let open = |s: usize| is_interface(kinds, s) as usize;
    let (w, h) = (covered.width() as usize, covered.height() as usize);
    let row = w + open(0) + open(1);
    (open(2) + open(3)) * row + (open(0) + open(1)) * h
}

/// The `k`-th ring cell around `covered`: the row below (left to right, corners
/// included), the row above, then the left and right columns between them,
/// each only beyond an interface side.
pub fn ring_cell(covered: &Rect, kinds: [PatchSide; 4], k: usize) -> (u32, u32) {
    let open = |s: usize| is_interface(kinds, s) as usize;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inner_band_is_every_band_cell_beside_the_active_region_once() {
        for (nx, ny) in [(2 * GHOST + 2, 2 * GHOST + 2), (2 * GHOST + 7, 2 * GHOST + 3)] {
            let layout = Layout { nx, ny, tile: [nx, ny] };
            let active = Rect::new(GHOST, GHOST, nx - GHOST, ny - GHOST);
            let beside = |x: u32, y: u32| {
                !active.contains(x, y)
                    && (x + 1 >= active.x0 && x <= active.x1)
                    && (y + 1 >= active.y0 && y <= active.y1)
            };
            let mut seen = std::collections::BTreeSet::new();
            for cell in 0..inner_band_cells(&layout) {
                let (x, y) = inner_band_cell(&layout, cell);
                assert!(beside(x, y), "({x}, {y}) of {nx}x{ny}");
                assert!(seen.insert((x, y)), "({x}, {y}) twice");
            }
            let all = (0..ny)
                .flat_map(|y| (0..nx).map(move |x| (x, y)))
                .filter(|&(x, y)| beside(x, y));
            assert_eq!(all.count(), seen.len());
        }
    }

    #[test]
    fn the_ring_visits_each_neighbour_beyond_an_interface_once() {
        let covered = Rect::new(3, 4, 7, 6);
        let (i, w) = (PatchSide::Interface, PatchSide::Wall);
        for (kinds, expected) in [
            ([i, i, i, i], 2 * (4 + 2) + 2 * 2),
            ([w, i, i, i], 2 * (4 + 1) + 2),
            ([i, i, w, PatchSide::FreeSlip], 2 * 2),
            ([w, w, w, w], 0),
        ] {
            let mut seen = std::collections::BTreeSet::new();
            for k in 0..ring_cells(&covered, kinds) {
                let (x, y) = ring_cell(&covered, kinds, k);
                let outside = !covered.contains(x, y);
                let touching = x + 1 >= covered.x0 && x <= covered.x1 && y + 1 >= covered.y0 && y <= covered.y1;
                assert!(outside && touching, "({x},{y}) is not a ring cell");
                let beyond_wall = (x < covered.x0 && !is_interface(kinds, 0))
                    || (x >= covered.x1 && !is_interface(kinds, 1))
                    || (y < covered.y0 && !is_interface(kinds, 2))
                    || (y >= covered.y1 && !is_interface(kinds, 3));
                assert!(!beyond_wall, "({x},{y}) lies beyond a wall side");
                assert!(seen.insert((x, y)), "({x},{y}) visited twice");
            }
            assert_eq!(seen.len(), expected, "{kinds:?}");
        }
    }
}
