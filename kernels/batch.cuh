// batch.cuh: the `_batch` entries of a fused ensemble, one launch for every
// member of a batch (lbm_core::device::BatchLaunch).
//
// all.cu compiles each batchable kernel family a second time, inside namespace
// lbm_batch, with LBM_KERNEL making each kernel a device function there. Its
// `_batch` entry, LBM_BATCH_ENTRY(name), takes one table of 64-bit words,
// member after member, each member's parameters in signature order (a pointer
// as its address, a 32-bit value in the low half of its word), and calls the
// device function with the words of member blockIdx.z, converted to the
// function's own parameter types. The body is the very code of the plain
// kernel, so each member computes the bits its own launch computes. The
// entry runs common.cuh's lbm_prologue before it reads the table (the body's
// own LBM_PROLOGUE is empty in the batch pass): waiting after the reads would
// hold every word in registers through the wait.
//
// What it does not do: it checks nothing about the table (lbm-core's launch
// check of every member's launch and the driver's packing,
// lbm_cuda::driver's batch words, are what make it right), and no kernel
// body may read blockIdx.z or gridDim.z.
#pragma once

// A parameter of type T read from its word.
template <typename T>
struct LbmWord;
template <typename T>
struct LbmWord<T*> {
    static __device__ __forceinline__ T* get(unsigned long long w) { return reinterpret_cast<T*>(w); }
};
template <>
struct LbmWord<unsigned int> {
    static __device__ __forceinline__ unsigned int get(unsigned long long w) { return (unsigned int)w; }
};
template <>
struct LbmWord<float> {
    static __device__ __forceinline__ float get(unsigned long long w) { return __uint_as_float((unsigned int)w); }
};
template <>
struct LbmWord<unsigned long long> {
    static __device__ __forceinline__ unsigned long long get(unsigned long long w) { return w; }
};
template <>
struct LbmWord<double> {
    static __device__ __forceinline__ double get(unsigned long long w) { return __longlong_as_double((long long)w); }
};

template <unsigned int... I>
struct LbmSeq {};
template <unsigned int N, unsigned int... I>
struct LbmMakeSeq : LbmMakeSeq<N - 1, N - 1, I...> {};
template <unsigned int... I>
struct LbmMakeSeq<0, I...> {
    typedef LbmSeq<I...> type;
};

// Calls `body` (a template argument, so the call is direct and inlined) with
// the words of member blockIdx.z.
template <typename F, F body>
struct LbmBatch;
template <typename... A, void (*body)(A...)>
struct LbmBatch<void (*)(A...), body> {
    template <unsigned int... I>
    static __device__ __forceinline__ void call(const unsigned long long* __restrict__ w, LbmSeq<I...>) {
        body(LbmWord<A>::get(w[I])...);
    }
    static __device__ __forceinline__ void run(const unsigned long long* __restrict__ words) {
        call(words + (unsigned long long)blockIdx.z * sizeof...(A), typename LbmMakeSeq<sizeof...(A)>::type());
    }
};

// The `_batch` entry of `name`, its signature qualified by `bounds` (empty,
// or a __launch_bounds__).
#define LBM_BATCH_ENTRY_BOUNDED_BY(name, bounds)                                                  \
    extern "C" __global__ void bounds name##_batch(const unsigned long long* __restrict__ words) { \
        lbm_prologue();                                                                           \
        LbmBatch<decltype(&lbm_batch::name), &lbm_batch::name>::run(words);                       \
    }
#define LBM_BATCH_ENTRY(name) LBM_BATCH_ENTRY_BOUNDED_BY(name, )
// A batch entry whose registers are capped so that `blocks` blocks of
// LBM_BLOCK_THREADS threads fit on one multiprocessor.
#define LBM_BOUNDED_BATCH_ENTRY(name, blocks) \
    LBM_BATCH_ENTRY_BOUNDED_BY(name, __launch_bounds__(LBM_BLOCK_THREADS, blocks))
