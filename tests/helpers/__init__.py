"""Test helpers importable from tests and from the scripts they run (tests/ is on the path)."""
