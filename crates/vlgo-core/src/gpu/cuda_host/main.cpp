// Runs one kernel of CubeCL's CUDA C++ on the host (see cuda_runtime.h beside this file).
// Built with KERNEL_SOURCE (the .cu file, quoted) and KERNEL_ENTRY (its entry point).
// Input file: grid, units, buffer count (u32 each); per buffer its length in 4-byte words and
// the words; then the kernel's info struct. Output file: every buffer's words, in order.
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
    auto head = read_words(in, 3);
    unsigned grid = head[0], units = head[1], count = head[2];
    // One more buffer for the dynamic metadata (tensor shapes and strides), which the caller
    // checks the kernel does not read; each buffer is one word longer, so none is empty.
    std::vector<std::vector<uint32_t>> buffers(count + 1);
    std::vector<void*> pointers(count + 1);
    for (unsigned b = 0; b < count; ++b) {
        size_t len = read_words(in, 1)[0];
        buffers[b] = read_words(in, len);
        buffers[b].push_back(0);
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

    FILE* out = std::fopen(argv[2], "wb");
    if (!out) {
        std::perror(argv[2]);
        return 2;
    }
    for (unsigned b = 0; b < count; ++b) {
        std::fwrite(buffers[b].data(), 4, buffers[b].size() - 1, out);
    }
    std::fclose(out);
    return 0;
}
