"""The GUI's link to the engine: the JSON-RPC client over the socket (plain Python) and the Qt object that
starts, watches and reconnects to the engine process."""
