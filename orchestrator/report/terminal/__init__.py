"""The terminal views (rich tables): `orch run`'s session table, `orch runs`, `orch show`
(runs.py) and `orch ceilings` / `orch devices --probe` (ceilings.py)."""
