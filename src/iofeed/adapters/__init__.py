"""Adapters: the only framework-specific code, turning engine batches into framework tensors."""
