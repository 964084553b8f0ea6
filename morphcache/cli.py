"""The `morphcache` command line."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("morphcache: not yet implemented", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
