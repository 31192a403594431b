"""Kernels built from primitives: the Load-Compute-Store-Communicate template and the operators on it."""
