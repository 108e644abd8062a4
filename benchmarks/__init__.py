"""Benchmarks: source-side visibility (lg_visibility) against handler-side filtering.

`python -m benchmarks [--quick]`. One module per workload (`w1_root_stream` ...
`w5_nested`), the seed-000 handler-side chain (`chain`), the variants and their consumers
(`variants`), the measurement passes (`harness`), the correctness corpus (`corpus`),
targeted probes (`probes`) and the report writers (`report`).
"""
