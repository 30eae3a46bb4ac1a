"""Tar shards by random access: the member index, one-sample reads and batched reads."""
