"""Tasks across many clones (hosts): what runs where is an engine's business; what a task
produced is kept on the review remote (`record.py`: publish, fetch, adopt), so any clone
can show a task and another host can continue it. Importing this package imports no
engine."""
