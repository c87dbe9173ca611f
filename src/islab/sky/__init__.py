"""SkyPilot: ``islab-train sky`` writes the task YAML (one cloud node, several, or a managed job that
recovers from spot preemption), and the islab-train inside each node reads its place in the job from
the variables SkyPilot sets in ``run``.

* :mod:`islab.sky.names` -- what the task file and the nodes share (formats, variables, storage mode);
* :mod:`islab.sky.options` -- the sky options and what SkyPilot refuses in them;
* :mod:`islab.sky.task` -- the task YAML and the commands that launch it;
* :mod:`islab.sky.allocation` -- inside a node: the allocation layer, beside SLURM's and Kubernetes'.

Torch-free, like the rest of the launcher side. docs/CLOUD.md is the user's guide.
"""
