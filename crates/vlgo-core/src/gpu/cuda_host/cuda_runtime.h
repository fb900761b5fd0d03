// Host stand-in for the CUDA runtime header, so that CubeCL's CUDA C++ compiles as host C++
// (C++20): a cube's units are threads of the host that meet at __syncthreads on a barrier,
// and the cubes run one after the other, so that one host array is every cube's dynamic shared
// memory. The kernels' own code (vector types, the reinterpretation of shared memory as
// vectors, indexing) is compiled as NVRTC would see it; only the built-ins below are the
// host's.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
#define __shared__

struct dim3 {
    unsigned int x, y, z;
};
thread_local dim3 threadIdx;
thread_local dim3 blockIdx;
dim3 blockDim;
dim3 gridDim;

namespace vlgo_host {
// The barrier of the cube that runs now.
inline std::barrier<>* cube_barrier = nullptr;
}  // namespace vlgo_host

inline void __syncthreads() { vlgo_host::cube_barrier->arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// As CUDA's overloads: fminf / fmaxf for floats (a NaN operand gives the other one).
template <class T> inline T min(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
        return std::fmin(a, b);
    } else {
        return a < b ? a : b;
    }
}
template <class T> inline T max(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
        return std::fmax(a, b);
    } else {
        return a > b ? a : b;
    }
}
using std::abs;
