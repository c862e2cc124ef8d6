"""Moving in from other password managers (IM-1): parsers of outside export formats.

Each parser turns bytes the user names (a KeePassXC database, XML or CSV; a Bitwarden JSON
export; a 1Password 1PUX or CSV export) into neutral :class:`~engine.moving.entry.Entry`
values, and :func:`~engine.moving.entry.check_all` validates every entry as a login card
before anything is sent to the engine. A malformed file or entry is a typed
``invalid_input`` error naming the entry (its position and title), never a value and never
a traceback. Parsers run in the CLI process; the engine only receives checked entries.
"""
