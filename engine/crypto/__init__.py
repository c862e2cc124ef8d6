"""Cryptographic building blocks: KDF, AEAD, chunked content, keys, canonical encoding."""
