"""The formatting kit every view of report/ shares: how a figure is written (formatters.py),
the columns of every statistics table (columns.py), cells, labels, markdown and paths. Pure
text from data; it imports nothing of document/, table/ or terminal/."""
