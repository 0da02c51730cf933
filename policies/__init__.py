"""Policies for neuralsim: the :class:`Policy` protocol, chunked execution, adapters and baselines.

A policy answers an observation with an action chunk (H, 8); :func:`run_episode` executes the first
``replan_every`` actions of each chunk open loop (openpi: 8) before querying again::

    import gymnasium as gym, neuralsim
    from policies import make_policy, run_episode

    env = gym.make("SimDROID-v0")
    result = run_episode(env, make_policy("noisy-0.3", env=env), seed=0)

:func:`make_policy` builds policies by name, importing their module only when asked:

=========================  ==========================================================================
name                       policy
=========================  ==========================================================================
``"zero"``, ``"random"``   no-skill baselines (:mod:`policies.simple`)
``"expert"``               SimDROID's scripted expert, needs ``env=`` (:mod:`policies.scripted`)
``"noisy-<std>"``          the expert with noise std in [0, 1], e.g. ``"noisy-0.3"``; needs ``env=``
``"scripted"``             the expert with keyword ``noise=`` / ``failure=`` / ``seed=``; needs ``env=``
``"replay"``               recorded actions, ``actions=`` or ``dataset=`` + ``index=`` (:mod:`policies.replay`)
``"openpi:HOST:PORT"``     an openpi websocket policy server (:mod:`policies.openpi_client`)
``"roboarena:HOST:PORT"``  a RoboArena policy server (:mod:`policies.roboarena_client`)
``"visuomotor-s<steps>"``  a shipped learned visuomotor checkpoint (:mod:`policies.visuomotor`)
``"visuomotor:PATH"``      a visuomotor checkpoint directory (or a hub id in the local cache)
``"flow-<name>"``          a shipped flow-matching checkpoint (:mod:`policies.flow`: flow-v4-s16000, ...)
``"flow:PATH"``            a flow checkpoint directory (``neuralsim train-flow-policy`` writes them)
=========================  ==========================================================================

Other keyword arguments go to the policy's constructor.  The websocket adapters and
:mod:`policies.server` need the ``policies`` extra: ``pip install 'neuralsim[policies]'``.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from .base import (
    ACTION_DIM,
    ACTION_MODES,
    DEFAULT_REPLAN_EVERY,
    ActionModeMismatchError,
    ChunkedController,
    EpisodeResult,
    MissingDependencyError,
    Policy,
    PolicyOutputError,
    TargetTracking,
    UnknownPolicyError,
    as_action_chunk,
    run_episode,
)

__all__ = [
    "ACTION_DIM", "ACTION_MODES", "DEFAULT_REPLAN_EVERY", "ActionModeMismatchError", "ChunkedController",
    "EpisodeResult", "MissingDependencyError", "Policy", "PolicyOutputError", "TargetTracking", "UnknownPolicyError",
    "as_action_chunk", "available_policies", "make_policy", "register_policy", "run_episode",
]

#: Exact names -> "module:callable" (imported on use).
_REGISTRY: dict[str, str] = {
    "zero": "policies.simple:ZeroPolicy",
    "random": "policies.simple:RandomPolicy",
    "replay": "policies.replay:make_replay",
    "scripted": "policies.scripted:ScriptedPolicy",
}
#: Name prefixes ("prefix:HOST:PORT") -> "module:callable" taking (host, port, **kw).
_SERVERS: dict[str, str] = {
    "openpi": "policies.openpi_client:OpenPIClient",
    "roboarena": "policies.roboarena_client:RoboArenaClient",
}
_FORMS = ("zero", "random", "expert", "noisy-<std>", "scripted", "replay", "openpi:HOST:PORT", "roboarena:HOST:PORT")


def register_policy(name: str, target: str) -> None:
    """Make ``make_policy(name, **kw)`` call ``target`` (``"module:callable"``, imported lazily)."""
    if ":" not in target:
        raise ValueError(f"target must be 'module:callable', got {target!r}")
    if name in _SERVERS or name.startswith("noisy-") or name == "expert":
        raise ValueError(f"{name!r} is a reserved policy name")
    _REGISTRY[name] = target


def available_policies() -> list[str]:
    """The name forms :func:`make_policy` accepts, then the shipped visuomotor and flow checkpoints by name."""
    from .flow.policy import shipped_checkpoints as shipped_flow  # directory listings: no torch
    from .visuomotor.policy import shipped_checkpoints

    return (list(_FORMS) + sorted(set(_REGISTRY) - set(_FORMS)) + ["visuomotor:PATH", "flow:PATH"]
            + shipped_checkpoints() + shipped_flow())


def _load(target: str) -> Callable[..., Any]:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _host_port(name: str, prefix: str) -> tuple[str, int]:
    rest = name[len(prefix) + 1:]
    host, sep, port = rest.rpartition(":")
    if not sep:  # "openpi:HOST": the default port
        host, port = rest, "8000"
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not host or not 0 < number < 65536:
        raise UnknownPolicyError(f"bad policy server name {name!r}; expected '{prefix}:HOST:PORT' with a port in "
                                 f"1-65535, e.g. '{prefix}:127.0.0.1:8000'")
    return host, number


def _visuomotor_names() -> list[str]:
    from .visuomotor.policy import shipped_checkpoints

    return shipped_checkpoints()


def make_policy(name: str, **kwargs: Any) -> Policy:
    """Build a policy by name (see the table in :mod:`policies`); ``kwargs`` go to its constructor.

    Raises:
        UnknownPolicyError: the name is not one of :func:`available_policies`.
        TypeError: a scripted policy without ``env=`` (or with a non-SimDROID env).
        MissingDependencyError: a websocket adapter without the ``policies`` extra installed.
        CheckpointError: a ``visuomotor:PATH`` / ``flow:PATH`` that is not a checkpoint directory, or a ``flow-...``
            name that is not shipped (the message names the training command).
    """
    if not isinstance(name, str):
        raise UnknownPolicyError(f"policy name must be a string, got {type(name).__name__}")
    prefix = name.split(":", 1)[0]
    if ":" in name and prefix in _SERVERS:
        host, port = _host_port(name, prefix)
        return _load(_SERVERS[prefix])(host, port, **kwargs)
    if name == "expert" or name.startswith("noisy-"):
        from .scripted import noise_from_name

        try:
            noise = noise_from_name(name)
        except ValueError as e:
            raise UnknownPolicyError(str(e)) from None
        if "noise" in kwargs:
            raise TypeError(f"{name!r} sets the noise itself; use make_policy('scripted', noise=...) to choose it")
        name, kwargs = "scripted", {**kwargs, "noise": noise}
    if name.startswith("visuomotor:") or name in _visuomotor_names():
        from .visuomotor import VisuomotorPolicy

        return VisuomotorPolicy.from_pretrained(name.removeprefix("visuomotor:"), **kwargs)
    if name.startswith(("flow:", "flow-")):  # a shipped name that is not there raises CheckpointError naming them
        from .flow import FlowPolicy

        return FlowPolicy.from_pretrained(name.removeprefix("flow:"), **kwargs)
    if name in _REGISTRY:
        if name == "scripted" and "env" not in kwargs:
            raise TypeError("scripted policies read SimDROID's privileged state: pass env=<a SimDROID-v0 env>, "
                            "e.g. make_policy('expert', env=gym.make('SimDROID-v0'))")
        return _load(_REGISTRY[name])(**kwargs)
    raise UnknownPolicyError(f"unknown policy {name!r}; valid names: {', '.join(available_policies())}")
