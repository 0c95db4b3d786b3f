"""asv's benchmark_dir for the upstream releases (`python -m benchmarks.upstream --asv`)."""
