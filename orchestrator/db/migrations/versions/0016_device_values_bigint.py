"""Columns a device can legitimately fill past 32 bits become BigInteger (64 bits on every
backend; SQLite's integers were 64-bit already): sample.t_ms (a device clock that jumped, a
boot-time clock across a long suspend: 2^31 ms is 24.8 days), sample.cpu_temp_mC and
sample.batt_temp_dC (what a thermal zone or battery reports, unchecked by the kernel), and
ceiling.knee_read_kib (a size the device's probe measured). Values beyond even 64 bits are
dropped before the store (db/storable.py). Ids stay as they are.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05 09:10:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None

WIDENED = {'sample': ('t_ms', 'cpu_temp_mC', 'batt_temp_dC'), 'ceiling': ('knee_read_kib',)}


def upgrade() -> None:
    for table, columns in WIDENED.items():
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.alter_column(column, existing_type=sa.Integer(), type_=sa.BigInteger())


def downgrade() -> None:
    for table, columns in WIDENED.items():
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.alter_column(column, existing_type=sa.BigInteger(), type_=sa.Integer())
