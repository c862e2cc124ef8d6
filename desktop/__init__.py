"""Desktop surfaces: tray icon and loopback dashboard (clients of the engine)."""
