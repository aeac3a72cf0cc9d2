"""lab_cell.error: why a lab cell failed, stored with the cell (docs/lab.md, "A failed cell
keeps its cause"). A cell that failed before its run started (its device could not be
prepared, an error in the worker) had no cause anywhere but the worker's log: `orch lab
status`, `orch lab wait` and the report now read it here. NULL for a cell that did not fail
and for the cells of older orchs.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 13:15:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('lab_cell') as batch:
        batch.add_column(sa.Column('error', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('lab_cell') as batch:
        batch.drop_column('error')
