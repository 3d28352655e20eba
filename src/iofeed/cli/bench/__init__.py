"""`iofeed bench`: loaders measured side by side in one run, in alternating windows.

One concept per module: `options` (what to run), `inputs` (folder, dataset, page cache),
`feeds` and `dali_peer` (the loaders under test), `host` (one process per feed), `train`
(the optional training step), `measure` (windows, CPU, memory), `runtime/gpu` (NVML sampling),
`machine` (what ran it), `schema`, `report` and `plot` (the results), `run` (all of it).
"""
