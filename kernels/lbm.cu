// lbm.cu: `stream_collide`, the per-hop update of one patch (pull streaming with
// boundaries, then TRT collision with Guo forcing), `current -> spare`.
//
// It mirrors lbm_core::cpu::stream_collide and cpu::pull cell by cell: one thread
// per active cell, row-major over the active region; solid cells are copied
// unchanged; a population that would come from beyond a wall side is bounced
// back with the wall's velocity (the first wall side in the order x, y wins);
// periodic sides wrap within the active region; ghost sides read the ghost band;
// a population from a solid cell is bounced back half-way without velocity.
//
// What it does not do: no interpolated (q-weighted) bounce-back, no inlet or
// outlet, no momentum exchange (exchange.cu), no coupling between levels
// (refine.cu). It never reads outside the allocation as long as ghost sides have
// at least one cell of band, which the host (lbm-cuda's launch validation) checks.
#include "common.cuh"

// The kind of side `side` (0 x-min, 1 x-max, 2 y-min, 3 y-max).
__device__ __forceinline__ unsigned int edge_kind(int side, unsigned int e0, unsigned int e1, unsigned int e2,
                                                  unsigned int e3) {
    return side == 0 ? e0 : (side == 1 ? e1 : (side == 2 ? e2 : e3));
}

extern "C" __global__ void stream_collide(const float* __restrict__ src, float* __restrict__ dst,
                                          const unsigned char* __restrict__ flags, unsigned int nx,
                                          unsigned int ny, unsigned int tile_x, unsigned int tile_y,
                                          unsigned int x0, unsigned int y0, unsigned int x1, unsigned int y1,
                                          unsigned int edge_x_min, unsigned int edge_x_max,
                                          unsigned int edge_y_min, unsigned int edge_y_max, float wall_x_min_ux,
                                          float wall_x_min_uy, float wall_x_max_ux, float wall_x_max_uy,
                                          float wall_y_min_ux, float wall_y_min_uy, float wall_y_max_ux,
                                          float wall_y_max_uy, float omega_plus, float omega_minus,
                                          float force_x, float force_y) {
    const unsigned int width = x1 - x0;
    const unsigned int height = y1 - y0;
    const unsigned long long t = thread_index();
    if (t >= (unsigned long long)width * height) {
        return;
    }
    const Layout layout = make_layout(nx, ny, tile_x, tile_y);
    const size_t plane = plane_cells(layout);
    const unsigned int x = x0 + (unsigned int)(t % width);
    const unsigned int y = y0 + (unsigned int)(t / width);
    const size_t index = cell_index(layout, x, y);

    float f[LBM_Q];
    if (flags[index] != LBM_FLAG_FLUID) {
        read_cell(src, plane, index, f);
        write_cell(dst, plane, index, f);
        return;
    }

#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        // cpu::pull, in signed arithmetic because a source may lie before x0 or y0.
        int sx = (int)x - lbm_cx(i);
        int sy = (int)y - lbm_cy(i);
        const int side_x = sx < (int)x0 ? 0 : (sx >= (int)x1 ? 1 : -1);
        const int side_y = sy < (int)y0 ? 2 : (sy >= (int)y1 ? 3 : -1);
        int wall = -1;
        if (side_x >= 0 && edge_kind(side_x, edge_x_min, edge_x_max, edge_y_min, edge_y_max) == LBM_EDGE_WALL) {
            wall = side_x;
        } else if (side_y >= 0 &&
                   edge_kind(side_y, edge_x_min, edge_x_max, edge_y_min, edge_y_max) == LBM_EDGE_WALL) {
            wall = side_y;
        }
        const float bounced = src[(size_t)lbm_opp(i) * plane + index];
        if (wall >= 0) {
            const float wx = wall == 0 ? wall_x_min_ux
                                       : (wall == 1 ? wall_x_max_ux : (wall == 2 ? wall_y_min_ux : wall_y_max_ux));
            const float wy = wall == 0 ? wall_x_min_uy
                                       : (wall == 1 ? wall_x_max_uy : (wall == 2 ? wall_y_min_uy : wall_y_max_uy));
            const float cu = (float)lbm_cx(i) * wx + (float)lbm_cy(i) * wy;
            f[i] = bounced + lbm_w(i) * cu / (0.5f * LBM_CS2);
            continue;
        }
        if (side_x >= 0 &&
            edge_kind(side_x, edge_x_min, edge_x_max, edge_y_min, edge_y_max) == LBM_EDGE_PERIODIC) {
            sx += side_x == 0 ? (int)width : -(int)width;
        }
        if (side_y >= 0 &&
            edge_kind(side_y, edge_x_min, edge_x_max, edge_y_min, edge_y_max) == LBM_EDGE_PERIODIC) {
            sy += side_y == 2 ? (int)height : -(int)height;
        }
        const size_t source = cell_index(layout, (unsigned int)sx, (unsigned int)sy);
        f[i] = flags[source] != LBM_FLAG_FLUID ? bounced : src[(size_t)i * plane + source];
    }
    collide(f, omega_plus, omega_minus, force_x, force_y);
    write_cell(dst, plane, index, f);
}
