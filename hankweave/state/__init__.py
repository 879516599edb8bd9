"""State: persisted types, the codon state machine, the reducer, the durable store, the lock,
the execution thread and cost aggregation."""
