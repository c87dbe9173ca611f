"""The parts of ``scripts/bench.py``, the benchmark suite: one module per concern (``common``: constants,
sizes, helpers, options; ``env``: section 1; ``training``: sections 2-5; ``sync``: section 8;
``cli_latency``: section 6; ``report``: the Markdown). What each section measures, and why that way:
the docstring of ``scripts/bench.py``, the entry point."""
