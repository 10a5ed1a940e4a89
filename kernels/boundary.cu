// boundary.cu: `update_boundary_state`, the once-per-interval update of the
// state the side rules of `stream_collide` read.
//
// One thread advances the interval counter in `state` (`[u32 interval, f32
// factor]`, the u32 stored in the first f32's bits) and stores the inlet
// amplitude factor for the end of the new interval, which every inlet side of
// the interval's `stream_collide` launches then multiplies its profile by. It
// mirrors lbm_core::kernels::boundary::{update_boundary_state,
// amplitude_factor}: kind 0 constant (1), 1 linear ramp over `parameter`
// intervals, 2 sine of period `parameter`, 3 piecewise linear through
// `table_points` (t, factor) pairs, constant beyond the ends. Every kind but the
// sine rounds exactly as the CPU; the sine uses CUDA's sinf, which is within 2
// ulp of the correctly rounded value but not bit for bit what the host libm's
// sinf (and so Rust's f32::sin) returns.
//
// What it does not do: it does not read the table when the amplitude is not a
// table (any buffer serves then), it does not check that the table's times
// increase (lbm_core's case validation does), and it computes nothing per cell:
// the profile of the inlet is a buffer the host uploads once.
#include "common.cuh"

// f32 nearest pi, as std::f32::consts::PI.
#define LBM_PI_F32 3.14159265358979323846f

// kernels::boundary::amplitude_factor at time `t` (base intervals).
__device__ __forceinline__ float amplitude_factor(unsigned int kind, float parameter, const float* table,
                                                  unsigned int table_points, float t) {
    if (kind == LBM_AMPLITUDE_RAMP && parameter > 0.0f) {
        return fminf(t / parameter, 1.0f);
    }
    if (kind == LBM_AMPLITUDE_SINE) {
        return sinf(2.0f * LBM_PI_F32 * t / parameter);
    }
    if (kind == LBM_AMPLITUDE_TABLE && table_points >= 1u) {
        if (t <= table[0]) {
            return table[1];
        }
        for (unsigned int k = 1; k < table_points; ++k) {
            const float t0 = table[2 * k - 2];
            const float f0 = table[2 * k - 1];
            const float t1 = table[2 * k];
            const float f1 = table[2 * k + 1];
            if (t <= t1) {
                return f0 + (f1 - f0) * ((t - t0) / (t1 - t0));
            }
        }
        return table[2 * table_points - 1];
    }
    return 1.0f;
}

LBM_KERNEL(update_boundary_state)(float* state, const float* __restrict__ table,
                                                 unsigned int table_points, unsigned int kind, float parameter) {
    LBM_PROLOGUE();
    if (thread_index() != 0) {
        return;
    }
    // Everything is read before anything is written, as the CPU reference does.
    const unsigned int interval = __float_as_uint(state[0]) + 1u;
    const float factor = amplitude_factor(kind, parameter, table, table_points, (float)interval);
    state[0] = __uint_as_float(interval);
    state[1] = factor;
}
