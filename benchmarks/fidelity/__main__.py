"""``python -m benchmarks.fidelity``: runs :mod:`benchmarks.fidelity.fidelity`."""

from .fidelity import main

raise SystemExit(main())
