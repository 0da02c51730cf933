"""Package data: the default episode set (``episodes/default.npz``) and world model (``world_model/``).

Directories are packages only so that setuptools ships their data files in wheels.
"""
