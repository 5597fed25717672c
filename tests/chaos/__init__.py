"""Chaos suite: real Redis, real dramatiq instances, injected faults, and a
Jepsen-style judgement of every recorded cron enqueue.

``CHAOS_PROFILE=short`` (the default, run by the normal test command and CI)
keeps every scenario to a few seconds; ``CHAOS_PROFILE=full`` repeats faults
and runs the mixed sequence longer.  ``python -m tests.chaos.soak`` runs the
mixed sequence for a chosen number of minutes.
"""
