"""run.time_source and run.source_file: where an imported run's started_at came from (a file
name, a preamble, a log... as local wall-clock time, or the file's mtime, a UTC guess) and the
study file it was read from; both NULL for live runs (orch's own clock, UTC)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-08 10:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('run') as batch:
        batch.add_column(sa.Column('time_source', sa.String(length=20), nullable=True))
        batch.add_column(sa.Column('source_file', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('run') as batch:
        batch.drop_column('source_file')
        batch.drop_column('time_source')
