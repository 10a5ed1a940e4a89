//! The CPU bulk update of one row, vectorised across its cells: one binary
//! serves every x86-64, choosing at run time the widest instruction set the
//! processor has (AVX-512, AVX2, else the x86-64 baseline, SSE2).
//!
//! Every variant compiles the same loop, nine fixed-offset input rows and nine
//! output rows with no branch on the cell, and each lane does one cell's
//! operations in the reference order: Rust never contracts a multiply and an
//! add into a fused one, and no variant enables FMA, so every variant gives the
//! bits of the per-cell reference ([`crate::lattice::collide`]).
//!
//! It holds the crate's only `unsafe`: calling a function compiled for an
//! instruction set, after checking that the processor has it.
#![allow(unsafe_code)]

use crate::lattice::{self, Q};

/// An instruction set the row loop is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vector {
    /// The x86-64 baseline (SSE2, four lanes), or whatever the target's
    /// compiler vectorises for on another architecture.
    Baseline,
    /// AVX2, eight lanes.
    Avx2,
    /// AVX-512F, sixteen lanes.
    Avx512,
}

impl Vector {
    /// The variants this processor runs, narrowest first.
    pub fn available() -> Vec<Vector> {
        [Vector::Baseline, Vector::Avx2, Vector::Avx512]
            .into_iter()
            .filter(|v| v.is_available())
            .collect()
    }

    /// The widest variant this processor runs.
    pub fn best() -> Vector {
        *Vector::available().last().expect("the baseline always runs")
    }

    pub fn is_available(self) -> bool {
        match self {
            Vector::Baseline => true,
            #[cfg(target_arch = "x86_64")]
            Vector::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Vector::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Vector::Baseline => "baseline",
            Vector::Avx2 => "avx2",
            Vector::Avx512 => "avx512",
        }
    }

    /// Pull and collide one row: cell `x` of `dst` from cell `x` of each of
    /// the nine `src` rows (the direction's plane, shifted by its neighbour
    /// offset). Every row has the length of `dst[0]`. A variant this processor
    /// lacks runs the baseline.
    #[inline]
    pub fn row(self, src: [&[f32]; Q], dst: [&mut [f32]; Q], omega_plus: f32, omega_minus: f32, force: [f32; 2]) {
        match self {
            #[cfg(target_arch = "x86_64")]
            Vector::Avx512 if self.is_available() => {
                // SAFETY: the processor has AVX-512F, checked just above.
                unsafe { row_avx512(src, dst, omega_plus, omega_minus, force) }
            }
            #[cfg(target_arch = "x86_64")]
            Vector::Avx2 if self.is_available() => {
                // SAFETY: the processor has AVX2, checked just above.
                unsafe { row_avx2(src, dst, omega_plus, omega_minus, force) }
            }
            _ => row(src, dst, omega_plus, omega_minus, force),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn row_avx512(src: [&[f32]; Q], dst: [&mut [f32]; Q], omega_plus: f32, omega_minus: f32, force: [f32; 2]) {
    row(src, dst, omega_plus, omega_minus, force)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn row_avx2(src: [&[f32]; Q], dst: [&mut [f32]; Q], omega_plus: f32, omega_minus: f32, force: [f32; 2]) {
    row(src, dst, omega_plus, omega_minus, force)
}

/// The loop every variant compiles: slices cut to one length up front so that
/// no index is checked inside it, and the collision inlined so that it
/// vectorises across cells.
#[inline(always)]
fn row(src: [&[f32]; Q], dst: [&mut [f32]; Q], omega_plus: f32, omega_minus: f32, force: [f32; 2]) {
    let n = dst[0].len();
    let src = src.map(|s| &s[..n]);
    let mut dst = dst.map(|d| &mut d[..n]);
    for x in 0..n {
        let mut f: [f32; Q] = std::array::from_fn(|i| src[i][x]);
        lattice::collide(&mut f, omega_plus, omega_minus, force);
        for (plane, value) in dst.iter_mut().zip(f) {
            plane[x] = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Boundary;
    use crate::device::BufferId;
    use crate::device::BufferRef;
    use crate::domain::geometry::{FLAG_FLUID, FLAG_SOLID};
    use crate::domain::hierarchy::{Layout, Rect};
    use crate::kernels::lbm::{
        BulkSide, Inlet, StreamCollide, StreamCollideBulk, Walls, boundary_cells, bulk_interior, bulk_open, bulk_sides,
        stream_collide,
    };
    use crate::kernels::lbm::{CellList, bulk_skip, stream_collide_bulk};

    /// Small deterministic noise around rest, a different value in every slot.
    fn populations(seed: u64, n: usize) -> Vec<f32> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4e-3
            })
            .collect()
    }

    fn placeholder(k: u32) -> BufferRef {
        BufferId(k).into()
    }

    /// The sides the bulk region of `k`'s patch takes: no periodic one
    /// where solid cells are (a row's span around a body does not wrap).
    fn open_sides(k: &StreamCollide, flags: &[u8]) -> [bool; 4] {
        let open = bulk_open(&k.layout, &k.active, k.boundaries);
        let solid = flags.contains(&FLAG_SOLID);
        std::array::from_fn(|s| open[s] && !(solid && k.boundaries[s] == Boundary::Periodic))
    }

    /// The split update of `k`'s patch: the bulk kernel over `interior`
    /// with a skip table where it wraps no axis, and `k` over a list of
    /// `cells` cells.
    fn split_launches(k: &StreamCollide, interior: Rect, cells: usize) -> (StreamCollideBulk, StreamCollide) {
        let sides = bulk_sides(&k.active, &interior, k.boundaries, k.wall_velocity);
        let bulk = StreamCollideBulk {
            src: k.src,
            dst: k.dst,
            skip: (!sides.contains(&BulkSide::Wrap)).then_some(placeholder(4)),
            layout: k.layout,
            interior,
            sides,
            omega_plus: k.omega_plus,
            omega_minus: k.omega_minus,
            force: k.force,
        };
        let listed = StreamCollide {
            cells: Some(CellList {
                cells: placeholder(3),
                count: cells as u32,
            }),
            ..k.clone()
        };
        (bulk, listed)
    }

    /// Every variant this processor runs gives the baseline's bits, on rows
    /// whose length is no multiple of any vector width.
    #[test]
    fn every_variant_gives_the_baselines_bits() {
        let layout = Layout {
            nx: 77,
            ny: 9,
            tile: [77, 9],
        };
        let plane = layout.plane_cells();
        let src = populations(3, Q * plane);
        for force in [[0.0, 0.0], [1e-4, -3e-5]] {
            let k = StreamCollideBulk {
                src: placeholder(0),
                dst: placeholder(1),
                skip: None,
                layout,
                interior: Rect::new(1, 1, 76, 8),
                sides: [BulkSide::Neighbour; 4],
                omega_plus: 1.6,
                omega_minus: 1.1,
                force,
            };
            let mut want = vec![f32::NAN; Q * plane];
            stream_collide_bulk(&k, &src, &mut want, None, Vector::Baseline);
            assert!(want.iter().filter(|v| !v.is_nan()).count() == Q * 75 * 7);
            for vector in Vector::available() {
                let mut got = vec![f32::NAN; Q * plane];
                stream_collide_bulk(&k, &src, &mut got, None, vector);
                let same = want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{} differs from the baseline (force {force:?})", vector.name());
            }
        }
    }

    /// The bulk kernel and then the general one over the boundary cells write
    /// what the general kernel over every cell writes, bit for bit: around
    /// solid cells, at walls, an inlet, an outflow and periodic sides (the
    /// solid cells inside the rim, which neither copies, already holding the
    /// source's populations, as a stepper's two buffers do).
    #[test]
    fn the_split_update_is_the_whole_update() {
        let layout = Layout {
            nx: 40,
            ny: 23,
            tile: [40, 23],
        };
        let plane = layout.plane_cells();
        let fluid = vec![FLAG_FLUID; plane];
        let mut bodies = fluid.clone();
        for (x, y) in [(10, 10), (11, 10), (10, 11), (25, 5), (1, 1), (38, 20), (20, 2)] {
            bodies[layout.index(x, y)] = FLAG_SOLID;
        }
        let src = populations(9, Q * plane);
        let profile: Vec<f32> = populations(4, 3 * 23).iter().map(|v| v.abs() * 10.0).collect();
        let sides = [
            ([Boundary::Periodic; 4], Rect::new(0, 0, 40, 23)),
            (
                [Boundary::Periodic, Boundary::Periodic, Boundary::Wall, Boundary::Wall],
                Rect::new(0, 0, 40, 23),
            ),
            (
                [
                    Boundary::Inlet,
                    Boundary::Outflow,
                    Boundary::Periodic,
                    Boundary::Periodic,
                ],
                Rect::new(0, 0, 40, 23),
            ),
            (
                [Boundary::Inlet, Boundary::Outflow, Boundary::Wall, Boundary::FreeSlip],
                Rect::new(0, 0, 40, 23),
            ),
            ([Boundary::Wall; 4], Rect::new(2, 1, 37, 22)),
            ([Boundary::Wall; 4], Rect::new(0, 0, 40, 23)),
            (
                [Boundary::Wall, Boundary::Interface, Boundary::Interface, Boundary::Wall],
                Rect::new(0, 2, 36, 23),
            ),
        ];
        for ((boundaries, active), flags) in sides.iter().flat_map(|s| [(*s, &fluid), (*s, &bodies)]) {
            let k = StreamCollide {
                wall_velocity: [[0.0; 2], [0.0; 2], [0.01, 0.0], [0.02, 0.0]],
                boundaries,
                active,
                force: [2e-5, 0.0],
                ..StreamCollide::periodic(
                    placeholder(0),
                    placeholder(1),
                    placeholder(2),
                    [40, 23],
                    crate::fixtures::benchmark_physics(),
                )
            };
            let inlet = Inlet {
                profile: &profile,
                factor: 0.75,
            };
            let mut whole = vec![f32::NAN; Q * plane];
            stream_collide(&k, &src, &mut whole, flags, Walls::default(), &inlet, None);
            let interior = bulk_interior(&layout, &active, open_sides(&k, flags)).unwrap();
            let list = boundary_cells(flags, &layout, &active, &interior);
            assert!(list.windows(2).all(|w| w[0] < w[1]), "the list ascends");
            let skip = bulk_skip(flags, &layout, &interior);
            let (bulk, listed) = split_launches(&k, interior, list.len());
            // The solid cells of a row's span are copied by neither kernel:
            // a stepper's two buffers already agree there.
            let mut split = vec![f32::NAN; Q * plane];
            for (x, y) in (interior.y0..interior.y1).flat_map(|y| (interior.x0..interior.x1).map(move |x| (x, y))) {
                let c = layout.index(x, y);
                if flags[c] == FLAG_SOLID {
                    (0..Q).for_each(|i| split[i * plane + c] = src[i * plane + c]);
                }
            }
            stream_collide_bulk(&bulk, &src, &mut split, Some(&skip), Vector::best());
            stream_collide(&listed, &src, &mut split, flags, Walls::default(), &inlet, Some(&list));
            let differ = whole
                .iter()
                .zip(&split)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            let solid = !std::ptr::eq(flags, &fluid);
            assert_eq!(
                differ, 0,
                "{boundaries:?} {active} solid {solid}: {differ} values differ"
            );
        }
    }

    /// The plan runs the bulk and the general launch over the list side by
    /// side (`Action::Together`), which is sound only if each cell is written
    /// by at most one of them: the list is the rim along sides with rules of
    /// their own and the fluid cells of each row's span around solid cells,
    /// which the bulk skips; across interface sides the bulk region reaches
    /// the active region's edge. Each writes into its own poisoned buffer;
    /// every active cell but the solid ones of the bulk region is written by
    /// one, none by both, and together they are the whole update; without
    /// solid cells the list is that rim only (none on the interface patch)
    /// and nothing is skipped.
    #[test]
    fn the_bulk_and_the_list_write_disjoint_cells() {
        let layout = Layout {
            nx: 41,
            ny: 26,
            tile: [41, 26],
        };
        let plane = layout.plane_cells();
        let fluid = vec![FLAG_FLUID; plane];
        let mut bodies = fluid.clone();
        for (x, y) in [
            (10, 10),
            (11, 10),
            (10, 11),
            (30, 5),
            (31, 6),
            (20, 2),
            (5, 20),
            (35, 20),
        ] {
            bodies[layout.index(x, y)] = FLAG_SOLID;
        }
        let src = populations(5, Q * plane);
        let profile: Vec<f32> = populations(6, 3 * 26).iter().map(|v| v.abs() * 10.0).collect();
        let inlet = Inlet {
            profile: &profile,
            factor: 0.5,
        };
        let sides = [
            ([Boundary::Periodic; 4], Rect::new(0, 0, 41, 26)),
            (
                [Boundary::Inlet, Boundary::Outflow, Boundary::Wall, Boundary::Wall],
                Rect::new(0, 0, 41, 26),
            ),
            ([Boundary::Interface; 4], Rect::new(3, 2, 38, 24)),
        ];
        for ((boundaries, active), flags) in sides.iter().flat_map(|s| [(*s, &fluid), (*s, &bodies)]) {
            let k = StreamCollide {
                boundaries,
                active,
                ..StreamCollide::periodic(
                    placeholder(0),
                    placeholder(1),
                    placeholder(2),
                    [41, 26],
                    crate::fixtures::benchmark_physics(),
                )
            };
            let interior = bulk_interior(&layout, &active, open_sides(&k, flags)).unwrap();
            // Across an interface the bulk kernel pulls from the band, and
            // it wraps periodic sides where no solid cell is.
            let open = boundaries == [Boundary::Interface; 4]
                || (boundaries == [Boundary::Periodic; 4] && std::ptr::eq(flags, &fluid));
            assert_eq!(interior == active, open, "{boundaries:?}");
            let list = boundary_cells(flags, &layout, &active, &interior);
            let skip = bulk_skip(flags, &layout, &interior);
            let rim_only = list.len() == active.cells() - interior.cells();
            assert_eq!(rim_only, std::ptr::eq(flags, &fluid), "{boundaries:?}");
            assert_eq!(rim_only, skip.chunks(2).all(|s| s[0] == s[1]), "{boundaries:?}");
            let (bulk, listed) = split_launches(&k, interior, list.len());
            let mut by_bulk = vec![f32::NAN; Q * plane];
            stream_collide_bulk(&bulk, &src, &mut by_bulk, Some(&skip), Vector::best());
            let mut by_list = vec![f32::NAN; Q * plane];
            stream_collide(
                &listed,
                &src,
                &mut by_list,
                flags,
                Walls::default(),
                &inlet,
                Some(&list),
            );
            let mut whole = vec![f32::NAN; Q * plane];
            stream_collide(&k, &src, &mut whole, flags, Walls::default(), &inlet, None);
            for y in 0..layout.ny {
                for x in 0..layout.nx {
                    let index = layout.index(x, y);
                    let written = |f: &[f32]| (0..Q).filter(|i| !f[i * plane + index].is_nan()).count();
                    let (b, l) = (written(&by_bulk), written(&by_list));
                    let inside = active.contains(x, y);
                    let copied_by_neither = interior.contains(x, y) && flags[index] == FLAG_SOLID;
                    let once = match inside && !copied_by_neither {
                        true => (b, l) == (Q, 0) || (b, l) == (0, Q),
                        false => (b, l) == (0, 0),
                    };
                    assert!(
                        once,
                        "{boundaries:?}: cell ({x}, {y}) has {b} values from the bulk and {l} from the list"
                    );
                    if copied_by_neither {
                        continue;
                    }
                    for i in 0..Q {
                        let one = if b > 0 {
                            by_bulk[i * plane + index]
                        } else {
                            by_list[i * plane + index]
                        };
                        assert_eq!(one.to_bits(), whole[i * plane + index].to_bits(), "({x}, {y}) {i}");
                    }
                }
            }
        }
    }
}
