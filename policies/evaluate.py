"""Evaluate a policy inside NeuralDROID-v0, judged, beside its SimDROID twin.

Usage (the README's main job runs this with its defaults)::

    python -m policies.evaluate                                  # expert plan, 3 default episodes
    python -m policies.evaluate --policy random --episodes 6 --out outputs/eval_random
    python -m policies.evaluate --policy openpi:127.0.0.1:8000 --episodes 12

For every episode of the shipped episode set (or ``--names``):

1. the policy acts in ``NeuralDROID-v0`` (the world model) from the episode's first three views;
   the env's reward function (default: the offline judge, ``roboworld:offline``) scores the finished
   episode on the RoboWorld 0-5 rubric;
2. the very same action stream is replayed in SimDROID, in the scene the world model was trained on
   (``SimDROID-v0`` classic, ``SimDROID-v1`` legible), from the same seed -- the ground truth of what those
   actions really do -- and its rubric level is recorded;
3. a video puts the two side by side: NeuralDROID's 2x2 collage on the left, SimDROID's on the right.

The default policy ``expert-plan`` is SimDROID's scripted expert run once in the simulator and its
actions replayed open loop in the world model (the world model cannot run a privileged expert).  Any
name :func:`policies.make_policy` knows that needs no privileged state works too (``zero``,
``random``, ``openpi:HOST:PORT``, ``roboarena:HOST:PORT``).

Results go to ``OUT/results.json``, rewritten (atomically) as each episode finishes.  An episode whose policy
fails (e.g. its server went away) is recorded with its error and its partial rollout's video, and its scores are
null; after a policy server failed the remaining episodes are not run.  Running the same command again resumes:
episodes already finished with the same options are kept, failed ones are run again, and a directory holding
episodes run with other options is refused.  The command exits 0 when every episode finished, 1 after saving when
one failed (or the policy server cannot be reached), 2 for a usage mistake (a bad option, an unknown policy or
episode, options that differ from the directory's) and 130 on Ctrl-C, each with one line on stderr saying what to
do.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .base import EpisodeResult, MissingDependencyError, UnknownPolicyError, run_episode
from .openpi_client import PolicyConnectionError, PolicyServerError
from .replay import ReplayPolicy

log = logging.getLogger(__name__)

EXPERT_PLAN = "expert-plan"
#: The policy names this job takes (besides names registered with :func:`policies.register_policy`).
CLI_POLICIES = (EXPERT_PLAN, "zero", "random", "openpi:HOST:PORT", "roboarena:HOST:PORT")
#: Options a resumed run must share with the episodes already in ``OUT/results.json``.
RESUME_KEYS = ("policy", "checkpoint", "reward_fn", "steps", "replan_every", "seed", "truth")
RESULTS = "results.json"
PROG = "policies.evaluate"


class EvalConfigError(ValueError):
    """Options this job cannot run with; the message says which and what would be valid (the CLI exits 2)."""


class ResumeMismatchError(EvalConfigError):
    """``out`` holds episodes run with other options (:data:`RESUME_KEYS`)."""


def check_policy_name(name: str) -> None:
    """Refuse, by name, a :func:`policies.make_policy` form this job cannot build: the scripted experts read
    SimDROID's privileged state, which a world model does not have, and ``replay`` needs recorded actions."""
    if name == "expert" or name == "scripted" or name.startswith("noisy-"):
        raise EvalConfigError(f"policy {name!r} reads SimDROID's privileged state, which the world model does not "
                              f"have; use {EXPERT_PLAN!r} (the expert planned in SimDROID, its actions replayed in the "
                              f"world model). This job takes: {', '.join(CLI_POLICIES)}")
    if name == "replay":
        raise EvalConfigError("policy 'replay' needs recorded actions, which this job cannot be given; build it with "
                              f"make_policy('replay', actions=...) in Python. This job takes: "
                              f"{', '.join(CLI_POLICIES)}")


@dataclass
class EvalConfig:
    """Options of ``python -m policies.evaluate``."""

    policy: str = EXPERT_PLAN
    """``expert-plan`` or a :func:`policies.make_policy` name that needs no privileged state."""
    episodes: int = 3
    """Number of episodes taken in order from the episode set (ignored when ``names`` is given)."""
    names: Sequence[str] = ()
    """Episode names of the set to run (``python -m neuralsim.envs.episodes --list`` prints them)."""
    steps: int = 150
    """Episode length (10 s at 15 Hz, SimDROID's horizon); the episode is judged at its end."""
    checkpoint: str | None = None
    """World-model checkpoint (directory or hub id); None = the shipped default."""
    reward_fn: Any = "default"
    """NeuralDROID's reward function: a name ("default" = the offline judge), a callable, or "none"."""
    replan_every: int = 8
    """Actions of each chunk executed open loop before the policy is queried again."""
    seed: int = 0
    """World-model noise seed of the first episode (episode i uses seed + i)."""
    out: str = "outputs/eval"
    """Where the videos and results.json go; a run with the same options resumes there (:data:`RESUME_KEYS`)."""
    truth: bool = True
    """Replay each action stream in SimDROID, in the world model's scene, for its ground-truth rubric level."""
    threads: int | None = 1
    """torch CPU threads (None: torch's default).  One world model at batch 1 gains little from a second
    thread, and two threads on a CPU another process is using ran ~18x slower here (2.5 s vs 0.14 s per step)."""
    progress: bool = True


@dataclass
class EpisodeScore:
    """One evaluated episode (a row of ``results.json``)."""

    name: str
    instruction: str
    steps: int
    neural_score: float | None
    """The reward function's score of the NeuralDROID rollout (None without a reward function)."""
    sim_level: int | None
    """SimDROID's ground-truth rubric level for the same actions (None with ``truth=False``)."""
    video: str | None
    """The side-by-side video (of the partial rollout for a failed episode; None if it has no frames)."""
    judgement: dict[str, Any] | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    """For a failed episode whose policy server reported an error: its traceback as ``server_traceback``."""
    seed: int | None = None
    """World-model noise seed of the episode (``cfg.seed`` + its position in the run)."""
    error: str | None = None
    """None for a finished episode; ``"Type: message"`` for one whose policy or env raised (its scores are None)."""


def _sim_env(scene: str = "classic"):
    """The SimDROID twin of a world model of SimDROID's ``scene`` (``"classic"``: ``SimDROID-v0``, ``"legible"``:
    ``SimDROID-v1``), at the world model's 64x64."""
    from neuralsim.envs.sim_droid import SimDROIDEnv

    return SimDROIDEnv(image_size=64, reward_fn=None, scene=scene)


def expert_plan(sim, seed: int, task: str, max_steps: int, settle_steps: int = 5) -> np.ndarray:
    """The scripted expert's actions for SimDROID episode (seed, task), stopping once its plan is done."""
    from neuralsim.envs.experts import ScriptedExpert

    obs, _ = sim.reset(seed=int(seed), options={"task": task})
    expert = ScriptedExpert(sim, seed=int(seed))
    expert.reset()
    actions, settle = [], 0
    for _ in range(max_steps):
        a = expert.act(obs)
        actions.append(a)
        obs, *_ = sim.step(a)
        settle += expert.done
        if settle > settle_steps:
            break
    return np.asarray(actions, np.float32)


def replay_in_sim(sim, seed: int, task: str, actions: np.ndarray):
    """Replay ``actions`` in SimDROID from (seed, task); returns (final info, Episode)."""
    sim.reset(seed=int(seed), options={"task": task})
    info: dict[str, Any] = {}
    for a in actions:
        _, _, _, _, info = sim.step(a)
    return info, sim.episode()


def side_by_side_frames(neural, sim) -> np.ndarray:
    """NeuralDROID collage | SimDROID collage, frame by frame (the shorter one holds its last frame)."""
    a = neural.collage_frames()
    if sim is None:
        return a
    b = sim.collage_frames()
    if b.shape[1:3] != a.shape[1:3]:
        from neuralsim.envs.episodes import resize_image

        b = np.stack([resize_image(f, a.shape[1]) for f in b])
    n = max(len(a), len(b))
    a = np.concatenate([a, np.repeat(a[-1:], n - len(a), 0)])
    b = np.concatenate([b, np.repeat(b[-1:], n - len(b), 0)])
    gap = np.full((n, a.shape[1], 4, 3), 255, np.uint8)
    return np.concatenate([a, gap, b], axis=2)


def _judgement_dict(j: Any) -> dict[str, Any] | None:
    if j is None:
        return None
    keys = ("score", "criteria", "rationale", "backend", "model", "latency_s", "cost_usd", "error")
    out = {k: getattr(j, k) for k in keys if hasattr(j, k)}
    return json.loads(json.dumps(out, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


def evaluate(cfg: EvalConfig) -> list[EpisodeScore]:
    """Run (or resume) the evaluation described by ``cfg``; writes videos and ``results.json`` into ``cfg.out``.

    ``results.json`` is rewritten as each episode finishes.  Episodes of ``cfg.out`` already finished with the same
    options (:data:`RESUME_KEYS`) are kept, not run again.  An episode whose policy or env raises is recorded with
    its error (``EpisodeScore.error``, scores None, the partial rollout's video); after a policy server failed
    (:class:`~policies.openpi_client.PolicyConnectionError`, :class:`~policies.openpi_client.PolicyServerError`)
    the remaining episodes are not run.

    Returns:
        every episode recorded in ``results.json`` (earlier runs' first), failed ones included.

    Raises:
        EvalConfigError: a bad option (:class:`ResumeMismatchError`: ``cfg.out`` holds episodes run with other
            options).
        UnknownPolicyError, UnknownEpisodeError: a policy or episode name this job does not know.
        PolicyConnectionError: the policy server cannot be reached at the start.
    """
    from neuralsim.envs.neural_droid import NeuralDROIDEnv
    from neuralsim.envs.scene import get_scene, scene_of

    from . import make_policy

    if cfg.episodes < 1 and not cfg.names:
        raise EvalConfigError(f"episodes must be >= 1, got {cfg.episodes}")
    if cfg.steps < 1:
        raise EvalConfigError(f"steps must be >= 1, got {cfg.steps}")
    if cfg.threads is not None and cfg.threads < 1:
        raise EvalConfigError(f"threads must be >= 1 or None, got {cfg.threads}")
    if cfg.policy != EXPERT_PLAN:
        check_policy_name(cfg.policy)
    out = Path(cfg.out)
    recorded = read_results(out / RESULTS)
    if recorded is not None:
        check_resume(cfg, recorded[0], out)
    if cfg.threads is not None:
        import torch

        torch.set_num_threads(int(cfg.threads))
    rows = {(r.name, r.seed): r for r in (recorded[1] if recorded else [])}
    policy = env = sim = None
    bar = _NoBar()
    try:
        try:
            policy = None if cfg.policy == EXPERT_PLAN else make_policy(cfg.policy)
        except UnknownPolicyError as e:
            raise UnknownPolicyError(f"{e}. This job takes: {', '.join(CLI_POLICIES)}") from None
        reward_fn = None if cfg.reward_fn == "none" else cfg.reward_fn
        env = NeuralDROIDEnv(checkpoint=cfg.checkpoint, reward_fn=reward_fn, max_episode_steps=cfg.steps)
        if not cfg.names and cfg.episodes > len(env.episodes):
            raise EvalConfigError(f"episodes must be <= {len(env.episodes)}, the size of the episode set; "
                                  f"got {cfg.episodes}")
        names = list(cfg.names) or env.episodes.names[: cfg.episodes]
        specs = [env.episodes.resolve(n) for n in names]
        scene = get_scene(env.world_model.config.scene)  # the truth is the scene the world model was trained on
        if cfg.policy == EXPERT_PLAN:
            other = [s.name for s in specs if scene_of(s.metadata, None) != scene.name]
            if other:
                raise EvalConfigError(f"policy 'expert-plan' needs SimDROID episode specs of the world model's scene "
                                      f"{scene.name!r} (metadata source {scene.env_id!r}); {other[:3]} are not")
        sim = _sim_env(scene.name) if cfg.truth or cfg.policy == EXPERT_PLAN else None
        todo = [(i, spec) for i, spec in enumerate(specs)
                if (spec.name, cfg.seed + i) not in rows or rows[spec.name, cfg.seed + i].error is not None]
        if len(todo) < len(specs):
            log.info("resuming %s: %d of the %d episodes already finished, %d to run", out, len(specs) - len(todo),
                     len(specs), len(todo))
        out.mkdir(parents=True, exist_ok=True)
        if not todo:  # every episode already finished: the file gets this run's config
            write_results(out / RESULTS, cfg, list(rows.values()))
        bar = _progress(len(todo), cfg.progress)
        for n, (i, spec) in enumerate(todo):
            score, error = _episode(cfg, env, sim, policy, spec, cfg.seed + i, out / f"{i:02d}_{spec.name}.mp4")
            rows[spec.name, cfg.seed + i] = score
            write_results(out / RESULTS, cfg, list(rows.values()))
            bar.update(1)
            if isinstance(error, (PolicyConnectionError, PolicyServerError)) and n + 1 < len(todo):
                log.warning("the policy server failed; the remaining %d episodes are not run", len(todo) - n - 1)
                break
    finally:
        bar.close()
        for thing in (env, sim, policy):
            close = getattr(thing, "close", None)
            if callable(close):
                close()
    return list(rows.values())


def _episode(cfg: EvalConfig, env, sim, policy, spec, seed: int, video: Path) -> tuple[EpisodeScore, Exception | None]:
    """Play, judge, replay in SimDROID and film one episode; a policy or env error fails the episode, not the run.

    The replay runs where the spec is a SimDROID layout of ``sim``'s scene (one of another scene, or no SimDROID
    layout, has no ground truth here)."""
    from neuralsim.envs.scene import scene_of
    from neuralsim.episode import write_video

    t0 = time.perf_counter()
    meta = spec.metadata
    if policy is None:  # the plan holds still once done, so every episode runs to the horizon
        policy = ReplayPolicy(expert_plan(sim, meta["seed"], meta["task"], cfg.steps), on_end="hold")
    error: Exception | None = None
    try:
        result: EpisodeResult | None = run_episode(env, policy, max_steps=cfg.steps, replan_every=cfg.replan_every,
                                                   seed=seed, options={"episode": spec.name})
    except Exception as e:  # noqa: BLE001 -- a failing policy fails its episode; the row records why
        result, error = getattr(e, "partial_episode", None), e
        log.warning("episode %s failed after %d steps: %s: %s", spec.name, result.steps if result else 0,
                    type(e).__name__, e)
    sim_level, sim_episode = None, None
    if cfg.truth and sim is not None and scene_of(meta, None) == sim.scene.name and result is not None:
        info, sim_episode = replay_in_sim(sim, meta["seed"], meta["task"], result.actions)
        sim_level = None if error is not None else int(info["rubric_level"])  # a failed episode has no scores
    path = None
    if result is not None and result.episode is not None:
        write_video(str(video), side_by_side_frames(result.episode, sim_episode))
        path = str(video)
    score = EpisodeScore(name=spec.name, instruction=spec.instruction, steps=result.steps if result else 0,
                         neural_score=None, sim_level=sim_level, video=path, seconds=time.perf_counter() - t0,
                         seed=seed)
    if error is not None:
        score.error = f"{type(error).__name__}: {error}"
        if getattr(error, "server_traceback", None):
            score.extra["server_traceback"] = error.server_traceback
    else:
        score.neural_score = None if env.reward_fn is None else float(result.reward)
        score.judgement = _judgement_dict(result.info.get("judgement"))
    return score, error


# ----------------------------------------------------------------------------- results.json: write, read, resume
def write_results(path: Path, cfg: EvalConfig, scores: Sequence[EpisodeScore]) -> None:
    """Write ``results.json`` (config, summary, episodes) atomically: a temporary file, then :func:`os.replace`."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"config": _jsonable(asdict(cfg)), "summary": summarise(scores),
                               "episodes": [asdict(s) for s in scores]}, indent=2))
    os.replace(tmp, path)


def read_results(path: Path) -> tuple[dict[str, Any], list[EpisodeScore]] | None:
    """The recorded config and episodes of a ``results.json``, or None if there is none.

    Rows written before rows carried their seed get ``config seed + position`` (how they were run).
    """
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        config, episodes = dict(data["config"]), list(data["episodes"])
    except (ValueError, KeyError, TypeError) as e:
        raise EvalConfigError(f"{path} is not a results file of this job ({type(e).__name__}: {e}); move it away or "
                              "use another --out") from None
    known = {f.name for f in fields(EpisodeScore)}
    scores = []
    for k, row in enumerate(episodes):
        score = EpisodeScore(**{key: v for key, v in row.items() if key in known})
        if score.seed is None:
            score.seed = int(config.get("seed", 0)) + k
        scores.append(score)
    return config, scores


def check_resume(cfg: EvalConfig, recorded: dict[str, Any], out: Path) -> None:
    """Raise :class:`ResumeMismatchError` if ``out``'s episodes were run with other :data:`RESUME_KEYS` options."""
    mine = _jsonable({k: getattr(cfg, k) for k in RESUME_KEYS})
    changed = [k for k in RESUME_KEYS if k in recorded and recorded[k] != mine[k]]
    if changed:
        said = ", ".join(f"{k}: {recorded[k]!r} then, {mine[k]!r} now" for k in changed)
        raise ResumeMismatchError(f"{out} holds episodes run with other options ({said}); to resume, run with the "
                                  "same options, or use a new --out")


def summarise(scores: Sequence[EpisodeScore]) -> dict[str, Any]:
    """Mean scores, success shares and NeuralDROID-vs-SimDROID agreement over the finished episodes."""
    failed = sum(s.error is not None for s in scores)
    scores = [s for s in scores if s.error is None]
    neural = [s.neural_score for s in scores if s.neural_score is not None and math.isfinite(s.neural_score)]
    sim = [s.sim_level for s in scores if s.sim_level is not None]
    both = [(s.neural_score, s.sim_level) for s in scores
            if s.neural_score is not None and math.isfinite(s.neural_score) and s.sim_level is not None]
    return {
        "episodes": len(scores),
        "failed": failed,
        "neural_mean_score": float(np.mean(neural)) if neural else None,
        "sim_mean_level": float(np.mean(sim)) if sim else None,
        "neural_success_rate": float(np.mean([x >= 5 for x in neural])) if neural else None,
        "sim_success_rate": float(np.mean([x >= 5 for x in sim])) if sim else None,
        "success_agreement": float(np.mean([(a >= 5) == (b >= 5) for a, b in both])) if both else None,
        "mean_abs_level_error": float(np.mean([abs(a - b) for a, b in both])) if both else None,
    }


def format_table(scores: Sequence[EpisodeScore], summary: dict[str, Any]) -> str:
    """A plain-text table of the scores and the summary."""
    def num(x, fmt="{:.1f}"):
        return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)

    lines = [f"{'episode':24s} {'steps':>5s} {'NeuralDROID':>11s} {'SimDROID':>8s}  instruction"]
    for s in scores:
        if s.error is not None:
            lines.append(f"{s.name:24s} {s.steps:5d} {'failed':>11s} {'-':>8s}  {s.error}")
            continue
        lines.append(f"{s.name:24s} {s.steps:5d} {num(s.neural_score):>11s} {num(s.sim_level, '{}'):>8s}  "
                     f"{s.instruction}")
    lines.append(f"mean judged score {num(summary['neural_mean_score'], '{:.2f}')} (NeuralDROID) vs ground-truth "
                 f"level {num(summary['sim_mean_level'], '{:.2f}')} (SimDROID); success agreement "
                 f"{num(summary['success_agreement'], '{:.0%}')}")
    return "\n".join(lines)


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    """Config values as JSON (a callable reward function is recorded by its qualified name, the same in every run)."""
    def value(v: Any) -> Any:
        if v is None or isinstance(v, (str, int, float, bool)):
            return v
        if isinstance(v, (tuple, list)):
            return list(v)
        if callable(v) and hasattr(v, "__qualname__"):
            return f"{getattr(v, '__module__', None) or '?'}.{v.__qualname__}"
        return repr(v)

    return {k: value(v) for k, v in d.items()}


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="episodes", unit="ep")


def build_parser() -> argparse.ArgumentParser:
    d = EvalConfig()
    p = argparse.ArgumentParser(prog="python -m policies.evaluate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", default=d.policy, help=f"'{EXPERT_PLAN}' (default), zero, random, "
                                                       "openpi:HOST:PORT, roboarena:HOST:PORT")
    p.add_argument("--episodes", type=int, default=d.episodes,
                   help="first N episodes of the episode set (default %(default)s; the shipped set has 24)")
    p.add_argument("--names", nargs="+", default=(), help="episode names instead of --episodes")
    p.add_argument("--steps", type=int, default=d.steps, help="step budget per episode (default %(default)s)")
    p.add_argument("--checkpoint", default=None, help="world-model directory or hub id (default: shipped)")
    p.add_argument("--reward-fn", dest="reward_fn", default=d.reward_fn,
                   help="e.g. roboworld:offline, roboworld:openai/gpt-4o, none")
    p.add_argument("--replan-every", dest="replan_every", type=int, default=d.replan_every,
                   help="actions of each chunk run open loop before the policy is asked again (default %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed,
                   help="world-model noise seed of the first episode (default %(default)s)")
    p.add_argument("--out", default=d.out, help="directory for the videos and results.json; the same command run "
                   "again resumes there, keeping finished episodes (default %(default)s)")
    p.add_argument("--no-truth", dest="truth", action="store_false",
                   help="skip the SimDROID replay (in the world model's scene: SimDROID-v0 classic, v1 legible)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch CPU threads (default 1)")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: 0 all episodes finished, 1 one failed (after saving), 2 a usage mistake, 130 Ctrl-C."""
    from neuralsim.envs.episodes import UnknownEpisodeError

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    cfg = EvalConfig(**vars(args))
    try:
        scores = evaluate(cfg)
    except KeyboardInterrupt:
        _fail(f"interrupted; {_saved(cfg.out)}; run the same command again to resume")
        return 130
    except (EvalConfigError, UnknownPolicyError, UnknownEpisodeError) as e:  # the user's options
        _fail(f"error: {e}")
        return 2
    except (ValueError, KeyError, FileNotFoundError, ConnectionError, PolicyServerError,
            MissingDependencyError) as e:  # the policy server is unreachable, a judge misses its key, ...
        _fail(f"error: {e}")
        return 1
    print(format_table(scores, summarise(scores)))
    failed = [s for s in scores if s.error is not None]
    if failed:
        _fail(f"error: {len(failed)} episode(s) failed (first {failed[0].name}: {failed[0].error}); "
              f"{_saved(cfg.out)}; run the same command again to resume (it runs the failed ones)")
        return 1
    print(f"videos (NeuralDROID | SimDROID) and {RESULTS} in {cfg.out}")
    return 0


def _fail(message: str) -> None:
    """One line on stderr (a multi-line message is cut to its first line)."""
    first = str(message).strip().splitlines()[0] if str(message).strip() else message
    print(f"{PROG}: {first}", file=sys.stderr)


def _saved(out: str) -> str:
    """What ``out/results.json`` holds, in words."""
    try:
        recorded = read_results(Path(out) / RESULTS)
    except EvalConfigError:
        recorded = None
    done = sum(s.error is None for s in recorded[1]) if recorded else 0
    if not done:
        return "no finished episode saved"
    return f"{done} finished episode{'s' if done != 1 else ''} saved in {Path(out) / RESULTS}"


if __name__ == "__main__":
    raise SystemExit(main())
