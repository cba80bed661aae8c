"""SRE-v0: diagnose and repair a small running system (nginx, a Python app, Redis, SQLite, a worker)."""
