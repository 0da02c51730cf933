"""``python -m benchmarks.policy_success``: runs :mod:`benchmarks.policy_success.policy_success`."""

from .policy_success import main

raise SystemExit(main())
