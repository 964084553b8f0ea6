"""morphcache.kernels."""
