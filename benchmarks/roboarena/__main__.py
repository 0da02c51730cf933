"""``python -m benchmarks.roboarena``: runs :mod:`benchmarks.roboarena.roboarena`."""

from .roboarena import main

raise SystemExit(main())
