"""Upstream sglang's own hot-path functions, measured on PyPI releases before and after each change.

Module map: `releases` (the cache: wheels, source trees, one venv), `stubs` (the CUDA-only
imports), `cases` (the cases, driving upstream's functions on the reference workloads),
`delayer` (H5's decision replay), `reference` (the reference forms on the same workloads),
`child` (one release in one process), `harness` (before/after per hot path), `counts`
(instruction counts under callgrind), `asv_repo` and `asv_suite/` (asv over a repository of
releases), `__main__` (the command line). See benchmarks/README.md, "Upstream releases".
"""
