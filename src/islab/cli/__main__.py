"""``python -m islab.cli``: the same as the ``islab-train`` console script."""

from islab.cli import main

main()
