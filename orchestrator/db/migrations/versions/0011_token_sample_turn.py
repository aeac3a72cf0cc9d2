"""token.turn and sample.turn: the session turn a token or a sample belongs to (docs/sessions.md).
NULL for the rows of one-shot runs. Token rows stored before this revision kept the CSV's
`turn` column in `extra`: it is copied into the new column (and stays in `extra`), so a
session CSV imported before gets its turns when its figures are recomputed after this
migration (FIGURES_VERSION 2).

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
    bind = op.get_bind()
    if bind.dialect.name == 'postgresql':
        op.execute("UPDATE token SET turn = (extra->>'turn')::numeric::integer "
                   "WHERE extra IS NOT NULL AND (extra->>'turn') IS NOT NULL")
    else:
        op.execute("UPDATE token SET turn = CAST(json_extract(extra, '$.turn') AS INTEGER) "
                   "WHERE extra IS NOT NULL AND json_extract(extra, '$.turn') IS NOT NULL")


def downgrade() -> None:
    for table in ('token', 'sample'):
        with op.batch_alter_table(table) as batch:
            batch.drop_column('turn')
