// What the kernel pipelines (core/*_pipeline.h) ask of an executor, and the
// small bodies every pipeline uses. A pipeline is a host function, templated
// on the executor, that checks the inputs, launches a fixed sequence of
// portable bodies (core/*_bodies.h) and reads back their status words. Two
// executors run it:
//
// * CpuExecutor (core/launch_cpu.h): the bodies over the core's parallel-for
//   on the CPU, the exact emulation of the GPU run, tested on every CI run;
// * CudaExecutor (custom_ops/cuda/launch.cuh): one CUDA kernel per body on a
//   stream, scratch memory from the framework's allocator.
//
// An executor `exec` provides:
//   exec.For(n, body)          body(i) for every i in [0, n), in any order and
//                              on any threads; later calls see its writes
//   exec.template Scratch<T>(n)  n uninitialized elements of device memory that
//                              live as long as the executor (throws
//                              std::bad_alloc when none can be had)
//   exec.SortPairs(keys_in, keys_out, values_in, values_out, n, key_bits)
//                              stable ascending sort of int32 keys in
//                              [0, 2**key_bits) carrying int32 values
//   exec.CopyToHost(dst, src, bytes)  waits for the work launched so far and
//                              copies device memory to the host
//
// Determinism: grid and block sizes of every launch come from the shapes
// alone, every float output element has one writer, and sums run in a fixed
// order; the status words are integer minima (the same whatever the order of
// the writers). No float atomics anywhere.
#ifndef KERAS_TREES_CORE_PIPELINE_H_
#define KERAS_TREES_CORE_PIPELINE_H_

#include <cstdint>

#include "core/portable.h"

namespace keras_trees {
namespace pipeline {

template <typename T>
struct Fill {
  T* data;
  T value;
  KT_HOST_DEVICE void operator()(int64_t i) const { data[i] = value; }
};

// Records the smallest index i in [0, n) at which `data` is not finite.
template <typename T>
struct FiniteCheck {
  const T* data;
  unsigned long long* status;
  KT_HOST_DEVICE void operator()(int64_t i) const {
    if (!portable::IsFinite(data[i])) portable::AtomicMin(status, static_cast<unsigned long long>(i));
  }
};

// Status words, all set to portable::kNone.
template <class Exec>
unsigned long long* NewStatus(Exec& exec, int64_t words) {
  unsigned long long* status = exec.template Scratch<unsigned long long>(words);
  exec.For(words, Fill<unsigned long long>{status, portable::kNone});
  return status;
}

// The number of bits of keys in [0, n).
inline int KeyBits(int64_t n) {
  int bits = 1;
  while ((int64_t{1} << bits) < n) ++bits;
  return bits;
}

}  // namespace pipeline
}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_PIPELINE_H_
