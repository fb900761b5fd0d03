// Runs one kernel of CubeCL's CUDA C++ on the host (see cuda_runtime.h beside this file).
// Built with KERNEL_SOURCE (the .cu file, quoted) and KERNEL_ENTRY (its entry point).
// Input file: grid, units, bytes of dynamic shared memory, buffer count (u32 each); per buffer
// its length in 4-byte words and the words; then the kernel's info struct. Output file: every
// buffer's words, in order. Exit status 3: the kernel wrote past a buffer's end.
#include <cuda_runtime.h>

#include KERNEL_SOURCE

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

// Every cube's dynamic shared memory (the cubes run one at a time): at least the 227 KiB a
// CUDA block may opt into.
alignas(16) uint8 dynamic_shared_mem[1 << 18];

namespace {

// Words after each buffer: a quiet NaN, so that a read past the end spoils the result, and a
// pattern that a write past the end would change.
constexpr size_t GUARD = 64;
constexpr uint32_t GUARD_WORD = 0x7fc0dead;

std::vector<uint32_t> read_words(FILE* f, size_t n) {
    std::vector<uint32_t> v(n);
    if (n > 0 && fread(v.data(), 4, n, f) != n) {
        std::fprintf(stderr, "the input file ends early\n");
        std::exit(2);
    }
    return v;
}

// The kernel's parameter P: the next buffer, or the info struct (passed by value).
template <class P> P arg(void** buffers, size_t i, const info_st& info) {
    if constexpr (std::is_pointer_v<P>) {
        return static_cast<P>(buffers[i]);
    } else {
        return info;
    }
}

template <class... P, size_t... I>
void call(void (*kernel)(P...), void** buffers, const info_st& info, std::index_sequence<I...>) {
    kernel(arg<P>(buffers, I, info)...);
}

template <class... P> void launch(void (*kernel)(P...), void** buffers, const info_st& info) {
    call(kernel, buffers, info, std::index_sequence_for<P...>{});
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
        return 2;
    }
    FILE* in = std::fopen(argv[1], "rb");
    if (!in) {
        std::perror(argv[1]);
        return 2;
    }
    auto head = read_words(in, 4);
    unsigned grid = head[0], units = head[1], shared = head[2], count = head[3];
    if (shared > sizeof(dynamic_shared_mem)) {
        std::fprintf(stderr, "%u bytes of shared memory; the host has %zu\n", shared,
                     sizeof(dynamic_shared_mem));
        return 2;
    }
    // One more buffer for the dynamic metadata (tensor shapes and strides), which the caller
    // checks the kernel does not read.
    std::vector<std::vector<uint32_t>> buffers(count + 1);
    std::vector<size_t> lengths(count);
    std::vector<void*> pointers(count + 1);
    for (unsigned b = 0; b < count; ++b) {
        lengths[b] = read_words(in, 1)[0];
        buffers[b] = read_words(in, lengths[b]);
        buffers[b].resize(lengths[b] + GUARD, GUARD_WORD);
    }
    buffers[count].assign(64, 0);
    for (unsigned b = 0; b <= count; ++b) {
        pointers[b] = buffers[b].data();
    }
    auto words = read_words(in, sizeof(info_st) / 4);
    info_st info;
    std::memcpy(&info, words.data(), sizeof(info_st));
    std::fclose(in);

    blockDim = {units, 1, 1};
    gridDim = {grid, 1, 1};
    for (unsigned cube = 0; cube < grid; ++cube) {
        // Shared memory starts as NaN (all bits set), as a GPU's holds garbage: a value read
        // before the cube wrote it spoils the result.
        std::memset(dynamic_shared_mem, 0xff, sizeof(dynamic_shared_mem));
        std::barrier<> barrier(units);
        vlgo_host::cube_barrier = &barrier;
        std::vector<std::thread> threads;
        for (unsigned unit = 0; unit < units; ++unit) {
            threads.emplace_back([&, unit] {
                threadIdx = {unit, 0, 0};
                blockIdx = {cube, 0, 0};
                launch(KERNEL_ENTRY, pointers.data(), info);
                // A unit that has returned no longer holds the others at a barrier.
                barrier.arrive_and_drop();
            });
        }
        for (auto& t : threads) {
            t.join();
        }
    }

    for (unsigned b = 0; b < count; ++b) {
        for (size_t g = 0; g < GUARD; ++g) {
            if (buffers[b][lengths[b] + g] != GUARD_WORD) {
                std::fprintf(stderr, "buffer %u (%zu words): written at word %zu\n", b,
                             lengths[b], lengths[b] + g);
                return 3;
            }
        }
    }
    FILE* out = std::fopen(argv[2], "wb");
    if (!out) {
        std::perror(argv[2]);
        return 2;
    }
    for (unsigned b = 0; b < count; ++b) {
        std::fwrite(buffers[b].data(), 4, lengths[b], out);
    }
    std::fclose(out);
    return 0;
}
