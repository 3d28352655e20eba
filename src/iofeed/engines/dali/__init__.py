"""The `dali` engine: DALI decodes batches whose order, crop boxes and flips iofeed decides
(nothing here imports DALI until the engine is built)."""
