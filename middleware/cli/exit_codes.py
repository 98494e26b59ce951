"""The exit statuses of every ``agency`` command, in one place (``agency --help`` lists them).

=====  ==========================================================================
0      done (a submitted task completed, or waits for input; task cancel: canceled)
1      a check said no: verification failed, health is not SERVING, a task ended
       failed/rejected/cancelled or was interrupted, a route was refused
2      an error: bad input or options (named), a server error, an address to
       serve on that is taken
3      nothing found: an id or name that matches nothing, a filter that selects no
       record, a data directory or log that does not exist
4      unavailable: the gateway does not answer (a call found nobody listening, or
       it answered UNAVAILABLE); trying again later may work
5      not authenticated: ``agency audit verify`` found the log intact but no
       ``--key`` was pinned, so who signed its checkpoints was not checked
130    interrupted (Ctrl-C)
=====  ==========================================================================
"""

from __future__ import annotations

__all__ = [
    "CHECK_FAILED",
    "ERROR",
    "EXIT_CODES_HELP",
    "INTERRUPTED",
    "NOTHING_FOUND",
    "NOT_AUTHENTICATED",
    "OK",
    "UNAVAILABLE",
]

OK = 0
CHECK_FAILED = 1
ERROR = 2
NOTHING_FOUND = 3
UNAVAILABLE = 4
NOT_AUTHENTICATED = 5
INTERRUPTED = 130

EXIT_CODES_HELP = """\
exit status:
  0    done (a submitted task completed, or waits for input; task cancel: canceled)
  1    a check said no: verification failed, health not SERVING, a task ended
       failed/rejected/cancelled or was interrupted, a route was refused
  2    an error: bad input or options (named), a server error, a taken port
  3    nothing found: an id that matches nothing, a filter that selects no record,
       a data directory or log that does not exist
  4    unavailable: the gateway does not answer; trying again later may work
  5    not authenticated: audit verify found the log intact, but no --key was
       pinned, so who signed it was not checked
  130  interrupted
"""
