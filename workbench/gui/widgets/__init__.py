"""Small reusable widgets of the main window."""
