"""``python -m neuralsim``: the ``neuralsim`` command line (:mod:`neuralsim.cli`), also what ``torchrun -m neuralsim``
runs."""

from neuralsim.cli import main

raise SystemExit(main())
