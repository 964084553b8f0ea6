"""morphcache.spec."""
