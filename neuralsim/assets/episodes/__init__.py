"""The default NeuralDROID episode set; rebuild with ``python -m neuralsim.envs.episodes --build-default``."""
