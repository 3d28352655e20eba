"""`iofeed doctor`: the machine, the data and a traced training command, and what to do about them."""
