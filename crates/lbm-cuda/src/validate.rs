//! Host-side checks that make a kernel launch memory-safe before it is enqueued.
//!
//! The CPU reference refuses a bad launch with an error or an index panic; on
//! the GPU the same launch would read or write outside its buffers. So before
//! every launch [`check`] proves, from the arguments alone, that each thread's
//! accesses stay inside the buffers it was given: argument kinds and count
//! (through lbm-core's typed decoders), buffer sizes from each byte offset,
//! offset alignment, the stencil geometry of each kernel, that no buffer is
//! both written and read (the CPU driver refuses that too), and that the grid
//! covers every work item (the CPU processes them all regardless of the grid).
//!
//! Buffers a launch passes but its kernel does not read are only required to
//! exist: `stream_collide` reads its wall distances only with interpolated
//! walls, and its inlet profile and boundary state only when a side is an
//! inlet; `update_boundary_state` reads its table only for a table amplitude.
//!
//! What it cannot check: the contents of a link table. A link's cell, behind
//! cell and direction are bounds-checked by the kernel itself, but its body
//! slot indexes the accumulators unchecked (the launch carries no body count),
//! so link tables are trusted to come from `lbm_core::geometry::wall_tables`.
//! Nothing here touches the device.

use lbm_core::device::BLOCK_THREADS;
use lbm_core::hierarchy::{GHOST, Layout};
use lbm_core::lattice::Q;
use lbm_core::launch::{
    AccumulateExchange, AccumulateFineFlux, CorrectInterfaceMass, EXCHANGE_WORDS, Edge, FillGhost, LINK_WORDS,
    RestrictToParent, StreamCollide, UpdateBoundaryState, fine_covered, inlet_samples, ring_cells,
};
use lbm_core::{Arg, BufferId, Error, Kernel, Launch, Result};

/// Checks `launch` against the buffer sizes `size_of` reports (bytes; `None`
/// for an unknown buffer), or says what is wrong. See the module documentation.
pub fn check(launch: &Launch, size_of: impl Fn(BufferId) -> Option<usize>) -> Result<()> {
    let kernel = launch.kernel;
    let refuse = |reason: String| Error::LaunchArgs {
        kernel: kernel.cuda_name().into(),
        reason,
    };
    // The typed decoders accept offset 0 only; offsets are checked below.
    let mut at_zero = launch.clone();
    let mut buffers = Vec::new();
    for arg in &mut at_zero.args {
        if let Arg::Buffer { id, byte_offset } = arg {
            buffers.push((*id, *byte_offset));
            *byte_offset = 0;
        }
    }
    let region = |slot: usize, what: &str, bytes: usize, align: u64| -> Result<()> {
        let (id, offset) = buffers[slot];
        let size = size_of(id).ok_or_else(|| Error::unknown_buffer("cuda", id))?;
        if offset % align != 0 {
            return Err(refuse(format!(
                "{what} ({id}) byte offset {offset} is not a multiple of {align}"
            )));
        }
        let available = (size as u64).saturating_sub(offset);
        if (bytes as u64) > available {
            return Err(refuse(format!(
                "{what} ({id}) holds {available} bytes after offset {offset}, the launch needs {bytes}"
            )));
        }
        Ok(())
    };
    let distinct = |written: usize, read: &[usize]| -> Result<()> {
        for &r in read {
            if buffers[written].0 == buffers[r].0 {
                return Err(refuse(format!(
                    "buffer {} is both read and written; kernels work out of place",
                    buffers[written].0
                )));
            }
        }
        Ok(())
    };

    let threads = match kernel {
        Kernel::StreamCollide => {
            let k = StreamCollide::decode(&at_zero)?;
            let plane = plane_cells(&k.layout, &refuse)?;
            let a = k.active;
            if a.x0 > a.x1 || a.y0 > a.y1 || a.x1 > k.layout.nx || a.y1 > k.layout.ny {
                return Err(refuse(format!(
                    "active region {a} is not inside the {}x{} allocation",
                    k.layout.nx, k.layout.ny
                )));
            }
            // A ghost side reads one cell beyond the active region.
            let room = [a.x0, k.layout.nx - a.x1, a.y0, k.layout.ny - a.y1];
            for (side, (edge, room)) in k.edges.iter().zip(room).enumerate() {
                if *edge == Edge::Ghost && room == 0 && a.cells() > 0 {
                    return Err(refuse(format!(
                        "side {side} is a ghost side but the active region {a} has no band beyond it"
                    )));
                }
            }
            region(0, "src", Q * plane * 4, 4)?;
            region(1, "dst", Q * plane * 4, 4)?;
            region(2, "flags", plane, 1)?;
            let mut read = vec![0, 2];
            if k.interpolated_walls {
                region(3, "wall_distance", Q * plane * 4, 4)?;
                read.push(3);
            }
            if k.edges.contains(&Edge::Inlet) {
                region(4, "inlet_profile", inlet_samples(a.height()) * 4, 4)?;
                region(5, "boundary_state", 8, 4)?;
                read.extend([4, 5]);
            }
            distinct(1, &read)?;
            a.cells()
        }
        Kernel::FillGhost => {
            let k = FillGhost::decode(&at_zero)?;
            let coarse_plane = plane_cells(&k.coarse, &refuse)?;
            let fine_plane = plane_cells(&k.fine, &refuse)?;
            if k.fine.nx < 2 * GHOST || k.fine.ny < 2 * GHOST {
                return Err(refuse(format!(
                    "the fine allocation {}x{} is smaller than its two ghost bands ({})",
                    k.fine.nx,
                    k.fine.ny,
                    2 * GHOST
                )));
            }
            let a = k.coarse_active;
            if a.x0 >= a.x1 || a.y0 >= a.y1 || a.x1 > k.coarse.nx || a.y1 > k.coarse.ny {
                return Err(refuse(format!(
                    "the parent's active region {a} is not inside its {}x{} allocation",
                    k.coarse.nx, k.coarse.ny
                )));
            }
            // The parent stencil of band cell (fx, fy) spans floor(p) - 1 ..= floor(p) + 2
            // with p as the kernel computes it; p grows with fx, so the corners bound
            // it. Beyond a wall side the kernel reads the mirror image instead, so
            // the cells read are the mirrored range's.
            for (axis, (offset, fine_n, coarse_n, lo, hi)) in [
                (k.active_offset[0], k.fine.nx, k.coarse.nx, a.x0, a.x1),
                (k.active_offset[1], k.fine.ny, k.coarse.ny, a.y0, a.y1),
            ]
            .into_iter()
            .enumerate()
            {
                let start = offset as i64 - (GHOST / 2) as i64;
                let first = parent_floor(start, 0) - 1;
                let last = parent_floor(start, fine_n - 1) + 2;
                let walls = [2 * axis, 2 * axis + 1].map(|side| !k.sides.kinds.is_interface(side));
                let (lo, hi) = (lo as i64, hi as i64);
                let mirrored = |c: i64| match c {
                    c if c < lo && walls[0] => 2 * lo - 1 - c,
                    c if c >= hi && walls[1] => 2 * hi - 1 - c,
                    c => c,
                };
                // The mirror map is monotone between these breakpoints.
                let read: Vec<i64> = [first, last, lo - 1, lo, hi - 1, hi]
                    .into_iter()
                    .filter(|c| (first..=last).contains(c))
                    .map(mirrored)
                    .collect();
                let (min, max) = (read.iter().min(), read.iter().max());
                if min
                    .zip(max)
                    .is_none_or(|(&min, &max)| min < 0 || max >= coarse_n as i64)
                {
                    return Err(refuse(format!(
                        "active offset {offset} on axis {axis}: the parent stencil needs cells {first} to {last} \
                         of {coarse_n} (mirrored beyond wall sides)"
                    )));
                }
            }
            region(0, "coarse_t", Q * coarse_plane * 4, 4)?;
            region(1, "coarse_t1", Q * coarse_plane * 4, 4)?;
            region(2, "fine_dst", Q * fine_plane * 4, 4)?;
            distinct(2, &[0, 1])?;
            FillGhost::band_cells(&k.fine)
        }
        Kernel::RestrictToParent => {
            let k = RestrictToParent::decode(&at_zero)?;
            let fine_plane = plane_cells(&k.fine, &refuse)?;
            let coarse_plane = plane_cells(&k.coarse, &refuse)?;
            let c = k.covered;
            if c.x0 > c.x1 || c.y0 > c.y1 || c.x1 > k.coarse.nx || c.y1 > k.coarse.ny {
                return Err(refuse(format!(
                    "covered region {c} is not inside the {}x{} parent",
                    k.coarse.nx, k.coarse.ny
                )));
            }
            let reach = |n: u32| k.fine_active_origin as u64 + 2 * n as u64;
            if reach(c.width()) > k.fine.nx as u64 || reach(c.height()) > k.fine.ny as u64 {
                return Err(refuse(format!(
                    "covered region {c} from fine cell {} reaches past the {}x{} fine allocation",
                    k.fine_active_origin, k.fine.nx, k.fine.ny
                )));
            }
            region(0, "fine_src", Q * fine_plane * 4, 4)?;
            region(1, "coarse_dst", Q * coarse_plane * 4, 4)?;
            distinct(1, &[0])?;
            c.cells()
        }
        Kernel::AccumulateFineFlux => {
            let k = AccumulateFineFlux::decode(&at_zero)?;
            let plane = plane_cells(&k.layout, &refuse)?;
            // The ring's ghost cells and their active neighbours lie inside the
            // allocation once both ghost bands fit.
            if k.layout.nx < 2 * GHOST || k.layout.ny < 2 * GHOST {
                return Err(refuse(format!(
                    "the fine allocation {}x{} is smaller than its two ghost bands ({})",
                    k.layout.nx,
                    k.layout.ny,
                    2 * GHOST
                )));
            }
            let ring = ring_cells(&fine_covered(&k.layout), k.kinds);
            region(0, "fine", Q * plane * 4, 4)?;
            region(1, "flux", ring * 4, 4)?;
            distinct(1, &[0])?;
            ring
        }
        Kernel::CorrectInterfaceMass => {
            let k = CorrectInterfaceMass::decode(&at_zero)?;
            let plane = plane_cells(&k.coarse, &refuse)?;
            let c = k.covered;
            // The ring lies one cell beyond each interface side.
            let room = |side: usize| k.kinds.is_interface(side) as u32;
            if c.x0 < room(0)
                || c.y0 < room(2)
                || c.x0 > c.x1
                || c.y0 > c.y1
                || c.x1 + room(1) > k.coarse.nx
                || c.y1 + room(3) > k.coarse.ny
            {
                return Err(refuse(format!(
                    "the ring around {c} is not inside the {}x{} parent",
                    k.coarse.nx, k.coarse.ny
                )));
            }
            // One block reduces the whole ring; its shared memory is sized for
            // exactly this block.
            if launch.grid != [1, 1, 1] || launch.block != [BLOCK_THREADS, 1, 1] {
                return Err(refuse(format!(
                    "runs as one block of {BLOCK_THREADS} threads, got grid {:?} and block {:?}",
                    launch.grid, launch.block
                )));
            }
            region(0, "coarse_t", Q * plane * 4, 4)?;
            region(1, "coarse_t1", Q * plane * 4, 4)?;
            region(2, "flux", ring_cells(&c, k.kinds) * 4, 4)?;
            distinct(1, &[0, 2])?;
            distinct(2, &[0])?;
            BLOCK_THREADS as usize
        }
        Kernel::AccumulateExchange => {
            let k = AccumulateExchange::decode(&at_zero)?;
            region(0, "f", Q * k.plane_cells as usize * 4, 4)?;
            region(1, "links", LINK_WORDS * k.n_links as usize * 4, 4)?;
            let one_body = if k.n_links > 0 { EXCHANGE_WORDS * 8 } else { 0 };
            region(2, "interval", one_body, 8)?;
            distinct(2, &[0, 1])?;
            if k.window_on {
                if buffers[3].0 == buffers[2].0 {
                    return Err(refuse("an open window needs its own accumulator".into()));
                }
                region(3, "window", one_body, 8)?;
                distinct(3, &[0, 1])?;
            }
            k.n_links as usize
        }
        Kernel::UpdateBoundaryState => {
            let k = UpdateBoundaryState::decode(&at_zero)?;
            region(0, "state", 8, 4)?;
            let table = 2 * k.table_points as usize * 4;
            region(1, "table", table, 4)?;
            if table > 0 {
                distinct(0, &[1])?;
            }
            1
        }
    };

    let [gx, gy, gz] = launch.grid;
    let [bx, by, bz] = launch.block;
    if gy != 1 || gz != 1 || by != 1 || bz != 1 || bx == 0 {
        return Err(refuse(format!(
            "kernels take one-dimensional launches, got grid {:?} and block {:?}",
            launch.grid, launch.block
        )));
    }
    if (gx as u64) * (bx as u64) < threads as u64 {
        return Err(refuse(format!(
            "grid of {gx} blocks of {bx} threads covers fewer than the {threads} work items"
        )));
    }
    Ok(())
}

/// `layout.plane_cells()`, once the layout is known not to divide by zero.
fn plane_cells(layout: &Layout, refuse: &impl Fn(String) -> Error) -> Result<usize> {
    if layout.nx == 0 || layout.ny == 0 || layout.tile[0] == 0 || layout.tile[1] == 0 {
        return Err(refuse(format!(
            "layout {}x{} with tile {:?}: sizes and tile sides must be at least 1",
            layout.nx, layout.ny, layout.tile
        )));
    }
    Ok(layout.plane_cells())
}

/// `floor(p)` of fine cell `f` in `fill_ghost`, in the kernel's f32 arithmetic.
fn parent_floor(start: i64, f: u32) -> i64 {
    (start as f32 + (f as f32 + 0.5) * 0.5 - 0.5).floor() as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use lbm_core::hierarchy::Rect;
    use lbm_core::launch::{Amplitude, PatchSides, SideKind, SideKinds};

    const SIZES: [usize; 9] = [8000, 8000, 1000, 16000, 16000, 64000, 64, 64, 96];

    fn size_of(id: BufferId) -> Option<usize> {
        SIZES.get(id.0 as usize).copied()
    }

    fn layout() -> Layout {
        Layout {
            nx: 12,
            ny: 10,
            tile: [4, 4],
        }
    }

    fn stream_collide() -> StreamCollide {
        StreamCollide {
            src: BufferId(0),
            dst: BufferId(1),
            flags: BufferId(2),
            // Not read: no interpolated walls, no inlet side.
            wall_distance: BufferId(6),
            inlet_profile: BufferId(6),
            boundary_state: BufferId(6),
            layout: layout(),
            active: Rect::new(1, 1, 11, 9),
            edges: [Edge::Ghost, Edge::Ghost, Edge::Wall, Edge::Periodic],
            wall_velocity: [[0.0; 2]; 4],
            omega_plus: 1.0,
            omega_minus: 1.0,
            force: [0.0; 2],
            interpolated_walls: false,
        }
    }

    /// Runs `check` and returns its refusal, or "ok".
    fn verdict(launch: &Launch) -> String {
        match check(launch, size_of) {
            Ok(()) => "ok".into(),
            Err(e) => e.to_string(),
        }
    }

    fn expect(launch: &Launch, parts: &[&str]) {
        let message = verdict(launch);
        for part in parts {
            assert!(message.contains(part), "`{message}` lacks `{part}`");
        }
    }

    #[test]
    fn stream_collide_bounds() {
        expect(&stream_collide().launch(), &["ok"]);
        let mut k = stream_collide();
        k.active = Rect::new(0, 1, 11, 9);
        expect(&k.launch(), &["ghost side", "no band"]);
        k.edges[0] = Edge::Periodic;
        expect(&k.launch(), &["ok"]);
        k.active = Rect::new(0, 1, 13, 9);
        expect(&k.launch(), &["not inside"]);
        let mut k = stream_collide();
        k.dst = BufferId(0);
        expect(&k.launch(), &["both read and written"]);
        let mut k = stream_collide();
        k.flags = BufferId(6);
        expect(&k.launch(), &["flags", "holds 64 bytes", "needs 144"]);
        let mut k = stream_collide();
        k.src = BufferId(42);
        expect(&k.launch(), &["unknown buffer 42"]);
        let mut k = stream_collide();
        k.layout.tile = [0, 4];
        expect(&k.launch(), &["tile sides must be at least 1"]);
    }

    #[test]
    fn stream_collide_sizes_the_buffers_it_reads_only() {
        // Wall distances: nine planes of 144 cells (5184 bytes), only with interpolated walls.
        let mut k = stream_collide();
        k.interpolated_walls = true;
        expect(&k.launch(), &["wall_distance", "holds 64 bytes", "needs 5184"]);
        k.wall_distance = BufferId(3);
        expect(&k.launch(), &["ok"]);
        k.wall_distance = BufferId(1);
        expect(&k.launch(), &["both read and written"]);
        // The inlet: three f32 per active row (8 rows) and the 8-byte state.
        let mut k = stream_collide();
        k.edges[0] = Edge::Inlet;
        k.edges[1] = Edge::Outflow;
        k.inlet_profile = BufferId(42);
        expect(&k.launch(), &["unknown buffer 42"]);
        k.inlet_profile = BufferId(8);
        expect(&k.launch(), &["ok"]);
        let mut launch = k.launch();
        launch.args[4] = Arg::Buffer {
            id: BufferId(8),
            byte_offset: 40,
        };
        expect(&launch, &["inlet_profile", "holds 56 bytes", "needs 96"]);
        launch.args[4] = Arg::buffer(BufferId(8));
        launch.args[5] = Arg::Buffer {
            id: BufferId(6),
            byte_offset: 60,
        };
        expect(&launch, &["boundary_state", "holds 4 bytes", "needs 8"]);
        k.boundary_state = BufferId(1);
        expect(&k.launch(), &["both read and written"]);
    }

    #[test]
    fn update_boundary_state_needs_its_state_and_table() {
        let update = |state: u32, table: u32, amplitude: &Amplitude| {
            UpdateBoundaryState::new(BufferId(state), BufferId(table), amplitude).launch()
        };
        let table = |n: usize| Amplitude::Table {
            points: vec![[0.0, 1.0]; n],
        };
        expect(&update(6, 0, &Amplitude::Constant), &["ok"]);
        expect(&update(6, 6, &Amplitude::Sine { period: 10.0 }), &["ok"]);
        expect(&update(6, 7, &table(8)), &["ok"]);
        expect(&update(6, 7, &table(9)), &["table", "holds 64 bytes", "needs 72"]);
        expect(&update(6, 6, &table(2)), &["both read and written"]);
        let mut launch = update(6, 0, &Amplitude::Constant);
        launch.args[0] = Arg::Buffer {
            id: BufferId(6),
            byte_offset: 58,
        };
        expect(&launch, &["state", "multiple of 4"]);
        launch.grid = [0, 1, 1];
        launch.args[0] = Arg::buffer(BufferId(6));
        expect(&launch, &["covers fewer than the 1 work items"]);
    }

    #[test]
    fn offsets_count_against_the_size_and_must_be_aligned() {
        let mut launch = stream_collide().launch();
        launch.args[0] = Arg::Buffer {
            id: BufferId(0),
            byte_offset: 2,
        };
        expect(&launch, &["src", "offset 2", "multiple of 4"]);
        // 9 planes of 144 cells are 5184 bytes: buffer 5 has room from 8 bytes in.
        launch.args[0] = Arg::Buffer {
            id: BufferId(5),
            byte_offset: 8,
        };
        expect(&launch, &["ok"]);
        launch.args[0] = Arg::Buffer {
            id: BufferId(5),
            byte_offset: 60_000,
        };
        expect(&launch, &["src", "after offset 60000"]);
    }

    #[test]
    fn grid_must_cover_every_item() {
        let mut launch = stream_collide().launch();
        launch.grid = [0, 1, 1];
        expect(&launch, &["covers fewer than the 80 work items"]);
        launch.grid = [1, 2, 1];
        expect(&launch, &["one-dimensional"]);
    }

    #[test]
    fn fill_ghost_and_restrict_stencils_stay_inside_the_parent() {
        let fine = Layout {
            nx: 16,
            ny: 16,
            tile: [16, 16],
        };
        let coarse = Layout {
            nx: 20,
            ny: 20,
            tile: [4, 4],
        };
        let fill_with = |active_offset: [u32; 2], sides: PatchSides| {
            FillGhost {
                coarse_t: BufferId(3),
                coarse_t1: BufferId(4),
                fine_dst: BufferId(5),
                coarse,
                coarse_active: Rect::new(0, 0, 20, 20),
                fine,
                active_offset,
                sides,
                alpha: 0.5,
                tau_plus: 0.6,
                tau_minus: 0.7,
                coarse_force: [0.0; 2],
            }
            .launch()
        };
        let fill = |active_offset: [u32; 2]| fill_with(active_offset, PatchSides::INTERFACES);
        // Band cell 0 has its stencil from parent cell active_offset - 4; the
        // last (fine cell 15) up to active_offset + 7.
        expect(&fill([4, 4]), &["ok"]);
        expect(&fill([3, 4]), &["axis 0", "parent stencil"]);
        expect(&fill([12, 12]), &["ok"]);
        expect(&fill([12, 13]), &["axis 1", "parent stencil"]);
        // Touching a wall side: the stencil reads mirror images instead.
        let walled = |side: usize| {
            let mut sides = PatchSides::INTERFACES;
            sides.kinds.0[side] = SideKind::Wall;
            sides
        };
        expect(&fill_with([0, 4], walled(0)), &["ok"]);
        expect(&fill_with([4, 14], walled(3)), &["ok"]);
        expect(&fill([4, 14]), &["axis 1", "parent stencil"]);
        expect(&fill_with([0, 4], walled(2)), &["axis 0", "parent stencil"]);
        let restrict = |covered: Rect| {
            RestrictToParent {
                fine_src: BufferId(5),
                coarse_dst: BufferId(3),
                fine,
                coarse,
                covered,
                fine_active_origin: GHOST,
                sides: PatchSides::INTERFACES,
                tau_plus: 0.6,
                tau_minus: 0.7,
                coarse_force: [0.0; 2],
            }
            .launch()
        };
        expect(&restrict(Rect::new(4, 4, 8, 8)), &["ok"]);
        expect(&restrict(Rect::new(4, 4, 10, 10)), &["ok"]);
        expect(&restrict(Rect::new(4, 4, 11, 8)), &["reaches past"]);
        expect(&restrict(Rect::new(18, 4, 21, 8)), &["not inside"]);
    }

    #[test]
    fn reflux_geometry_and_launch_shape() {
        let coarse = Layout {
            nx: 20,
            ny: 20,
            tile: [20, 20],
        };
        let correct_with = |covered: Rect, kinds: SideKinds| {
            CorrectInterfaceMass {
                coarse_t: BufferId(3),
                coarse_t1: BufferId(4),
                flux: BufferId(2),
                coarse,
                covered,
                kinds,
            }
            .launch()
        };
        let correct = |covered: Rect| correct_with(covered, SideKinds::INTERFACES);
        expect(&correct(Rect::new(1, 1, 19, 19)), &["ok"]);
        expect(&correct(Rect::new(0, 1, 19, 19)), &["ring around", "not inside"]);
        expect(&correct(Rect::new(1, 1, 20, 19)), &["ring around", "not inside"]);
        let (i, w) = (SideKind::Interface, SideKind::Wall);
        expect(&correct_with(Rect::new(0, 1, 20, 19), SideKinds([w, w, i, i])), &["ok"]);
        expect(
            &correct_with(Rect::new(0, 0, 20, 19), SideKinds([w, w, i, i])),
            &["ring around"],
        );
        let mut launch = correct(Rect::new(4, 4, 8, 8));
        launch.grid = [2, 1, 1];
        expect(&launch, &["one block of 256"]);
        let mut launch = correct(Rect::new(4, 4, 8, 8));
        launch.args[2] = Arg::buffer(BufferId(4));
        expect(&launch, &["both read and written"]);
        let flux = |nx: u32| {
            AccumulateFineFlux {
                fine: BufferId(5),
                flux: BufferId(2),
                layout: Layout {
                    nx,
                    ny: 16,
                    tile: [4, 4],
                },
                kinds: SideKinds::INTERFACES,
            }
            .launch()
        };
        expect(&flux(16), &["ok"]);
        expect(&flux(6), &["smaller than its two ghost bands"]);
    }

    #[test]
    fn exchange_needs_distinct_accumulators_when_the_window_is_open() {
        let exchange = |window: u32, window_on: bool| {
            AccumulateExchange {
                f: BufferId(0),
                plane_cells: 100,
                links: BufferId(2),
                n_links: 10,
                interval: BufferId(6),
                window: BufferId(window),
                window_on,
            }
            .launch()
        };
        expect(&exchange(6, false), &["ok"]);
        expect(&exchange(7, true), &["ok"]);
        expect(&exchange(6, true), &["own accumulator"]);
        expect(&exchange(0, true), &["both read and written"]);
    }
}
