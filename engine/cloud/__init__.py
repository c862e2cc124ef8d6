"""Cloud object sync (issue 21; SPEC CL-1 … CL-4; design in docs/cloud.md).

Devices that never see each other exchange sync bundles (engine/sync/bundle.py) through
storage the user already has. The storage only ever holds sealed envelopes and signed
descriptors: :mod:`engine.cloud.objects` makes and checks them, :mod:`engine.cloud.state`
keeps accounts, the outbox and the inbox as sealed device-local records,
:mod:`engine.cloud.worker` plans, transfers and acknowledges one account's sync, and
:mod:`engine.cloud.s3` is the S3-compatible transport.
"""
