"""The SQL behind ``status.app.ports``: one store per area, each over the unit of work's connection."""
