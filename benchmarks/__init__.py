"""Benchmarks: a shelf of instruments, one subpackage per family, each runnable with ``python -m``.

- :mod:`benchmarks.roboarena`: policies ranked inside the world model against SimDROID's truth, with its report;
- :mod:`benchmarks.policy_success`: closed-loop success of policies in SimDROID (and of the scripted expert);
- :mod:`benchmarks.fidelity`: open-loop fidelity, whether the model follows its actions (``dynamics``) and how
  legible a scene is;
- :mod:`benchmarks.optimism_bias`: failure preservation under the six perturbations, and the guarantee that they fail;
- :mod:`benchmarks.mirabench`: MiraBench's three levels and WoW's IDM Turing test;
- :mod:`benchmarks.judges`: a judge's accuracy and ranking against SimDROID's levels;
- :mod:`benchmarks.throughput`: frames per second, KV cache against recomputing;
- :mod:`benchmarks.common`: what the families share (statistics, result paths, held-out episodes, the graded
  policy set, the trained instruments and their assets).

A family's headline runs as ``python -m benchmarks.<family>``, its other measurements as
``python -m benchmarks.<family>.<module>``.  Reports go to ``benchmarks/results/`` (the shipped model's).
"""
