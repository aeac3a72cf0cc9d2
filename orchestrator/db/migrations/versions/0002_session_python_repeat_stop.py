"""session: the controller's Python version and why adaptive repeats stopped

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 07:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('session') as batch:
        batch.add_column(sa.Column('python_version', sa.String(length=50), nullable=True))
        batch.add_column(sa.Column('repeat_stop', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('session') as batch:
        batch.drop_column('repeat_stop')
        batch.drop_column('python_version')
