"""Dockable panels of the main window; each is a thin view over state it is given."""
