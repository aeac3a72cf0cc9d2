"""session.device_facts: the device's facts as they were when the session ran (kernel,
governor, RAM, getprop values...), so an old session's provenance does not show today's probe

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 21:30:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('session') as batch:
        batch.add_column(sa.Column('device_facts', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('session') as batch:
        batch.drop_column('device_facts')
