// exchange.cu: `accumulate_exchange`, the momentum exchange on body links.
//
// The link table has lbm_core::domain::geometry::LINK_WORDS words per link:
// the fluid cell's storage index; the direction d pointing into the body plus
// 16 x the body slot; the lever arm x and y as f32 bits; the wall distance q
// as f32 bits; the storage index of the fluid cell behind, or LBM_NO_CELL.
// `f` holds the post-collision populations that the hop's streaming reads. Each
// link gives its body c_d (f*_d + f_in) in real populations (un-shifted by their
// weights, hence the 2 w_d), f_in being what `bouzidi` returns along opp(d), and
// the torque r x F about the body centre; the interval accumulator and, when
// `window_on`, the window accumulator get the sums
// (lbm_core::kernels::exchange::EXCHANGE_WORDS doubles per body slot: Fx, Fy,
// torque, unused).
//
// The sums do not depend on their order: each contribution is turned into a
// fixed-point integer (`lbm_to_fixed`, multiples of 2^-64, exact from 2^-11
// on; a non-finite one, or one of 2^40 or more, marks its component instead)
// and summed as an unsigned 128-bit integer, which wraps and associates; only
// the slot's total is rounded back to double, once (`lbm_from_fixed`; NaN
// where marked). So a body's sums are the same bits whatever else the table
// holds, in whatever order and over however many blocks: a split run's slab,
// whose table lacks the other slabs' bodies, gives each body what one device
// gives it. The launch is n_slots x B blocks of LBM_BLOCK_THREADS (T) threads,
// B = `blocks_per_slot` (bodies on one level share the accumulators, one slot
// each, named in the link table); block b of slot s is blockIdx.x = s B + b.
// Thread t of that block sums the links of slot s among links b T + t,
// b T + t + B T, ...; a tree in shared memory combines the threads' sums into
// the block's partial, which thread 0 writes to `partials`
// (LBM_PARTIAL_WORDS 64-bit words per block: each component's low and high
// words, then the marks). It then fences and counts the block's arrival on
// the slot's u32 in `arrivals` (the pattern of producer.cu); the block that
// reads B - 1 is the slot's last, sees every other block's partial, adds
// them, adds the rounded total to the slot's words and sets the counter back
// to 0 for the next launch. No atomics on the sums. Why this shape: one block
// per slot was latency-bound (56 us on 10k links); B, chosen on the host from
// the link count (lbm_core::kernels::exchange::blocks_per_slot: one block per
// 2048 links, 1 to 64), spreads a slot over several SMs, and each block still
// reads its stride of the whole table but computes only its own slot's
// links, so the slots are summed side by side. The only limit on slots is
// the 2^28 a link can name (MAX_BODY_SLOTS beside the launch struct; the
// launch check refuses more, and more than 64 blocks per slot).
//
// It mirrors lbm_core::kernels::exchange::accumulate_exchange bit for bit:
// each contribution, its fixed-point value, the partials and the rounding.
// What it does not do: it does not zero the accumulators (the plan's memset
// does) nor the counters (zero from the allocation on, left zero by every
// launch), and it does not check the slots in the table against `n_slots`
// (the table is built by lbm_core::domain::geometry::wall_tables; a link of a
// slot without blocks contributes nothing, as on the CPU).
#include "common.cuh"

// `v` in multiples of 2^-64, truncated toward zero, into `out`; false for a
// non-finite `v` or one of 2^40 or more (lbm_core::kernels::exchange::to_fixed).
__device__ __forceinline__ bool lbm_to_fixed(double v, unsigned __int128* out) {
    const unsigned long long bits = (unsigned long long)__double_as_longlong(v);
    const unsigned long long exponent = (bits >> 52) & 0x7ffull;
    if (exponent >= 1023ull + 40ull) {
        return false;
    }
    if (exponent == 0ull) {
        *out = 0;
        return true;
    }
    const unsigned long long mantissa = (bits & ((1ull << 52) - 1ull)) | (1ull << 52);
    const long long shift = (long long)exponent - 1011;
    unsigned __int128 magnitude = 0;
    if (shift >= 0) {
        magnitude = (unsigned __int128)mantissa << shift;
    } else if (shift >= -52) {
        magnitude = (unsigned __int128)(mantissa >> (-shift));
    }
    // Two's complement negation, as Rust's i128 `-`.
    *out = (bits >> 63) != 0ull ? (unsigned __int128)0 - magnitude : magnitude;
    return true;
}

// The fixed-point `x` (two's complement, multiples of 2^-64) as the nearest
// double, ties to even (lbm_core::kernels::exchange::from_fixed).
__device__ double lbm_from_fixed(unsigned __int128 x) {
    const bool negative = (x >> 127) != 0;
    const unsigned __int128 magnitude = negative ? (unsigned __int128)0 - x : x;
    if (magnitude == 0) {
        return 0.0;
    }
    const unsigned long long hi = (unsigned long long)(magnitude >> 64);
    const unsigned long long lo = (unsigned long long)magnitude;
    const int lead = hi != 0ull ? 127 - __clzll((long long)hi) : 63 - __clzll((long long)lo);
    unsigned __int128 mantissa = magnitude;
    long long scale = 0;
    if (lead > 52) {
        const int drop = lead - 52;
        const unsigned __int128 rest = magnitude & (((unsigned __int128)1 << drop) - 1);
        const unsigned __int128 half = (unsigned __int128)1 << (drop - 1);
        mantissa = magnitude >> drop;
        if (rest > half || (rest == half && (mantissa & 1) != 0)) {
            mantissa += 1;
        }
        scale = drop;
    }
    // Both factors exact, so is their product.
    const double power = __longlong_as_double((1023ll + scale - 64ll) << 52);
    const double value = __ull2double_rn((unsigned long long)mantissa) * power;
    return negative ? -value : value;
}

LBM_KERNEL(accumulate_exchange)(const float* __restrict__ f, unsigned int plane_cells,
                                               const unsigned int* __restrict__ links, unsigned int n_links,
                                               unsigned int n_slots, unsigned int blocks_per_slot, double* partials,
                                               unsigned int* arrivals, double* interval, double* window,
                                               unsigned int window_on) {
    LBM_PROLOGUE();
    __shared__ unsigned __int128 partial[3][LBM_BLOCK_THREADS];
    __shared__ unsigned int marks[LBM_BLOCK_THREADS];
    // The host launches exactly n_slots x blocks_per_slot blocks of
    // LBM_BLOCK_THREADS threads (uniform branch: the whole block leaves or
    // none of it).
    if (blockDim.x != LBM_BLOCK_THREADS || blocks_per_slot == 0 || blockIdx.x / blocks_per_slot >= n_slots) {
        return;
    }
    const unsigned int slot = blockIdx.x / blocks_per_slot;
    const unsigned int block = blockIdx.x % blocks_per_slot;
    const unsigned int tid = threadIdx.x;
    const size_t stride = (size_t)LBM_BLOCK_THREADS * blocks_per_slot;
    unsigned __int128 sum[3] = {0, 0, 0};
    unsigned int mark = 0;
    for (size_t k = (size_t)block * LBM_BLOCK_THREADS + tid; k < n_links; k += stride) {
        const unsigned int* link = links + k * LBM_LINK_WORDS;
        if (link[1] >> 4 != slot) {
            continue;
        }
        const unsigned int cell = link[0];
        const int d = (int)(link[1] & 15u);
        const unsigned int behind = link[5];
        const bool has_behind = behind != LBM_NO_CELL;
        if (cell >= plane_cells || d >= LBM_Q || (has_behind && behind >= plane_cells)) {
            // A malformed link would read outside the population planes; the CPU
            // reference panics on it, here it contributes nothing.
            continue;
        }
        const double rx = (double)__uint_as_float(link[2]);
        const double ry = (double)__uint_as_float(link[3]);
        const float q = __uint_as_float(link[4]);
        const float returned = bouzidi(f, plane_cells, cell, has_behind, behind, lbm_opp(d), q);
        // cpu::link_exchange: the shifted populations, the rest state's part left out.
        const double both = (double)(f[(size_t)d * plane_cells + cell] + returned);
        const double fx = (double)lbm_cx(d) * both;
        const double fy = (double)lbm_cy(d) * both;
        const double value[3] = {fx, fy, rx * fy - ry * fx};
        for (int j = 0; j < 3; ++j) {
            unsigned __int128 fixed;
            if (lbm_to_fixed(value[j], &fixed)) {
                sum[j] += fixed;
            } else {
                mark |= 1u << j;
            }
        }
    }
    for (int j = 0; j < 3; ++j) {
        partial[j][tid] = sum[j];
    }
    marks[tid] = mark;
    __syncthreads();
#pragma unroll
    for (unsigned int h = LBM_BLOCK_THREADS / 2; h > 0; h >>= 1) {
        if (tid < h) {
            for (int j = 0; j < 3; ++j) {
                partial[j][tid] += partial[j][tid + h];
            }
            marks[tid] |= marks[tid + h];
        }
        __syncthreads();
    }
    if (tid != 0) {
        return;
    }
    // Volatile: the last block reads partials other SMs wrote during this
    // launch, which a line cached in its own L1 (a neighbour slot's read) must
    // not stand in for.
    volatile unsigned long long* slot_partials =
        (volatile unsigned long long*)partials + (size_t)slot * blocks_per_slot * LBM_PARTIAL_WORDS;
    volatile unsigned long long* mine = slot_partials + (size_t)block * LBM_PARTIAL_WORDS;
    for (int j = 0; j < 3; ++j) {
        mine[2 * j] = (unsigned long long)partial[j][0];
        mine[2 * j + 1] = (unsigned long long)(partial[j][0] >> 64);
    }
    mine[6] = marks[0];
    // The partial is visible to every block before the arrival is counted.
    __threadfence();
    if (atomicAdd(arrivals + slot, 1u) != blocks_per_slot - 1) {
        return;
    }
    // Every other block of the slot fenced before it arrived, so its partial
    // is visible.
    __threadfence();
    unsigned __int128 total[3] = {0, 0, 0};
    unsigned long long total_marks = 0;
    for (unsigned int b = 0; b < blocks_per_slot; ++b) {
        volatile unsigned long long* words = slot_partials + (size_t)b * LBM_PARTIAL_WORDS;
        for (int j = 0; j < 3; ++j) {
            total[j] += ((unsigned __int128)words[2 * j + 1] << 64) | words[2 * j];
        }
        total_marks |= words[6];
    }
    double value[3];
    for (int j = 0; j < 3; ++j) {
        value[j] = (total_marks >> j & 1ull) != 0ull ? __longlong_as_double(0x7ff8000000000000ll) : lbm_from_fixed(total[j]);
    }
    double* out = interval + (size_t)slot * LBM_EXCHANGE_WORDS;
    for (int j = 0; j < 3; ++j) {
        out[j] += value[j];
    }
    if (window_on != 0) {
        double* w = window + (size_t)slot * LBM_EXCHANGE_WORDS;
        for (int j = 0; j < 3; ++j) {
            w[j] += value[j];
        }
    }
    // Every block of the slot has arrived, so nothing else touches the
    // counter in this launch; the next launch finds it at 0.
    atomicExch(arrivals + slot, 0u);
}
