"""The command line: `iofeed preprocess | index | inspect | synth | bench | doctor`, and the two
tools behind the last two."""
