"""What only a GPU runs, in one place: the loader's CUDA device, streams, NVML and DALI's version."""
