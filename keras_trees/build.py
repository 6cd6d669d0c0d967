"""``python -m keras_trees.build [--framework tensorflow|jax] [--force]``: compile
the kernels ahead of time (by default for the active Keras backend)."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--framework", choices=["tensorflow", "jax"],
                        help="the library to build (default: the active Keras backend's)")
    args = parser.parse_args(argv)
    import keras

    from keras_trees import _build
    from keras_trees.ops import _library

    framework = args.framework or _build.default_framework()
    path = _build.build(force=args.force, framework=framework)
    if framework == keras.backend.backend() and not _library.load():
        print(f"keras-trees: built {path} but could not load it: {_library.load_error()}",
              file=sys.stderr)
        return 1
    print(f"keras-trees {framework} kernels ready: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
