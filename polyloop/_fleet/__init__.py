"""Many runs: batches (plan, worker processes, report) and the PostgreSQL queue."""
