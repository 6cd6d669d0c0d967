"""``python -m keras_trees.build [--force]``: compile the custom ops ahead of time."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    from keras_trees import _build
    from keras_trees.ops import _library

    path = _build.build(force=args.force)
    if not _library.load():
        print(f"keras-trees: built {path} but could not load it: {_library.load_error()}",
              file=sys.stderr)
        return 1
    print(f"keras-trees custom ops ready: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
