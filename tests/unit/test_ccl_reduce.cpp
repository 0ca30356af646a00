// Reduction's element arithmetic: the portable loops and the vector kernels (ordinary and
// streaming stores) must give the same bits, for every type, op and instruction set, at any
// alignment and length.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "meshnn/ccl/reduce.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"
#include "support/test_helpers.hpp"

namespace {

using meshnn::ReduceOp;
using meshnn::ccl::ElementType;
using meshnn::ccl::Reduction;
using meshnn::ccl::ResultStores;
namespace kernels = meshnn::kernels;

using IsaCap = meshnn::testing::ScopedIsaCap;

std::vector<kernels::Isa> isas() {
  std::vector<kernels::Isa> out{kernels::Isa::PORTABLE};
  if (kernels::best_supported_isa() >= kernels::Isa::AVX2) out.push_back(kernels::Isa::AVX2);
  if (kernels::best_supported_isa() >= kernels::Isa::AVX512) out.push_back(kernels::Isa::AVX512);
  return out;
}

// Random 32-bit patterns with the awkward values mixed in: NaN, infinities, signed zeros, and the
// integer extremes (which wrap when summed).
std::vector<uint32_t> words(size_t n, uint32_t seed) {
  const float special_f[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 1.0f, -1.0f, 3.0e38f};
  const uint32_t special_i[] = {0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu, 0u, 1u};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-100.0f, 100.0f);
  std::vector<uint32_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t kind = rng() % 8;
    if (kind == 0) {
      std::memcpy(&out[i], &special_f[rng() % 8], 4);
    } else if (kind == 1) {
      out[i] = special_i[rng() % 5];
    } else {
      const float f = value(rng);
      std::memcpy(&out[i], &f, 4);
    }
  }
  return out;
}

// The documented rule, restated independently of the library: result = a (+) b, where max keeps `a`
// unless b > a (so a NaN in `a` stays), min likewise, sums of integers wrap.
uint32_t expected(ElementType type, ReduceOp op, uint32_t a, uint32_t b) {
  auto pick = [op](auto x, auto y) {
    if (op == ReduceOp::MAX) return y > x ? y : x;
    if (op == ReduceOp::MIN) return y < x ? y : x;
    return static_cast<decltype(x)>(x + y);
  };
  if (type == ElementType::F32) {
    float x, y;
    std::memcpy(&x, &a, 4);
    std::memcpy(&y, &b, 4);
    const float r = pick(x, y);
    uint32_t bits;
    std::memcpy(&bits, &r, 4);
    return bits;
  }
  if (type == ElementType::I32) {
    if (op == ReduceOp::SUM || op == ReduceOp::MEAN) return a + b;
    return static_cast<uint32_t>(pick(static_cast<int32_t>(a), static_cast<int32_t>(b)));
  }
  return pick(a, b);
}

TEST(CclReduction, StreamingAndCachedStoresGiveTheDocumentedBits) {
  const ElementType types[] = {ElementType::F32, ElementType::I32, ElementType::U32};
  const ReduceOp ops[] = {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::MIN};
  // Lengths around the vector widths; output offsets (in elements) that misalign the destination.
  const int64_t counts[] = {0, 1, 7, 8, 9, 15, 16, 17, 33, 1000};
  const int64_t offsets[] = {0, 1, 5, 16};
  const std::vector<uint32_t> a = words(1100, 1), b = words(1100, 2);
  for (kernels::Isa isa : isas()) {
    IsaCap cap(isa);
    for (ElementType type : types) {
      for (ReduceOp op : ops) {
        const Reduction red{op, type, false, 2};
        for (int64_t count : counts) {
          for (int64_t offset : offsets) {
            for (ResultStores stores : {ResultStores::CACHED, ResultStores::STREAMING}) {
              SCOPED_TRACE(::testing::Message() << "isa " << kernels::to_string(isa) << " type " << static_cast<int>(type)
                                                << " op " << static_cast<int>(op) << " count " << count << " offset "
                                                << offset << " streaming " << (stores == ResultStores::STREAMING));
              // Guard words on both sides catch a write past either end.
              std::vector<uint32_t> out(count + offset + 20, 0xDEADBEEFu);
              red.combine_wire_to(a.data(), b.data(), out.data() + offset, count, stores);
              std::vector<uint32_t> accumulated(out.size(), 0xDEADBEEFu);
              std::memcpy(accumulated.data() + offset, a.data(), count * 4);
              red.accumulate_wire(accumulated.data() + offset, b.data(), count, stores);
              for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
                const bool inside = i >= offset && i < offset + count;
                const uint32_t want = inside ? expected(type, op, a[i - offset], b[i - offset]) : 0xDEADBEEFu;
                ASSERT_EQ(out[i], want) << "combine_wire_to, element " << i;
                ASSERT_EQ(accumulated[i], want) << "accumulate_wire, element " << i;
              }
            }
          }
        }
      }
    }
  }
}

// Equal bits, except that a float sum of two NaNs may carry either one's payload: which one is up
// to the compiler's operand order for `a + b`, here and in the library's portable loops alike.
bool same_result(ElementType type, uint32_t got, uint32_t want) {
  auto is_nan = [](uint32_t bits) { return (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0; };
  return got == want || (type == ElementType::F32 && is_nan(got) && is_nan(want));
}

TEST(CclReduction, CombiningManySourcesFoldsThemInOrderWithTheDocumentedBits) {
  // combine_sources (the direct exchange's reduction) and combine_into_wire, on every instruction
  // set: sources fold left to right, x0 (+) x1 (+) ... in blocks, so lengths straddle the block.
  const ElementType types[] = {ElementType::F32, ElementType::I32, ElementType::U32};
  const ReduceOp ops[] = {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::MIN};
  const int64_t counts[] = {1, 17, 2047, 2048, 2049, 5000};
  std::vector<std::vector<uint32_t>> inputs;
  for (uint32_t k = 0; k < 5; ++k) inputs.push_back(words(5000, 10 + k));
  for (kernels::Isa isa : isas()) {
    IsaCap cap(isa);
    for (ElementType type : types) {
      for (ReduceOp op : ops) {
        const Reduction red{op, type, false, 2};
        for (size_t n_sources : {size_t{2}, size_t{3}, size_t{5}}) {
          for (int64_t count : counts) {
            SCOPED_TRACE(::testing::Message() << "isa " << kernels::to_string(isa) << " type " << static_cast<int>(type)
                                              << " op " << static_cast<int>(op) << " sources " << n_sources
                                              << " count " << count);
            std::vector<const void*> sources;
            for (size_t k = 0; k < n_sources; ++k) sources.push_back(inputs[k].data());
            std::vector<uint32_t> out(count + 8, 0xDEADBEEFu);
            red.combine_sources(sources, out.data(), count);
            std::vector<uint32_t> wire(inputs[0].begin(), inputs[0].begin() + count);
            red.combine_into_wire(wire.data(), inputs[1].data(), count);
            for (int64_t i = 0; i < count; ++i) {
              uint32_t want = inputs[0][i];
              for (size_t k = 1; k < n_sources; ++k) want = expected(type, op, want, inputs[k][i]);
              ASSERT_PRED3(same_result, type, out[i], want) << "combine_sources, element " << i;
              ASSERT_PRED3(same_result, type, wire[i], expected(type, op, inputs[0][i], inputs[1][i]))
                  << "combine_into_wire, element " << i;
            }
            for (int64_t i = count; i < count + 8; ++i) ASSERT_EQ(out[i], 0xDEADBEEFu) << "past the end, element " << i;
          }
        }
      }
    }
  }
}

}  // namespace
