"""What the window adds to every page: keyboard shortcuts, F1 help, accessible names and focus order."""
