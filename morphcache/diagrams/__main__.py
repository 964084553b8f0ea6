"""``python -m morphcache.diagrams SPEC OUT_DIR``: write a spec's diagrams."""

from .main import main

raise SystemExit(main())
