"""Imported for its effect: this process skips the garbage collections at interpreter exit.

A process that has imported torch (with Dynamo, sympy and matplotlib: millions of objects) spent
0.5 to 1.4 s here walking them in the collections the interpreter runs while it shuts down:
after every notebook's kernel, after each forkserver, after the command line itself.
`gc.freeze`, run as an exit handler, moves every object out of the collector's sight first.
Every other exit handler still runs, and objects freed by their reference counts still are;
only objects in reference cycles are left for the operating system, which takes back the whole
process's memory anyway.
"""

import atexit
import gc

atexit.register(gc.freeze)
