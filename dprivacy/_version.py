"""The version of dprivacy: the single source read by the build (hatch) and by ``dprivacy.__version__``."""

__version__ = "0.1.0"
