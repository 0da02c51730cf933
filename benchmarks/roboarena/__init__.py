"""RoboArena on ground truth: policies ranked inside the world model, checked against SimDROID (docs/ROBOARENA.md).

- :mod:`.roboarena`: the benchmark (``python -m benchmarks.roboarena``, ``neuralsim roboarena``);
- :mod:`.report`: its plots and static HTML page; ``shipped_run/`` holds the shipped model's run.
"""
