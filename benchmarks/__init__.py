"""asv benchmark suite of the six hot paths (H1-H6); see benchmarks/README.md."""
