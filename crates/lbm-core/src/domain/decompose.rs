//! The split of a run over several devices (issue 13's decomposition): the
//! base grid cut into slabs along x, the cuts placed so that the most loaded
//! slab holds as few cell updates (over all levels) as they can, each kept
//! clear of every refinement patch and body, so
//! that each patch (with its coupling stencil) and each body's links belong
//! to one slab. A layout where no such cut exists is refused, naming what is
//! in the way.
//!
//! Each slab's [`SlabWindow`] turns the whole hierarchy into the part one
//! device holds ([`SlabWindow::restrict`]): its base columns with one halo
//! column beyond each cut, whose side is then an interface (the general
//! update pulls from the halo column as a refined patch pulls from its ghost
//! band), and the patches inside it. `lbm_core::split` runs the slabs and
//! fills the halo columns.
//!
//! What it does not do: run anything, or move a halo.

use serde::{Deserialize, Serialize};

use crate::config::{Boundary, LatticeConfig};
use crate::domain::geometry::BODY_CLEARANCE;
use crate::domain::hierarchy::{Hierarchy, Layout, PARENT_MARGIN, Patch, Rect};
use crate::domain::sides::PatchSides;
use crate::error::{Error, Result};
use crate::kernels::halo::halo_bytes;

/// Base cells a cut keeps from a refinement patch's footprint: what its
/// coupling reads of the parent around it.
pub const CUT_CLEARANCE: u32 = PARENT_MARGIN;

/// Base columns a slab holds at least.
pub const MIN_SLAB_COLUMNS: u32 = 4;

/// One device's part of the base grid: columns `[x0, x1)`, every row.
#[derive(Clone, Debug, PartialEq)]
pub struct Slab {
    pub x0: u32,
    pub x1: u32,
    /// Cell updates per base interval over all levels.
    pub cell_updates: u64,
}

/// The slabs of a run over `slabs.len()` devices.
#[derive(Clone, Debug, PartialEq)]
pub struct Decomposition {
    pub slabs: Vec<Slab>,
    /// Cuts that exchange halos: one between each pair of neighbouring
    /// slabs, and one more across a periodic x side.
    pub cuts: usize,
    /// Rows of the base grid: the cells of each cut.
    pub rows: u32,
    /// Whether the x sides are periodic, so that the last slab's x-max side
    /// meets the first slab's x-min side across a cut.
    pub periodic: bool,
}

/// What one device holds of a decomposed run: base columns `[x0, x1)` of
/// every row and, beyond each side that is a cut (`halo[0]` x-min,
/// `halo[1]` x-max), one halo column holding the neighbour's populations
/// that cross it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlabWindow {
    pub x0: u32,
    pub x1: u32,
    pub halo: [bool; 2],
}

impl SlabWindow {
    /// Columns of halo beyond the x-min side.
    pub fn halo_before(&self) -> u32 {
        u32::from(self.halo[0])
    }

    /// The part of `hierarchy` (validated for the whole domain) and of its
    /// patches' `sides` this window holds: the base grid's columns with
    /// the halo columns around them, and every patch inside it, numbered
    /// anew in order with its parent renumbered. A finer level may be left
    /// without patches; a patch crossing the window's edges is refused (the
    /// decomposition never cuts one).
    pub fn restrict(
        &self,
        hierarchy: &Hierarchy,
        sides: &[Vec<PatchSides>],
    ) -> Result<(Hierarchy, Vec<Vec<PatchSides>>)> {
        let whole = hierarchy.base();
        let (nx, ny) = (whole.active.width(), whole.active.height());
        if self.x0 >= self.x1 || self.x1 > nx {
            return Err(Error::parameter(
                "slab",
                format!("columns {}..{}", self.x0, self.x1),
                &format!("a non-empty range of the {nx} base columns"),
            ));
        }
        let before = self.halo_before();
        let alloc = self.x1 - self.x0 + before + u32::from(self.halo[1]);
        // A tile as wide as the whole grid is the default, row-major storage.
        let tile = match whole.layout.tile == [whole.layout.nx, whole.layout.ny] {
            true => [alloc, ny],
            false => whole.layout.tile,
        };
        let base = Patch {
            origin: [self.x0 as i64 - before as i64, 0],
            layout: Layout { nx: alloc, ny, tile },
            active: Rect::new(before, 0, before + self.x1 - self.x0, ny),
            on_boundary: [!self.halo[0], !self.halo[1], true, true],
            ..whole.clone()
        };
        let mut levels = vec![vec![base]];
        let mut kept_sides = vec![vec![sides[0][0]]];
        // Which patches of the previous level the window holds, by their
        // index in the whole hierarchy: the new index, or none.
        let mut renumbered: Vec<Option<usize>> = vec![Some(0)];
        for (level, patches) in hierarchy.levels.iter().enumerate().skip(1) {
            let (mut kept, mut kept_level_sides, mut next) = (Vec::new(), Vec::new(), vec![None; patches.len()]);
            for p in patches {
                let parent = p.parent.and_then(|q| renumbered[q]);
                let [x0, _, x1, _] = p.global_active();
                let scale = 1i64 << level;
                let inside = x0 >= self.x0 as i64 * scale && x1 <= self.x1 as i64 * scale;
                let outside = x1 <= self.x0 as i64 * scale || x0 >= self.x1 as i64 * scale;
                match (parent, inside) {
                    (Some(parent), true) => {
                        next[p.index] = Some(kept.len());
                        kept.push(Patch {
                            index: kept.len(),
                            parent: Some(parent),
                            ..p.clone()
                        });
                        kept_level_sides.push(sides[level][p.index]);
                    }
                    _ if outside => {}
                    _ => {
                        return Err(Error::Layout {
                            level,
                            patch: Some((p.index, p.rect)),
                            reason: format!(
                                "crosses the edge of the slab of base columns {}..{}: a patch stays whole on one \
                                 device",
                                self.x0, self.x1
                            ),
                        });
                    }
                }
            }
            levels.push(kept);
            kept_sides.push(kept_level_sides);
            renumbered = next;
        }
        Ok((Hierarchy { levels }, kept_sides))
    }
}

impl Decomposition {
    /// Cuts `hierarchy`'s base grid into `devices` slabs; see the module
    /// documentation.
    pub fn plan(hierarchy: &Hierarchy, lattice: &LatticeConfig, devices: usize) -> Result<Decomposition> {
        let base = hierarchy.base();
        let (nx, ny) = (base.active.width(), base.active.height());
        let widest = (nx / MIN_SLAB_COLUMNS) as usize;
        let work = column_work(hierarchy);
        // Where a cut may not fall: strictly inside a patch's footprint
        // widened by the clearance, or a level-0 body's.
        let mut blocked: Vec<(u32, u32, String)> = hierarchy
            .patches()
            .filter(|p| p.level > 0)
            .map(|p| {
                let [x0, _, x1, _] = p.global_active();
                let scale = 1i64 << p.level;
                let (f0, f1) = (x0.div_euclid(scale), (x1 + scale - 1).div_euclid(scale));
                (
                    (f0 - CUT_CLEARANCE as i64).max(0) as u32,
                    (f1 + CUT_CLEARANCE as i64).min(nx as i64) as u32,
                    format!("patch {}", p.name()),
                )
            })
            .collect();
        // A body's part in the domain: a bump's circle spans far wider.
        let domain = [0.0, 0.0, nx as f64, lattice.hierarchy.base[1] as f64];
        // An edge on a cell face (0.56 m at 0.01 m a cell is 56.00000000000001
        // cells) is that face, as the case's cell faces are everywhere.
        let on_face = |v: f64| if (v - v.round()).abs() < 1e-6 { v.round() } else { v };
        for (b, body) in lattice.bodies.iter().enumerate().filter(|(_, b)| b.level == 0) {
            let [x0, _, x1, _] = body.shape.bounds_within(domain).unwrap_or_else(|| body.shape.bounds());
            blocked.push((
                (on_face(x0).floor() - BODY_CLEARANCE).max(0.0) as u32,
                ((on_face(x1).ceil() + BODY_CLEARANCE) as u32).min(nx),
                format!("body {b}"),
            ));
        }
        let allowed = |c: u32| blocked.iter().all(|(a, b, _)| c <= *a || c >= *b);
        let prefix: Vec<u64> = std::iter::once(0)
            .chain(work.iter().scan(0u64, |s, w| {
                *s += w;
                Some(*s)
            }))
            .collect();
        let total = prefix[nx as usize];
        // Whether cuts `k0..` can follow a cut at `from` with no slab
        // holding more than `most` updates, or the cut that finds no place
        // (its index and the columns it could have taken). The columns each
        // cut can reach are carried forward one cut at a time: a cut placed
        // greedily (as far right as it may go) can leave the next one inside
        // a patch where a cut further left would not.
        let rest = |devices: usize, k0: usize, from: u32, most: u64| -> std::result::Result<(), (usize, u32, u32)> {
            let mut reached = vec![false; nx as usize + 1];
            reached[from as usize] = true;
            let mut first = from;
            for k in k0..devices {
                let lo = first + MIN_SLAB_COLUMNS;
                let hi = nx - (devices - k) as u32 * MIN_SLAB_COLUMNS;
                let mut next = vec![false; nx as usize + 1];
                // The rightmost reachable cut at least a slab's width
                // before `c`: the previous cut that leaves `c`'s slab least work.
                let (mut nearest, mut scan) = (None, first);
                for c in lo..=hi {
                    while scan + MIN_SLAB_COLUMNS <= c {
                        if reached[scan as usize] {
                            nearest = Some(scan);
                        }
                        scan += 1;
                    }
                    next[c as usize] =
                        allowed(c) && nearest.is_some_and(|p: u32| prefix[c as usize] - prefix[p as usize] <= most);
                }
                first = (lo..=hi).find(|c| next[*c as usize]).ok_or((k, lo, hi))?;
                reached = next;
            }
            let last = (first..=nx)
                .rev()
                .find(|c| reached[*c as usize])
                .expect("`first` is reached");
            match prefix[nx as usize] - prefix[last as usize] <= most {
                true => Ok(()),
                false => Err((devices - 1, last, nx)),
            }
        };
        // The most slabs any layout holds, for a refusal only: a layout of G
        // slabs less one cut is one of G - 1, so those that fit are 1 to some
        // largest G.
        let most_slabs = || {
            let (mut fit, mut over) = (1, widest + 1);
            while over - fit > 1 {
                let mid = fit + (over - fit) / 2;
                match rest(mid, 1, 0, total) {
                    Ok(()) => fit = mid,
                    Err(_) => over = mid,
                }
            }
            fit
        };
        if devices == 0 || devices > widest {
            let fit = most_slabs();
            return Err(Error::parameter(
                "--devices",
                devices,
                &format!(
                    "1 to {fit} for this layout (slabs of at least {MIN_SLAB_COLUMNS} of the {nx} base columns, \
                     cuts clear of patches and bodies)"
                ),
            ));
        }
        if let Err((k, lo, hi)) = rest(devices, 1, 0, total) {
            let fit = most_slabs();
            let (_, _, what) = blocked
                .iter()
                .find(|(a, b, _)| *a < hi && *b > lo)
                .expect("only a blocked range can leave no cut");
            return Err(Error::parameter(
                "--devices",
                devices,
                &format!(
                    "1 to {fit} for this layout: cut {k} of {} could fall only between base columns {lo} and \
                     {hi}, which {what} and its {CUT_CLEARANCE}-cell clearance cover (patches and bodies stay \
                     whole on one device)",
                    devices - 1
                ),
            ));
        }
        // The smallest most-loaded slab the cuts allow ...
        let (mut lo, mut hi) = (total.div_ceil(devices as u64), total);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match rest(devices, 1, 0, mid) {
                Ok(_) => hi = mid,
                Err(_) => lo = mid + 1,
            }
        }
        let most = lo;
        // ... and under it each cut nearest an even share of what is left.
        let mut cuts = vec![0u32];
        for k in 1..devices {
            let prev = cuts[k - 1];
            let start = prefix[prev as usize];
            let share = start as f64 + (total - start) as f64 / (devices - k + 1) as f64;
            let lo = prev + MIN_SLAB_COLUMNS;
            let hi = nx - (devices - k) as u32 * MIN_SLAB_COLUMNS;
            // Nearest the share first, so the feasibility of the rest is
            // asked of few candidates.
            let mut candidates: Vec<u32> = (lo..=hi)
                .filter(|c| allowed(*c) && prefix[*c as usize] - start <= most)
                .collect();
            candidates.sort_by(|a, b| {
                let d = |c: u32| (prefix[c as usize] as f64 - share).abs();
                d(*a).total_cmp(&d(*b))
            });
            let cut = candidates
                .into_iter()
                .find(|c| rest(devices, k + 1, *c, most).is_ok())
                .expect("the bound is feasible, so some cut keeps it");
            cuts.push(cut);
        }
        cuts.push(nx);
        let slabs = cuts
            .windows(2)
            .map(|w| Slab {
                x0: w[0],
                x1: w[1],
                cell_updates: prefix[w[1] as usize] - prefix[w[0] as usize],
            })
            .collect();
        let periodic = lattice.boundaries[0] == Boundary::Periodic;
        Ok(Decomposition {
            slabs,
            cuts: devices - 1 + usize::from(periodic && devices > 1),
            rows: ny,
            periodic,
        })
    }

    /// The window of slab `k`: a halo column beyond each side that meets
    /// another slab.
    pub fn window(&self, k: usize) -> SlabWindow {
        let g = self.slabs.len();
        let across = self.periodic && g > 1;
        SlabWindow {
            x0: self.slabs[k].x0,
            x1: self.slabs[k].x1,
            halo: [k > 0 || across, k + 1 < g || across],
        }
    }

    /// The most loaded slab's cell updates over the mean.
    pub fn imbalance(&self) -> f64 {
        let most = self.slabs.iter().map(|s| s.cell_updates).max().unwrap_or(0) as f64;
        let mean = self.slabs.iter().map(|s| s.cell_updates).sum::<u64>() as f64 / self.slabs.len() as f64;
        most / mean
    }

    /// Bytes the halo exchange moves per base interval: at each cut, each
    /// side's crossing populations (f32) of every row, both ways, once per
    /// level-0 hop.
    pub fn halo_bytes_per_interval(&self) -> u64 {
        (self.cuts * 2 * halo_bytes(self.rows)) as u64
    }
}

/// Cell updates per base interval of each base column, over all levels (a
/// level-`l` cell updates 2^l times and a base column holds 2^l of its
/// columns).
fn column_work(hierarchy: &Hierarchy) -> Vec<u64> {
    let base = hierarchy.base();
    let nx = base.active.width() as usize;
    let mut work = vec![0u64; nx];
    for p in hierarchy.patches() {
        let [x0, y0, x1, y1] = p.global_active();
        let (rows, updates) = ((y1 - y0) as u64, 1u64 << p.level);
        let scale = 1i64 << p.level;
        for x in x0..x1 {
            let column = x.div_euclid(scale) - base.origin[0] - base.active.x0 as i64;
            if let Some(w) = usize::try_from(column).ok().and_then(|c| work.get_mut(c)) {
                *w += rows * updates;
            }
        }
    }
    debug_assert_eq!(work.iter().sum::<u64>(), hierarchy.cell_updates_per_interval());
    work
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::hierarchy::Rect;

    fn plan(lattice: &LatticeConfig, devices: usize) -> Result<Decomposition> {
        let (hierarchy, _) = lattice.validate(&[]).unwrap();
        Decomposition::plan(&hierarchy, lattice, devices)
    }

    #[test]
    fn a_uniform_grid_splits_evenly_and_counts_its_halos() {
        let mut lattice = LatticeConfig::uniform(120, 40, 0.8, [Boundary::Periodic; 4]);
        let d = plan(&lattice, 3).unwrap();
        assert_eq!(
            d.slabs.iter().map(|s| (s.x0, s.x1)).collect::<Vec<_>>(),
            [(0, 40), (40, 80), (80, 120)]
        );
        assert_eq!(d.imbalance(), 1.0);
        // Periodic in x: three cuts, each 2 x 3 populations of 40 rows of f32.
        assert_eq!(d.cuts, 3);
        assert_eq!(d.halo_bytes_per_interval(), 3 * 2 * 3 * 40 * 4);
        lattice.boundaries[0] = Boundary::Wall;
        lattice.boundaries[1] = Boundary::Wall;
        assert_eq!(plan(&lattice, 3).unwrap().cuts, 2);
        assert_eq!(plan(&lattice, 1).unwrap().halo_bytes_per_interval(), 0);
    }

    #[test]
    fn cuts_balance_the_refined_work_and_keep_clear_of_patches() {
        let mut lattice = LatticeConfig::uniform(120, 40, 0.8, [Boundary::Periodic; 4]);
        lattice.hierarchy.levels = vec![vec![Rect::new(10, 14, 26, 26)]];
        let d = plan(&lattice, 2).unwrap();
        let (hierarchy, _) = lattice.validate(&[]).unwrap();
        assert_eq!(
            d.slabs.iter().map(|s| s.cell_updates).sum::<u64>(),
            hierarchy.cell_updates_per_interval()
        );
        // The patch's 1536 updates pull the cut left of the middle, to 41.
        assert_eq!(d.slabs[0].x1, 41);
        assert!(d.imbalance() < 1.01, "{}", d.imbalance());
        // A patch holding more than half the work stays whole: the cut keeps
        // clear of it and the imbalance says what that costs.
        lattice.hierarchy.levels = vec![vec![Rect::new(10, 8, 40, 32)]];
        let d = plan(&lattice, 2).unwrap();
        assert_eq!(d.slabs[0].x1, 40 + CUT_CLEARANCE);
        assert!(d.imbalance() > 1.4, "{}", d.imbalance());
    }

    /// A body whose edge lies on a cell face, as a case in metres puts it
    /// (56.00000000000001 cells), keeps the cut its clearance from that face,
    /// not a column further: a cut at 60 balances two slabs of 60 columns.
    #[test]
    fn a_body_edge_on_a_cell_face_is_that_face() {
        use crate::domain::geometry::{Body, Shape};
        let mut lattice = LatticeConfig::uniform(120, 40, 0.8, [Boundary::Wall; 4]);
        lattice.bodies = vec![Body {
            shape: Shape::Rectangle {
                min: [50.0, 10.0],
                max: [0.56 / 0.01, 20.0],
            },
            level: 0,
        }];
        let d = plan(&lattice, 2).unwrap();
        assert_eq!(d.slabs[0].x1, 60, "{d:?}");
        assert_eq!(d.imbalance(), 1.0);
    }

    /// The smallest most-loaded slab over every layout of `devices` slabs
    /// of at least `MIN_SLAB_COLUMNS` whose cuts keep `CUT_CLEARANCE` from
    /// each patch footprint `[f0, f1)`, by enumeration.
    fn best_by_enumeration(work: &[u64], footprints: &[(u32, u32)], devices: usize) -> Option<u64> {
        let nx = work.len() as u32;
        let allowed = |c: u32| {
            footprints
                .iter()
                .all(|&(f0, f1)| c <= f0.saturating_sub(CUT_CLEARANCE) || c >= f1 + CUT_CLEARANCE)
        };
        let load = |a: u32, b: u32| work[a as usize..b as usize].iter().sum::<u64>();
        fn go(
            from: u32,
            left: usize,
            nx: u32,
            allowed: &dyn Fn(u32) -> bool,
            load: &dyn Fn(u32, u32) -> u64,
        ) -> Option<u64> {
            if left == 1 {
                return (nx - from >= MIN_SLAB_COLUMNS).then(|| load(from, nx));
            }
            (from + MIN_SLAB_COLUMNS..nx)
                .filter(|c| allowed(*c))
                .filter_map(|c| go(c, left - 1, nx, allowed, load).map(|rest| rest.max(load(from, c))))
                .min()
        }
        go(0, devices, nx, &allowed, &load)
    }

    #[test]
    fn the_cuts_are_found_whenever_a_layout_exists_and_balance_it_best() {
        // A 64-column cavity refined in its middle half (as
        // cases/cavity-re100.toml): 6 and 7 slabs fit, three or four left of
        // the patch and the rest right of it.
        let mut lattice = LatticeConfig::uniform(64, 32, 0.8, [Boundary::Wall; 4]);
        lattice.hierarchy.levels = vec![vec![Rect::new(16, 8, 48, 24)]];
        for devices in [6, 7] {
            let d = plan(&lattice, devices).unwrap();
            assert_eq!(d.slabs.len(), devices);
            assert!(d.slabs.iter().all(|s| s.x1 - s.x0 >= MIN_SLAB_COLUMNS), "{d:?}");
            assert!(
                d.slabs
                    .iter()
                    .all(|s| s.x1 <= 12 || s.x0 >= 52 || (s.x0 <= 12 && s.x1 >= 52)),
                "{d:?}"
            );
        }
        // Placements of one or two patches in a 28-column grid, over 1
        // to 6 devices: a layout is found exactly when one exists, and its
        // most loaded slab is the least any layout gives.
        let mut compared = 0;
        for a in (0..=20).step_by(2) {
            for width in [3, 7] {
                for second in [None, Some(22)] {
                    let mut patches = vec![Rect::new(a + 2, 0, (a + 2 + width).min(26), 8)];
                    if let Some(b) = second
                        && b > a + width + 4
                    {
                        patches.push(Rect::new(b, 0, b + 2, 8));
                    }
                    let mut lattice = LatticeConfig::uniform(28, 8, 0.8, [Boundary::Wall; 4]);
                    lattice.hierarchy.levels = vec![patches.clone()];
                    let Ok((hierarchy, _)) = lattice.validate(&[]) else {
                        continue;
                    };
                    let work = column_work(&hierarchy);
                    let footprints: Vec<(u32, u32)> = patches.iter().map(|r| (r.x0, r.x1)).collect();
                    for devices in 1..=6 {
                        let found = Decomposition::plan(&hierarchy, &lattice, devices);
                        let best = best_by_enumeration(&work, &footprints, devices);
                        let most = found
                            .as_ref()
                            .ok()
                            .map(|d| d.slabs.iter().map(|s| s.cell_updates).max().unwrap());
                        assert_eq!(most, best, "{patches:?} over {devices}: {found:?}");
                        // A refusal names the most devices any layout takes.
                        if let Err(e) = found {
                            let largest = (1..devices)
                                .rev()
                                .find(|g| best_by_enumeration(&work, &footprints, *g).is_some())
                                .unwrap_or(1);
                            let e = e.to_string();
                            assert!(
                                e.contains(&format!("1 to {largest} for this layout")),
                                "{patches:?}: {e}"
                            );
                        }
                        compared += 1;
                    }
                }
            }
        }
        assert!(compared > 100, "{compared}");
    }

    #[test]
    fn impossible_layouts_and_counts_are_refused_naming_the_flag() {
        let mut lattice = LatticeConfig::uniform(40, 40, 0.8, [Boundary::Periodic; 4]);
        lattice.hierarchy.levels = vec![vec![Rect::new(6, 6, 34, 34)]];
        let e = plan(&lattice, 2).unwrap_err().to_string();
        assert!(e.contains("--devices") && e.contains("patch L1.p0"), "{e}");
        let e = plan(&lattice, 0).unwrap_err().to_string();
        assert!(e.contains("--devices") && e.contains("1 to 1 for this layout"), "{e}");
        assert!(plan(&lattice, 11).is_err());
    }
}
