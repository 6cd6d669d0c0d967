// Helpers of the XLA FFI adapters (the JAX binding): the core's parallel-for
// served by XLA's intra-op thread pool, buffer shapes for core/checks.h, and
// errors. The arithmetic lives in custom_ops/core/; the checks too.
#ifndef KERAS_TREES_XLA_FFI_UTILS_H_
#define KERAS_TREES_XLA_FFI_UTILS_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/checks.h"
#include "core/common.h"
#include "xla/ffi/api/ffi.h"

// Declares a handler symbol with default visibility (the library is compiled
// with -fvisibility=hidden); XLA_FFI_DEFINE_HANDLER_SYMBOL then defines it and
// Python finds it with ctypes. Use at global scope.
#define KT_EXPORT_FFI_HANDLER(name) \
  extern "C" __attribute__((visibility("default"))) XLA_FFI_Error* name(XLA_FFI_CallFrame*)

namespace keras_trees {

namespace ffi = ::xla::ffi;

// The core's parallel-for on XLA's intra-op thread pool. The calling thread
// works too: chunks are claimed from a shared counter by the caller and by up
// to num_threads - 1 scheduled tasks, and the call returns once every chunk is
// done. A task that starts late finds nothing left and only releases the shared
// state, so the caller never waits for a task that has not started (no
// deadlock when the pool is busy). How [0, n) is split never changes results:
// the cores have one writer per output element and fixed summation orders.
inline ParallelFor XlaParallelFor(ffi::ThreadPool pool) {
  ParallelFor parallel_for;
  const int64_t threads = std::max<int64_t>(pool.num_threads(), 1);
  parallel_for.num_threads = static_cast<int>(threads);
  if (threads <= 1) return parallel_for;  // serial on the calling thread
  parallel_for.run = [pool, threads](int64_t n, int64_t cost_per_unit, const RangeFn& fn) mutable {
    // Chunks of at least ~10k cycles, and a few per thread for balance.
    const int64_t min_items = std::max<int64_t>(1, 10000 / std::max<int64_t>(cost_per_unit, 1));
    const int64_t chunk = std::max(min_items, (n + 4 * threads - 1) / (4 * threads));
    const int64_t chunks = (n + chunk - 1) / chunk;
    if (chunks <= 1) {
      fn(0, n);
      return;
    }
    struct State {
      std::atomic<int64_t> next{0};
      int64_t done = 0;
      std::mutex mu;
      std::condition_variable cv;
    };
    auto state = std::make_shared<State>();
    const RangeFn* body = &fn;
    auto work = [state, body, n, chunk, chunks]() {
      int64_t finished = 0;
      for (int64_t c; (c = state->next.fetch_add(1)) < chunks; ++finished) {
        (*body)(c * chunk, std::min(n, (c + 1) * chunk));
      }
      if (finished > 0) {
        std::lock_guard<std::mutex> lock(state->mu);
        state->done += finished;
        if (state->done == chunks) state->cv.notify_all();
      }
    };
    const int64_t helpers = std::min<int64_t>(threads, chunks) - 1;
    for (int64_t i = 0; i < helpers; ++i) pool.Schedule(decltype(work)(work));
    work();
    std::unique_lock<std::mutex> lock(state->mu);
    state->cv.wait(lock, [&] { return state->done == chunks; });
  };
  return parallel_for;
}

inline Shape ShapeOf(const ffi::AnyBuffer& buffer) {
  auto dims = buffer.dimensions();
  return Shape(dims.begin(), dims.end());
}

inline ffi::Error InvalidArgument(const std::string& message) {
  return ffi::Error::InvalidArgument(message);
}

inline ffi::Error FromCheck(const std::string& message) {
  return message.empty() ? ffi::Error::Success() : InvalidArgument(message);
}

// Every handler is defined through Guard<&Handler>::Call: a C++ exception
// from the core (std::bad_alloc when its scratch memory cannot be had,
// rethrown on the calling thread by ParallelFor from whichever worker hit it)
// becomes an XLA error (RESOURCE_EXHAUSTED) that JAX raises, instead of
// aborting the process.
template <auto Handler>
struct Guard;

template <typename... Args, ffi::Error (*Handler)(Args...)>
struct Guard<Handler> {
  static ffi::Error Call(Args... args) {
    try {
      return Handler(std::move(args)...);
    } catch (const std::bad_alloc&) {
      return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                        "keras-trees kernel: out of memory for its working memory; use a smaller batch");
    } catch (const std::exception& e) {
      return ffi::Error(ffi::ErrorCode::kInternal, std::string("keras-trees kernel: ") + e.what());
    }
  }
};

// The supported floating types: float32 and float64 (JAX with x64 enabled).
inline bool IsF32(const ffi::AnyBuffer& b) { return b.element_type() == ffi::DataType::F32; }
inline bool IsF64(const ffi::AnyBuffer& b) { return b.element_type() == ffi::DataType::F64; }

template <typename T>
inline bool HasType(const ffi::AnyBuffer& b) {
  return std::is_same<T, float>::value ? IsF32(b) : IsF64(b);
}

template <typename T>
inline T* Data(const ffi::AnyBuffer& b) {
  return reinterpret_cast<T*>(b.untyped_data());
}

template <typename T>
inline T* Data(ffi::Result<ffi::AnyBuffer>& result) {
  return reinterpret_cast<T*>(result->untyped_data());
}

// Calls fn(T{}) for T = float or double by the dtype of `probe` (fn reads the
// type off its argument: `using T = decltype(tag);`). Every other floating
// argument must have that dtype: the Python wrappers cast them, and
// CheckSameType says which one does not.
template <typename Fn>
ffi::Error DispatchFloat(const ffi::AnyBuffer& probe, const char* name, Fn&& fn) {
  if (IsF32(probe)) return fn(float{});
  if (IsF64(probe)) return fn(double{});
  return InvalidArgument(std::string(name) + " must be float32 or float64");
}

template <typename T>
inline std::string CheckSameType(std::initializer_list<std::pair<const char*, const ffi::AnyBuffer*>> args) {
  for (const auto& [name, buffer] : args) {
    if (!HasType<T>(*buffer)) {
      return std::string(name) + " must have the dtype of x (" +
             (std::is_same<T, float>::value ? "float32" : "float64") + ")";
    }
  }
  return "";
}

inline std::string CheckType(const ffi::AnyBuffer& b, ffi::DataType type, const char* name,
                             const char* type_name) {
  return b.element_type() == type ? "" : std::string(name) + " must be " + type_name;
}


// The arguments, results and attributes of the ops bound on several platforms,
// after each platform's context (XLA's thread pool for the CPU handlers and
// their CPU emulation, the stream for the CUDA handlers): one declaration per
// op (xla/*_ffi.cc, xla/portable_ffi.cc, cuda/xla_handlers.cu).
template <typename Binding>
auto SoftTreeEnsembleSignature(Binding binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // x
      .template Arg<ffi::AnyBuffer>()            // node_weights
      .template Arg<ffi::AnyBuffer>()            // node_bias
      .template Arg<ffi::AnyBuffer>()            // leaf_weights
      .template Arg<ffi::AnyBuffer>()            // gamma (scalar)
      .template Ret<ffi::AnyBuffer>();           // output [batch, units]
}

template <typename Binding>
auto SoftTreeEnsembleGradSignature(Binding binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // grad_output
      .template Arg<ffi::AnyBuffer>()            // x
      .template Arg<ffi::AnyBuffer>()            // node_weights
      .template Arg<ffi::AnyBuffer>()            // node_bias
      .template Arg<ffi::AnyBuffer>()            // leaf_weights
      .template Arg<ffi::AnyBuffer>()            // gamma (scalar)
      .template Ret<ffi::AnyBuffer>()            // grad_x
      .template Ret<ffi::AnyBuffer>()            // grad_node_weights
      .template Ret<ffi::AnyBuffer>()            // grad_node_bias
      .template Ret<ffi::AnyBuffer>();           // grad_leaf_weights
}

template <typename Binding>
auto HingeForwardSignature(Binding binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // x
      .template Arg<ffi::AnyBuffer>()            // thresholds
      .template Arg<ffi::AnyBuffer>()            // feature_indices (int32)
      .template Arg<ffi::AnyBuffer>()            // leaf_weights
      .template Ret<ffi::AnyBuffer>()            // output [batch, trees, units]
      .template Ret<ffi::AnyBuffer>()            // leaf (int32)
      .template Ret<ffi::AnyBuffer>()            // margin
      .template Ret<ffi::AnyBuffer>()            // vertex (int32)
      .template Attr<bool>("fern");
}

template <typename Binding>
auto HingeBackwardSignature(Binding binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // grad_output
      .template Arg<ffi::AnyBuffer>()            // grad_margin
      .template Arg<ffi::AnyBuffer>()            // x
      .template Arg<ffi::AnyBuffer>()            // feature_indices
      .template Arg<ffi::AnyBuffer>()            // leaf_weights
      .template Arg<ffi::AnyBuffer>()            // leaf
      .template Arg<ffi::AnyBuffer>()            // margin
      .template Arg<ffi::AnyBuffer>()            // vertex
      .template Ret<ffi::AnyBuffer>()            // grad_x
      .template Ret<ffi::AnyBuffer>()            // grad_thresholds
      .template Ret<ffi::AnyBuffer>()            // grad_leaf_weights
      .template Attr<bool>("fern");
}

template <typename Binding>
auto RouteSignature(Binding binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // x
      .template Arg<ffi::AnyBuffer>()            // split_weights
      .template Arg<ffi::AnyBuffer>()            // split_bias
      .template Arg<ffi::AnyBuffer>()            // is_split (bool)
      .template Ret<ffi::AnyBuffer>()            // node (int32) [batch, trees]
      .template Ret<ffi::AnyBuffer>()            // path_values [batch, trees, depth or 0]
      .template Attr<bool>("with_path_values");
}

template <typename Binding>
auto RouteExpertsSignature(Binding binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // x
      .template Arg<ffi::AnyBuffer>()            // split_weights
      .template Arg<ffi::AnyBuffer>()            // split_bias
      .template Arg<ffi::AnyBuffer>()            // expert_weights
      .template Arg<ffi::AnyBuffer>()            // threshold
      .template Arg<ffi::AnyBuffer>()            // is_split (bool)
      .template Ret<ffi::AnyBuffer>()            // node (int32)
      .template Ret<ffi::AnyBuffer>()            // path_values
      .template Attr<bool>("with_path_values");
}

template <typename Binding>
auto CheckSignature(Binding binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // oks: (n,) bool
      .template Ret<ffi::AnyBuffer>()            // token: () bool, true
      .template Attr<std::string_view>("messages");
}

}  // namespace keras_trees

#endif  // KERAS_TREES_XLA_FFI_UTILS_H_
