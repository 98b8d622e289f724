"""Migration workbook for moving PyTorch models onto AWS Trainium.

The notebooks in ``notebooks/`` are thin; every measurement, verdict and report lives here.
"""

__version__ = "0.1.0"
