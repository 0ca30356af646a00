// Internal to src/kernels: avx512-bf16's packer of A's micro-panels (pack_pairs_avx512bf16.cpp),
// KernelSet::pack_bf16_a_panel's contract, for 1 <= mr <= 16. Defined in a file compiled with AVX-512 flags: call it
// only where the dispatcher found the instructions.
#pragma once

#include <cstdint>

namespace meshnn::kernels {

void pack_bf16_a_panel_avx512(const uint16_t* const* rows, int mr, int64_t k_valid, int64_t k0, int64_t kc,
                              uint32_t* dst);

}  // namespace meshnn::kernels
