// Helpers of the PyTorch adapters (the torch binding): the core's parallel-for
// served by PyTorch's intra-op thread pool (at::parallel_for), tensor shapes
// for core/checks.h, output allocation and errors. The arithmetic lives in
// custom_ops/core/; the checks too.
//
// Only PyTorch's stable C++ ABI is used (torch/csrc/stable/, the AOTI C shim):
// the library is compiled with TORCH_TARGET_VERSION = 2.10, the first release
// whose stable ABI has parallel_for, so one build loads into PyTorch 2.10 and
// every later release. The ops are registered with STABLE_TORCH_LIBRARY_FRAGMENT
// in namespace keras_trees; their fake (meta) kernels and autograd formulas are
// registered from Python (keras_trees/ops/_torch_*.py).
//
// Errors: a failed input check throws std::invalid_argument, which PyTorch
// raises as ValueError carrying the message of core/checks.h (eager and inside
// torch.compile'd code alike); an exception from a core (std::bad_alloc when
// its scratch memory cannot be had, rethrown on the calling thread by
// ParallelFor) becomes RuntimeError through Guard.
#ifndef KERAS_TREES_TORCH_TORCH_UTILS_H_
#define KERAS_TREES_TORCH_TORCH_UTILS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "core/checks.h"
#include "core/common.h"

namespace keras_trees {

using torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;

// The core's parallel-for on PyTorch's intra-op thread pool (at::parallel_for
// through the stable ABI; torch.set_num_threads sets its size). [0, n) is cut
// into chunks of at least ~10k cycles, a few per thread, which the pool's
// threads claim from a shared counter: at::parallel_for hands each thread one
// fixed share (OpenMP), so on a busy machine a thread that is descheduled
// would hold up the whole call; claimed chunks keep the others working.
// at::parallel_for runs inline inside a parallel region (the calling thread
// then claims every chunk). How [0, n) is split never changes results: the
// cores have one writer per output element and fixed summation orders.
inline ParallelFor TorchParallelFor() {
  ParallelFor parallel_for;
  const int64_t threads = std::max<int64_t>(static_cast<int64_t>(torch::stable::get_num_threads()), 1);
  parallel_for.num_threads = static_cast<int>(threads);
  if (threads <= 1) return parallel_for;  // serial on the calling thread
  parallel_for.run = [threads](int64_t n, int64_t cost_per_unit, const RangeFn& fn) {
    const int64_t min_items = std::max<int64_t>(1, 10000 / std::max<int64_t>(cost_per_unit, 1));
    const int64_t chunk = std::max(min_items, (n + 4 * threads - 1) / (4 * threads));
    const int64_t chunks = (n + chunk - 1) / chunk;
    if (chunks <= 1) {
      fn(0, n);
      return;
    }
    std::atomic<int64_t> next{0};
    const int64_t workers = std::min(threads, chunks);
    torch::stable::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
      for (int64_t c; (c = next.fetch_add(1)) < chunks;) fn(c * chunk, std::min(n, (c + 1) * chunk));
    });
  };
  return parallel_for;
}

inline Shape ShapeOf(const Tensor& t) {
  const auto sizes = t.sizes();
  return Shape(sizes.begin(), sizes.end());
}

// A failed check: ValueError in Python, with the message of core/checks.h.
[[noreturn]] inline void Fail(const std::string& message) { throw std::invalid_argument(message); }

// Raises unless a check of core/checks.h returned an empty message.
inline void Check(const std::string& message) {
  if (!message.empty()) Fail(message);
}

inline bool IsF32(const Tensor& t) { return t.scalar_type() == ScalarType::Float; }
inline bool IsF64(const Tensor& t) { return t.scalar_type() == ScalarType::Double; }

template <typename T>
inline bool HasType(const Tensor& t) {
  return std::is_same<T, float>::value ? IsF32(t) : IsF64(t);
}

template <typename T>
inline const char* TypeName() {
  return std::is_same<T, float>::value ? "float32" : "float64";
}

// Calls fn(T{}) for T = float or double by the dtype of `probe`. Every other
// floating argument must have that dtype: the Python wrappers cast them, and
// CheckSameType says which one does not.
template <typename Fn>
auto DispatchFloat(const Tensor& probe, const char* name, Fn&& fn) -> decltype(fn(float{})) {
  if (IsF32(probe)) return fn(float{});
  if (IsF64(probe)) return fn(double{});
  Fail(std::string(name) + " must be float32 or float64");
}

template <typename T>
inline std::string CheckSameType(std::initializer_list<std::pair<const char*, const Tensor*>> args) {
  for (const auto& [name, tensor] : args) {
    if (!HasType<T>(*tensor)) {
      return std::string(name) + " must have the dtype of x (" + TypeName<T>() + ")";
    }
  }
  return "";
}

inline std::string CheckType(const Tensor& t, ScalarType type, const char* name, const char* type_name) {
  return t.scalar_type() == type ? "" : std::string(name) + " must be " + type_name;
}

// The kernels read dense row-major data: a strided view is copied first (the
// Python wrappers pass contiguous tensors, so this is rare).
inline Tensor Dense(const Tensor& t) { return t.is_contiguous() ? t : torch::stable::contiguous(t); }

template <typename T>
inline T* Data(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

template <typename T>
inline int32_t DtypeCode();
template <>
inline int32_t DtypeCode<float>() { return aoti_torch_dtype_float32(); }
template <>
inline int32_t DtypeCode<double>() { return aoti_torch_dtype_float64(); }
template <>
inline int32_t DtypeCode<int32_t>() { return aoti_torch_dtype_int32(); }
template <>
inline int32_t DtypeCode<bool>() { return aoti_torch_dtype_bool(); }

// A new uninitialized, contiguous CPU tensor of element type T.
template <typename T>
inline Tensor Empty(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  AtenTensorHandle handle = nullptr;
  const AOTITorchError status =
      aoti_torch_empty_strided(static_cast<int64_t>(shape.size()), shape.data(), strides.data(), DtypeCode<T>(),
                               aoti_torch_device_type_cpu(), 0, &handle);
  if (status != AOTI_TORCH_SUCCESS) throw std::bad_alloc();
  return Tensor(handle);
}

// A new CPU tensor like `shape`, of element type T, filled with zeros.
template <typename T>
inline Tensor Zeros(const Shape& shape) {
  Tensor t = Empty<T>(shape);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::fill_n(Data<T>(t), n, T(0));
  return t;
}

// Every op is registered as TORCH_BOX(&Guard<&Op>::Call): a C++ exception from
// a core other than a failed check (std::bad_alloc when its scratch memory
// cannot be had, rethrown on this thread by ParallelFor from whichever worker
// hit it) becomes RuntimeError with the message of the other bindings.
template <auto Op>
struct Guard;

template <typename R, typename... Args, R (*Op)(Args...)>
struct Guard<Op> {
  static R Call(Args... args) {
    try {
      return Op(std::move(args)...);
    } catch (const std::bad_alloc&) {
      throw std::runtime_error("keras-trees kernel: out of memory for its working memory; use a smaller batch");
    }
  }
};

#define KT_TORCH_IMPL(m, name, fn) (m).impl(name, TORCH_BOX(&::keras_trees::Guard<&fn>::Call))

}  // namespace keras_trees

#endif  // KERAS_TREES_TORCH_TORCH_UTILS_H_
