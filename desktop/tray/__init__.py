"""Tray icon, menu, bounded status prober, engine launcher."""
