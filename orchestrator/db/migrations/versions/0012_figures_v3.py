"""Figures version 3 (stats/figures.py): a run's decode s/token, its generated token count
(the engine's for a summary-only import), whether its figures are the engine's summary lines,
the flash read per token a summary line printed, and the CPU start temperature of a driver
log's entry state. No schema change: reaching this revision makes db/store.py recompute every
stored run's figures (db/backfill.py).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 19:00:00
"""

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
