"""Kubernetes: ``islab-train k8s`` writes the job (TrainJob, PyTorchJob, JobSet or an Indexed Job), and
the islab-train inside each pod reads its place in the job from what the controller injects.

* :mod:`islab.k8s.names` -- what the manifests and the pods share (formats, variables, port, mount);
* :mod:`islab.k8s.options` -- the k8s options and what Kubernetes refuses in them;
* :mod:`islab.k8s.pod` -- the one pod every format runs;
* :mod:`islab.k8s.manifests` -- each format's wrapper, and the YAML;
* :mod:`islab.k8s.allocation` -- inside a pod: the allocation layer, beside SLURM's.

Torch-free, like the rest of the launcher side. docs/KUBERNETES.md is the user's guide.
"""
