"""The Center (CT-1 … CT-4): signed grant tickets, the hosted store server and its standby (docs/center.md)."""
