"""Built-in workloads: small enough for a laptop, shaped like the models people migrate."""
