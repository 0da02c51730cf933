"""Gymnasium wrappers for the DROID environments.

Failure perturbations (MiraBench's six families, adapted to DROID): one ``gymnasium.ActionWrapper``
per family, a registry by name and composition.  See :mod:`neuralsim.wrappers.perturbations`.
"""

from __future__ import annotations

from .perturbation_base import GRASP_THRESHOLD, TRIGGERS, JointOffset, PerturbationWrapper
from .perturbations import (
    PERTURBATIONS,
    ApproachOvershoot,
    ContactOscillation,
    GripCarrySlip,
    GripForceWeak,
    PrematureRelease,
    WristTiltGrasp,
    apply_perturbation,
    compose,
    make_perturbation,
)

__all__ = [
    "GRASP_THRESHOLD",
    "TRIGGERS",
    "JointOffset",
    "PerturbationWrapper",
    "PERTURBATIONS",
    "ApproachOvershoot",
    "ContactOscillation",
    "GripCarrySlip",
    "GripForceWeak",
    "PrematureRelease",
    "WristTiltGrasp",
    "apply_perturbation",
    "compose",
    "make_perturbation",
]
