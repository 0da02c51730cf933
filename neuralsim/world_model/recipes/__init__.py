"""Training recipes, one YAML file each (``default.yaml``: the shipped model); run by ``neuralsim train --recipe``.

A package only so that setuptools ships the files in wheels.
"""
