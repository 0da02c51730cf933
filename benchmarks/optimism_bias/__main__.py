"""``python -m benchmarks.optimism_bias``: runs :mod:`benchmarks.optimism_bias.optimism_bias`."""

from .optimism_bias import main

raise SystemExit(main())
