"""ceiling: a device's measured hardware ceilings (orch ceilings), one row per device and day

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 10:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('ceiling',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('device_id', sa.Integer(), nullable=False),
    sa.Column('day', sa.String(length=10), nullable=False),
    sa.Column('measured_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('abi', sa.String(length=20), nullable=True),
    sa.Column('probe_sha', sa.String(length=64), nullable=True),
    sa.Column('path', sa.Text(), nullable=True),
    sa.Column('fstype', sa.String(length=40), nullable=True),
    sa.Column('direct', sa.Boolean(), nullable=True),
    sa.Column('seq_mibps', sa.Float(), nullable=True),
    sa.Column('seq_samples', sa.JSON(), nullable=True),
    sa.Column('lanes', sa.JSON(), nullable=True),
    sa.Column('best_mibps', sa.Float(), nullable=True),
    sa.Column('knee_lanes', sa.Integer(), nullable=True),
    sa.Column('knee_read_kib', sa.Integer(), nullable=True),
    sa.Column('dram_gibps', sa.Float(), nullable=True),
    sa.Column('dram', sa.JSON(), nullable=True),
    sa.Column('compute_tps', sa.Float(), nullable=True),
    sa.Column('compute_note', sa.Text(), nullable=True),
    sa.Column('notes', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['device_id'], ['device.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('device_id', 'day')
    )


def downgrade() -> None:
    op.drop_table('ceiling')
