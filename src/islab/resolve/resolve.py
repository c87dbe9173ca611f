"""Where each setting comes from: layers, files and precedence, then the schema, then the disk.

A launch is described by up to five *layers* of settings, highest precedence first:

1. the command line (``--num-envs 64``),
2. inside a scheduler allocation (``--slurm`` or under ``srun``): the allocation's node count,
   node rank and rendezvous address (:mod:`islab.resolve.allocations`, :mod:`islab.resolve.slurm`),
3. ``ISLAB_*`` environment variables (``ISLAB_NUM_ENVS=64``),
4. a YAML cluster file (``--cluster two-node.yaml``), shared by every node of a cluster,
5. built-in defaults (the schema's, :mod:`islab.spec.run_spec`).

:func:`resolve_spec` merges them field by field (a command-line ``--master-port`` overrides the
file's ``rendezvous.master_port`` but keeps its ``master_addr``), validates the result once with
the schema, then checks what needs the disk and returns a :class:`ResolvedSpec`: the frozen
:class:`RunSpec` plus, for every field, the layer it came from. The work is a pipeline of small
steps over immutable values (:mod:`islab.resolve.pipeline`); this module is its entry point for
callers that hold plain layers. Every way it can fail is a :class:`SpecError` whose messages name
the field as the user gave it (``--num-envs``, ``ISLAB_SEED``, ``cpu.yaml: nnodes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from islab.resolve.edge import Edge
from islab.resolve.layers import Layer, Provided, Source
from islab.resolve.pipeline import Inputs, ResolvedSpec, resolve
from islab.resolve.sources import AllocationSource, LayerBuilder, cluster_layer, read_cluster_file
from islab.resolve.steps import install_extra_hint

__all__ = ["Provided", "ResolvedSpec", "Source", "install_extra_hint", "resolve_spec"]


def load_cluster_file(path: Path) -> dict[str, Provided]:
    """Read a YAML cluster spec into a flat layer keyed by dotted field names (``islab-train k8s``
    writes the file's fields into each pod's command)."""
    return dict(cluster_layer(read_cluster_file(path), path).values)


def resolve_spec(
    cli: Mapping[str, Provided] | None = None,
    env: Mapping[str, Provided] | None = None,
    cluster_file: Path | None = None,
    slurm: LayerBuilder | None = None,
    *,
    allocations: Sequence[AllocationSource] = (),
    edge: Edge | None = None,
    nodes_compared: bool = False,
) -> ResolvedSpec:
    """Merge command line > scheduler allocation > environment > cluster file > defaults, then
    validate once.

    ``cli`` and ``env`` are flat layers keyed by dotted field names (``rendezvous.master_port``);
    absent keys mean "not given". ``slurm``, when running inside a SLURM allocation, builds the
    allocation's layer (nodes, node rank, rendezvous) from the values the other layers chose --
    where the rendezvous goes depends on the launcher and backend (see :mod:`islab.resolve.slurm`);
    ``allocations``: any scheduler's, the same way (:func:`islab.resolve.allocations.active_allocations`).
    ``edge``: what reads the machine (default: :class:`islab.resolve.edge.DiskEdge`; a dry run's
    :class:`~islab.resolve.edge.DryRunEdge` plans ``--isaaclab`` without a checkout).
    ``nodes_compared``: the pre-flight will compare the shared fields across nodes, so one node's
    command line may set them (otherwise they must come from the cluster file).
    Raises :class:`SpecError` with human messages.
    """
    allocated = (*([AllocationSource(Source.SLURM, slurm)] if slurm is not None else []), *allocations)
    inputs = Inputs(Layer(Source.CLI, cli or {}), Layer(Source.ENV, env or {}), cluster_file, allocated, nodes_compared)
    return resolve(inputs, edge)
