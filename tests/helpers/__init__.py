"""Test helpers importable from any test (and from scripts the tests run)."""
