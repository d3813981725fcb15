"""The shipped configs (package data): `--config NAME` finds NAME.toml here."""
