// health.cu: `check_health`, the divergence check of one patch.
//
// One thread per active cell, row-major over the active region (x fastest),
// as `stream_collide`. A fluid cell (solid cells and the ghost band are not
// read) with a population that is NaN or infinite lowers result[0] to its
// active-region index; any other fluid cell whose speed from the moments
// without the half-force shift is above `speed_limit` (squares compared: no
// square root) lowers result[1]. atomicMin keeps the smallest index of each
// kind whatever order the threads run in, so the result is deterministic and
// several launches can share one buffer at byte offsets.
//
// It mirrors lbm_core::kernels::health::{check_health, speed_squared} cell by
// cell, in f32 and the same order, so both flag the same cells. What it does
// not do: reset `result` (the caller's memset to 0xFF bytes, LBM_NO_CELL in
// each word, does) or tell how far a cell is beyond the limit (the stepper
// works that out from the populations of the one cell it reports).
#include "common.cuh"

// Whether `v` is neither NaN nor infinite: its exponent is not all ones. Bits
// rather than isfinite, so the host build needs no math-library variant of it.
__device__ __forceinline__ bool finite_f32(float v) {
    return (__float_as_uint(v) & 0x7F800000u) != 0x7F800000u;
}

LBM_KERNEL(check_health)(const float* __restrict__ f, const unsigned char* __restrict__ flags,
                                        unsigned int* result, unsigned int nx, unsigned int ny,
                                        unsigned int tile_x, unsigned int tile_y, unsigned int x0, unsigned int y0,
                                        unsigned int x1, unsigned int y1, float speed_limit) {
    LBM_PROLOGUE();
    const unsigned int width = x1 - x0;
    const unsigned int height = y1 - y0;
    const unsigned long long t = thread_index();
    if (t >= (unsigned long long)width * height) {
        return;
    }
    const Layout layout = make_layout(nx, ny, tile_x, tile_y);
    const size_t plane = plane_cells(layout);
    // An active region never holds 2^32 cells (see stream_collide).
    const unsigned int cell = (unsigned int)t;
    const size_t index = cell_index(layout, x0 + cell % width, y0 + cell / width);
    if (flags[index] != LBM_FLAG_FLUID) {
        return;
    }
    float p[LBM_Q];
    read_cell(f, plane, index, p);
    bool finite = true;
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        finite = finite && finite_f32(p[i]);
    }
    if (!finite) {
        atomicMin(result, cell);
        return;
    }
    const Moments m = moments(p, 0.0f, 0.0f);
    if (m.ux * m.ux + m.uy * m.uy > speed_limit * speed_limit) {
        atomicMin(result + 1, cell);
    }
}
