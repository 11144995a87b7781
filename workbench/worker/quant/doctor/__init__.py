"""The quantization doctor: after the ladder, why each layer hurts (a cause with its evidence), the fixes for it,
each tried by re-quantizing a fixed copy and measured, and the verified ones applied. Worker side; never Qt."""
