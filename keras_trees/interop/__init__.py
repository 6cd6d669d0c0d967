"""Conversions between keras-trees topologies and other tree libraries
(optional dependencies are imported lazily inside the functions)."""
