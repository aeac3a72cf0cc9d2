"""session.label and session.import_options: what `orch import` was told (--label, --device,
--name, --model), so a re-import can say which options it ignored and --replace can apply them

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 10:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('session') as batch:
        batch.add_column(sa.Column('label', sa.Text(), nullable=True))
        batch.add_column(sa.Column('import_options', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('session') as batch:
        batch.drop_column('import_options')
        batch.drop_column('label')
