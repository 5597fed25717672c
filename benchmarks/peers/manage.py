"""Django entry point for running dramatiq-crontab's ``crontab`` command
as a peer in the benchmarks (``python manage.py crontab``)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crontab_settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
