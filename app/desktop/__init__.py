"""The desktop around the GUI: the display check before the first window, the first-paint probe, the
launcher entry a user installs."""
