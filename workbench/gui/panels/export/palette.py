"""The colours the Export & Benchmark tab says a result with: passed, failed, neither (not verified, stopped),
and still running."""

PASSED, FAILED, NEUTRAL, RUNNING = "#2e9d4a", "#d0342c", "#8a8f98", "#2f6fd6"
