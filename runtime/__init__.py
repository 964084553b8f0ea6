"""morphcache.runtime."""
