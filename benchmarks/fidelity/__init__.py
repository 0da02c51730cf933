"""How faithful a world model is to SimDROID (docs/FIDELITY.md).

- :mod:`.fidelity`: the open-loop benchmark (``python -m benchmarks.fidelity``); its parts :mod:`.metrics`
  (frame, cube and arm scores), :mod:`.paired` (paired A/Bs) and :mod:`.report` (the printed table);
- :mod:`.dynamics`: does the model follow its actions? (``python -m benchmarks.fidelity.dynamics``);
- :mod:`.legibility`: how many pixels a cube spans per scene (``python -m benchmarks.fidelity.legibility``).
"""
