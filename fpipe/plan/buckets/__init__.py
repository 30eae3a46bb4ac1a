"""Bucketing in the plan tier: bucket tables (``bucket_config``), assignment, grouped batches."""
