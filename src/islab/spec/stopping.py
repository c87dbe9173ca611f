"""How a run stops before its last iteration, shared by the launcher and the ranks (torch-free).

A *preempting* signal -- SIGTERM (what SLURM sends on ``scontrol requeue``/``scancel``, and at the
time limit) or SIGUSR1 (what ``#SBATCH --signal=B:USR1@N`` sends N seconds before it) -- asks for
a stop that loses nothing: every rank finishes the iteration it is in, the ranks agree on that
iteration (one all-reduce per iteration), rank 0 writes ``checkpoints/latest.pt`` and every
process exits with :data:`PREEMPTED_EXIT_CODE`. islab-train SIGKILLs whatever is still alive
:data:`PREEMPT_GRACE_S` after the signal. SIGINT (Ctrl-C) stops at once (exit 130).
"""

from __future__ import annotations

import signal

# EX_TEMPFAIL of sysexits.h: "try again later" -- the run stopped with a checkpoint; run it again
# (islab-train --resume RUN_DIR, or let SLURM requeue it) to go on. Not 124 (timeout) nor 128+N.
PREEMPTED_EXIT_CODE = 75
PREEMPT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR1)
# How long the ranks get to finish their iteration and write the checkpoint before SIGKILL: the
# default of torchrun's own shutdown timeout and of SLURM's KillWait, which bound it anyway.
PREEMPT_GRACE_S = 30.0
