"""Text-to-SQL with live execution feedback (`SQL-v0`)."""
