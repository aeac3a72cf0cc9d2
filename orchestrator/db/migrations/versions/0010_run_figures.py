"""run.figures: each run's figures (stats/figures.py RunFigures, FIGURES_VERSION 1), computed
once when it ends or is imported. Stored runs get theirs when the store reaches this revision
(db/store.py migrate -> db/figures.py backfill), from their stored token rows and samples.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 10:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('run') as batch:
        batch.add_column(sa.Column('figures', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('run') as batch:
        batch.drop_column('figures')
