"""lab: devices served by lab workers, submissions and their cells (orch lab)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 13:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('lab_device',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.Column('worker', sa.String(length=200), nullable=True),
    sa.Column('host', sa.String(length=200), nullable=True),
    sa.Column('state', sa.String(length=20), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('failures', sa.Integer(), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=True),
    sa.Column('current_cell_id', sa.Integer(), nullable=True),
    sa.Column('seen_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('lab_batch',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('matrix_name', sa.String(length=200), nullable=True),
    sa.Column('matrix_path', sa.Text(), nullable=True),
    sa.Column('matrix_text', sa.Text(), nullable=True),
    sa.Column('prompt_text', sa.Text(), nullable=True),
    sa.Column('command', sa.Text(), nullable=True),
    sa.Column('submitted_from', sa.String(length=200), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('lab_cell',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('batch_id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.Integer(), nullable=False),
    sa.Column('device', sa.String(length=200), nullable=False),
    sa.Column('cell_key', sa.String(length=400), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=20), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=True),
    sa.Column('worker', sa.String(length=200), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('enqueued_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['batch_id'], ['lab_batch.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['session_id'], ['session.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('session_id', 'cell_key')
    )
    op.create_index('ix_lab_cell_device_state', 'lab_cell', ['device', 'state'], unique=False)
    op.create_index('ix_lab_cell_batch', 'lab_cell', ['batch_id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_lab_cell_batch', table_name='lab_cell')
    op.drop_index('ix_lab_cell_device_state', table_name='lab_cell')
    op.drop_table('lab_cell')
    op.drop_table('lab_batch')
    op.drop_table('lab_device')
