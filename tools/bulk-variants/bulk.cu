// Variants of stream_collide_bulk (kernels/lbm.cu) timed against a copy of the
// same bytes: the experiment behind docs/PERFORMANCE.md, "The bulk kernel". Not
// part of the engine. `plain` is the first bulk kernel (48 registers), `pairs`
// collides and stores each opposite pair together (32 registers), `aligned` is
// `pairs` with each row's blocks starting at an aligned storage index: what
// kernels/lbm.cu keeps. The bits of `aligned` are compared with `plain`'s.
// Then `aligned` with cache operators on its loads, other block sizes and
// all of L1 as cache, none of which beat it (2026-12-02), and `engine`: the
// shipped kernels/lbm.ptx's stream_collide_bulk, JIT-compiled by the driver
// as lbm-cuda loads it.
#include "../../kernels/common.cuh"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>
#include <fstream>
#include <sstream>
#include <string>

__device__ __forceinline__ void load(const float* __restrict__ src, unsigned int tile_x, unsigned int plane,
                                     unsigned int index, float f[LBM_Q]) {
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        f[i] = src[(unsigned int)i * plane + (index - (unsigned int)lbm_cx(i) - (unsigned int)lbm_cy(i) * tile_x)];
    }
}

// kernels/lbm.cu's collide_and_store, restated so that this file stands alone.
__device__ __forceinline__ void pairs_store(const float f[LBM_Q], float op, float om, float fx, float fy,
                                            float* __restrict__ dst, unsigned int plane, unsigned int index) {
    const Moments m = moments(f, fx, fy);
    const float usq = m.ux * m.ux + m.uy * m.uy;
    const bool forced = !(fx == 0.0f && fy == 0.0f);
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) {
        const int o = lbm_opp(i);
        if (o < i) continue;
        float feq[2], s[2] = {0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int d = k == 0 ? i : o;
            const float cx = (float)lbm_cx(d), cy = (float)lbm_cy(d);
            const float cu = cx * m.ux + cy * m.uy;
            feq[k] = lbm_w(d) * (m.delta_rho + (3.0f * cu + 4.5f * cu * cu - 1.5f * usq));
            if (forced) {
                const float tx = 3.0f * (cx - m.ux) + 9.0f * cu * cx, ty = 3.0f * (cy - m.uy) + 9.0f * cu * cy;
                s[k] = lbm_w(d) * (tx * fx + ty * fy);
            }
        }
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int d = k == 0 ? i : o, e = k == 0 ? o : i;
            const float ev = 0.5f * ((f[d] - feq[k]) + (f[e] - feq[1 - k]));
            const float od = 0.5f * ((f[d] - feq[k]) - (f[e] - feq[1 - k]));
            const float es = 0.5f * (s[k] + s[1 - k]), os = 0.5f * (s[k] - s[1 - k]);
            const float out = f[d] - op * ev - om * od + (1.0f - 0.5f * op) * es + (1.0f - 0.5f * om) * os;
            if (k == 0 || o != i) dst[(unsigned int)d * plane + index] = out;
        }
    }
}

#define ARGS                                                                                                   \
    const float *__restrict__ src, float *__restrict__ dst, unsigned int tile_x, unsigned int plane,          \
        unsigned int x0, unsigned int y0, unsigned int x1, unsigned int y1, float op, float om, float fx, float fy

extern "C" __global__ void plain(ARGS) {
    const unsigned int x = x0 + blockIdx.x * blockDim.x + threadIdx.x, y = y0 + blockIdx.y;
    if (x >= x1 || y >= y1) return;
    const unsigned int index = y * tile_x + x;
    float f[LBM_Q];
    load(src, tile_x, plane, index, f);
    collide(f, op, om, fx, fy);
#pragma unroll
    for (int i = 0; i < LBM_Q; ++i) dst[(unsigned int)i * plane + index] = f[i];
}

extern "C" __global__ void pairs(ARGS) {
    const unsigned int x = x0 + blockIdx.x * blockDim.x + threadIdx.x, y = y0 + blockIdx.y;
    if (x >= x1 || y >= y1) return;
    const unsigned int index = y * tile_x + x;
    float f[LBM_Q];
    load(src, tile_x, plane, index, f);
    pairs_store(f, op, om, fx, fy, dst, plane, index);
}

extern "C" __global__ void aligned(ARGS) {
    const unsigned int y = y0 + blockIdx.y;
    const unsigned int lead = (y * tile_x + x0) & 31u;
    const long long x = (long long)x0 - lead + (long long)(blockIdx.x * blockDim.x + threadIdx.x);
    if (x < (long long)x0 || x >= (long long)x1 || y >= y1) return;
    const unsigned int index = y * tile_x + (unsigned int)x;
    float f[LBM_Q];
    load(src, tile_x, plane, index, f);
    pairs_store(f, op, om, fx, fy, dst, plane, index);
}

// `aligned` with its loads through a cache operator: `.cs` (evict first,
// streaming), `.nc` (the read-only path), `.lu` (last use).
#define ALIGNED_WITH(NAME, LOAD)                                                                               \
    extern "C" __global__ void NAME(ARGS) {                                                                    \
        const unsigned int y = y0 + blockIdx.y;                                                                \
        const unsigned int lead = (y * tile_x + x0) & 31u;                                                     \
        const long long x = (long long)x0 - lead + (long long)(blockIdx.x * blockDim.x + threadIdx.x);         \
        if (x < (long long)x0 || x >= (long long)x1 || y >= y1) return;                                        \
        const unsigned int index = y * tile_x + (unsigned int)x;                                               \
        float f[LBM_Q];                                                                                        \
        _Pragma("unroll") for (int i = 0; i < LBM_Q; ++i) {                                                    \
            f[i] = LOAD(&src[(unsigned int)i * plane +                                                         \
                             (index - (unsigned int)lbm_cx(i) - (unsigned int)lbm_cy(i) * tile_x)]);           \
        }                                                                                                      \
        pairs_store(f, op, om, fx, fy, dst, plane, index);                                                     \
    }
ALIGNED_WITH(aligned_cs, __ldcs)
ALIGNED_WITH(aligned_nc, __ldg)
ALIGNED_WITH(aligned_lu, __ldlu)

typedef void (*Kernel)(ARGS);

// The engine's own `stream_collide_bulk`, JIT-compiled from the shipped
// kernels/lbm.ptx as lbm-cuda loads it, or null when that fails (said).
CUfunction engine_bulk() {
    cudaFree(0);
    std::ifstream in("../../kernels/lbm.ptx");
    std::stringstream ptx;
    ptx << in.rdbuf();
    CUmodule module;
    CUfunction f = nullptr;
    CUresult r = cuModuleLoadData(&module, ptx.str().c_str());
    if (r == CUDA_SUCCESS) r = cuModuleGetFunction(&f, module, "stream_collide_bulk");
    if (r != CUDA_SUCCESS) printf("kernels/lbm.ptx: not loaded (CUresult %d)\n", (int)r);
    return r == CUDA_SUCCESS ? f : nullptr;
}

int main() {
    const CUfunction engine = engine_bulk();
    // Variants 3..: `aligned` with other loads, block sizes and the L1 carveout.
    const char* names[] = {"plain", "pairs", "aligned", "al_cs", "al_nc", "al_lu", "al_128", "al_512", "al_l1max"};
    Kernel kernels[] = {plain, pairs, aligned, aligned_cs, aligned_nc, aligned_lu, aligned, aligned, aligned};
    const unsigned int threads[] = {256, 256, 256, 256, 256, 256, 128, 512, 256};
    for (unsigned int n : {4096u, 8192u}) {
        const size_t plane = (size_t)n * n, bytes = 9 * plane * 4;
        float *a, *b, *c;
        cudaMalloc(&a, bytes);
        cudaMalloc(&b, bytes);
        cudaMalloc(&c, bytes);
        float* h = (float*)malloc(bytes);
        for (size_t k = 0; k < 9 * plane; ++k) h[k] = 1e-3f * (float)((k * 2654435761u) % 2000) / 1000.0f - 1e-3f;
        cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice);
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        const int reps = 40;
        float ms;
        cudaEventRecord(e0);
        for (int r = 0; r < reps; ++r) cudaMemcpyAsync(r % 2 ? a : b, r % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        const double copy = (double)plane * reps / (ms * 1e-3) / 1e9;
        printf("n %u: device-to-device copy %.1f G cells/s\n", n, copy);
        const unsigned int w = n - 2, h_rows = n - 2;
        for (int v = 0; v < 9; ++v) {
            const unsigned int t = threads[v];
            const dim3 grid((w + (v >= 2 ? 31 : 0) + t - 1) / t, h_rows);
            cudaFuncSetAttribute(kernels[v], cudaFuncAttributePreferredSharedMemoryCarveout, v == 8 ? 0 : -1);
            for (int forced = 0; forced < 2; ++forced) {
                const float fx = forced ? 1e-6f : 0.0f;
                for (int r = 0; r < reps + 3; ++r) {
                    if (r == 3) cudaEventRecord(e0);
                    kernels[v]<<<grid, t>>>(r % 2 ? b : a, r % 2 ? a : b, n, (unsigned)plane, 1, 1, n - 1, n - 1,
                                              1.6f, 1.1f, fx, 0.0f);
                }
                cudaEventRecord(e1);
                cudaEventSynchronize(e1);
                cudaEventElapsedTime(&ms, e0, e1);
                const double g = (double)w * h_rows * reps / (ms * 1e-3) / 1e9;
                printf("n %u %-8s force %d: %.1f G cells/s = %.1f%% of the copy (%s)\n", n, names[v], forced, g,
                       100 * g / copy, cudaGetErrorString(cudaGetLastError()));
            }
        }
        // The engine's kernel as shipped, launched as the stepper launches it.
        for (int forced = 0; engine != nullptr && forced < 2; ++forced) {
            float* io[2] = {a, b};
            const unsigned int* skip = nullptr;
            unsigned int nn = n, one = 1, last = n - 1;
            // Every side of the region a neighbour a fixed offset away (no wrap, no wall).
            unsigned int sides = 0;
            float wall[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            float op = 1.6f, om = 1.1f, fx = forced ? 1e-6f : 0.0f, fy = 0.0f;
            for (int r = 0; r < reps + 3; ++r) {
                if (r == 3) cudaEventRecord(e0);
                void* args[] = {&io[r % 2], &io[1 - r % 2], &skip, &nn, &nn, &nn, &nn, &one, &one, &last, &last,
                                &sides, &wall[0], &wall[1], &wall[2], &wall[3], &wall[4], &wall[5], &wall[6],
                                &wall[7], &op, &om, &fx, &fy};
                cuLaunchKernel(engine, (w + 31 + 255) / 256, h_rows, 1, 256, 1, 1, 0, nullptr, args, nullptr);
            }
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms, e0, e1);
            const double g = (double)w * h_rows * reps / (ms * 1e-3) / 1e9;
            printf("n %u %-8s force %d: %.1f G cells/s = %.1f%% of the copy (%s)\n", n, "engine", forced, g,
                   100 * g / copy, cudaGetErrorString(cudaGetLastError()));
        }
        // Bits: `aligned` against `plain` from the same input, both outputs poisoned first.
        cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice);
        for (int forced = 0; forced < 2; ++forced) {
            const float fx = forced ? 1e-5f : 0.0f;
            cudaMemset(b, 0xff, bytes);
            cudaMemset(c, 0xff, bytes);
            plain<<<dim3((w + 255) / 256, h_rows), 256>>>(a, b, n, (unsigned)plane, 1, 1, n - 1, n - 1, 1.6f, 1.1f, fx,
                                                        -2e-6f);
            aligned<<<dim3((w + 31 + 255) / 256, h_rows), 256>>>(a, c, n, (unsigned)plane, 1, 1, n - 1, n - 1, 1.6f,
                                                               1.1f, fx, -2e-6f);
            float* hb = (float*)malloc(bytes);
            float* hc = (float*)malloc(bytes);
            cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost);
            cudaMemcpy(hc, c, bytes, cudaMemcpyDeviceToHost);
            size_t differ = 0;
            for (size_t k = 0; k < 9 * plane; ++k) differ += memcmp(&hb[k], &hc[k], 4) != 0;
            printf("n %u force %d: %zu values differ between plain and aligned\n", n, forced, differ);
            free(hb);
            free(hc);
        }
        free(h);
        cudaFree(a);
        cudaFree(b);
        cudaFree(c);
    }
    return 0;
}
