from engine.cli.entry import run

run()
