"""The Qt objects the whole GUI shares, which hold state and signal its changes: the preferences and the
theme, the list of jobs, navigation between pages, the notification centre.
"""
