// common.cuh: the D2Q9 lattice and storage layout shared by every kernel family.
//
// What it is: device-side twins of lbm_core::lattice (velocities, weights,
// shifted equilibrium, moments, even and odd non-equilibrium parts, TRT
// collision with Guo forcing), of the coupling helpers of lbm_core::kernels::refine
// (gradient fields, rebuilding post-collision populations) and of
// lbm_core::domain::hierarchy::Layout::index (the tiled cell index).
// Each function mirrors its Rust counterpart operation for operation, in f32 and
// in the same order, so that with FMA contraction off (see `cargo xtask ptx`) a
// kernel computes the same bits as the CPU reference. Populations are stored
// minus their weights (f_i - w_i), exactly as on the CPU.
//
// It also holds the one boundary rule two kernel families share: Bouzidi's
// interpolated bounce-back (lbm_core::kernels::lbm::bouzidi), which `stream_collide`
// applies on body links and `accumulate_exchange` needs for the population a
// wall returns.
//
// What it does not do: no kernel lives here, nothing touches global memory
// except through the index helpers and the Bouzidi rule's reads, and no side
// rules of the active region (walls, inlet, outflow, free slip, wrap: those
// are lbm.cu's).
#pragma once

#include "constants.cuh"

// Lattice velocities c_i: rest, the four axis directions, then the diagonals.
// Written as selects rather than tables so that every unrolled use folds to a
// constant and a data-dependent direction costs no memory load.
// A read-only load that asks the L2 to fetch the whole 256-byte block
// around it (PTX `ld.global.nc.L2::256B`): the bulk kernel's nine
// population streams then reach DRAM as longer bursts (H200, a periodic
// 4096^2 grid: 93.1-93.2% of a copy against 91.5-91.8% without, same run).
// The value is the plain load's; the emulator loads plainly.
__device__ __forceinline__ float lbm_load_prefetched(const float* p) {
#ifdef __CUDA_ARCH__
    float v;
    asm("ld.global.nc.L2::256B.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
#else
    return *p;
#endif
}

__device__ __forceinline__ int lbm_cx(int i) {
    return (int)(i == 1 || i == 5 || i == 8) - (int)(i == 3 || i == 6 || i == 7);
}
__device__ __forceinline__ int lbm_cy(int i) {
    return (int)(i == 2 || i == 5 || i == 6) - (int)(i == 4 || i == 7 || i == 8);
}
// Index of the opposite velocity: 0 3 4 1 2 7 8 5 6.
__device__ __forceinline__ int lbm_opp(int i) {
    return i == 0 ? 0 : (i < 5 ? ((i + 1) & 3) + 1 : ((i - 3) & 3) + 5);
}
// The direction with the x (resp. y) component of c_i negated: a free-slip
// side mirrors populations in its wall.
__device__ __forceinline__ int lbm_mirror_x(int i) {
    return i == 1 ? 3 : (i == 3 ? 1 : (i == 5 ? 6 : (i == 6 ? 5 : (i == 7 ? 8 : (i == 8 ? 7 : i)))));
}
__device__ __forceinline__ int lbm_mirror_y(int i) {
    return i == 2 ? 4 : (i == 4 ? 2 : (i == 5 ? 8 : (i == 8 ? 5 : (i == 6 ? 7 : (i == 7 ? 6 : i)))));
}
// Lattice weights, each the correctly rounded f32 of its fraction (as in Rust).
__device__ __forceinline__ float lbm_w(int i) {
    return i == 0 ? 4.0f / 9.0f : (i < 5 ? 1.0f / 9.0f : 1.0f / 36.0f);
}

// Squared lattice speed of sound, the f32 nearest 1/3 as in lattice::CS2.
#define LBM_CS2 (1.0f / 3.0f)
// Its inverse, exactly 3 (lattice::INV_CS2): what the coupling and the wall
// rule multiply by, where a division by LBM_CS2 cost a correctly rounded
// division each.
#define LBM_INV_CS2 3.0f

// A storage layout: allocation size and tile shape (lbm_core::domain::hierarchy::Layout).
struct Layout {
    unsigned int nx;
    unsigned int ny;
    unsigned int tx;
    unsigned int ty;
};

__device__ __forceinline__ Layout make_layout(unsigned int nx, unsigned int ny, unsigned int tx,
                                              unsigned int ty) {
    Layout l;
    l.nx = nx;
    l.ny = ny;
    l.tx = tx;
    l.ty = ty;
    return l;
}

// Cells in one population plane, padding of partial tiles included.
__device__ __forceinline__ size_t plane_cells(Layout l) {
    // 32-bit divisions (a 64-bit one is a long subroutine); the host bounds
    // every dimension far below 2^31.
    const unsigned int tiles_x = (l.nx + l.tx - 1) / l.tx;
    const unsigned int tiles_y = (l.ny + l.ty - 1) / l.ty;
    return (size_t)tiles_x * tiles_y * l.tx * l.ty;
}

// Storage index of cell (x, y): row-major tiles, row-major inside each tile.
__device__ __forceinline__ size_t cell_index(Layout l, unsigned int x, unsigned int y) {
    // One tile across (the default, whole-allocation tile): the general formula
    // reduces exactly to row-major with the tile's width as stride, and this
    // uniform branch saves the integer divisions.
    if (l.tx >= l.nx) {
        return (size_t)y * l.tx + x;
    }
    const unsigned int tiles_x = (l.nx + l.tx - 1) / l.tx;
    size_t tile = (size_t)(y / l.ty) * tiles_x + (size_t)(x / l.tx);
    return tile * ((size_t)l.tx * (size_t)l.ty) + (size_t)(y % l.ty) * l.tx + (size_t)(x % l.tx);
}

// Density minus one and velocity of one cell (lattice::Moments).
struct Moments {
    float delta_rho;
    float ux;
    float uy;
};


// lattice::moments: density and velocity u = j / rho0 with half the force added.
__device__ __forceinline__ Moments moments(const float f[LBM_Q], float force_x, float force_y) {
    float delta_rho = 0.0f;
    float jx = 0.0f;
    float jy = 0.0f;
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        delta_rho += f[i];
        jx += f[i] * (float)lbm_cx(i);
        jy += f[i] * (float)lbm_cy(i);
    }
    Moments m;
    m.delta_rho = delta_rho;
    m.ux = jx + 0.5f * force_x;
    m.uy = jy + 0.5f * force_y;
    return m;
}

// lattice::equilibrium: shifted incompressible (He-Luo) equilibrium f_i^eq - w_i.
__device__ __forceinline__ void equilibrium(Moments m, float feq[LBM_Q]) {
    float usq = m.ux * m.ux + m.uy * m.uy;
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        float cu = (float)lbm_cx(i) * m.ux + (float)lbm_cy(i) * m.uy;
        feq[i] = lbm_w(i) * (m.delta_rho + (3.0f * cu + 4.5f * cu * cu - 1.5f * usq));
    }
}

// lattice::non_equilibrium: -w_i rho0 tau / cs2 * Q_i : S for strain (sxx, syy, sxy).
__device__ __forceinline__ void non_equilibrium(float tau, float sxx, float syy, float sxy, float fneq[LBM_Q]) {
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        float cx = (float)lbm_cx(i);
        float cy = (float)lbm_cy(i);
        float q_s = (cx * cx - LBM_CS2) * sxx + (cy * cy - LBM_CS2) * syy + 2.0f * cx * cy * sxy;
        fneq[i] = -lbm_w(i) * tau * LBM_INV_CS2 * q_s;
    }
}

// lattice::guo_source: Guo's forcing term before its relaxation factor.
__device__ __forceinline__ void guo_source(Moments m, float force_x, float force_y, float s[LBM_Q]) {
    if (force_x == 0.0f && force_y == 0.0f) {
#pragma unroll
        for (int i = 0; i < LBM_Q; ++i) {
            s[i] = 0.0f;
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        float cx = (float)lbm_cx(i);
        float cy = (float)lbm_cy(i);
        float cu = cx * m.ux + cy * m.uy;
        float term_x = 3.0f * (cx - m.ux) + 9.0f * cu * cx;
        float term_y = 3.0f * (cy - m.uy) + 9.0f * cu * cy;
        s[i] = lbm_w(i) * (term_x * force_x + term_y * force_y);
    }
}

// lattice::collide: one TRT collision (BGK when omega_minus == omega_plus) with
// Guo forcing, in place on shifted populations.
__device__ __forceinline__ void collide(float f[LBM_Q], float omega_plus, float omega_minus, float force_x,
                                        float force_y) {
    Moments m = moments(f, force_x, force_y);
    float feq[LBM_Q];
    equilibrium(m, feq);
    float source[LBM_Q];
    guo_source(m, force_x, force_y, source);
    float pre[LBM_Q];
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        pre[i] = f[i];
    }
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        int o = lbm_opp(i);
        float even_neq = 0.5f * ((pre[i] - feq[i]) + (pre[o] - feq[o]));
        float odd_neq = 0.5f * ((pre[i] - feq[i]) - (pre[o] - feq[o]));
        float even_src = 0.5f * (source[i] + source[o]);
        float odd_src = 0.5f * (source[i] - source[o]);
        f[i] = pre[i] - omega_plus * even_neq - omega_minus * odd_neq + (1.0f - 0.5f * omega_plus) * even_src +
               (1.0f - 0.5f * omega_minus) * odd_src;
    }
}

// lattice::non_equilibrium_odd: first-order odd non-equilibrium part of a
// pre-collision population, -tau- w_i [-c_ia d_b P_ab / cs2 + Q_iab c_ig d_g P_ab / (2 cs2^2)]
// with P = rho0 u u; dx and dy hold d/dx and d/dy of (P_xx, P_yy, P_xy).
__device__ __forceinline__ void non_equilibrium_odd(float tau_minus, const float dx[3], const float dy[3],
                                                    float fneq[LBM_Q]) {
    const float div_x = dx[0] + dy[2];
    const float div_y = dx[2] + dy[1];
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        const float cx = (float)lbm_cx(i);
        const float cy = (float)lbm_cy(i);
        const float q0 = cx * cx - LBM_CS2;
        const float q1 = cy * cy - LBM_CS2;
        const float q2 = cx * cy;
        const float along_x = q0 * dx[0] + q1 * dx[1] + 2.0f * q2 * dx[2];
        const float along_y = q0 * dy[0] + q1 * dy[1] + 2.0f * q2 * dy[2];
        const float q_c_grad = cx * along_x + cy * along_y;
        const float c_div = cx * div_x + cy * div_y;
        fneq[i] = -tau_minus * lbm_w(i) * (-c_div * LBM_INV_CS2 + q_c_grad * (0.5f * LBM_INV_CS2 * LBM_INV_CS2));
    }
}

// lattice::non_equilibrium_odd_curvature: second-order odd non-equilibrium part
// of a pre-collision population, tau- (tau+ - 1/2) w_i rho0 [c_ia c_ib c_ig
// d_a d_b u_g / cs2 - c_ig lap u_g - 2 c_ig d_g div u]; d2ux and d2uy hold
// (d_xx, d_yy, d_xy) of ux and uy.
__device__ __forceinline__ void non_equilibrium_odd_curvature(float tau_plus, float tau_minus,
                                                              const float d2ux[3], const float d2uy[3],
                                                              float fneq[LBM_Q]) {
    const float scale = tau_minus * (tau_plus - 0.5f);
    const float lap_x = d2ux[0] + d2ux[1];
    const float lap_y = d2uy[0] + d2uy[1];
    const float grad_div_x = d2ux[0] + d2uy[2];
    const float grad_div_y = d2ux[2] + d2uy[1];
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        const float cx = (float)lbm_cx(i);
        const float cy = (float)lbm_cy(i);
        const float along_x = cx * cx * d2ux[0] + cy * cy * d2ux[1] + 2.0f * cx * cy * d2ux[2];
        const float along_y = cx * cx * d2uy[0] + cy * cy * d2uy[1] + 2.0f * cx * cy * d2uy[2];
        const float third = cx * along_x + cy * along_y;
        const float linear = cx * (lap_x + 2.0f * grad_div_x) + cy * (lap_y + 2.0f * grad_div_y);
        fneq[i] = scale * lbm_w(i) * (third * LBM_INV_CS2 - linear);
    }
}


__device__ __forceinline__ float gradient_field(Moments m, int field) {
    return field == 0 ? m.ux : (field == 1 ? m.uy : (field == 2 ? m.ux * m.ux : (field == 3 ? m.uy * m.uy : m.ux * m.uy)));
}

// cpu::rebuild_post_collision: equilibrium plus the non-equilibrium parts
// after one relaxation, the even (strain) part with tau+ and the odd
// (momentum-flux and curvature) parts with tau-; d_dx and d_dy are the
// gradients of the gradient fields, d2ux and d2uy the velocity curvature, all
// in lattice units of the target level.
__device__ __forceinline__ void rebuild_post_collision(float delta_rho, float ux, float uy, float tau_plus,
                                                       float tau_minus, const float d_dx[LBM_GRADIENT_FIELDS],
                                                       const float d_dy[LBM_GRADIENT_FIELDS], const float d2ux[3],
                                                       const float d2uy[3], float post[LBM_Q]) {
    Moments m;
    m.delta_rho = delta_rho;
    m.ux = ux;
    m.uy = uy;
    float feq[LBM_Q];
    equilibrium(m, feq);
    float even[LBM_Q];
    non_equilibrium(tau_plus, d_dx[0], d_dy[1], 0.5f * (d_dy[0] + d_dx[1]), even);
    float odd[LBM_Q];
    non_equilibrium_odd(tau_minus, d_dx + 2, d_dy + 2, odd);
    float curved[LBM_Q];
    non_equilibrium_odd_curvature(tau_plus, tau_minus, d2ux, d2uy, curved);
    const float keep_even = 1.0f - 1.0f / tau_plus;
    const float keep_odd = 1.0f - 1.0f / tau_minus;
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        post[i] = feq[i] + keep_even * even[i] + keep_odd * (odd[i] + curved[i]);
    }
}

// Reads the nine populations of storage cell `index` from planes of `plane` cells.
__device__ __forceinline__ void read_cell(const float* __restrict__ f, size_t plane, size_t index,
                                          float out[LBM_Q]) {
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        out[i] = f[(size_t)i * plane + index];
    }
}

__device__ __forceinline__ void write_cell(float* __restrict__ f, size_t plane, size_t index,
                                           const float value[LBM_Q]) {
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        f[(size_t)i * plane + index] = value[i];
    }
}

// cpu::bouzidi: Bouzidi's linear interpolated bounce-back for the population
// arriving at `index` along `i` from a wall at fraction `q` of the link. For
// q < 1/2 it interpolates between the leaving populations (along opp(i)) of
// the cell and of the fluid cell `behind` it (`has_behind`; half-way
// bounce-back without one), for q >= 1/2 between the leaving population and
// the cell's own along `i`. A NaN q takes the second branch, as on the CPU.
// Reads only what the CPU reads: `behind` only when q < 1/2 and it exists.
__device__ __forceinline__ float bouzidi(const float* __restrict__ f, size_t plane, size_t index, bool has_behind,
                                         size_t behind, int i, float q) {
    const int toward = lbm_opp(i);
    const float leaving = f[(size_t)toward * plane + index];
    if (q < 0.5f) {
        if (!has_behind) {
            return leaving;
        }
        return 2.0f * q * leaving + (1.0f - 2.0f * q) * f[(size_t)toward * plane + behind];
    }
    return leaving / (2.0f * q) + (2.0f * q - 1.0f) / (2.0f * q) * f[(size_t)i * plane + index];
}

// Side kinds of a refined patch (lbm_core::domain::sides::PatchSide), two bits per

__device__ __forceinline__ unsigned int side_kind(unsigned int packed, int side) {
    return (packed >> (2 * side)) & 3u;
}

// A patch's sides as its coupling stencils see them (lbm_core::domain::sides::PatchSides).
struct PatchSides {
    unsigned int kinds;
    float tangential[4];
};

__device__ __forceinline__ PatchSides make_sides(unsigned int kinds, float tangential_x_min, float tangential_x_max,
                                                 float tangential_y_min, float tangential_y_max) {
    PatchSides sides;
    sides.kinds = kinds;
    sides.tangential[0] = tangential_x_min;
    sides.tangential[1] = tangential_x_max;
    sides.tangential[2] = tangential_y_min;
    sides.tangential[3] = tangential_y_max;
    return sides;
}

// One axis of cpu::mirrored_cell: the coordinate itself, or beyond a wall side
// of [lo, hi) its mirror image, `crossed` set to that side (else -1).
__device__ __forceinline__ unsigned int mirror_axis(int c, unsigned int lo, unsigned int hi, int low_side,
                                                    unsigned int kinds, int* crossed) {
    if (c < (int)lo && side_kind(kinds, low_side) != LBM_PATCH_SIDE_INTERFACE) {
        *crossed = low_side;
        return (unsigned int)(2 * (int)lo - 1 - c);
    }
    if (c >= (int)hi && side_kind(kinds, low_side + 1) != LBM_PATCH_SIDE_INTERFACE) {
        *crossed = low_side + 1;
        return (unsigned int)(2 * (int)hi - 1 - c);
    }
    *crossed = -1;
    return (unsigned int)c;
}

// The tangential wall velocity of side `side`, by selects rather than an
// index: an array indexed at run time lives in local memory.
__device__ __forceinline__ float tangential_of(PatchSides sides, int side) {
    return side == 0 ? sides.tangential[0]
                     : (side == 1 ? sides.tangential[1] : (side == 2 ? sides.tangential[2] : sides.tangential[3]));
}

// cpu::reflect: the moments of a mirror image in wall side `side`.
__device__ __forceinline__ Moments reflect(Moments m, PatchSides sides, int side) {
    const bool no_slip = side_kind(sides.kinds, side) == LBM_PATCH_SIDE_WALL;
    Moments r;
    r.delta_rho = m.delta_rho;
    if (side < 2) {
        r.ux = -m.ux;
        r.uy = no_slip ? 2.0f * tangential_of(sides, side) - m.uy : m.uy;
    } else {
        r.ux = no_slip ? 2.0f * tangential_of(sides, side) - m.ux : m.ux;
        r.uy = -m.uy;
    }
    return r;
}

// cpu::reflect_crossed: the moments of a stencil cell read at its mirror
// image, reflected in the side `mirror_axis` reported crossing (-1 for
// none); across two sides each velocity component reversed once per side
// that reverses it, with no wall term (the mean of both orders).
__device__ __forceinline__ Moments reflect_crossed(Moments m, PatchSides sides, int crossed_x, int crossed_y) {
    if (crossed_x >= 0 && crossed_y >= 0) {
        Moments r;
        r.delta_rho = m.delta_rho;
        r.ux = side_kind(sides.kinds, crossed_y) == LBM_PATCH_SIDE_WALL ? m.ux : -m.ux;
        r.uy = side_kind(sides.kinds, crossed_x) == LBM_PATCH_SIDE_WALL ? m.uy : -m.uy;
        return r;
    }
    if (crossed_x >= 0) {
        return reflect(m, sides, crossed_x);
    }
    if (crossed_y >= 0) {
        return reflect(m, sides, crossed_y);
    }
    return m;
}

// Every kernel opens with this (LBM_PROLOGUE() in the kernel families, which
// all.cu defines per pass), because lbm_cuda launches every kernel with
// programmatic stream serialization: a kernel may then be scheduled while
// the one before it in its stream drains, instead of after it completed. A
// plan's interval is a chain of short dependent kernels (a fused batch's, a
// few dozen), and the gap between two of them costs as much as a small
// kernel's work. So the prologue first lets the next kernel be scheduled
// (once every block of this one has started), then waits until the kernels
// this one depends on have completed and their writes are visible; nothing
// may touch global memory before that (the tidy test reads the PTX for it).
// In a launch without the attribute (tools/bulk-variants) both are no-ops.
__device__ __forceinline__ void lbm_prologue() {
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();
}

// The global thread index of a one-dimensional launch.
__device__ __forceinline__ unsigned long long thread_index() {
    return (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
}
