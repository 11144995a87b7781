"""The dataset browser: thumbnail grid, sample view, class charts and the dataset picker."""
