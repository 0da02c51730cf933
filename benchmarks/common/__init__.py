"""What the benchmark families share; nothing here imports a family.

- :mod:`.stats`: small-sample statistics (Wilson intervals, exact McNemar, correlations, bootstrap, MMRV);
- :mod:`.results_path`: where a report goes (``benchmarks/results/<name>.json``, ``_quick`` for smoke runs);
- :mod:`.heldout`: held-out SimDROID episodes and the frames a world model makes of them;
- :mod:`.policy_set`: the graded policies and the name rules of the ranking benchmarks;
- the trained instruments, their weights under ``assets/``: :mod:`.object_probe` (finds a cube of a colour,
  ``python -m benchmarks.common.object_probe`` trains it), :mod:`.cube_tracks` (every cube through a video) and
  :mod:`.idm` (inverse dynamics from two frames, ``python -m benchmarks.common.idm``).
"""
