"""lab_batch.session_prompts: a submitted matrix's `session:` prompt files as read on the
submitting host ({prompt_file: text}), so a worker on another host sends the same turns
(docs/sessions.md). NULL for batches without session prompt files.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 18:45:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('lab_batch') as batch:
        batch.add_column(sa.Column('session_prompts', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('lab_batch') as batch:
        batch.drop_column('session_prompts')
