// TensorFlow GPU kernels of the trace-free Tree Ensemble Layer ops
// (KerasTrees>SoftTreeEnsembleTraceFree and ...Grad): the kernels of
// tree_ensemble_kernels.h with the pipeline of core/tree_ensemble_pipeline.h
// on the op's CUDA stream (cuda/tf_entry.h), scratch memory from
// allocate_temp. Every input, gamma included, stays in device memory (no
// HostMemory declaration; gamma is copied to the host only to word a bad
// gamma's message). The outputs are sized from the shapes alone. The traced
// KerasTrees>SoftTreeEnsemble keeps its CPU kernel only. Compiled only in the
// CUDA build (KERAS_TREES_CUDA=1). Built with nvcc, not yet run on a GPU.
#if KERAS_TREES_CUDA

#include "cuda/tf_entry.h"
#include "gpu_kernel_utils.h"
#include "kernel_utils.h"
#include "tree_ensemble_kernels.h"

namespace keras_trees {

struct TelGpuRun {
  template <typename T>
  static std::string Forward(tensorflow::OpKernelContext* ctx, const SoftTreeDims& d, const T* x, const T* w,
                             const T* b, const T* o, const T* g, T* out) {
    GpuScratch scratch(ctx);
    return gpu::SoftTreeEnsembleForward<T>(GpuStream(ctx), scratch.Allocator(), d, x, w, b, o, g, out);
  }

  template <typename T>
  static std::string Backward(tensorflow::OpKernelContext* ctx, const SoftTreeDims& d, const T* gy, const T* x,
                              const T* w, const T* b, const T* o, const T* g, T* gx, T* gw, T* gb, T* go) {
    GpuScratch scratch(ctx);
    return gpu::SoftTreeEnsembleBackward<T>(GpuStream(ctx), scratch.Allocator(), d, gy, x, w, b, o, g, gx, gw, gb,
                                            go);
  }
};

#define REGISTER_TREE_ENSEMBLE_GPU(T)                                                                  \
  REGISTER_KERNEL_BUILDER(                                                                            \
      Name("KerasTrees>SoftTreeEnsembleTraceFree").Device(::tensorflow::DEVICE_GPU).TypeConstraint<T>("T"), \
      Guarded<SoftTreeEnsembleTraceFreeOp<T, TelGpuRun>>);                                            \
  REGISTER_KERNEL_BUILDER(Name("KerasTrees>SoftTreeEnsembleTraceFreeGrad")                            \
                              .Device(::tensorflow::DEVICE_GPU)                                       \
                              .TypeConstraint<T>("T"),                                                \
                          Guarded<SoftTreeEnsembleTraceFreeGradOp<T, TelGpuRun>>);

REGISTER_TREE_ENSEMBLE_GPU(float);
REGISTER_TREE_ENSEMBLE_GPU(double);

}  // namespace keras_trees

#endif  // KERAS_TREES_CUDA
