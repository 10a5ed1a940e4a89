// lbm.cu: the per-hop update of one patch (pull streaming with boundaries, then
// TRT collision with Guo forcing), `current -> spare`, as two kernels:
// `stream_collide_bulk` over the interior of a row-major patch, with no flag
// and only the rules of periodic and wall sides that its region reaches,
// and `stream_collide`, the general update, over every
// active cell or over a list of cells (the patch's rim and, per row, the span
// around a body's cells: lbm_core::kernels::lbm::boundary_cells). The bulk
// kernel computes every interior cell it does not skip as if its
// neighbourhood were fluid; it skips each row's span, which the list kernel
// computes, so the two write different cells (the plan runs them side by
// side) and together write exactly what the general kernel alone writes.
//
// `stream_collide` mirrors lbm_core::kernels::lbm::{stream_collide, pull, body_wall,
// anti_bounce_back} cell by cell: one thread per active cell, row-major
// over the active region, or per listed cell (`stream_collide_spread`: a
// column of nine threads per cell, one per population); solid cells are
// copied unchanged. A population that would
// come from beyond a side of the active region takes that side's rule, the first
// match in this order winning at a corner: inlet (bounce-back with the inlet
// profile's sample for the row and direction, domain::order::inlet_sample, times the
// amplitude factor in `boundary_state`, the momentum term at rest density, and
// where omega- < 1 the odd non-equilibrium it turns restored), wall (bounce-back with the wall's velocity,
// across two walls the sum of both), outflow (anti-bounce-back at rest density
// with the velocity extrapolated from the cell and its upstream neighbour,
// plus the leaving population's viscous part from the velocity gradient),
// free slip (the
// population mirrored in the wall, from the same row or column), then the
// periodic wrap within the active region or the ghost band's value. A population
// from a solid cell is returned by the body: Bouzidi's interpolated bounce-back
// with the wall distance of the link when the launch passes a wall-distance
// table (`n_wall_cells` > 0), else half-way bounce-back.
//
// What it does not do: no momentum exchange (exchange.cu), no coupling between
// levels (refine.cu), no update of the inlet factor (boundary.cu), and no reads
// of a buffer the launch does not use: `wall_distance` only with interpolated
// walls (its `n_wall_cells` indices and the q of the cells found there),
// `inlet_profile` and `boundary_state` only with an inlet side, which is
// what lbm-core's launch check sizes. It never reads outside the allocation
// as long as ghost sides have at least one cell of band, which that check
// also makes.
#include "common.cuh"

// The bulk kernel's rule for a side of its region (two bits per side, x-min
// lowest): a neighbour at the fixed offset, the region's other end, or a wall.
#define LBM_BULK_NEIGHBOUR 0u
#define LBM_BULK_WRAP 1u
#define LBM_BULK_WALL 2u
#define LBM_BULK_SIDE(sides, side) (((sides) >> (2 * (side))) & 3u)

// No side: a source inside the active region along that axis.
#define LBM_BOUNDARY_NONE 0xFFFFFFFFu

// The kind of side `side` (0 x-min, 1 x-max, 2 y-min, 3 y-max), or LBM_BOUNDARY_NONE for -1.
__device__ __forceinline__ unsigned int edge_kind(int side, unsigned int e0, unsigned int e1, unsigned int e2,
                                                  unsigned int e3) {
    return side < 0 ? LBM_BOUNDARY_NONE : (side == 0 ? e0 : (side == 1 ? e1 : (side == 2 ? e2 : e3)));
}

// Whether (x, y) lies next to a side of kind `kind`, i.e. some population
// arrives there from beyond that side.
__device__ __forceinline__ bool next_to(unsigned int kind, unsigned int x, unsigned int y, unsigned int x0,
                                        unsigned int y0, unsigned int x1, unsigned int y1, unsigned int e0,
                                        unsigned int e1, unsigned int e2, unsigned int e3) {
    return (x == x0 && e0 == kind) || (x + 1 == x1 && e1 == kind) || (y == y0 && e2 == kind) ||
           (y + 1 == y1 && e3 == kind);
}

// The wall-distance table of lbm_core::kernels::lbm::WallDistances: `n`
// storage indices ascending, then LBM_Q f32 per listed cell. `slot` is the
// cell's position in it, found at the cell's first body link and kept for the
// others (-2: not looked for yet, -1: not listed).
struct WallTable {
    const unsigned int* __restrict__ words;
    unsigned int n;
    int slot;
};

// lbm_core::kernels::lbm::wall_distance: the first listed index not below
// `index`, by the same bisection step for step, and q = 0 when that is not
// `index`.
__device__ __forceinline__ float wall_distance_of(WallTable* table, unsigned int index, int i) {
    if (table->slot == -2) {
        unsigned int lo = 0;
        unsigned int hi = table->n;
        while (lo < hi) {
            const unsigned int mid = lo + (hi - lo) / 2;
            if (table->words[mid] < index) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        table->slot = lo < table->n && table->words[lo] == index ? (int)lo : -1;
    }
    return table->slot < 0 ? 0.0f : __uint_as_float(table->words[table->n + (unsigned int)table->slot * LBM_Q + i]);
}

// cpu::body_wall: the population the body returns into (x, y) along `i`, the
// neighbour (x, y) - c_i being solid. The cell behind, (x, y) + c_i, counts only
// inside the active region and when fluid.
__device__ __forceinline__ float body_wall(const float* __restrict__ src, const unsigned char* __restrict__ flags,
                                           WallTable* walls, Layout layout, unsigned int x0,
                                           unsigned int y0, unsigned int x1, unsigned int y1, unsigned int x,
                                           unsigned int y, int i, size_t index, size_t plane) {
    const float q = walls->n != 0 ? wall_distance_of(walls, (unsigned int)index, i) : 0.5f;
    const int bx = (int)x + lbm_cx(i);
    const int by = (int)y + lbm_cy(i);
    bool has_behind = false;
    size_t behind = 0;
    if (bx >= (int)x0 && by >= (int)y0 && bx < (int)x1 && by < (int)y1) {
        behind = cell_index(layout, (unsigned int)bx, (unsigned int)by);
        has_behind = flags[behind] == LBM_FLAG_FLUID;
    }
    return bouzidi(src, plane, index, has_behind, behind, i, q);
}

// The population arriving at `index` along `i` from storage cell `source`
// (itself, mirrored along `direction`, or the body's return when it is solid).
__device__ __forceinline__ float neighbour_or_wall(const float* __restrict__ src,
                                                   const unsigned char* __restrict__ flags, WallTable* walls,
                                                   Layout layout, unsigned int x0, unsigned int y0, unsigned int x1,
                                                   unsigned int y1, unsigned int x, unsigned int y, int i,
                                                   int direction, size_t index, size_t source, size_t plane) {
    return flags[source] != LBM_FLAG_FLUID
               ? body_wall(src, flags, walls, layout, x0, y0, x1, y1, x, y, i, index, plane)
               : src[(size_t)direction * plane + source];
}

// What the open sides' rules need of a cell next to them. The outflow's
// (cpu::anti_bounce_back): the boundary velocity (the cell's velocity, the force taken back out of the
// post-collision momentum, extrapolated half a cell from the upstream
// neighbour (x - 1, y) when that lies in the active region), the
// non-equilibrium correction's velocity gradient (cpu::outflow_gradient:
// backward along x, central along y, one-sided in an edge row of the active
// region; `gxy` = d ux/dy + d uy/dx) and factor -(2/omega+ - 1) * 3, and the
// cell's own velocity `here_ux`, `here_uy` (where omega- > 1 the leaving
// population's odd non-equilibrium is dropped). Its neighbours are fluid: a
// body keeps 4 cells from every side (LatticeConfig::check_bodies). The
// inlet's: `here_ux`, `here_uy` (where omega- < 1 the arriving population's
// odd non-equilibrium is restored).
struct SideState {
    float ux, uy, gxx, gyy, gxy, scale, here_ux, here_uy;
};

// The velocity of cell `index` after the last collision, the force taken
// back out.
__device__ __forceinline__ Moments cell_moments(const float* __restrict__ src, size_t plane, size_t index,
                                                float force_x, float force_y) {
    float cell[LBM_Q];
    read_cell(src, plane, index, cell);
    return moments(cell, -force_x, -force_y);
}

__device__ __forceinline__ SideState outflow_state(const float* __restrict__ src, Layout layout, size_t plane,
                                                 size_t index, unsigned int x, unsigned int y, unsigned int x0,
                                                 unsigned int y0, unsigned int y1, float force_x, float force_y,
                                                 float omega_plus) {
    SideState out;
    const Moments here = cell_moments(src, plane, index, force_x, force_y);
    float dx[2] = {0.0f, 0.0f};
    if (x > x0) {
        const Moments upstream = cell_moments(src, plane, cell_index(layout, x - 1, y), force_x, force_y);
        out.ux = 1.5f * here.ux - 0.5f * upstream.ux;
        out.uy = 1.5f * here.uy - 0.5f * upstream.uy;
        dx[0] = here.ux - upstream.ux;
        dx[1] = here.uy - upstream.uy;
    } else {
        out.ux = here.ux;
        out.uy = here.uy;
    }
    float dy[2] = {0.0f, 0.0f};
    const bool has_below = y > y0;
    const bool has_above = y + 1 < y1;
    if (has_below && has_above) {
        const Moments below = cell_moments(src, plane, cell_index(layout, x, y - 1), force_x, force_y);
        const Moments above = cell_moments(src, plane, cell_index(layout, x, y + 1), force_x, force_y);
        dy[0] = 0.5f * (above.ux - below.ux);
        dy[1] = 0.5f * (above.uy - below.uy);
    } else if (has_above) {
        const Moments above = cell_moments(src, plane, cell_index(layout, x, y + 1), force_x, force_y);
        dy[0] = above.ux - here.ux;
        dy[1] = above.uy - here.uy;
    } else if (has_below) {
        const Moments below = cell_moments(src, plane, cell_index(layout, x, y - 1), force_x, force_y);
        dy[0] = here.ux - below.ux;
        dy[1] = here.uy - below.uy;
    }
    out.gxx = dx[0];
    out.gyy = dy[1];
    out.gxy = dx[1] + dy[0];
    out.scale = -(2.0f / omega_plus - 1.0f) * 3.0f;
    out.here_ux = here.ux;
    out.here_uy = here.uy;
    return out;
}

// cpu::odd_non_equilibrium: the odd non-equilibrium part of the population
// leaving `index` along `i` after the last collision, the cell's velocity
// being (here_ux, here_uy).
__device__ __forceinline__ float odd_non_equilibrium(const float* __restrict__ src, size_t plane, size_t index,
                                                     int i, float here_ux, float here_uy, float force_x,
                                                     float force_y) {
    const float cx = (float)lbm_cx(i);
    const float cy = (float)lbm_cy(i);
    const float cf = cx * force_x + cy * force_y;
    return 0.5f * (src[(size_t)i * plane + index] - src[(size_t)lbm_opp(i) * plane + index]) -
           3.0f * lbm_w(i) * (cx * here_ux + cy * here_uy) - 0.5f * 3.0f * lbm_w(i) * cf;
}

// The value of side `side` (0 x_min, 1 x_max, 2 y_min, 3 y_max) among four,
// by selects: an array indexed at run time would live in local memory.
__device__ __forceinline__ float side_value(int side, float x_min, float x_max, float y_min, float y_max) {
    return side == 0 ? x_min : (side == 1 ? x_max : (side == 2 ? y_min : y_max));
}

// The population arriving at (x, y) along `i` by the general rules
// (cpu::pull): the side rule of the first side its source lies beyond, else
// the neighbour or the body's return.
__device__ __forceinline__ float pull_general(
    const float* __restrict__ src, const unsigned char* __restrict__ flags, WallTable* walls, Layout layout,
    const float* __restrict__ inlet_profile, const float* __restrict__ boundary_state, unsigned int x,
    unsigned int y, unsigned int x0, unsigned int y0, unsigned int x1, unsigned int y1, unsigned int boundary_x_min,
    unsigned int boundary_x_max, unsigned int boundary_y_min, unsigned int boundary_y_max, float wall_x_min_ux,
    float wall_x_min_uy, float wall_x_max_ux, float wall_x_max_uy, float wall_y_min_ux, float wall_y_min_uy,
    float wall_y_max_ux, float wall_y_max_uy, const SideState& state, float omega_minus, float force_x,
    float force_y, int i, size_t index, size_t plane) {
    const unsigned int width = x1 - x0;
    const unsigned int height = y1 - y0;
    // cpu::pull, in signed arithmetic because a source may lie before x0 or y0.
    int sx = (int)x - lbm_cx(i);
    int sy = (int)y - lbm_cy(i);
    const int side_x = sx < (int)x0 ? 0 : (sx >= (int)x1 ? 1 : -1);
    const int side_y = sy < (int)y0 ? 2 : (sy >= (int)y1 ? 3 : -1);
    const unsigned int kind_x = edge_kind(side_x, boundary_x_min, boundary_x_max, boundary_y_min, boundary_y_max);
    const unsigned int kind_y = edge_kind(side_y, boundary_x_min, boundary_x_max, boundary_y_min, boundary_y_max);
    const float cx = (float)lbm_cx(i);
    const float cy = (float)lbm_cy(i);

    // Inlet or wall: bounce-back carrying the side's velocity; at a corner
    // an inlet wins over a wall, so each row injects its profile's whole
    // mass flux, and across two walls the link takes the sum of their
    // velocities (cpu::corner_velocity, y side first).
    const bool inlet = kind_x == LBM_BOUNDARY_INLET || kind_y == LBM_BOUNDARY_INLET;
    const bool wall_x = kind_x == LBM_BOUNDARY_WALL;
    const bool wall_y = kind_y == LBM_BOUNDARY_WALL;
    if (inlet || wall_x || wall_y) {
        float ux;
        float uy;
        float sample = 0.0f;
        if (inlet) {
            // domain::order::inlet_sample: where the link crosses the inlet.
            sample = inlet_profile[LBM_INLET_SAMPLE(y - y0, lbm_cy(i))];
            ux = sample * boundary_state[1];
            uy = 0.0f;
        } else {
            const int side = wall_y ? side_y : side_x;
            ux = side_value(side, wall_x_min_ux, wall_x_max_ux, wall_y_min_ux, wall_y_max_ux);
            uy = side_value(side, wall_x_min_uy, wall_x_max_uy, wall_y_min_uy, wall_y_max_uy);
            if (wall_x && wall_y) {
                ux += side_value(side_x, wall_x_min_ux, wall_x_max_ux, wall_y_min_ux, wall_y_max_ux);
                uy += side_value(side_x, wall_x_min_uy, wall_x_max_uy, wall_y_min_uy, wall_y_max_uy);
            }
        }
        // cpu::pull's bounce: 2 w_i rho0 (c_i . u_w) / cs2 added to the leaving population.
        const float leaving = src[(size_t)lbm_opp(i) * plane + index];
        const float cu = cx * ux + cy * uy;
        const float value = leaving + lbm_w(i) * cu * (2.0f * LBM_INV_CS2);
        if (inlet && omega_minus < 1.0f && sample != 0.0f) {
            // cpu::pull: the odd non-equilibrium the bounce turned, restored
            // (not on the resting wall beside an inlet's span, sample 0).
            return value + 2.0f * odd_non_equilibrium(src, plane, index, i, state.here_ux, state.here_uy, force_x,
                                                      force_y);
        }
        return value;
    }

    // Outflow: anti-bounce-back at rest density, with the viscous correction.
    if (kind_x == LBM_BOUNDARY_OUTFLOW || kind_y == LBM_BOUNDARY_OUTFLOW) {
        const float strain =
            (cx * cx - 1.0f / 3.0f) * state.gxx + (cy * cy - 1.0f / 3.0f) * state.gyy + cx * cy * state.gxy;
        const float correction = state.scale * lbm_w(i) * strain;
        const float cu = cx * state.ux + cy * state.uy;
        const int leaving = lbm_opp(i);
        // cpu::outflow_rest_density: hydrostatic under a body force across.
        const float middle = (float)(y0 + y1 - 1u) * 0.5f;
        const float rest = 3.0f * force_y * ((float)y - middle);
        const float lx = (float)lbm_cx(leaving);
        const float ly = (float)lbm_cy(leaving);
        const float cf = lx * force_x + ly * force_y;
        const float value =
            -src[(size_t)leaving * plane + index] +
            2.0f * lbm_w(i) *
                (rest + 4.5f * cu * cu - 1.5f * (state.ux * state.ux + state.uy * state.uy)) +
            correction + 3.0f * lbm_w(leaving) * cf;
        if (omega_minus > 1.0f) {
            // cpu::anti_bounce_back's d_i: the odd non-equilibrium dropped.
            return value + odd_non_equilibrium(src, plane, index, leaving, state.here_ux, state.here_uy, force_x,
                                               force_y);
        }
        return value;
    }

    // Free slip: the population that left this row (column) towards the wall, mirrored.
    int direction = i;
    if (kind_x == LBM_BOUNDARY_FREE_SLIP) {
        direction = lbm_mirror_x(direction);
        sx = (int)x;
    }
    if (kind_y == LBM_BOUNDARY_FREE_SLIP) {
        direction = lbm_mirror_y(direction);
        sy = (int)y;
    }
    if (kind_x == LBM_BOUNDARY_PERIODIC) {
        sx += side_x == 0 ? (int)width : -(int)width;
    }
    if (kind_y == LBM_BOUNDARY_PERIODIC) {
        sy += side_y == 2 ? (int)height : -(int)height;
    }
    const size_t source = cell_index(layout, (unsigned int)sx, (unsigned int)sy);
    return neighbour_or_wall(src, flags, walls, layout, x0, y0, x1, y1, x, y, i, direction, index, source, plane);
}

// The cell of list entry `t` (cells: the active region's row-major
// numbers; none: entry t is cell t), false where there is none or it lies
// outside the active region (skipped, as on the CPU).
__device__ __forceinline__ bool listed_cell(const unsigned int* __restrict__ cells, unsigned int n_cells,
                                            unsigned long long t, unsigned int width, unsigned int height,
                                            unsigned int* cell) {
    const unsigned long long region = (unsigned long long)width * height;
    if (cells != nullptr) {
        if (t >= n_cells) {
            return false;
        }
        *cell = cells[t];
    } else {
        *cell = (unsigned int)t;
        if (t >= region) {
            return false;
        }
    }
    return (unsigned long long)*cell < region;
}

// The wall table of a listed cell at `index`: a list with a wall table
// carries each cell's slot in it after the numbers
// (lbm_core::kernels::lbm::CellList): one check, where the bisection is a
// chain of dependent loads; a wrong hint bisects.
__device__ __forceinline__ WallTable listed_walls(const unsigned int* __restrict__ wall_distance,
                                                  unsigned int n_wall_cells, const unsigned int* __restrict__ cells,
                                                  unsigned int n_cells, unsigned long long t, size_t index) {
    WallTable walls = {wall_distance, n_wall_cells, -2};
    if (cells != nullptr && n_wall_cells != 0) {
        const unsigned int hint = cells[n_cells + t];
        if (hint < n_wall_cells && wall_distance[hint] == (unsigned int)index) {
            walls.slot = (int)hint;
        }
    }
    return walls;
}

LBM_KERNEL(stream_collide)(
    const float* __restrict__ src, float* __restrict__ dst, const unsigned char* __restrict__ flags,
    const unsigned int* __restrict__ wall_distance, const float* __restrict__ inlet_profile,
    const float* __restrict__ boundary_state, const unsigned int* __restrict__ cells, unsigned int n_cells,
    unsigned int nx, unsigned int ny, unsigned int tile_x,
    unsigned int tile_y, unsigned int x0, unsigned int y0, unsigned int x1, unsigned int y1, unsigned int boundary_x_min,
    unsigned int boundary_x_max, unsigned int boundary_y_min, unsigned int boundary_y_max, float wall_x_min_ux,
    float wall_x_min_uy, float wall_x_max_ux, float wall_x_max_uy, float wall_y_min_ux, float wall_y_min_uy,
    float wall_y_max_ux, float wall_y_max_uy, float omega_plus, float omega_minus, float force_x, float force_y,
    unsigned int n_wall_cells) {
    LBM_PROLOGUE();
    const unsigned int width = x1 - x0;
    const unsigned int height = y1 - y0;
    const unsigned long long t = thread_index();
    unsigned int cell;
    if (!listed_cell(cells, n_cells, t, width, height, &cell)) {
        return;
    }
    const Layout layout = make_layout(nx, ny, tile_x, tile_y);
    const size_t plane = plane_cells(layout);
    // 32-bit division: far cheaper than 64-bit, and an active region never
    // holds 2^32 cells (its nine planes would not fit in device memory).
    const unsigned int x = x0 + cell % width;
    const unsigned int y = y0 + cell / width;
    const size_t index = cell_index(layout, x, y);

    WallTable walls = listed_walls(wall_distance, n_wall_cells, cells, n_cells, t, index);
    float f[LBM_Q];
    if (flags[index] != LBM_FLAG_FLUID) {
        read_cell(src, plane, index, f);
        write_cell(dst, plane, index, f);
        return;
    }

    // Interior cells of a layout one tile wide (row-major with stride tile_x):
    // every neighbour lies in the active region at a fixed offset, so no side
    // rule and no tiled index are needed (cpu::stream_collide's fast path).
    if (nx <= tile_x && x > x0 && x + 1 < x1 && y > y0 && y + 1 < y1) {
#pragma unroll
        for (int i = 0; i < LBM_Q; ++i) {
            const size_t source =
                (size_t)((long long)index - (long long)lbm_cx(i) - (long long)lbm_cy(i) * (long long)tile_x);
            f[i] = neighbour_or_wall(src, flags, &walls, layout, x0, y0, x1, y1, x, y, i, i, index, source, plane);
        }
        collide(f, omega_plus, omega_minus, force_x, force_y);
        write_cell(dst, plane, index, f);
        return;
    }


    // A population comes from beyond a side only in a cell next to it, so the
    // open sides' state is computed once, in those cells: bit for bit what
    // the CPU computes per population.
    SideState state = {};
    if (next_to(LBM_BOUNDARY_OUTFLOW, x, y, x0, y0, x1, y1, boundary_x_min, boundary_x_max, boundary_y_min,
                boundary_y_max)) {
        state = outflow_state(src, layout, plane, index, x, y, x0, y0, y1, force_x, force_y, omega_plus);
    } else if (omega_minus < 1.0f && next_to(LBM_BOUNDARY_INLET, x, y, x0, y0, x1, y1, boundary_x_min,
                                             boundary_x_max, boundary_y_min, boundary_y_max)) {
        const Moments here = cell_moments(src, plane, index, force_x, force_y);
        state.here_ux = here.ux;
        state.here_uy = here.uy;
    }
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        f[i] = pull_general(src, flags, &walls, layout, inlet_profile, boundary_state, x, y, x0, y0, x1, y1,
                            boundary_x_min, boundary_x_max, boundary_y_min, boundary_y_max, wall_x_min_ux,
                            wall_x_min_uy, wall_x_max_ux, wall_x_max_uy, wall_y_min_ux, wall_y_min_uy, wall_y_max_ux,
                            wall_y_max_uy, state, omega_minus, force_x, force_y, i, index, plane);
    }
    collide(f, omega_plus, omega_minus, force_x, force_y);
    write_cell(dst, plane, index, f);
}

#ifdef LBM_PLAIN_PASS
// The population arriving at `index` along the constant `I`: the fixed
// offset in the interior of a one-tile layout (every neighbour in the active
// region, cpu::stream_collide's fast path), else the general rules.
template <int I>
__device__ __forceinline__ float pull_one(
    const float* __restrict__ src, const unsigned char* __restrict__ flags, WallTable* walls, Layout layout,
    const float* __restrict__ inlet_profile, const float* __restrict__ boundary_state, bool interior,
    unsigned int x, unsigned int y, unsigned int x0, unsigned int y0, unsigned int x1, unsigned int y1,
    unsigned int boundary_x_min, unsigned int boundary_x_max, unsigned int boundary_y_min,
    unsigned int boundary_y_max, float wall_x_min_ux, float wall_x_min_uy, float wall_x_max_ux,
    float wall_x_max_uy, float wall_y_min_ux, float wall_y_min_uy, float wall_y_max_ux, float wall_y_max_uy,
    float force_x, float force_y, float omega_plus, float omega_minus, size_t index, size_t plane) {
    if (interior) {
        const size_t source =
            (size_t)((long long)index - (long long)lbm_cx(I) - (long long)lbm_cy(I) * (long long)layout.tx);
        return neighbour_or_wall(src, flags, walls, layout, x0, y0, x1, y1, x, y, I, I, index, source, plane);
    }
    // Only a population moving towards -x can come from beyond the outflow
    // (x_max, the one side the case allows it on), and only one moving
    // towards +x from beyond the inlet (x_min); their state computed here, in
    // the one thread that needs it, keeps it out of the others' registers.
    SideState state = {};
    if (lbm_cx(I) < 0 && next_to(LBM_BOUNDARY_OUTFLOW, x, y, x0, y0, x1, y1, boundary_x_min, boundary_x_max,
                                 boundary_y_min, boundary_y_max)) {
        state = outflow_state(src, layout, plane, index, x, y, x0, y0, y1, force_x, force_y, omega_plus);
    }
    if (lbm_cx(I) > 0 && omega_minus < 1.0f &&
        next_to(LBM_BOUNDARY_INLET, x, y, x0, y0, x1, y1, boundary_x_min, boundary_x_max, boundary_y_min,
                boundary_y_max)) {
        const Moments here = cell_moments(src, plane, index, force_x, force_y);
        state.here_ux = here.ux;
        state.here_uy = here.uy;
    }
    return pull_general(src, flags, walls, layout, inlet_profile, boundary_state, x, y, x0, y0, x1, y1,
                        boundary_x_min, boundary_x_max, boundary_y_min, boundary_y_max, wall_x_min_ux,
                        wall_x_min_uy, wall_x_max_ux, wall_x_max_uy, wall_y_min_ux, wall_y_min_uy, wall_y_max_ux,
                        wall_y_max_uy, state, omega_minus, force_x, force_y, I, index, plane);
}

// A block of stream_collide: LBM_LIST_CELLS cells along x, one row of
// threads per population along y. Each thread pulls one population of its
// cell (its own chain of loads: the neighbour's flag, the body's wall
// distance, the values), the block shares them, and the first row collides
// and stores each cell: a cell's nine pulls run side by side instead of one
// after another in one thread, which is what bounded this kernel on short
// lists (a rim and the spans around a body). Its entry is
// `stream_collide_spread`, a plain kernel only: a fused batch runs
// `stream_collide` (one thread per cell), whose members' lists together
// already fill the device.
#define LBM_LIST_CELLS 32u

// Its parameters are stream_collide's, written out again: the tidy test
// reads both signatures from this file and checks each against the launch.
LBM_SPREAD_KERNEL(stream_collide)(
    const float* __restrict__ src, float* __restrict__ dst, const unsigned char* __restrict__ flags,
    const unsigned int* __restrict__ wall_distance, const float* __restrict__ inlet_profile,
    const float* __restrict__ boundary_state, const unsigned int* __restrict__ cells, unsigned int n_cells,
    unsigned int nx, unsigned int ny, unsigned int tile_x,
    unsigned int tile_y, unsigned int x0, unsigned int y0, unsigned int x1, unsigned int y1, unsigned int boundary_x_min,
    unsigned int boundary_x_max, unsigned int boundary_y_min, unsigned int boundary_y_max, float wall_x_min_ux,
    float wall_x_min_uy, float wall_x_max_ux, float wall_x_max_uy, float wall_y_min_ux, float wall_y_min_uy,
    float wall_y_max_ux, float wall_y_max_uy, float omega_plus, float omega_minus, float force_x, float force_y,
    unsigned int n_wall_cells) {
    LBM_PROLOGUE();
    __shared__ float pulled[LBM_Q][LBM_LIST_CELLS];
    const unsigned int width = x1 - x0;
    const unsigned int height = y1 - y0;
    const unsigned int lane = threadIdx.x;
    const int i = (int)threadIdx.y;
    const unsigned long long t = (unsigned long long)blockIdx.x * LBM_LIST_CELLS + lane;
    // Every thread reaches the barrier, so none returns before it.
    unsigned int cell = 0;
    const bool live = listed_cell(cells, n_cells, t, width, height, &cell);
    const Layout layout = make_layout(nx, ny, tile_x, tile_y);
    const size_t plane = plane_cells(layout);
    // 32-bit division: far cheaper than 64-bit, and an active region never
    // holds 2^32 cells (its nine planes would not fit in device memory).
    const unsigned int x = x0 + (live ? cell % width : 0u);
    const unsigned int y = y0 + (live ? cell / width : 0u);
    const size_t index = cell_index(layout, x, y);
    const bool fluid = live && flags[index] == LBM_FLAG_FLUID;
    if (live && !fluid) {
        // A solid cell keeps its populations: each thread copies its own.
        dst[(size_t)i * plane + index] = src[(size_t)i * plane + index];
    }
    if (fluid) {
        WallTable walls = listed_walls(wall_distance, n_wall_cells, cells, n_cells, t, index);
        const bool interior = nx <= tile_x && x > x0 && x + 1 < x1 && y > y0 && y + 1 < y1;
#define LBM_PULL_ONE(I)                                                                                          \
    case I:                                                                                                      \
        value = pull_one<I>(src, flags, &walls, layout, inlet_profile, boundary_state, interior, x, y, x0, y0, x1, \
                            y1, boundary_x_min, boundary_x_max, boundary_y_min, boundary_y_max, wall_x_min_ux,   \
                            wall_x_min_uy, wall_x_max_ux, wall_x_max_uy, wall_y_min_ux, wall_y_min_uy,           \
                            wall_y_max_ux, wall_y_max_uy, force_x, force_y, omega_plus, omega_minus, index, plane); \
        break;
        float value = 0.0f;
        // The row of threads is one population for the whole warp, so the
        // switch does not diverge.
        switch (i) {
            LBM_PULL_ONE(0)
            LBM_PULL_ONE(1)
            LBM_PULL_ONE(2)
            LBM_PULL_ONE(3)
            LBM_PULL_ONE(4)
            LBM_PULL_ONE(5)
            LBM_PULL_ONE(6)
            LBM_PULL_ONE(7)
            LBM_PULL_ONE(8)
        }
#undef LBM_PULL_ONE
        pulled[i][lane] = value;
    }
    __syncthreads();
    if (fluid && i == 0) {
        float f[LBM_Q];
#pragma unroll
        for (int k = 0; k < LBM_Q; ++k) {
            f[k] = pulled[k][lane];
        }
        collide(f, omega_plus, omega_minus, force_x, force_y);
        write_cell(dst, plane, index, f);
    }
}
#endif  // LBM_PLAIN_PASS

// lattice::collide operation for operation, with each opposite pair's two
// results computed together and stored at once: the same expressions in the
// same order give the same bits, and with few values live the kernel needs
// 32 registers instead of 48 (full occupancy).
__device__ __forceinline__ void collide_and_store(const float f[LBM_Q], float omega_plus, float omega_minus,
                                                  float force_x, float force_y, float* __restrict__ dst,
                                                  unsigned int plane, unsigned int index) {
    const Moments m = moments(f, force_x, force_y);
    const float usq = m.ux * m.ux + m.uy * m.uy;
    const bool forced = !(force_x == 0.0f && force_y == 0.0f);
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        const int o = lbm_opp(i);
        if (o < i) {
            continue;
        }
        float feq[2];
        float source[2] = {0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int d = k == 0 ? i : o;
            const float cx = (float)lbm_cx(d);
            const float cy = (float)lbm_cy(d);
            const float cu = cx * m.ux + cy * m.uy;
            feq[k] = lbm_w(d) * (m.delta_rho + (3.0f * cu + 4.5f * cu * cu - 1.5f * usq));
            if (forced) {
                const float term_x = 3.0f * (cx - m.ux) + 9.0f * cu * cx;
                const float term_y = 3.0f * (cy - m.uy) + 9.0f * cu * cy;
                source[k] = lbm_w(d) * (term_x * force_x + term_y * force_y);
            }
        }
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int d = k == 0 ? i : o;
            const int e = k == 0 ? o : i;
            const float even_neq = 0.5f * ((f[d] - feq[k]) + (f[e] - feq[1 - k]));
            const float odd_neq = 0.5f * ((f[d] - feq[k]) - (f[e] - feq[1 - k]));
            const float even_src = 0.5f * (source[k] + source[1 - k]);
            const float odd_src = 0.5f * (source[k] - source[1 - k]);
            const float out = f[d] - omega_plus * even_neq - omega_minus * odd_neq +
                              (1.0f - 0.5f * omega_plus) * even_src + (1.0f - 0.5f * omega_minus) * odd_src;
            if (k == 0 || o != i) {
                dst[(unsigned int)d * plane + index] = out;
            }
        }
    }
}

// The cell a launch's thread updates (false: none), and the prologue both
// entries share. A launch of one row of one-row blocks over a region of
// several rows runs its threads over the region's storage indices as one
// run, from the aligned index at or below its first cell, so that short
// rows idle only on the cells between them (the rim), not on a block's
// unused columns.
__device__ __forceinline__ bool bulk_cell(unsigned int tile_x, unsigned int x0, unsigned int y0, unsigned int x1,
                                          unsigned int y1, unsigned int* ux, unsigned int* y) {
    if (gridDim.y == 1 && blockDim.y == 1 && y1 - y0 > 1) {
        const unsigned int index = ((y0 * tile_x + x0) & ~31u) + blockIdx.x * blockDim.x + threadIdx.x;
        *y = index / tile_x;
        *ux = index - *y * tile_x;
        return *y >= y0 && *y < y1 && *ux >= x0 && *ux < x1;
    }
    *y = y0 + blockIdx.y * blockDim.y + threadIdx.y;
    const unsigned int lead = (*y * tile_x + x0) & 31u;
    const long long x = (long long)x0 - (long long)lead + (long long)(blockIdx.x * blockDim.x + threadIdx.x);
    *ux = (unsigned int)x;
    return x >= (long long)x0 && x < (long long)x1 && *y < y1;
}

// stream_collide_bulk: the update of the cells of [x0, x1) x [y0, y1), the
// interior of a patch stored row-major (one tile column, so a neighbour is a
// fixed offset away), computed as if the cell and its eight neighbours were
// fluid: no flag, no side rule, 32-bit indices (the launch check bounds nine
// planes by 2^32 cells). Each block row is one cell row (blocks of 256 x 1
// threads on rows of 225 cells or more, of 32 x 8 on shorter ones, where a
// 256-thread row would mostly idle), so no thread divides; or, where a
// small patch's short rows span most of its allocation's row, one run of
// one-row blocks over the region's storage indices (bulk_cell: a division
// a thread, against a row's last warp a quarter idle); each row's threads
// start at the storage index below x0 that is a multiple of 32 (threads
// before x0 do nothing), so that every warp's stores, and the loads of the
// directions without an x component, are whole aligned 128-byte lines:
// misaligned, each took two L2 requests, and the L2 was the bottleneck. The
// cells where the assumption fails are `stream_collide`'s, over the patch's
// list: the rim and, in each row, one span around the solid cells, which
// `skip` names ([xa, xb) per row, two u32, bottom up) and this kernel leaves
// alone, so the two launches write different cells and run side by side.
// At a side whose code in `sides` is a wrap (a periodic axis the region
// spans whole, no solid cell) or a wall, the region's cells along it take
// that rule as the general kernel does (its other end; the wall's
// bounce-back with the wall's velocity, the sum of both at a corner), so
// a periodic or walled patch without a body is this one launch, without a
// rim. The host launches stream_collide_bulk_walled where a side is a wall
// (this entry leaves its wall_* arguments unread): the walls' path compiled
// into one kernel cost every launch about 2% on large grids (H200, a 4096^2
// periodic grid, same run). A thread reads whether to skip after it has
// issued its nine loads: read
// first, it made the kernel take 37 registers instead of 32 (three quarters
// of the occupancy), and a skipped thread's loads are a few cells a row.
// lbm_core::kernels::lbm::stream_collide_bulk is its CPU reference.
LBM_KERNEL(stream_collide_bulk)(const float* __restrict__ src, float* __restrict__ dst,
                                               const unsigned int* __restrict__ skip,
                                               unsigned int nx, unsigned int ny, unsigned int tile_x,
                                               unsigned int tile_y, unsigned int x0, unsigned int y0,
                                               unsigned int x1, unsigned int y1, unsigned int sides,
                                               float wall_x_min_ux, float wall_x_min_uy, float wall_x_max_ux,
                                               float wall_x_max_uy, float wall_y_min_ux, float wall_y_min_uy,
                                               float wall_y_max_ux, float wall_y_max_uy, float omega_plus,
                                               float omega_minus, float force_x, float force_y) {
    LBM_PROLOGUE();
    unsigned int ux;
    unsigned int y;
    if (!bulk_cell(tile_x, x0, y0, x1, y1, &ux, &y)) {
        return;
    }
    const unsigned int plane = (unsigned int)plane_cells(make_layout(nx, ny, tile_x, tile_y));
    const unsigned int index = y * tile_x + ux;
    // A wrapped side shifts the fixed offset of the populations that cross
    // it at the region's cells along it by the region's span (the other end).
    const unsigned int span_x = x1 - x0;
    const unsigned int span_y = (y1 - y0) * tile_x;
    const unsigned int west = ux == x0 && LBM_BULK_SIDE(sides, 0) == LBM_BULK_WRAP ? span_x : 0u;
    const unsigned int east = ux + 1 == x1 && LBM_BULK_SIDE(sides, 1) == LBM_BULK_WRAP ? span_x : 0u;
    const unsigned int south = y == y0 && LBM_BULK_SIDE(sides, 2) == LBM_BULK_WRAP ? span_y : 0u;
    const unsigned int north = y + 1 == y1 && LBM_BULK_SIDE(sides, 3) == LBM_BULK_WRAP ? span_y : 0u;
    float f[LBM_Q];
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        unsigned int source = index - (unsigned int)lbm_cx(i) - (unsigned int)lbm_cy(i) * tile_x;
        if (lbm_cx(i) > 0) {
            source += west;
        } else if (lbm_cx(i) < 0) {
            source -= east;
        }
        if (lbm_cy(i) > 0) {
            source += south;
        } else if (lbm_cy(i) < 0) {
            source -= north;
        }
        f[i] = lbm_load_prefetched(src + ((unsigned int)i * plane + source));
    }
    if (skip != nullptr) {
        const unsigned int row = y - y0;
        if (ux >= skip[2 * row] && ux < skip[2 * row + 1]) {
            return;
        }
    }
    collide_and_store(f, omega_plus, omega_minus, force_x, force_y, dst, plane, index);
}

// stream_collide_bulk_walled: the same update where a side is a wall (the
// host picks it by the sides; the plain entry has no walls' path): the
// cells along a side with a rule of its own gather apart from the others.
// Capped at 32 registers (full occupancy; 40 uncapped), no spill.
LBM_BOUNDED_KERNEL(stream_collide_bulk_walled, 8)(const float* __restrict__ src, float* __restrict__ dst,
                                               const unsigned int* __restrict__ skip,
                                               unsigned int nx, unsigned int ny, unsigned int tile_x,
                                               unsigned int tile_y, unsigned int x0, unsigned int y0,
                                               unsigned int x1, unsigned int y1, unsigned int sides,
                                               float wall_x_min_ux, float wall_x_min_uy, float wall_x_max_ux,
                                               float wall_x_max_uy, float wall_y_min_ux, float wall_y_min_uy,
                                               float wall_y_max_ux, float wall_y_max_uy, float omega_plus,
                                               float omega_minus, float force_x, float force_y) {
    LBM_PROLOGUE();
    unsigned int ux;
    unsigned int y;
    if (!bulk_cell(tile_x, x0, y0, x1, y1, &ux, &y)) {
        return;
    }
    const unsigned int plane = (unsigned int)plane_cells(make_layout(nx, ny, tile_x, tile_y));
    const unsigned int index = y * tile_x + ux;
    float f[LBM_Q];
    // A cell on a side with a rule of its own (wrap or wall) takes it; every
    // other cell pulls each population from a fixed offset.
    const bool ruled = (ux == x0 && LBM_BULK_SIDE(sides, 0) != LBM_BULK_NEIGHBOUR) ||
                       (ux + 1 == x1 && LBM_BULK_SIDE(sides, 1) != LBM_BULK_NEIGHBOUR) ||
                       (y == y0 && LBM_BULK_SIDE(sides, 2) != LBM_BULK_NEIGHBOUR) ||
                       (y + 1 == y1 && LBM_BULK_SIDE(sides, 3) != LBM_BULK_NEIGHBOUR);
    if (!ruled) {
#pragma unroll
        for (int i = 0; i < LBM_Q; ++i) {
            const unsigned int source = index - (unsigned int)lbm_cx(i) - (unsigned int)lbm_cy(i) * tile_x;
            f[i] = src[(unsigned int)i * plane + source];
        }
    } else {
#pragma unroll
        for (int i = 0; i < LBM_Q; ++i) {
            const int side_x = lbm_cx(i) > 0 && ux == x0 ? 0 : (lbm_cx(i) < 0 && ux + 1 == x1 ? 1 : -1);
            const int side_y = lbm_cy(i) > 0 && y == y0 ? 2 : (lbm_cy(i) < 0 && y + 1 == y1 ? 3 : -1);
            const unsigned int kind_x = side_x < 0 ? LBM_BULK_NEIGHBOUR : LBM_BULK_SIDE(sides, side_x);
            const unsigned int kind_y = side_y < 0 ? LBM_BULK_NEIGHBOUR : LBM_BULK_SIDE(sides, side_y);
            // Across two walls the sum of their velocities, as in the
            // general kernel.
            const bool wall_x = kind_x == LBM_BULK_WALL;
            const bool wall_y = kind_y == LBM_BULK_WALL;
            if (wall_x || wall_y) {
                const int wall = wall_y ? side_y : side_x;
                float wx = side_value(wall, wall_x_min_ux, wall_x_max_ux, wall_y_min_ux, wall_y_max_ux);
                float wy = side_value(wall, wall_x_min_uy, wall_x_max_uy, wall_y_min_uy, wall_y_max_uy);
                if (wall_x && wall_y) {
                    wx += side_value(side_x, wall_x_min_ux, wall_x_max_ux, wall_y_min_ux, wall_y_max_ux);
                    wy += side_value(side_x, wall_x_min_uy, wall_x_max_uy, wall_y_min_uy, wall_y_max_uy);
                }
                const float cu = (float)lbm_cx(i) * wx + (float)lbm_cy(i) * wy;
                f[i] = src[(unsigned int)lbm_opp(i) * plane + index] + lbm_w(i) * cu * (2.0f * LBM_INV_CS2);
                continue;
            }
            unsigned int source = index - (unsigned int)lbm_cx(i) - (unsigned int)lbm_cy(i) * tile_x;
            if (kind_x == LBM_BULK_WRAP) {
                source = side_x == 0 ? source + (x1 - x0) : source - (x1 - x0);
            }
            if (kind_y == LBM_BULK_WRAP) {
                source = side_y == 2 ? source + (y1 - y0) * tile_x : source - (y1 - y0) * tile_x;
            }
            f[i] = src[(unsigned int)i * plane + source];
        }
    }
    if (skip != nullptr) {
        const unsigned int row = y - y0;
        if (ux >= skip[2 * row] && ux < skip[2 * row + 1]) {
            return;
        }
    }
    collide_and_store(f, omega_plus, omega_minus, force_x, force_y, dst, plane, index);
}
