"""The graph server, a process of its own: Model Explorer's web server on 127.0.0.1, serving graph JSON the
worker wrote. `process` (imported by the GUI) starts and stops it and imports nothing heavy; `launcher` runs
inside it.
"""
