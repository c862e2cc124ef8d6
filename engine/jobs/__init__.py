"""Crypto jobs (SPEC JB-1 … JB-3): plans that pin inputs, credentials, steps and outputs, and the runner.

``plan`` builds and digests a plan, ``recipes`` turns a job kind and its arguments into
one, ``runner`` executes an approved plan in a private workspace. The service decides
who may run what (engine/service/handlers/jobs.py); nothing here knows callers.
"""
