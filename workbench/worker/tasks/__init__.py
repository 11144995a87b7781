"""Built-in worker tasks; each module registers its tasks with workbench.worker.registry on import."""
