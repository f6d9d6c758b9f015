"""Pure decisions: queueing, scheduling, the drain lifecycle, metering.

`now` is always a parameter; nothing here reads a clock, a file or a socket.
"""
