"""Remote sessions, approval tickets and credential-injecting proxies (SPEC §9, RM-1…RM-5, PX-1…PX-4).

The daemon owns every connection. Network I/O runs on one private asyncio loop
(:mod:`engine.remote.runtime`) so op handlers, which run in worker threads under
or beside the service lock, never block on a socket while holding the lock.
"""
