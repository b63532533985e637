from onceonly.cli import run

run()
