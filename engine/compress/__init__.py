"""Compression techniques applied to a finished fine-tune's ``model/`` (each one a job kind's core).

Each module works on run directories and raises ``engine.training.context.JobFailed`` with
a hint for the user; the recipe in ``engine/recipes`` wraps it as a job.
"""
