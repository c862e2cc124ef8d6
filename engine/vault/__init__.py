"""Vaults: signed policy, the signed revision DAG shared by every asset kind, history, diff."""
