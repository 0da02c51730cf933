"""The policies the ranking benchmarks share (``benchmarks.judges.ranking``, ``benchmarks.roboarena``).

A benchmark names its policies with strings.  The **graded set** (:func:`graded_policies`) is the scripted expert
at noise 0, 0.3, 0.6 and 0.9, the expert with each of its failure modes
(:data:`neuralsim.envs.experts.FAILURE_MODES`), random and zero; its names are ``expert``, ``noisy-0.3``, ...,
``expert+missed_grasp``, ..., ``random``, ``zero``.  Any other name goes to :func:`policies.make_policy` as it is
(``openpi:HOST:PORT``, ``roboarena:HOST:PORT``, a registered learned policy, ``noisy-<std>``), so a policy added to
the factory is a benchmark entry with no change here.

Scripted policies read SimDROID's privileged state (:attr:`PolicyChoice.privileged`): they act closed loop in
SimDROID only, and a world model gets the plan they made there from the same initial state.  Every policy starts
from the same held-out initial states (:func:`policies.heldout.heldout_starts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The scripted expert's noise levels in the graded set.
NOISE_LEVELS = (0.0, 0.3, 0.6, 0.9)
#: Factory names that need recorded actions, which a benchmark cannot give.
_UNSUPPORTED = ("replay",)


@dataclass(frozen=True)
class PolicyChoice:
    """A benchmark's policy: its report name and how :func:`policies.make_policy` builds it.

    Attributes:
        name: the name in reports (``"expert+weak_grip"``, ``"openpi:127.0.0.1:8000"``).
        factory: the :func:`policies.make_policy` name (``"scripted"``, ``"random"``, the name itself).
        kwargs: constructor keyword arguments besides ``env`` and ``seed``.
    """

    name: str
    factory: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def privileged(self) -> bool:
        """True for SimDROID's scripted expert, which reads the simulator's state and cannot act in a world model."""
        return self.factory == "scripted"

    def build(self, env: Any = None, seed: int | None = None) -> Any:
        """A fresh policy instance.  ``env``: the SimDROID env a privileged policy reads; ``seed``: the seed of a
        scripted or random policy's generator (other policies take no seed)."""
        from policies import make_policy

        kw = dict(self.kwargs)
        if self.privileged:
            kw.update(env=env, seed=seed)
        elif self.factory == "random":
            kw["seed"] = seed
        return make_policy(self.factory, **kw)


def graded_policies() -> list[tuple[str, str, dict]]:
    """The policies of graded skill, as (report name, :func:`policies.make_policy` name, keyword arguments)."""
    from neuralsim.envs.experts import FAILURE_MODES

    out = [(f"noisy-{n:g}" if n else "expert", "scripted", {"noise": n}) for n in NOISE_LEVELS]
    out += [(f"expert+{f}", "scripted", {"failure": f}) for f in FAILURE_MODES]
    return out + [("random", "random", {}), ("zero", "zero", {})]


def graded_names() -> list[str]:
    """The report names of the graded set, most skilled first."""
    return [name for name, _, _ in graded_policies()]


def resolve_policy(name: str) -> PolicyChoice:
    """The :class:`PolicyChoice` for a benchmark policy name (see the module docstring).

    Raises:
        policies.UnknownPolicyError: a name neither in the graded set nor a form :func:`policies.make_policy`
            takes, or ``replay`` (it needs recorded actions).
    """
    from policies import UnknownPolicyError, available_policies
    from policies.scripted import noise_from_name

    graded = {n: PolicyChoice(n, kind, dict(kw)) for n, kind, kw in graded_policies()}
    if name in graded:
        return graded[name]
    if name.startswith("noisy-"):
        try:
            return PolicyChoice(name, "scripted", {"noise": noise_from_name(name)})
        except ValueError as e:
            raise UnknownPolicyError(str(e)) from None
    if name in _UNSUPPORTED:
        raise UnknownPolicyError(f"policy {name!r} replays recorded actions, which a benchmark cannot be given; "
                                 "record them as a policy of your own (policies.register_policy)")
    forms = [f for f in available_policies() if f not in ("noisy-<std>", *_UNSUPPORTED)]
    exact = {f for f in forms if ":" not in f}
    prefixes = {f.split(":", 1)[0] for f in forms if ":" in f}  # "openpi:HOST:PORT", "visuomotor:PATH", ...
    if name in exact or (":" in name and name.split(":", 1)[0] in prefixes):
        return PolicyChoice(name, name, {})
    raise UnknownPolicyError(
        f"unknown benchmark policy {name!r}; use a name of the graded set ({', '.join(graded)}), 'noisy-<std>' or "
        f"a policies.make_policy name ({', '.join(forms)})")

