"""HTML reports from the files the commands write: the page, its charts, what each kind of
result shows."""
