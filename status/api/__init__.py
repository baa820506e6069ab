"""HTTP adapter (Starlette): parse, call the service, map errors."""
