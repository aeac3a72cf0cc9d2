"""orch test plugin: the `shbench` engine (engine.py) and the `directory` device kind
(directory.py)."""
