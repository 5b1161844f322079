from customops.cli import run

run()
