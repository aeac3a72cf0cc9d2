"""Alembic environment: orch runs migrations in-process on the connection it opened."""
from alembic import context

from orchestrator.db.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # `alembic` command line: use the URL from the config
    from alembic.util import CommandError
    from sqlalchemy import create_engine

    url = context.config.get_main_option("sqlalchemy.url")
    if url is None:
        raise CommandError("set sqlalchemy.url in the alembic config (orch itself migrates "
                           "in-process, on the connection it opened)")
    engine = create_engine(url)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=metadata,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()
