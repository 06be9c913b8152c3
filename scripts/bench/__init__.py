"""swavg's benchmarks (scripts/bench.py, scripts/bench_counts.py): see cli.py for what they run."""
