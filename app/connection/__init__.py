"""The GUI's link to the engine: the JSON-RPC client over the local socket or TLS (engine_client: requests,
subscriptions, Qt signals on the event loop) and the Qt object that finds or starts the engine process,
watches it and reconnects (engine_process)."""
