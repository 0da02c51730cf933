"""World-model throughput: :mod:`.throughput`, frames per second with the KV cache against recomputing the window,
and ``env.step`` of the single and vector env (``python -m benchmarks.throughput``)."""
