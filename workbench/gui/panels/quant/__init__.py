"""The Quantization tab: the PTQ wizard, the live accuracy ladder, the per-layer table and the plots that show
which layer hurts and why. GUI side: never imports torch."""
