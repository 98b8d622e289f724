"""Many models, many targets: a matrix file of items, one item per array task, one dashboard."""
