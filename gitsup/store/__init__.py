"""What gitsup keeps: task records, the event log, leases, the cost ledger, the
repository context."""
