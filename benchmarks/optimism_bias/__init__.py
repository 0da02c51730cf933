"""Optimism bias: does the world model show the failures that SimDROID shows? (MiraBench, Level 3.)

- :mod:`.optimism_bias`: the benchmark (``python -m benchmarks.optimism_bias``);
- :mod:`.perturbation_guarantee`: do the six perturbations really make SimDROID fail?
  (``python -m benchmarks.optimism_bias.perturbation_guarantee``).
"""
