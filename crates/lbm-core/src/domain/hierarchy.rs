//! The refinement hierarchy: a base grid and levels of rectangular patches, each
//! patch with its allocation, ghost band, storage tiling and parent.
//!
//! Coordinates: level `l` has its own global cell index space in which one base
//! cell spans `2^l` cells. A patch of level `l + 1` is given as a [`Rect`] in
//! level-`l` global coordinates and covers level-`l + 1` cells `[2*x0, 2*x1)`.
//! This module validates layouts and computes indices; it allocates nothing.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Width of the ghost band, in cells of the patch's own level, on every side of a
/// refined patch's allocation.
pub const GHOST: u32 = 4;

/// How far, in parent cells, a patch must stay from the edge of its parent's
/// active region where that edge is an interface: two parent cells hold the
/// ghost band, one more feeds the bilinear interpolation and one more the
/// velocity gradient. Where the edge lies on the domain's boundary a patch may
/// instead touch it: the coupling stencils then read mirror images of the cells
/// inside, so the parent needs this many cells across that axis.
pub const PARENT_MARGIN: u32 = 4;

/// The sides of a rectangle in the order every side array uses.
pub const SIDE_NAMES: [&str; 4] = ["x_min", "x_max", "y_min", "y_max"];

/// A half-open rectangle of cells `[x0, x1) x [y0, y1)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rect {
    pub x0: u32,
    pub y0: u32,
    pub x1: u32,
    pub y1: u32,
}

impl Rect {
    pub const fn new(x0: u32, y0: u32, x1: u32, y1: u32) -> Self {
        Rect { x0, y0, x1, y1 }
    }
    pub fn width(&self) -> u32 {
        self.x1.saturating_sub(self.x0)
    }
    pub fn height(&self) -> u32 {
        self.y1.saturating_sub(self.y0)
    }
    pub fn cells(&self) -> usize {
        self.width() as usize * self.height() as usize
    }
    pub fn contains(&self, x: u32, y: u32) -> bool {
        x >= self.x0 && x < self.x1 && y >= self.y0 && y < self.y1
    }
    fn overlaps(&self, other: &Rect) -> bool {
        self.x0 < other.x1 && other.x0 < self.x1 && self.y0 < other.y1 && other.y0 < self.y1
    }
    fn contains_with_margin(&self, inner: &Rect, margin: u32) -> bool {
        inner.x0 >= self.x0 + margin
            && inner.y0 >= self.y0 + margin
            && inner.x1 + margin <= self.x1
            && inner.y1 + margin <= self.y1
    }
}

impl std::fmt::Display for Rect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "x {}..{} y {}..{}", self.x0, self.x1, self.y0, self.y1)
    }
}

/// The storage layout of one allocation: its size, tile shape and the cell index
/// function shared by every kernel.
///
/// Cells are grouped in `tile[0] x tile[1]` tiles stored one after another in
/// row-major tile order, each tile row-major inside. The default tile is the whole
/// allocation, which is plain row-major storage. Each of the nine populations is a
/// plane of `plane_cells()` f32 values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Layout {
    pub nx: u32,
    pub ny: u32,
    pub tile: [u32; 2],
}

impl Layout {
    pub fn tiles_x(&self) -> u32 {
        self.nx.div_ceil(self.tile[0])
    }
    pub fn tiles_y(&self) -> u32 {
        self.ny.div_ceil(self.tile[1])
    }
    /// Cells in one population plane, padding of partial tiles included.
    pub fn plane_cells(&self) -> usize {
        self.tiles_x() as usize * self.tiles_y() as usize * self.tile[0] as usize * self.tile[1] as usize
    }
    #[inline]
    pub fn index(&self, x: u32, y: u32) -> usize {
        let [tx, ty] = self.tile;
        // One tile column (the default): the formula below reduces exactly to
        // row-major with the tile's width as stride, without its divisions.
        if tx >= self.nx {
            return y as usize * tx as usize + x as usize;
        }
        let tile = (y / ty) as usize * self.tiles_x() as usize + (x / tx) as usize;
        tile * (tx as usize * ty as usize) + (y % ty) as usize * tx as usize + (x % tx) as usize
    }
}

/// What the caller asks for: the base grid and the patches of each finer level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HierarchySpec {
    pub base: [u32; 2],
    /// `levels[k]` holds the patches of level `k + 1`, in level-`k` coordinates.
    pub levels: Vec<Vec<Rect>>,
}

/// As a person reads it: the base grid's cells, then each level's patches
/// as cell ranges of the level above.
impl std::fmt::Display for HierarchySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "base grid {} x {} cells", self.base[0], self.base[1])?;
        for (k, patches) in self.levels.iter().enumerate() {
            write!(f, "; level {} patches", k + 1)?;
            for (i, r) in patches.iter().enumerate() {
                let sep = if i == 0 { " " } else { ", " };
                write!(f, "{sep}x {}..{} y {}..{}", r.x0, r.x1, r.y0, r.y1)?;
            }
        }
        Ok(())
    }
}

impl HierarchySpec {
    pub fn uniform(nx: u32, ny: u32) -> Self {
        HierarchySpec {
            base: [nx, ny],
            levels: Vec::new(),
        }
    }
}

/// One patch of one level, validated.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Patch {
    pub level: usize,
    pub index: usize,
    /// Index of the patch of level `level - 1` that contains this one.
    pub parent: Option<usize>,
    /// The rectangle as given, in level-`level - 1` coordinates (whole domain for level 0).
    pub rect: Rect,
    /// Global level coordinates of allocation cell (0, 0): negative for a
    /// patch whose ghost band reaches beyond a domain side it touches.
    pub origin: [i64; 2],
    pub layout: Layout,
    /// The cells this patch advances, in allocation coordinates.
    pub active: Rect,
    /// Which sides of the active region (x-min, x-max, y-min, y-max) lie on
    /// the domain's boundary: all four for the base grid, those a refined
    /// patch touches otherwise.
    pub on_boundary: [bool; 4],
}

impl Patch {
    pub fn name(&self) -> String {
        format!("L{}.p{}", self.level, self.index)
    }
    /// Width of the ghost band around the active region.
    pub fn ghost(&self) -> u32 {
        if self.level == 0 { 0 } else { GHOST }
    }
    /// The active region in global coordinates of this level.
    pub fn global_active(&self) -> [i64; 4] {
        [
            self.origin[0] + self.active.x0 as i64,
            self.origin[1] + self.active.y0 as i64,
            self.origin[0] + self.active.x1 as i64,
            self.origin[1] + self.active.y1 as i64,
        ]
    }
}

/// A validated hierarchy: `levels[l]` lists the patches of level `l`; level 0 is
/// exactly one patch, the base grid.
#[derive(Clone, Debug, Serialize)]
pub struct Hierarchy {
    pub levels: Vec<Vec<Patch>>,
}

impl Hierarchy {
    pub fn n_levels(&self) -> usize {
        self.levels.len()
    }
    pub fn base(&self) -> &Patch {
        &self.levels[0][0]
    }
    pub fn patches(&self) -> impl Iterator<Item = &Patch> {
        self.levels.iter().flatten()
    }

    /// Cell updates in one base interval: every active cell of level `l`
    /// updates 2^l times.
    pub fn cell_updates_per_interval(&self) -> u64 {
        self.patches()
            .map(|p| p.active.cells() as u64 * (1u64 << p.level))
            .sum()
    }
}

impl HierarchySpec {
    /// Checks every patch and builds the layouts with the storage tile of each
    /// level (`None` or a missing entry: the whole allocation), or names the
    /// first bad patch.
    pub fn validate(&self, tiles: &[Option<[u32; 2]>]) -> Result<Hierarchy> {
        let [nx, ny] = self.base;
        if nx == 0 || ny == 0 {
            return Err(Error::parameter(
                "base",
                format!("{nx}x{ny}"),
                "both sizes must be at least 1 cell",
            ));
        }
        if tiles.len() > self.levels.len() + 1 {
            return Err(Error::parameter(
                "run.tiles",
                tiles.len(),
                &format!("at most one tile per level ({} levels)", self.levels.len() + 1),
            ));
        }
        let tile_for = |level: usize, alloc: [u32; 2]| -> Result<[u32; 2]> {
            match tiles.get(level).copied().flatten() {
                None => Ok(alloc),
                Some([tx, ty]) if tx >= 1 && ty >= 1 => Ok([tx, ty]),
                Some([tx, ty]) => Err(Error::parameter(
                    &format!("run.tiles[{level}]"),
                    format!("[{tx}, {ty}]"),
                    "tile sides must be at least 1 cell",
                )),
            }
        };
        let base_layout = Layout {
            nx,
            ny,
            tile: tile_for(0, [nx, ny])?,
        };
        let mut levels = vec![vec![Patch {
            level: 0,
            index: 0,
            parent: None,
            rect: Rect::new(0, 0, nx, ny),
            origin: [0, 0],
            layout: base_layout,
            active: Rect::new(0, 0, nx, ny),
            on_boundary: [true; 4],
        }]];
        for (k, rects) in self.levels.iter().enumerate() {
            let level = k + 1;
            if rects.is_empty() {
                return Err(Error::Layout {
                    level,
                    patch: None,
                    reason: "a level needs at least one patch; drop the empty level instead".into(),
                });
            }
            let mut patches = Vec::with_capacity(rects.len());
            for (index, rect) in rects.iter().enumerate() {
                let name = Some((index, *rect));
                if rect.width() == 0 || rect.height() == 0 {
                    return Err(Error::Layout {
                        level,
                        patch: name,
                        reason: "empty patch: x1 must exceed x0 and y1 must exceed y0".into(),
                    });
                }
                let parents = &levels[level - 1];
                let global = |p: &Patch| {
                    let [ax0, ay0, ax1, ay1] = p.global_active();
                    Rect::new(ax0 as u32, ay0 as u32, ax1 as u32, ay1 as u32)
                };
                let Some(parent) = parents.iter().find(|p| global(p).overlaps(rect)) else {
                    return Err(Error::Layout {
                        level,
                        patch: name,
                        reason: format!("outside every patch of level {}", level - 1),
                    });
                };
                let parent_rect = global(parent);
                if !parent_rect.contains_with_margin(rect, 0) {
                    return Err(Error::Layout {
                        level,
                        patch: name,
                        reason: format!(
                            "outside its parent {} (level {} patch {} covers {parent_rect})",
                            parent.name(),
                            level - 1,
                            parent.index
                        ),
                    });
                }
                let gaps = [
                    rect.x0 - parent_rect.x0,
                    parent_rect.x1 - rect.x1,
                    rect.y0 - parent_rect.y0,
                    parent_rect.y1 - rect.y1,
                ];
                let mut on_boundary = [false; 4];
                for (side, gap) in gaps.into_iter().enumerate() {
                    let touches_domain = gap == 0 && parent.on_boundary[side];
                    if touches_domain {
                        let across = if side < 2 {
                            parent_rect.width()
                        } else {
                            parent_rect.height()
                        };
                        if across < PARENT_MARGIN {
                            return Err(Error::Layout {
                                level,
                                patch: name,
                                reason: format!(
                                    "touches the domain's {} side, but its parent {parent_rect} is only {across} \
                                     cells across there; the mirrored stencil needs {PARENT_MARGIN}",
                                    SIDE_NAMES[side]
                                ),
                            });
                        }
                        on_boundary[side] = true;
                    } else if gap < PARENT_MARGIN {
                        let alternative = if parent.on_boundary[side] {
                            " (or touch that side, the domain's boundary, if it is a wall, moving wall or free-slip side)"
                        } else {
                            ""
                        };
                        return Err(Error::Layout {
                            level,
                            patch: name,
                            reason: format!(
                                "too close to the {} edge of its parent {parent_rect}: the ghost band and its \
                                 interpolation stencil need {PARENT_MARGIN} parent cells on every side{alternative}",
                                SIDE_NAMES[side]
                            ),
                        });
                    }
                }
                if let Some((other, _)) = rects[..index].iter().enumerate().find(|(_, r)| r.overlaps(rect)) {
                    return Err(Error::Layout {
                        level,
                        patch: name,
                        reason: format!("overlaps level {level} patch {other} {}", rects[other]),
                    });
                }
                let grown = Rect::new(
                    rect.x0.saturating_sub(1),
                    rect.y0.saturating_sub(1),
                    rect.x1 + 1,
                    rect.y1 + 1,
                );
                if let Some((other, _)) = rects[..index].iter().enumerate().find(|(_, r)| r.overlaps(&grown)) {
                    return Err(Error::Layout {
                        level,
                        patch: name,
                        reason: format!(
                            "touches level {level} patch {other} {}: sibling patches need a gap of at least one \
                             parent cell, where the interface mass correction acts; merge them into one patch instead",
                            rects[other]
                        ),
                    });
                }
                let alloc = [2 * rect.width() + 2 * GHOST, 2 * rect.height() + 2 * GHOST];
                patches.push(Patch {
                    level,
                    index,
                    parent: Some(parent.index),
                    rect: *rect,
                    origin: [2 * rect.x0 as i64 - GHOST as i64, 2 * rect.y0 as i64 - GHOST as i64],
                    layout: Layout {
                        nx: alloc[0],
                        ny: alloc[1],
                        tile: tile_for(level, alloc)?,
                    },
                    active: Rect::new(GHOST, GHOST, alloc[0] - GHOST, alloc[1] - GHOST),
                    on_boundary,
                });
            }
            levels.push(patches);
        }
        Ok(Hierarchy { levels })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(levels: Vec<Vec<Rect>>) -> HierarchySpec {
        HierarchySpec { base: [48, 48], levels }
    }

    fn check_refused(levels: Vec<Vec<Rect>>, expect: &[&str]) {
        let message = spec(levels).validate(&[]).unwrap_err().to_string();
        for part in expect {
            assert!(message.contains(part), "`{message}` lacks `{part}`");
        }
    }

    #[test]
    fn four_level_fixture_is_accepted() {
        let h = spec(vec![
            vec![Rect::new(6, 6, 26, 26)],
            vec![Rect::new(20, 20, 44, 44)],
            vec![Rect::new(56, 56, 72, 72)],
        ])
        .validate(&[])
        .unwrap();
        assert_eq!(h.n_levels(), 4);
        let p = &h.levels[3][0];
        assert_eq!((p.layout.nx, p.layout.ny), (40, 40));
        assert_eq!(p.origin, [108, 108]);
        assert_eq!(p.active, Rect::new(4, 4, 36, 36));
    }

    #[test]
    fn bad_layouts_name_the_patch_and_the_reason() {
        check_refused(
            vec![vec![Rect::new(40, 40, 60, 60)]],
            &[
                "level 1 patch 0 (`refinement[0].patches[0]`, cells x 40..60 y 40..60 of level 0)",
                "outside",
            ],
        );
        check_refused(
            vec![vec![Rect::new(6, 6, 20, 20), Rect::new(18, 18, 30, 30)]],
            &["level 1 patch 1", "overlaps level 1 patch 0"],
        );
        check_refused(
            vec![vec![Rect::new(6, 6, 20, 20), Rect::new(20, 6, 30, 30)]],
            &["level 1 patch 1", "touches level 1 patch 0"],
        );
        check_refused(
            vec![vec![Rect::new(2, 6, 20, 20)]],
            &[
                "level 1 patch 0",
                "too close to the x_min edge",
                "4 parent cells",
                "or touch that side",
            ],
        );
        check_refused(
            vec![vec![Rect::new(10, 10, 10, 20)]],
            &["level 1 patch 0", "empty patch"],
        );
        check_refused(
            vec![vec![Rect::new(6, 6, 26, 26)], vec![Rect::new(12, 20, 30, 30)]],
            &["level 2 patch 0", "too close"],
        );
        check_refused(vec![vec![]], &["level 1", "at least one patch"]);
        // Touching the parent's edge is only allowed where that edge is the domain's.
        check_refused(
            vec![vec![Rect::new(0, 6, 20, 20)], vec![Rect::new(10, 12, 30, 30)]],
            &["level 2 patch 0", "too close to the y_min edge"],
        );
        check_refused(
            vec![vec![Rect::new(0, 6, 20, 20)], vec![Rect::new(2, 20, 30, 30)]],
            &["level 2 patch 0", "too close to the x_min edge", "or touch that side"],
        );
        let message = HierarchySpec {
            base: [48, 3],
            levels: vec![vec![Rect::new(0, 0, 20, 3)]],
        }
        .validate(&[])
        .map(|_| ())
        .expect_err("a parent 3 cells across cannot mirror a 4-cell stencil")
        .to_string();
        assert!(message.contains("only 3 cells across"), "{message}");
    }

    #[test]
    fn patches_may_touch_the_domain_boundary_and_their_children_may_follow() {
        let h = spec(vec![vec![Rect::new(0, 0, 20, 48)], vec![Rect::new(0, 10, 30, 96)]])
            .validate(&[])
            .unwrap();
        assert_eq!(h.levels[0][0].on_boundary, [true; 4]);
        assert_eq!(h.levels[1][0].on_boundary, [true, false, true, true]);
        assert_eq!(h.levels[2][0].on_boundary, [true, false, false, true]);
        // The ghost band reaches beyond the domain on the touching sides.
        assert_eq!(h.levels[1][0].origin, [-4, -4]);
        assert_eq!(h.levels[2][0].origin, [-4, 16]);
    }

    #[test]
    fn tiled_index_is_a_bijection_onto_the_plane() {
        let layout = Layout {
            nx: 10,
            ny: 7,
            tile: [4, 3],
        };
        let mut seen = vec![false; layout.plane_cells()];
        for y in 0..7 {
            for x in 0..10 {
                let i = layout.index(x, y);
                assert!(!seen[i], "index {i} hit twice");
                seen[i] = true;
            }
        }
        let whole = Layout {
            nx: 10,
            ny: 7,
            tile: [10, 7],
        };
        assert_eq!(whole.index(3, 2), 23);
    }
}
