"""Coming from the originals: obi, META and PoliTerm setups (see docs/migrating.md)."""
