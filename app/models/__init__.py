"""What the GUI knows, in plain Python (no Qt): the page registry, a job record in words, a spec's fields,
the variants of a run. Everything above reads these; they read only app.text and engine.api.
"""
