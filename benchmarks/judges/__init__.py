"""Judges measured against SimDROID's rubric levels, without a world model.

- :mod:`.accuracy`: exact and within-one accuracy on a labelled dataset (``python -m benchmarks.judges.accuracy``);
- :mod:`.ranking`: does a judge rank graded policies as the truth does? (``python -m benchmarks.judges.ranking``).
"""
