//===- NumpyRandom.h - numpy's legacy uniform draws -------------*- C++ -*-===//
//
// The draws of `np.random.seed(seed); np.random.uniform(0, 1, shape)`:
// MT19937 seeded by init_genrand (std::mt19937's seeding) with the seed's
// low 32 bits, each double built from two 32-bit outputs with 27 and 26
// bits kept. ONNX's reference implementation draws this way; the CPU
// training_dropout kernel draws its mask at run time, the CUDA target
// draws the same mask at compile time.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_NUMPYRANDOM_H
#define SHARDFLOW_RUNTIME_NUMPYRANDOM_H

#include <cstdint>
#include <random>

namespace shardflow::runtime {

/// numpy's generator after `np.random.seed(seed)` (an int64 seed, as ONNX's
/// attribute, keeps its low 32 bits).
inline std::mt19937 numpyGenerator(int64_t seed) {
  return std::mt19937(uint32_t(uint64_t(seed)));
}

/// numpy's `random_sample`: a double in [0, 1) with 53 random bits.
inline double numpyUniform(std::mt19937 &gen) {
  uint32_t a = uint32_t(gen()) >> 5, b = uint32_t(gen()) >> 6;
  return (double(a) * 67108864.0 + double(b)) / 9007199254740992.0;
}

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_NUMPYRANDOM_H
