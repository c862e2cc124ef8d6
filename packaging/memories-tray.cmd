@echo off
rem Memories tray autostart (Windows Startup folder)
start "" {exec}
