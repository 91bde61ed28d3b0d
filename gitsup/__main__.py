from gitsup.cli.main import run

run()
