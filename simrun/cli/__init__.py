"""The ``simrun`` command line: the click group (`group`), the options every command
shares (`options`), embedded runs (`run`), the commands that talk to a service (`remote`),
``simrun scale`` (`scale`), ``simrun worker`` (`worker`), and the terminal views: live
progress (`progress`), tables (`tables`), following a run (`follow`), the forecast and the
dry run (`forecast`, `dryrun`)."""

from simrun.cli.group import cli as cli
from simrun.cli.group import main as main
