"""Can ``--logger wandb`` log in? Checked before launch, because wandb asks only inside rank 0,
after every rank has started, and fails there with a page of tracebacks.

wandb logs in from, in order: ``WANDB_API_KEY``; the ``~/.netrc`` entry (``$NETRC`` if set) for
its API host (``WANDB_BASE_URL``, default ``https://api.wandb.ai``), which ``wandb login`` writes.
``WANDB_MODE=offline`` or ``disabled`` needs no login. The ranks get the spec's ``env:`` on top of
this shell's environment, so both count. Pure: the environment and the home directory come in.
"""

from __future__ import annotations

import netrc
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

from islab.spec.issues import Issue

DEFAULT_BASE_URL = "https://api.wandb.ai"
NO_LOGIN_MODES = ("offline", "disabled", "dryrun")


def wandb_login_issue(environ: Mapping[str, str], home: Path) -> Issue | None:
    """None when wandb can log in (or needs not); else the reason and the three ways to fix it."""
    if environ.get("WANDB_MODE", "").strip().lower() in NO_LOGIN_MODES or environ.get("WANDB_API_KEY", "").strip():
        return None
    host = urlparse(environ.get("WANDB_BASE_URL", "").strip() or DEFAULT_BASE_URL).hostname or "api.wandb.ai"
    path = Path(environ.get("NETRC", "").strip() or home / ".netrc")
    try:
        if netrc.netrc(str(path)).authenticators(host) is not None:
            return None
    except (OSError, netrc.NetrcParseError):
        pass
    return Issue(
        "--logger wandb",
        f"no Weights & Biases login here: WANDB_API_KEY is not set and {path} has no entry for {host}, so "
        "rank 0 would fail after the launch",
        "Run `wandb login` (or set WANDB_API_KEY, e.g. in the spec's env:), or set WANDB_MODE=offline to log to "
        "files only (wandb sync uploads them later)",
    )
