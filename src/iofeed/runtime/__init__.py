"""What the rest stands on: process start, the machine's probes (CPU, GPU), progress lines,
registries of named choices."""
