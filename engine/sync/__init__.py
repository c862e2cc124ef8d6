"""Sync: verified replication of vaults between devices (issue 14, SY-1..SY-4; docs/sync.md)."""
