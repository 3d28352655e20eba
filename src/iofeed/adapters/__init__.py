"""Adapters: the only framework-specific code, turning backend batches into framework tensors."""
