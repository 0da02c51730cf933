"""Closed-loop success of policies in SimDROID, the truth.

- :mod:`.policy_success`: the learned policies and the baselines on held-out states
  (``python -m benchmarks.policy_success``);
- :mod:`.expert_success`: the scripted expert per task family, clean and per failure mode
  (``python -m benchmarks.policy_success.expert_success``).
"""
