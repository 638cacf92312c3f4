"""The metrics benchmark (benchmarks/bench_metrics.py) with tiny sizes: its report's structure and
the sanity of its figures; speed targets are the benchmark's job, not asserted here."""

from __future__ import annotations

from benchmarks import bench_metrics
from benchmarks.common import Context


def test_metrics_benchmark_end_to_end_with_tiny_sizes(redis_servers, tmp_path):
    server = redis_servers(1)[0]
    ctx = Context(server, quick=True, results_dir=tmp_path, verbose=False)
    section = bench_metrics.run(ctx, sizes=bench_metrics.Sizes(rounds=1, slices=2))
    for variant in bench_metrics.VARIANTS:
        for path in ("factory", "locked"):
            key = f"{variant.replace(' ', '_')}.{path}"
            assert section.figures[f"{key}.pair_us"] > 0
            assert 0 < section.figures[f"{key}.ratio"] < 10 and 0 < section.figures[f"{key}.ratio_fed"] < 10
    assert section.figures["off.factory.ratio"] == 1.0
    assert len(section.checks) == 2 * (len(bench_metrics.VARIANTS) - 2)  # every metrics variant, both paths
    assert any("ratio to off" in block for block in section.blocks)
