"""Backends produce batches of images; adapters turn them into framework tensors."""
