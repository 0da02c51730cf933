"""``python -m benchmarks.throughput``: runs :mod:`benchmarks.throughput.throughput`."""

from .throughput import main

raise SystemExit(main())
