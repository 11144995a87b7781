"""The quantization doctor: why each layer hurts, the fixes for it, each tried by re-quantizing a fixed copy
and measured, and the verified ones applied (run.run_doctor is the pipeline's stage)."""
