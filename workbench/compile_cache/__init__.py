"""The compile caches a run reuses: where they live, their version stamp, and filling one ahead
of a scheduled run (prewarm)."""
