// moments.cu: `save_moments`, the density and velocity of one patch's active
// region into a device staging buffer, for the outputs.
//
// One thread per active cell, row-major over the active region (x fastest).
// Every cell is written, solid ones too, as `Stepper::fields` downloads them:
// `out` holds three planes of `width * height` f32 (delta_rho, then ux, then
// uy), the momentum taking back the half of the body force that the stored
// post-collision populations carry.
//
// It mirrors lbm_core::kernels::moments::save_moments cell by cell in f32 and
// the same order, so the bytes equal the CPU's. What it does not do: read the
// flags (the writers mask solid cells from their own geometry) or convert to
// physical units (the host does, as for a direct download).
#include "common.cuh"

LBM_KERNEL(save_moments)(const float* __restrict__ f, float* __restrict__ out, unsigned int nx,
                                        unsigned int ny, unsigned int tile_x, unsigned int tile_y,
                                        unsigned int x0, unsigned int y0, unsigned int x1, unsigned int y1,
                                        float force_x, float force_y) {
    LBM_PROLOGUE();
    const unsigned int width = x1 - x0;
    const unsigned int height = y1 - y0;
    const unsigned long long cells = (unsigned long long)width * height;
    const unsigned long long t = thread_index();
    if (t >= cells) {
        return;
    }
    const Layout layout = make_layout(nx, ny, tile_x, tile_y);
    const size_t plane = plane_cells(layout);
    const unsigned int cell = (unsigned int)t;
    const size_t index = cell_index(layout, x0 + cell % width, y0 + cell / width);
    float p[LBM_Q];
    read_cell(f, plane, index, p);
    const Moments m = moments(p, -force_x, -force_y);
    out[t] = m.delta_rho;
    out[cells + t] = m.ux;
    out[2 * cells + t] = m.uy;
}
