//! The sides of a refined patch as its coupling stencils see them: an
//! interface with the parent level, or a wall or free-slip side of the domain
//! that the patch touches. Mirror images of the cells inside stand in for the
//! cells beyond a wall, with the velocity normal to the wall reversed and, for
//! a no-slip wall, the tangential velocity reflected about the wall's own.
//!
//! The base grid's sides are [`Boundary`] values of the configuration; this
//! module does not decide what a domain side is, only how a patch meets one.

use serde::Serialize;

use crate::config::Boundary;
use crate::domain::hierarchy::{GHOST, Layout, Patch, Rect, SIDE_NAMES};
use crate::error::{Error, Result};
use crate::lattice::Moments;

/// What lies beyond one side of a refined patch's active region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[repr(u32)]
pub enum PatchSide {
    /// The parent's cells: the side is a coarse-fine interface.
    Interface = 0,
    /// A no-slip wall of the domain, possibly moving along itself.
    Wall = 1,
    /// A free-slip wall of the domain.
    FreeSlip = 2,
}

impl PatchSide {
    const ALL: [PatchSide; 3] = [PatchSide::Interface, PatchSide::Wall, PatchSide::FreeSlip];

    /// The kind of every side packed two bits per side, x-min lowest, as the
    /// kernels take it.
    pub fn pack(kinds: [PatchSide; 4]) -> u32 {
        kinds.iter().enumerate().map(|(s, k)| (*k as u32) << (2 * s)).sum()
    }

    /// [`PatchSide::pack`] undone, or the offending code.
    pub fn unpack(packed: u32) -> std::result::Result<[PatchSide; 4], u32> {
        if packed >> 8 != 0 {
            return Err(packed);
        }
        let mut kinds = [PatchSide::Interface; 4];
        for (s, kind) in kinds.iter_mut().enumerate() {
            let code = (packed >> (2 * s)) & 3;
            *kind = *Self::ALL.get(code as usize).ok_or(packed)?;
        }
        Ok(kinds)
    }
}

/// The [`PatchSide`] of each side (x-min, x-max, y-min, y-max) and the
/// velocity of each wall along itself.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PatchSides {
    pub kinds: [PatchSide; 4],
    /// The velocity of each wall along itself (u_y for x sides, u_x for y
    /// sides), lattice units; ignored for other kinds.
    pub tangential: [f32; 4],
}

impl PatchSides {
    /// Every side an interface: a patch clear of the domain's boundary.
    pub const INTERFACES: PatchSides = PatchSides {
        kinds: [PatchSide::Interface; 4],
        tangential: [0.0; 4],
    };

    /// Whether `side` is a coarse-fine interface.
    pub fn is_interface(&self, side: usize) -> bool {
        is_interface(self.kinds, side)
    }

    /// The sides of refined `patch`: where it touches the domain's boundary,
    /// that side's wall (moving along itself with the side's wall velocity) or
    /// free-slip wall; an interface with its parent elsewhere. Touching any
    /// other kind of side is refused, naming the patch and the side.
    pub fn of_patch(patch: &Patch, boundaries: [Boundary; 4], wall_velocity: [[f32; 2]; 4]) -> Result<PatchSides> {
        let mut sides = PatchSides::INTERFACES;
        for side in (0..4).filter(|&s| patch.on_boundary[s]) {
            sides.kinds[side] = match boundaries[side] {
                Boundary::Wall => PatchSide::Wall,
                Boundary::FreeSlip => PatchSide::FreeSlip,
                other => {
                    return Err(Error::Layout {
                        level: patch.level,
                        patch: Some((patch.index, patch.rect)),
                        reason: format!(
                            "touches the domain's {} side, which is {}; a patch may touch only a wall, \
                             moving wall or free-slip side: keep it 4 parent cells away from this one",
                            SIDE_NAMES[side],
                            other.name()
                        ),
                    });
                }
            };
            // A wall moves along itself: u_y on an x side, u_x on a y side.
            sides.tangential[side] = wall_velocity[side][if side < 2 { 1 } else { 0 }];
        }
        Ok(sides)
    }
}

/// Whether `side` of `kinds` is a coarse-fine interface.
pub fn is_interface(kinds: [PatchSide; 4], side: usize) -> bool {
    kinds[side] == PatchSide::Interface
}

/// The cell a coupling stencil reads for cell (x, y) of a patch whose active
/// region is `active`: (x, y) itself, or beyond a wall side of `sides` its
/// mirror image in that side, with the sides crossed (x first, then y) for
/// [`reflect`].
#[inline]
pub fn mirrored_cell(sides: &PatchSides, active: &Rect, x: i32, y: i32) -> (u32, u32, [Option<usize>; 2]) {
    let axis = |c: i32, lo: u32, hi: u32, low_side: usize| {
        let (lo, hi) = (lo as i32, hi as i32);
        if c < lo && !sides.is_interface(low_side) {
            ((2 * lo - 1 - c) as u32, Some(low_side))
        } else if c >= hi && !sides.is_interface(low_side + 1) {
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
    let no_slip = sides.kinds[side] == PatchSide::Wall;
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

/// The moments of a stencil cell read at its mirror image: reflected in the
/// side [`mirrored_cell`] reported crossing. Across two sides (a corner's
/// diagonal image) the two reflections taken in either order differ in the
/// sign of the moving walls' terms (x then y adds 2(u_y - u_x) for walls
/// moving with u_x and u_y, y then x the opposite), so a case turned by a
/// quarter turn would not give the turned flow; the image is their mean,
/// which has no wall term: each velocity component reversed once per side
/// that reverses it.
#[inline]
pub fn reflect_crossed(m: Moments, sides: &PatchSides, crossed: [Option<usize>; 2]) -> Moments {
    match crossed {
        [Some(x), Some(y)] => {
            let reverses = |side: usize| sides.kinds[side] == PatchSide::Wall;
            Moments {
                delta_rho: m.delta_rho,
                ux: if reverses(y) { m.ux } else { -m.ux },
                uy: if reverses(x) { m.uy } else { -m.uy },
            }
        }
        _ => crossed.into_iter().flatten().fold(m, |m, side| reflect(m, sides, side)),
    }
}

/// Whether allocation cell (fx, fy) lies in the ghost band beyond a wall side
/// of the patch, where the fine level applies the wall's rule instead.
#[inline]
pub fn beyond_wall(layout: &Layout, sides: &PatchSides, fx: u32, fy: u32) -> bool {
    let walled = |side: usize| !sides.is_interface(side);
    (fx < GHOST && walled(0))
        || (fx >= layout.nx - GHOST && walled(1))
        || (fy < GHOST && walled(2))
        || (fy >= layout.ny - GHOST && walled(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips_and_refuses_unknown_codes() {
        let kinds = [
            PatchSide::Wall,
            PatchSide::Interface,
            PatchSide::FreeSlip,
            PatchSide::Wall,
        ];
        assert_eq!(PatchSide::unpack(PatchSide::pack(kinds)), Ok(kinds));
        assert_eq!(PatchSide::unpack(3 << 4), Err(3 << 4));
        assert_eq!(PatchSide::unpack(1 << 8), Err(1 << 8));
    }
}
