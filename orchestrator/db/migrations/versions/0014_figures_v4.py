"""Figures version 4 (stats/figures.py): a run's overlap follows its settings wherever they came
from (a design file's `--overlap` flags too, stats/overlap.py), so a design's overlap runs get
the overlap caveat and its serial runs no stall; and `mean_after_trim`, the mean over the
tokens after a trim, beside the whole run's mean (never trimmed). No schema change: reaching
this revision makes db/store.py recompute every stored run's figures (db/backfill.py).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 06:00:00
"""

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
