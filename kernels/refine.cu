// refine.cu: the coupling between a refined patch and its parent.
//
// `fill_ghost` (coarse to fine) rebuilds every ghost-band cell of a fine patch
// from its parent: density and velocity interpolated bicubically (4-point
// Lagrange), the gradients of velocity and momentum flux by central differences
// on the parent and bilinearly between them, all linearly in time by `alpha`,
// and turned into fine post-collision populations with the fine tau+ and tau-.
// Only the band's inner layer, the cells next to the active region, is
// filled: the fine level fills its band before each of its hops, and a hop's
// update, the restriction and the reflux read no other band cell. One thread
// per inner-layer cell, one block per run of LBM_FILL_RUN cells along a side:
// the block first takes the parent moments its run's stencils reach into
// shared memory, once each, where every cell used to compute its own sixteen.
//
// `restrict_to_parent` (fine to coarse) overwrites every parent cell the fine
// active region covers, except those of the hole, with the mass- and
// momentum-weighted average of its 2x2 fine cells, the gradients across that
// block rebuilt with the parent's tau+ and tau-. The tiles wholly inside the
// hole are not launched. One block per tile of LBM_RESTRICT_TILE^2 covered parent cells
// (a 2D grid over the covered region), one thread per parent cell: the block
// first takes the moments of every fine cell its cells' stencils reach into
// shared memory, once each, then each thread combines its 4x4 fine cells.
//
// Where the fine patch touches a wall of the domain, both read mirror images of
// the cells inside (cpu::mirrored_cell, cpu::reflect) for the stencil cells
// beyond it: the parent's in `fill_ghost`, the fine patch's own in
// `restrict_to_parent`.
//
// Both mirror lbm_core::kernels::refine::{fill_ghost, restrict_to_parent} operation for
// operation. What they do not do: no stream or collision of their own, no check
// that the stencil stays inside the parent (the host validates the geometry
// before launching), and no handling of solid cells in the coupling zone (the
// hierarchy keeps bodies away from patch edges).
#include "common.cuh"

// The moments of parent cell (x, y), mixed in time, with the physical velocity
// (post-collision momentum minus half the force), those of its mirror image
// beyond a wall side of the parent's active region: cpu::parent_moments.
__device__ __forceinline__ Moments parent_moments(const float* __restrict__ coarse_t,
                                                  const float* __restrict__ coarse_t1, Layout coarse, size_t plane,
                                                  unsigned int ax0, unsigned int ay0, unsigned int ax1,
                                                  unsigned int ay1, PatchSides sides, int x, int y, float alpha,
                                                  float force_x, float force_y) {
    int crossed_x;
    int crossed_y;
    const unsigned int mx = mirror_axis(x, ax0, ax1, 0, sides.kinds, &crossed_x);
    const unsigned int my = mirror_axis(y, ay0, ay1, 2, sides.kinds, &crossed_y);
    const size_t index = cell_index(coarse, mx, my);
    float f[LBM_Q];
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        const float a = coarse_t[(size_t)i * plane + index];
        const float b = coarse_t1[(size_t)i * plane + index];
        f[i] = a + alpha * (b - a);
    }
    return reflect_crossed(moments(f, -force_x, -force_y), sides, crossed_x, crossed_y);
}

// cpu::lagrange4: weights of the 4-point Lagrange interpolation at t in [0, 1]
// between the second and third of four equally spaced points.
__device__ __forceinline__ void lagrange4(float t, float w[4]) {
    w[0] = -t * (t - 1.0f) * (t - 2.0f) * (1.0f / 6.0f);
    w[1] = (t + 1.0f) * (t - 1.0f) * (t - 2.0f) / 2.0f;
    w[2] = -(t + 1.0f) * t * (t - 2.0f) / 2.0f;
    w[3] = (t + 1.0f) * t * (t - 1.0f) * (1.0f / 6.0f);
}

// Capped at 64 registers (72 uncapped, no spill): four blocks per
// multiprocessor instead of three. A fused batch's fill is one wave of blocks
// that the register file, not the card's threads, limits, and a fill pair's
// two launches share the card.
LBM_BOUNDED_KERNEL(fill_ghost, 4)(const float* __restrict__ coarse_t, const float* __restrict__ coarse_t1,
                                      float* __restrict__ fine_dst, unsigned int coarse_nx, unsigned int coarse_ny,
                                      unsigned int coarse_tile_x, unsigned int coarse_tile_y,
                                      unsigned int coarse_active_x0, unsigned int coarse_active_y0,
                                      unsigned int coarse_active_x1, unsigned int coarse_active_y1,
                                      unsigned int fine_nx, unsigned int fine_ny, unsigned int fine_tile_x,
                                      unsigned int fine_tile_y, unsigned int active_offset_x,
                                      unsigned int active_offset_y, unsigned int side_kinds, float tangential_x_min,
                                      float tangential_x_max, float tangential_y_min, float tangential_y_max,
                                      float alpha, float tau_plus, float tau_minus, float coarse_force_x,
                                      float coarse_force_y) {
    LBM_PROLOGUE();
    // The parent moments under the block's run of inner-layer cells. A run of
    // LBM_FILL_RUN fine cells spans at most LBM_FILL_RUN / 2 + 1 parent floors
    // and the stencil adds one before and two after; one fine cell across
    // spans one floor, so four.
    __shared__ Moments box[(LBM_FILL_RUN / 2 + 4) * 4];
    // The host launches blocks of LBM_BLOCK_THREADS threads (uniform branch).
    if (blockDim.x != LBM_BLOCK_THREADS) {
        return;
    }
    const PatchSides sides =
        make_sides(side_kinds, tangential_x_min, tangential_x_max, tangential_y_min, tangential_y_max);
    const Layout coarse = make_layout(coarse_nx, coarse_ny, coarse_tile_x, coarse_tile_y);
    const Layout fine = make_layout(fine_nx, fine_ny, fine_tile_x, fine_tile_y);

    // The block's run: the inner layer's bottom row's runs, its top row's,
    // then its left column's and its right column's between them, as
    // FillGhost::shape counts them (side = the patch side the run lies along).
    const unsigned int row = fine_nx - 2 * LBM_GHOST + 2;
    const unsigned int column = fine_ny - 2 * LBM_GHOST;
    const unsigned int row_runs = (row + LBM_FILL_RUN - 1) / LBM_FILL_RUN;
    const unsigned int column_runs = (column + LBM_FILL_RUN - 1) / LBM_FILL_RUN;
    unsigned int run = blockIdx.x;
    int side = 2;
    if (run >= row_runs) {
        run -= row_runs;
        side = 3;
        if (run >= row_runs) {
            run -= row_runs;
            side = 0;
            if (run >= column_runs) {
                run -= column_runs;
                side = 1;
            }
        }
    }
    // Band cells beyond a wall side are left as they are: the fine level
    // applies the wall's rule there and nothing reads them (cpu::beyond_wall).
    // A whole run lies beyond its own side (uniform branch).
    if (side_kind(side_kinds, side) != LBM_PATCH_SIDE_INTERFACE) {
        return;
    }
    const bool along_x = side >= 2;
    const unsigned int extent = along_x ? row : column;
    const unsigned int first = run * LBM_FILL_RUN;
    const unsigned int last = (first + LBM_FILL_RUN < extent ? first + LBM_FILL_RUN : extent) - 1;
    // Fine coordinates of the layer across the run, and of the run's first
    // cell along it.
    const unsigned int across0 = (side & 1) == 0 ? LBM_GHOST - 1 : (along_x ? fine_ny : fine_nx) - LBM_GHOST;
    const unsigned int along0 = along_x ? LBM_GHOST - 1 : LBM_GHOST;
    const unsigned int along = threadIdx.x;
    const unsigned int fx = along_x ? along0 + first + along : across0;
    const unsigned int fy = along_x ? across0 : along0 + first + along;

    // The fine allocation starts LBM_GHOST / 2 parent cells before its active
    // region; p grows with the fine coordinate, so the run's corners bound the
    // floors its cells take.
    const int half = (int)(LBM_GHOST / 2);
    const float start_x = (float)((int)active_offset_x - half);
    const float start_y = (float)((int)active_offset_y - half);
    const unsigned int lo_x = along_x ? along0 + first : across0;
    const unsigned int hi_x = along_x ? along0 + last : across0;
    const unsigned int lo_y = along_x ? across0 : along0 + first;
    const unsigned int hi_y = along_x ? across0 : along0 + last;
    const int box_x = (int)floorf(start_x + ((float)lo_x + 0.5f) * 0.5f - 0.5f) - 1;
    const int box_y = (int)floorf(start_y + ((float)lo_y + 0.5f) * 0.5f - 0.5f) - 1;
    const int box_w = (int)floorf(start_x + ((float)hi_x + 0.5f) * 0.5f - 0.5f) + 3 - box_x;
    const int box_h = (int)floorf(start_y + ((float)hi_y + 0.5f) * 0.5f - 0.5f) + 3 - box_y;
    const size_t coarse_plane = plane_cells(coarse);
    for (int k = (int)threadIdx.x; k < box_w * box_h; k += LBM_BLOCK_THREADS) {
        box[k] = parent_moments(coarse_t, coarse_t1, coarse, coarse_plane, coarse_active_x0, coarse_active_y0,
                                coarse_active_x1, coarse_active_y1, sides, box_x + k % box_w, box_y + k / box_w,
                                alpha, coarse_force_x, coarse_force_y);
    }
    __syncthreads();
    // Past the run's end, or a corner cell beyond the wall side next to it.
    if (first + along > last || (fx < LBM_GHOST && side_kind(side_kinds, 0) != LBM_PATCH_SIDE_INTERFACE) ||
        (fx >= fine_nx - LBM_GHOST && side_kind(side_kinds, 1) != LBM_PATCH_SIDE_INTERFACE) ||
        (fy < LBM_GHOST && side_kind(side_kinds, 2) != LBM_PATCH_SIDE_INTERFACE) ||
        (fy >= fine_ny - LBM_GHOST && side_kind(side_kinds, 3) != LBM_PATCH_SIDE_INTERFACE)) {
        return;
    }
    const float px = start_x + ((float)fx + 0.5f) * 0.5f - 0.5f;
    const float py = start_y + ((float)fy + 0.5f) * 0.5f - 0.5f;
    const int x0 = (int)floorf(px);
    const int y0 = (int)floorf(py);
    const float wx = px - (float)x0;
    const float wy = py - (float)y0;

    // Moments on the 4x4 parent stencil around the four interpolation points,
    // read from the box where they are used: fewer registers.
    const Moments* const stencil = box + (y0 - 1 - box_y) * box_w + (x0 - 1 - box_x);
#define M(j, i) stencil[(j) * box_w + (i)]

    // Density and velocity: bicubic (4-point Lagrange in each direction).
    float lx[4];
    float ly[4];
    lagrange4(wx, lx);
    lagrange4(wy, ly);
    float acc[3] = {0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float w = lx[i] * ly[j];
            acc[0] += w * M(j, i).delta_rho;
            acc[1] += w * M(j, i).ux;
            acc[2] += w * M(j, i).uy;
        }
    }
    // Gradients: central differences at the four inner points, bilinear between
    // them; they only enter the small non-equilibrium part.
    float d_dx[LBM_GRADIENT_FIELDS];
    float d_dy[LBM_GRADIENT_FIELDS];
#pragma unroll
    for (int f = 0; f < LBM_GRADIENT_FIELDS; ++f) {
        d_dx[f] = 0.0f;
        d_dy[f] = 0.0f;
    }
    float d2u[2][3] = {{0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int dj = 0; dj < 2; ++dj) {
        const float weight_y = dj == 0 ? 1.0f - wy : wy;
#pragma unroll
        for (int di = 0; di < 2; ++di) {
            const float weight_x = di == 0 ? 1.0f - wx : wx;
            const int i = di + 1;
            const int j = dj + 1;
            const float w = weight_x * weight_y;
#pragma unroll
            for (int f = 0; f < LBM_GRADIENT_FIELDS; ++f) {
                d_dx[f] += w * 0.5f * (gradient_field(M(j, i + 1), f) - gradient_field(M(j, i - 1), f));
                d_dy[f] += w * 0.5f * (gradient_field(M(j + 1, i), f) - gradient_field(M(j - 1, i), f));
            }
            // Curvature of the velocity: second differences, likewise.
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const float centre = gradient_field(M(j, i), c);
                d2u[c][0] += w * (gradient_field(M(j, i + 1), c) - 2.0f * centre + gradient_field(M(j, i - 1), c));
                d2u[c][1] += w * (gradient_field(M(j + 1, i), c) - 2.0f * centre + gradient_field(M(j - 1, i), c));
                d2u[c][2] += w * 0.25f *
                             ((gradient_field(M(j + 1, i + 1), c) - gradient_field(M(j + 1, i - 1), c)) -
                              (gradient_field(M(j - 1, i + 1), c) - gradient_field(M(j - 1, i - 1), c)));
            }
        }
    }
    const float delta_rho = acc[0];
    const float fine_force_x = 0.5f * coarse_force_x;
    const float fine_force_y = 0.5f * coarse_force_y;
    // One fine lattice unit of length is half the parent's: first derivatives
    // halve, second derivatives quarter.
#pragma unroll
    for (int f = 0; f < LBM_GRADIENT_FIELDS; ++f) {
        d_dx[f] = 0.5f * d_dx[f];
        d_dy[f] = 0.5f * d_dy[f];
    }
#pragma unroll
    for (int c = 0; c < 2; ++c) {
#pragma unroll
        for (int d = 0; d < 3; ++d) {
            d2u[c][d] = 0.25f * d2u[c][d];
        }
    }
    float post[LBM_Q];
    rebuild_post_collision(delta_rho, acc[1] + 0.5f * fine_force_x, acc[2] + 0.5f * fine_force_y,
                           tau_plus, tau_minus, d_dx, d_dy, d2u[0], d2u[1], post);
    write_cell(fine_dst, plane_cells(fine), cell_index(fine, fx, fy), post);
#undef M
}

// Tiles of LBM_RESTRICT_TILE cells over [c0, c1), at least one:
// RestrictToParent::shape.
__device__ __forceinline__ unsigned int restrict_tiles(unsigned int c0, unsigned int c1) {
    const unsigned int n = (c1 - c0 + LBM_RESTRICT_TILE - 1) / LBM_RESTRICT_TILE;
    return n > 0 ? n : 1u;
}

// lbm_core::kernels::refine::inner_tiles: the tiles [first, last) over [c0, c1)
// that lie wholly inside the hole's [h0, h1), the last one (perhaps partial)
// where the hole reaches c1.
__device__ __forceinline__ void inner_tiles(unsigned int c0, unsigned int c1, unsigned int h0, unsigned int h1,
                                            unsigned int tiles, unsigned int* first, unsigned int* last) {
    *first = 0;
    *last = 0;
    if (h1 <= h0) {
        return;
    }
    const unsigned int a = (h0 - c0 + LBM_RESTRICT_TILE - 1) / LBM_RESTRICT_TILE;
    const unsigned int b = h1 == c1 ? tiles : (h1 - c0) / LBM_RESTRICT_TILE;
    if (b > a) {
        *first = a;
        *last = b;
    }
}

// Capped at 48 registers (the batch entry took 56, no spill): five blocks per
// multiprocessor instead of four.
// cpu::centre_weights: the restriction's weights along one axis for the 4
// fine cells from `first` (CENTRE4, or BLOCK2, the block's two cells
// averaged, where the outer cell lies in the ghost band beyond an interface
// side).
__device__ __forceinline__ void centre_weights(unsigned int kinds, int low_side, int first, unsigned int lo,
                                               unsigned int hi, float w[4]) {
    const bool stale = (first < (int)lo && side_kind(kinds, low_side) == LBM_PATCH_SIDE_INTERFACE) ||
                       (first + 3 >= (int)hi && side_kind(kinds, low_side + 1) == LBM_PATCH_SIDE_INTERFACE);
    if (stale) {
        w[0] = 0.0f;
        w[1] = 0.5f;
        w[2] = 0.5f;
        w[3] = 0.0f;
    } else {
        w[0] = -1.0f / 16.0f;
        w[1] = 9.0f / 16.0f;
        w[2] = 9.0f / 16.0f;
        w[3] = -1.0f / 16.0f;
    }
}

LBM_BOUNDED_KERNEL(restrict_to_parent, 5)(const float* __restrict__ fine_src, float* __restrict__ coarse_dst,
                                              unsigned int fine_nx, unsigned int fine_ny, unsigned int fine_tile_x,
                                              unsigned int fine_tile_y, unsigned int coarse_nx,
                                              unsigned int coarse_ny, unsigned int coarse_tile_x,
                                              unsigned int coarse_tile_y, unsigned int covered_x0,
                                              unsigned int covered_y0, unsigned int covered_x1,
                                              unsigned int covered_y1, unsigned int hole_x0, unsigned int hole_y0,
                                              unsigned int hole_x1, unsigned int hole_y1,
                                              unsigned int fine_active_origin,
                                              unsigned int side_kinds, float tangential_x_min,
                                              float tangential_x_max, float tangential_y_min,
                                              float tangential_y_max, float tau_plus, float tau_minus,
                                              float coarse_force_x, float coarse_force_y) {
    LBM_PROLOGUE();
    // The moments of the block's fine cells: its tile of parent cells' 2x2
    // blocks and the ring of fine cells around them, each computed once here
    // instead of by every parent cell whose 4x4 stencil reaches it (four times
    // on average; the stencils overlap).
    __shared__ Moments tile[LBM_RESTRICT_FINE][LBM_RESTRICT_FINE];
    // The host launches blocks of LBM_BLOCK_THREADS threads, one tile of
    // LBM_RESTRICT_TILE x LBM_RESTRICT_TILE parent cells each (uniform branch).
    if (blockDim.x != LBM_BLOCK_THREADS) {
        return;
    }
    const PatchSides sides =
        make_sides(side_kinds, tangential_x_min, tangential_x_max, tangential_y_min, tangential_y_max);
    const Layout fine = make_layout(fine_nx, fine_ny, fine_tile_x, fine_tile_y);
    const Layout coarse = make_layout(coarse_nx, coarse_ny, coarse_tile_x, coarse_tile_y);
    const float fine_force_x = 0.5f * coarse_force_x;
    const float fine_force_y = 0.5f * coarse_force_y;
    const size_t fine_plane = plane_cells(fine);
    // The tiles wholly inside the hole are not launched: block b is the
    // b-th of the others, row by row (RestrictToParent::shape counts them).
    const unsigned int tiles_x = restrict_tiles(covered_x0, covered_x1);
    const unsigned int tiles_y = restrict_tiles(covered_y0, covered_y1);
    unsigned int inner_x0;
    unsigned int inner_x1;
    unsigned int inner_y0;
    unsigned int inner_y1;
    inner_tiles(covered_x0, covered_x1, hole_x0, hole_x1, tiles_x, &inner_x0, &inner_x1);
    inner_tiles(covered_y0, covered_y1, hole_y0, hole_y1, tiles_y, &inner_y0, &inner_y1);
    if (inner_x0 == inner_x1 || inner_y0 == inner_y1) {
        inner_x0 = inner_x1 = inner_y0 = inner_y1 = 0;
    }
    const unsigned int inner_w = inner_x1 - inner_x0;
    const unsigned int below = inner_y0 * tiles_x;
    const unsigned int beside = (inner_y1 - inner_y0) * (tiles_x - inner_w);
    unsigned int tx;
    unsigned int ty;
    if (blockIdx.x < below) {
        tx = blockIdx.x % tiles_x;
        ty = blockIdx.x / tiles_x;
    } else if (blockIdx.x - below < beside) {
        const unsigned int k = blockIdx.x - below;
        const unsigned int m = tiles_x - inner_w;
        tx = k % m;
        tx += tx >= inner_x0 ? inner_w : 0u;
        ty = inner_y0 + k / m;
    } else {
        const unsigned int k = blockIdx.x - below - beside;
        tx = k % tiles_x;
        ty = inner_y1 + k / tiles_x;
    }
    // The one block of a region wholly inside its hole (uniform branch).
    if (ty >= tiles_y) {
        return;
    }
    const unsigned int bx0 = covered_x0 + tx * LBM_RESTRICT_TILE;
    const unsigned int by0 = covered_y0 + ty * LBM_RESTRICT_TILE;
    // The block's parent cells inside the covered region; a tile on its far
    // edge loads only the fine cells its own stencils reach.
    const unsigned int left_x = bx0 < covered_x1 ? covered_x1 - bx0 : 0u;
    const unsigned int left_y = by0 < covered_y1 ? covered_y1 - by0 : 0u;
    const unsigned int tile_w = left_x < LBM_RESTRICT_TILE ? left_x : LBM_RESTRICT_TILE;
    const unsigned int tile_h = left_y < LBM_RESTRICT_TILE ? left_y : LBM_RESTRICT_TILE;
    const unsigned int load_w = 2 * tile_w + 2;
    const unsigned int load_h = 2 * tile_h + 2;
    // Fine cell of tile entry (0, 0): one before the block's first 2x2 block.
    const int tx0 = (int)(fine_active_origin + 2 * (bx0 - covered_x0)) - 1;
    const int ty0 = (int)(fine_active_origin + 2 * (by0 - covered_y0)) - 1;
    // At an interface the ring reaches into the ghost band (the last fill); at
    // a wall it reads mirror images.
    const unsigned int g0 = fine_active_origin;
    // A fixed trip count, unrolled, so that a thread's loads of several
    // entries are in flight together.
#pragma unroll
    for (unsigned int n = 0; n < (LBM_RESTRICT_FINE * LBM_RESTRICT_FINE + LBM_BLOCK_THREADS - 1) / LBM_BLOCK_THREADS;
         ++n) {
        // Entries in the tile's own shape (a division by a constant).
        const unsigned int k = threadIdx.x + n * LBM_BLOCK_THREADS;
        const unsigned int i = k % LBM_RESTRICT_FINE;
        const unsigned int j = k / LBM_RESTRICT_FINE;
        if (j >= load_h) {
            break;
        }
        if (i >= load_w) {
            continue;
        }
        int crossed_x;
        int crossed_y;
        const unsigned int x = mirror_axis(tx0 + (int)i, g0, fine_nx - g0, 0, sides.kinds, &crossed_x);
        const unsigned int y = mirror_axis(ty0 + (int)j, g0, fine_ny - g0, 2, sides.kinds, &crossed_y);
        float f[LBM_Q];
        read_cell(fine_src, fine_plane, cell_index(fine, x, y), f);
        tile[j][i] = reflect_crossed(moments(f, -fine_force_x, -fine_force_y), sides, crossed_x, crossed_y);
    }
    __syncthreads();
    const unsigned int lx = threadIdx.x % LBM_RESTRICT_TILE;
    const unsigned int ly = threadIdx.x / LBM_RESTRICT_TILE;
    if (lx >= tile_w || ly >= tile_h) {
        return;
    }
    const unsigned int cx = bx0 + lx;
    const unsigned int cy = by0 + ly;
    if (cx >= hole_x0 && cx < hole_x1 && cy >= hole_y0 && cy < hole_y1) {
        return;
    }
    // The 2x2 block and the ring of fine cells around it, for the curvature,
    // read from the tile where they are used rather than copied into
    // registers: fewer registers, more blocks in flight.
    const Moments(*const near)[LBM_RESTRICT_FINE] = &tile[2 * ly];
#define G(dy, dx) near[dy][2 * lx + (dx)]
    const Moments m[2][2] = {{G(1, 1), G(1, 2)}, {G(2, 1), G(2, 2)}};
    // Density and momentum: cubic interpolation to the block centre, the
    // block's two-cell average along an axis where the stencil reaches the
    // ghost band beyond an interface (cpu::centre_weights).
    float along_x[4];
    float along_y[4];
    centre_weights(sides.kinds, 0, tx0 + 2 * (int)lx, g0, fine_nx - g0, along_x);
    centre_weights(sides.kinds, 2, ty0 + 2 * (int)ly, g0, fine_ny - g0, along_y);
    float delta_rho = 0.0f;
    float jx = 0.0f;
    float jy = 0.0f;
#pragma unroll
    for (int dy = 0; dy < 4; ++dy) {
#pragma unroll
        for (int dx = 0; dx < 4; ++dx) {
            const Moments c = G(dy, dx);
            const float w = along_x[dx] * along_y[dy];
            delta_rho += w * c.delta_rho;
            jx += w * c.ux;
            jy += w * c.uy;
        }
    }
    // Differences across the 2x2 block are centred on the parent cell; one fine
    // spacing is half a parent spacing, hence no 1/2 here.
    float d_dx[LBM_GRADIENT_FIELDS];
    float d_dy[LBM_GRADIENT_FIELDS];
#pragma unroll
    for (int f = 0; f < LBM_GRADIENT_FIELDS; ++f) {
        const float v00 = gradient_field(m[0][0], f);
        const float v01 = gradient_field(m[0][1], f);
        const float v10 = gradient_field(m[1][0], f);
        const float v11 = gradient_field(m[1][1], f);
        d_dx[f] = (v01 + v11) - (v00 + v10);
        d_dy[f] = (v10 + v11) - (v00 + v01);
    }
    // Second differences centred on the block (cpu::restrict_to_parent): the sum
    // over the two middle rows of u0 - u1 - u2 + u3 is already in parent units.
    float d2u[2][3];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
        float u[4][4];
#pragma unroll
        for (int dy = 0; dy < 4; ++dy) {
#pragma unroll
            for (int dx = 0; dx < 4; ++dx) {
                u[dy][dx] = gradient_field(G(dy, dx), c);
            }
        }
        const float d2x = (u[1][0] - u[1][1] - u[1][2] + u[1][3]) + (u[2][0] - u[2][1] - u[2][2] + u[2][3]);
        const float d2y = (u[0][1] - u[1][1] - u[2][1] + u[3][1]) + (u[0][2] - u[1][2] - u[2][2] + u[3][2]);
        const float dxy = (u[2][2] - u[2][1]) - (u[1][2] - u[1][1]);
        d2u[c][0] = d2x;
        d2u[c][1] = d2y;
        d2u[c][2] = 4.0f * dxy;
    }
    float post[LBM_Q];
    rebuild_post_collision(delta_rho, jx + 0.5f * coarse_force_x, jy + 0.5f * coarse_force_y,
                           tau_plus, tau_minus, d_dx, d_dy, d2u[0], d2u[1], post);
    write_cell(coarse_dst, plane_cells(coarse), cell_index(coarse, cx, cy), post);
#undef G
}
