"""The regression loop (docs/regressions.md): `annotation` (notes on sessions and runs,
acknowledged regressions) and `alert` (what the lab's webhook posted, once per event).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 07:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'annotation',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('target_kind', sa.String(20), nullable=False),
        sa.Column('target', sa.String(64), nullable=False),
        sa.Column('text', sa.Text(), nullable=False),
        sa.Column('author', sa.String(200)),
        sa.Column('created_at', sa.DateTime(timezone=True)),
    )
    op.create_index('ix_annotation_target', 'annotation', ['target_kind', 'target'])
    op.create_table(
        'alert',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('key', sa.String(300), nullable=False, unique=True),
        sa.Column('kind', sa.String(20), nullable=False),
        sa.Column('payload', sa.JSON()),
        sa.Column('outcome', sa.Text()),
        sa.Column('created_at', sa.DateTime(timezone=True)),
    )


def downgrade() -> None:
    op.drop_table('alert')
    op.drop_index('ix_annotation_target', 'annotation')
    op.drop_table('annotation')
