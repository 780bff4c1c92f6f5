"""Serving: an OpenAI-compatible HTTP endpoint for a loaded model, run by the serve.model job
(engine/recipes/serve.py; docs/serve.md). A job's code: it never imports the daemon."""
