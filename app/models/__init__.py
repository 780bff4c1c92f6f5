"""What the GUI knows, without widgets: Qt objects that hold state and signal its changes.

Pages and widgets read these instead of each asking the engine for the same thing.
"""
