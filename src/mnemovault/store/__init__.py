"""PostgreSQL storage: the embedded server, the connection pool and the SQL of each table."""
