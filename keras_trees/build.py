"""``python -m keras_trees.build [--framework tensorflow|jax|torch] [--force] [--cuda]``:
compile the kernels ahead of time (by default for the active Keras backend).

The CUDA kernels are built too with ``--cuda`` (an error without nvcc), or by
default when nvcc is found and the framework sees a GPU."""

import argparse
import sys


def _sees_gpu(framework):
    """Whether `framework` sees a GPU (imports only that framework)."""
    if framework == "jax":
        import jax

        try:
            return bool(jax.devices("gpu"))
        except RuntimeError:  # no GPU backend
            return False
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--framework", choices=["tensorflow", "jax", "torch"],
                        help="the library to build (default: the active Keras backend's)")
    parser.add_argument("--cuda", action="store_true",
                        help="build the CUDA kernels too (default: when nvcc is found and the "
                             "framework sees a GPU)")
    args = parser.parse_args(argv)
    import keras

    from keras_trees import _build
    from keras_trees.ops import _library

    framework = args.framework or _build.default_framework()
    try:
        path = _build.build(force=args.force, framework=framework)
        cuda_path, cuda_reason = None, None
        if framework not in _build.CUDA_LIBRARIES and not args.cuda:
            cuda_reason = f"the {framework} binding has CPU kernels only"
        elif args.cuda:
            cuda_path = _build.build(force=args.force, framework=framework, cuda=True)
        elif _build.find_nvcc() is None:
            cuda_reason = "nvcc not found (set KERAS_TREES_NVCC or CUDA_HOME, or pass --cuda)"
        elif not _sees_gpu(framework):
            cuda_reason = f"{framework} sees no GPU (pass --cuda to build them anyway)"
        else:
            cuda_path = _build.build(force=args.force, framework=framework, cuda=True)
    except _build.BuildError as exc:
        print(f"keras-trees: {exc}", file=sys.stderr)
        return 1
    if framework == keras.backend.backend() and not _library.load():
        print(f"keras-trees: built {path} but could not load it: {_library.load_error()}",
              file=sys.stderr)
        return 1
    print(f"keras-trees {framework} kernels ready: {path}")
    if cuda_path is not None:
        print(f"keras-trees {framework} CUDA kernels ready: {cuda_path}")
    else:
        print(f"keras-trees {framework} CUDA kernels not built: {cuda_reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
