"""``python -m hierbandit.cli``."""

from hierbandit.cli.main import app

app()
