"""Judges by name: the factories behind ``"roboworld:openai/gpt-4o"`` and friends.

A reward-function name is ``FAMILY:BACKEND/MODEL[?option=value&...]``; ``neuralsim.rewards``
looks FAMILY up in the ``neuralsim.reward_functions`` entry-point group and calls the factory here
with the rest of the string:

=====================  ===============================  ======================================
family                 rubric                           example
=====================  ===============================  ======================================
``roboworld``          ``roboworld_progress`` (0-5)     ``roboworld:offline`` (the default),
                                                        ``roboworld:openai/gpt-4o``,
                                                        ``roboworld:gemini/gemini-2.5-flash``,
                                                        ``roboworld:local//models/qwen-vl``
``binary``             ``binary_success`` (0/1)         ``binary:openai/gpt-4o-mini``
``wow``                ``wow_four_dimensions`` (1-5)    ``wow:openai/gpt-4o``
``wow_execution``      ``wow_execution_quality`` (1-5)  ``wow_execution:gemini/gemini-2.5-flash``
``mirabench``          ``mirabench_optimism_pairwise``  ``mirabench:openai/gpt-4o`` (pairs)
=====================  ===============================  ======================================

Options after ``?`` go to the backend (``base_url``, ``temperature``, ``image_detail``,
``json_mode``, ``device`` ...), the retry policy (``max_attempts``, ``timeout_s``,
``initial_backoff_s``, ``max_backoff_s``) or the cache (``cache_dir``, ``cache=false``), e.g.
``roboworld:openai/Qwen/Qwen2.5-VL-7B-Instruct?base_url=http://localhost:8000/v1``.
"""

from __future__ import annotations

from typing import Any, Callable
from urllib.parse import parse_qsl

RUBRIC_OF_FAMILY = {
    "roboworld": "roboworld_progress",
    "binary": "binary_success",
    "wow": "wow_four_dimensions",
    "wow_execution": "wow_execution_quality",
    "mirabench": "mirabench_optimism_pairwise",
}
RETRY_OPTIONS = ("max_attempts", "timeout_s", "initial_backoff_s", "max_backoff_s", "multiplier", "jitter")


def parse_spec(spec: str) -> tuple[str, str, dict[str, Any]]:
    """``"openai/gpt-4o?temperature=0"`` -> ("openai", "gpt-4o", {"temperature": 0}).

    The backend is the text before the first "/", the model everything after it (so model names
    and absolute paths may contain "/": ``local//abs/path`` -> ("local", "/abs/path")).
    """
    spec = (spec or "").strip()
    body, _, query = spec.partition("?")
    backend, _, model = body.partition("/")
    options = {k: _convert(v) for k, v in parse_qsl(query, keep_blank_values=True)}
    return backend or "offline", model, options


def _convert(v: str) -> Any:
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            pass
    return v


def make_judge(rubric: str, spec: str = "offline", **options: Any) -> Callable[[Any], Any]:
    """Build a judge for ``rubric`` from a backend spec (``"openai/gpt-4o"``, ``"offline"`` ...).

    Returns a :class:`~judges.judge.Judge` (VLM backends) or an
    :class:`~judges.offline.judge.OfflineJudge`; both are ``reward_fn(episode) -> Judgement``.
    Construction errors (missing API key, missing weights, unknown backend) raise here, before any
    rollout runs.
    """
    backend, model, spec_options = parse_spec(spec)
    opts = {**spec_options, **options}
    if backend == "offline":
        from judges.offline.judge import OfflineJudge

        unknown = set(opts) - {"device"}
        if unknown:
            raise ValueError(f"the offline judge takes only the option 'device', got {sorted(unknown)}")
        return OfflineJudge(weights=model or None, rubric=rubric, **opts)
    from judges.backends import make_backend
    from judges.judge import Judge
    from judges.retry import RetryPolicy

    retry = RetryPolicy(**{k: opts.pop(k) for k in RETRY_OPTIONS if k in opts})
    cache: Any = opts.pop("cache_dir", None)
    if opts.pop("cache", True) is False:
        cache = False
    return Judge(rubric, make_backend(backend, model, **opts), cache=cache, retry=retry)


def _factory(family: str) -> Callable[[str], Callable[[Any], Any]]:
    rubric = RUBRIC_OF_FAMILY[family]

    def make(rest: str = "") -> Callable[[Any], Any]:
        return make_judge(rubric, rest or "offline")

    make.__name__ = f"make_{family}"
    make.__doc__ = f"Entry point ``{family}:BACKEND/MODEL`` -> a ``{rubric}`` judge (reward_fn)."
    return make


make_roboworld = _factory("roboworld")
make_binary = _factory("binary")
make_wow = _factory("wow")
make_wow_execution = _factory("wow_execution")
make_mirabench = _factory("mirabench")
