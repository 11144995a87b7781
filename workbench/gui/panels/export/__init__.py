"""The Export & Benchmark tab: export a trained (or quantized) model, check its parity, and measure latency,
throughput and memory across backends and batch sizes."""
