"""Reading snapshots: open, verified shard reads, Arrow → numpy."""
