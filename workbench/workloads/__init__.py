"""Built-in workloads: small enough for a laptop, shaped like the models people migrate.

Each lives in a module of its own; this registry names them and the default.
"""

# Name -> factory spec; `workbench.workload.load_workload` resolves a name through this.
BUILTIN_WORKLOADS: dict[str, str] = {
    "seed-mlp": "workbench.workloads.seed_mlp:make_workload",
    "tiny-transformer": "workbench.workloads.tiny_transformer:make_workload",
    "tiny-cnn": "workbench.workloads.tiny_cnn:make_workload",
}
# What every run, notebook and WorkloadSpec uses when no workload is named.
DEFAULT_WORKLOAD = "seed-mlp"
# The spec prefixes of the two loaders outside the registry: workloads/huggingface.py and
# workloads/script.py.
HF_PREFIX = "hf:"
SCRIPT_PREFIX = "script:"
