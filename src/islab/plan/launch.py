"""The whole launch of a resolved spec, planned in one place: the CLI runs what this returns.

:func:`islab.plan.plan.build_plan` writes every node's command from a spec. A launch needs more,
all of it a pure function of the resolved spec and facts the edge gathers (:class:`LaunchFacts`):

* the run directory named after the scheduler job (:class:`islab.resolve.job.JobIdentity`, chosen
  once by resolution), or the one this launch claimed when another took the clock's name;
* ``--resume`` alone training to the run's original target (:func:`islab.plan.plan.resumes_to_target`);
* the NCCL settings the launch adds, under the user's own (:func:`islab.plan.nccl.with_nccl_settings`);
* on a c10d node, what only that node knows (does it host the store, its address towards the
  endpoint: :func:`islab.plan.torchrun.with_c10d_node_facts`);
* what to say before starting (cameras on several GPUs: :func:`islab.plan.placement.camera_warning`)
  and the DNS name to wait for (a Kubernetes job's node 0), as :class:`Launch` fields.

No probe, clock or environment is read here: the caller passes them in, so a dry run, a real
launch and a test get the same plan from the same facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from islab.plan.launch_plan import LaunchPlan
from islab.plan.nccl import with_nccl_settings
from islab.plan.placement import camera_warning
from islab.plan.plan import build_plan, resumes_to_target
from islab.plan.torchrun import with_c10d_node_facts
from islab.resolve.resolved import ResolvedSpec
from islab.spec.addresses import split_host_port


@dataclass(frozen=True)
class LaunchFacts:
    """What the edge knows about this machine and moment."""

    now: datetime
    free_port: int
    environ: Mapping[str, str] = field(default_factory=dict)  # what the ranks inherit
    nccl_safe: bool = False
    run_dir: str | None = None  # the directory a real launch claimed (None: the planner's name)
    # a c10d node: does it host the store (it can bind the endpoint), its address towards the endpoint
    hosts_store: bool | None = None
    local_addr: str | None = None


@dataclass(frozen=True)
class Launch:
    """The plan and what the launch does around it."""

    plan: LaunchPlan
    warnings: tuple[str, ...] = ()  # said before starting (and by a dry run)
    dns_host: str | None = None  # wait until this name resolves before the rendezvous


def plan_launch(resolved: ResolvedSpec, facts: LaunchFacts) -> Launch:
    """The launch of ``resolved`` with ``facts`` (see the module docstring). SpecError from the planner."""
    spec = resolved.spec
    job = resolved.job
    plan = build_plan(
        spec, now=facts.now, free_port=facts.free_port, job=resolved.job, to_target=resumes_to_target(resolved),
        run_dir=facts.run_dir,
    )  # fmt: skip
    plan = with_nccl_settings(plan, spec, safe=facts.nccl_safe, inherited=facts.environ)
    if facts.hosts_store is not None and spec.rendezvous.backend == "c10d" and spec.nnodes > 1:
        node_rank = spec.node_rank if spec.node_rank is not None else 0
        plan = with_c10d_node_facts(plan, node_rank, hosts_store=facts.hosts_store, local_addr=facts.local_addr)
    warning = camera_warning(spec, facts.environ)
    waits = job is not None and job.waits_for_dns and plan.rendezvous_address
    dns_host = split_host_port(plan.rendezvous_address)[0] if waits and plan.rendezvous_address else None
    return Launch(plan, (warning,) if warning else (), dns_host)
