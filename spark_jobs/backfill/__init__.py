"""Backfill: what the change stream alone cannot give, loaded or derived on request (the initial Dumpling
snapshot, daily as-of tables)."""
