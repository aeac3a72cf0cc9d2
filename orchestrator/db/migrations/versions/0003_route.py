"""route: expert-routing traces (docs/routes.md), one row per routed expert

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 08:30:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('route',
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('turn', sa.Integer(), nullable=False),
    sa.Column('phase', sa.SmallInteger(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('layer', sa.SmallInteger(), nullable=False),
    sa.Column('slot', sa.SmallInteger(), nullable=False),
    sa.Column('expert', sa.Integer(), nullable=False),
    sa.Column('weight', sa.Float(), nullable=True),
    sa.Column('residency', sa.SmallInteger(), nullable=False),
    sa.Column('expert_bytes', sa.BigInteger(), nullable=False),
    sa.Column('dropped', sa.SmallInteger(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['run.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'seq')
    )


def downgrade() -> None:
    op.drop_table('route')
