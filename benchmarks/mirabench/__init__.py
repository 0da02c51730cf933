"""MiraBench and WoW-World-Eval's IDM Turing test, each checked against SimDROID (docs/BENCHMARKS.md).

- :mod:`.mirabench`: the three levels (``python -m benchmarks.mirabench``), :mod:`.indicators` its Level 1 and 2;
- :mod:`.idm_turing`: actions read from video, replayed in SimDROID (``python -m benchmarks.mirabench.idm_turing``);
- :mod:`.world_model_videos`: the held-out rollouts both read, generated once and cached.
"""
