"""``python -m benchmarks.mirabench``: runs :mod:`benchmarks.mirabench.mirabench`."""

from .mirabench import main

raise SystemExit(main())
