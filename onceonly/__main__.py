from onceonly._start import run

run()
