"""morphcache.proofs."""
