"""token.turn and sample.turn: the session turn a token or a sample belongs to (docs/sessions.md).
NULL for the rows of one-shot runs and of runs stored before this revision (an imported
22-column CSV's `turn` value stays in the row's `extra`).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 17:45:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ('token', 'sample'):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column('turn', sa.Integer(), nullable=True))


def downgrade() -> None:
    for table in ('token', 'sample'):
        with op.batch_alter_table(table) as batch:
            batch.drop_column('turn')
